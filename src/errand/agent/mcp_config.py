"""errand's MCP server as each agent CLI's configuration names it (see :mod:`errand.agent.mcp_server`).

Claude Code takes a JSON string on ``--mcp-config`` (``--strict-mcp-config``: no
other server is loaded, none the working copy declares); Codex takes
``mcp_servers.<name>`` on ``-c``. Both read the run's token from the environment
(Claude Code expands ``${VAR}`` in a header; Codex has ``bearer_token_env_var``),
so it is in no command line, and so in no process list a step of the agent
prints into its transcript. Each bounds a tool call, so a server that stops
answering is a tool error for the model, not a CLI waiting for ever.
"""

from __future__ import annotations

import json

from errand.agent.external import ToolAccess
from errand.agent.mcp_server import SERVER_NAME

__all__ = ["TOKEN_ENV", "TOOL_SECONDS", "claude_code_env", "claude_code_flags", "codex_env", "codex_flags"]

#: Seconds a CLI waits on one call of errand's tools (they answer at once; ask_person does not block).
TOOL_SECONDS = 120
#: The variable the CLI reads the run's token for errand's tools from.
TOKEN_ENV = "ERRAND_TOOLS_TOKEN"


def claude_code_flags(tools: ToolAccess | None) -> list[str]:
    if tools is None:
        return []
    server = {"type": "http", "url": tools.url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}}
    return ["--mcp-config", json.dumps({"mcpServers": {SERVER_NAME: server}}), "--strict-mcp-config"]


def claude_code_env(tools: ToolAccess | None) -> dict[str, str]:
    if tools is None:
        return {}
    return {TOKEN_ENV: tools.token, "MCP_TOOL_TIMEOUT": str(TOOL_SECONDS * 1000), "MCP_TIMEOUT": "60000"}


def codex_flags(tools: ToolAccess | None) -> list[str]:
    if tools is None:
        return []
    return ["-c", f'mcp_servers.{SERVER_NAME}={{url={json.dumps(tools.url)}, bearer_token_env_var="{TOKEN_ENV}", '
                  f"startup_timeout_sec=60, tool_timeout_sec={TOOL_SECONDS}}}"]


def codex_env(tools: ToolAccess | None) -> dict[str, str]:
    return {} if tools is None else {TOKEN_ENV: tools.token}
