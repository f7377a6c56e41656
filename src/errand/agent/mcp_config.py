"""errand's MCP server as each agent CLI's configuration names it (see :mod:`errand.agent.mcp_server`).

Claude Code takes a JSON string on ``--mcp-config`` (``--strict-mcp-config``: no
other server is loaded, none the working copy declares); Codex takes
``mcp_servers.<name>`` on ``-c``; Gemini CLI reads ``mcpServers`` in its
``settings.json`` (``httpUrl``: streamable HTTP); OpenCode reads ``mcp`` in its
configuration (a ``remote`` server, its OAuth off: the token is all it needs).
Each reads the run's token from the environment (Claude Code and Gemini CLI
expand ``${VAR}`` in a header, OpenCode ``{env:VAR}``; Codex has
``bearer_token_env_var``), so it is in no command line, and so in no process
list a step of the agent prints into its transcript. Each bounds a tool call, so
a server that stops answering is a tool error for the model, not a CLI waiting
for ever. Each names errand's tools its own way (``mcp__errand__ask_person``,
``mcp_errand_ask_person``, ``errand_ask_person``); errand's log names them all
as Claude Code does (:func:`errand_tool_name`).

mini-swe-agent has no MCP client (its one tool is ``bash``): it reaches the same
server through a command errand puts on its PATH (:data:`TOOLS_COMMAND`, see
:mod:`errand.agent.mini_swe_agent`).
"""

from __future__ import annotations

import json
from typing import Any

from errand.agent.cli import ToolAccess
from errand.agent.mcp_server import SERVER_NAME, TOOL_NAMES

__all__ = ["TOKEN_ENV", "TOOL_SECONDS", "URL_ENV", "claude_code_env", "claude_code_flags", "codex_env", "codex_flags",
           "errand_tool_name", "gemini_servers", "opencode_servers", "tools_env"]

#: Seconds a CLI waits on one call of errand's tools (they answer at once; ask_person does not block).
TOOL_SECONDS = 120
#: The variable the CLI reads the run's token for errand's tools from.
TOKEN_ENV = "ERRAND_TOOLS_TOKEN"
#: The variable a CLI without an MCP client reads the server's address from.
URL_ENV = "ERRAND_TOOLS_URL"


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


def tools_env(tools: ToolAccess | None) -> dict[str, str]:
    """The run's token for errand's tools, for a CLI that reads it from its environment."""
    return {} if tools is None else {TOKEN_ENV: tools.token}


def codex_env(tools: ToolAccess | None) -> dict[str, str]:
    return tools_env(tools)


def gemini_servers(tools: ToolAccess | None) -> dict[str, Any]:
    """``mcpServers`` of Gemini CLI's settings (``trust``: its tools run without asking, as its others do
    under ``--yolo``; ``timeout`` in milliseconds)."""
    if tools is None:
        return {}
    return {SERVER_NAME: {"httpUrl": tools.url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"},
                          "timeout": TOOL_SECONDS * 1000, "trust": True}}


def opencode_servers(tools: ToolAccess | None) -> dict[str, Any]:
    """``mcp`` of OpenCode's configuration (``timeout``: of each request, in milliseconds)."""
    if tools is None:
        return {}
    return {SERVER_NAME: {"type": "remote", "url": tools.url, "enabled": True, "oauth": False,
                          "timeout": TOOL_SECONDS * 1000, "headers": {"Authorization": f"Bearer {{env:{TOKEN_ENV}}}"}}}


def errand_tool_name(name: str, prefix: str) -> str:
    """A CLI's name for one of errand's tools (``prefix`` + the tool's), as errand's log names it
    (``mcp__errand__<tool>``); any other name as it came."""
    tool = name[len(prefix):] if name.startswith(prefix) else None
    return f"mcp__{SERVER_NAME}__{tool}" if tool in TOOL_NAMES else name
