"""OpenCode as a task's agent: its pinned package, its command line, its stream in errand's terms.

Started as ``opencode run --format json -m <provider>/<model> PROMPT`` over the working
copy (the provider is ``errand``), its model reached by configuration (``OPENCODE_CONFIG_CONTENT``): a
provider ``errand`` on the OpenAI-compatible chat completions wire
(``@ai-sdk/openai-compatible``) whose ``baseURL`` is the model gateway's and whose
key is read from ``ERRAND_MODEL_TOKEN``, the run's token. Every permission is
granted (errand's sandbox is the boundary; one it asked for, headless, would end
its run), its snapshots, sharing, update checks and model-catalogue fetch are
off, and errand's instructions and memories go in a file of its ``instructions``
in the sandbox's home, out of the diff. errand's tools are a ``remote`` MCP
server of its configuration (:func:`~errand.agent.mcp_config.opencode_servers`),
which it names ``errand_<tool>``; a question asked there is answered in the same
session (``--session``; its sessions are kept in its data directory, which errand
keeps while the run waits).

Its stream, one JSON object a line, each with the ``sessionID``: ``step_start``
(a model call begins), ``text`` (what it said), ``tool_use`` (a tool call, once it
has run: its input, output and, for ``bash``, exit code), ``step_finish`` (the
call's tokens; ``reason`` ``stop`` when the model is done) and ``error``. There is
no last line of its own: a step that finishes with ``stop`` ends the run. Its side
calls (a title for the session) are no step of the stream; the gateway meters them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from errand.agent.cli import CliAdapter, ModelAccess, Said, SameTools, model_step
from errand.agent.mcp_config import errand_tool_name, opencode_servers, tools_env
from errand.models import Usage

__all__ = ["PACKAGE", "VERSION", "OpenCode"]

VERSION = "1.18.33"
PACKAGE = f"opencode-ai@{VERSION}"
INSTRUCTIONS = "/root/.config/opencode/errand.md"
_TOKEN = "ERRAND_MODEL_TOKEN"
_SAME_TOOLS: SameTools = {
    "bash": ("shell", {"command": "command"}),
    "read": ("read_file", {"path": "filePath"}),
    "edit": ("edit_file", {"path": "filePath", "old": "oldString", "new": "newString"}),
    "write": ("write_file", {"path": "filePath", "content": "content"}),
    "grep": ("search", {"pattern": "pattern", "path": "path"}),
}


class OpenCode(CliAdapter):
    """The OpenCode adapter (it keeps the call under way, its text, and the tokens so far)."""

    kind = "opencode"
    provider = "openai"
    protocol = "openai-chat"
    package = PACKAGE
    binary = "opencode"
    home = "/root/.local/share/opencode"  # its sessions, kept while a run waits for an answer

    def __init__(self, workdir: str = "/workspace") -> None:
        super().__init__(workdir)
        self._call = ""  # the message id of the model call under way
        self._stepped = False  # whether that call has been reported as a step yet
        self._text = ""  # its text
        self._said = ""  # the last text the model said: the summary, when it stops
        self._usage = Usage()

    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        words = ["opencode", "run", "--format", "json", "-m", f"errand/{access.model}"]
        return [*words, *(["--session", session] if session else []), prompt]

    def env(self, access: ModelAccess) -> dict[str, str]:
        config = {"provider": {"errand": {"npm": "@ai-sdk/openai-compatible", "name": "errand",
                                          "options": {"baseURL": access.base_url, "apiKey": f"{{env:{_TOKEN}}}"},
                                          "models": {access.model: {"name": access.model}}}},
                  "model": f"errand/{access.model}", "small_model": f"errand/{access.model}",
                  "autoupdate": False, "share": "disabled", "snapshot": False, "instructions": [INSTRUCTIONS],
                  "permission": {"*": "allow"}, "mcp": opencode_servers(access.tools)}
        return {"OPENCODE_CONFIG_CONTENT": json.dumps(config), _TOKEN: access.token, **tools_env(access.tools),
                "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1", "NO_COLOR": "1"}

    def files(self, access: ModelAccess, system: str) -> dict[str, str]:
        return {INSTRUCTIONS: system + "\n"}

    def translate(self, line: Mapping[str, Any]) -> list[Said]:
        kind = line.get("type")
        part = line.get("part") if isinstance(line.get("part"), Mapping) else {}
        assert isinstance(part, Mapping)
        said = [Said("session", {"id": line["sessionID"]})] if line.get("sessionID") else []
        if kind == "step_start":
            self._call, self._stepped, self._text = str(part.get("messageID") or ""), False, ""
        elif kind == "text":
            self._text += str(part.get("text") or "")
        elif kind == "tool_use":
            said += self._tool(part)
        elif kind == "step_finish":
            said += self._finish(part)
        elif kind == "error":
            error = line.get("error") if isinstance(line.get("error"), Mapping) else {}
            assert isinstance(error, Mapping)
            data = error.get("data") if isinstance(error.get("data"), Mapping) else {}
            assert isinstance(data, Mapping)
            reason = str(data.get("message") or error.get("name") or "an error")
            said.append(Said("result", {"ok": False, "text": self._said, "reason": reason, "usage": self._usage}))
        return said

    def _step(self, calls: list[dict[str, Any]]) -> Said:
        """The call under way as a step (again, for each more tool call of it: counted once)."""
        self._stepped = True
        text, self._text = self._text, ""
        if text:
            self._said = text
        return model_step(self._call, text, calls)

    def _tool(self, part: Mapping[str, Any]) -> list[Said]:
        state = part.get("state") if isinstance(part.get("state"), Mapping) else {}
        assert isinstance(state, Mapping)
        name = errand_tool_name(str(part.get("tool") or ""), "errand_")
        call = self.tool_call(str(part.get("callID") or ""), name, state.get("input"), _SAME_TOOLS)
        metadata = state.get("metadata") if isinstance(state.get("metadata"), Mapping) else {}
        assert isinstance(metadata, Mapping)
        output = str(state.get("output") or state.get("error") or "")
        ok = state.get("status") == "completed"
        exit_code = metadata.get("exit") if isinstance(metadata.get("exit"), int) else None
        if call["name"] == "shell":
            ok = ok and exit_code in (0, None)
        said = [self._step([call]), Said("tool_call", call)]
        if call["name"] == "shell":
            said.append(Said("output", {"id": call["id"], "text": output + ("" if output.endswith("\n") else "\n")}))
        return [*said, Said("tool_result", {"id": call["id"], "name": call["name"], "ok": ok,
                                            "exit_code": exit_code, "content": output})]

    def _finish(self, part: Mapping[str, Any]) -> list[Said]:
        self._usage = self._usage + _usage(part.get("tokens"))
        said = [self._step([])] if not self._stepped or self._text else []
        if part.get("reason") != "stop":
            return said
        return [*said, Said("result", {"ok": True, "text": self._said, "reason": None, "usage": self._usage})]


def _usage(tokens: object) -> Usage:
    """A call's tokens: ``input`` the part of the prompt not read from the cache."""
    if not isinstance(tokens, Mapping):
        return Usage()
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), Mapping) else {}
    assert isinstance(cache, Mapping)
    read, write = int(cache.get("read") or 0), int(cache.get("write") or 0)
    return Usage(int(tokens.get("input") or 0) + read + write,
                 int(tokens.get("output") or 0) + int(tokens.get("reasoning") or 0), read, write)
