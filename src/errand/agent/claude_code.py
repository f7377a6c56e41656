"""Claude Code as a task's agent: its pinned package, its command line, its stream in errand's terms.

Started as ``claude -p PROMPT --output-format stream-json --verbose`` over the
working copy, its permission prompts off (the sandbox is the boundary;
``IS_SANDBOX=1`` lets it run so as root), its non-essential traffic off, its
model reached at ``ANTHROPIC_BASE_URL`` with a per-task token as
``ANTHROPIC_AUTH_TOKEN`` (sent as a Bearer header), the project's instructions
and memories appended to its system prompt (``--append-system-prompt``).

Its stream, one JSON object a line: ``system``/``init`` (the session), an
``assistant`` line per content block of a model call (text, ``tool_use``), a
``user`` line with each ``tool_result``, and a last ``result``. A model call's
blocks come on consecutive ``assistant`` lines, each repeating the call's usage as
the stream began (its output tokens are the result's to say).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from errand.agent.cli import CliAdapter, ModelAccess, Said, SameTools, model_step
from errand.agent.mcp_config import claude_code_env, claude_code_flags
from errand.models import Usage

__all__ = ["PACKAGE", "VERSION", "ClaudeCode"]

VERSION = "2.1.332"
PACKAGE = f"@anthropic-ai/claude-code@{VERSION}"
_EXIT_CODE = re.compile(r"^(?:Error: )?Exit code (\d+)")
_SAME_TOOLS: SameTools = {
    "Bash": ("shell", {"command": "command"}),
    "Read": ("read_file", {"path": "file_path"}),
    "Edit": ("edit_file", {"path": "file_path", "old": "old_string", "new": "new_string"}),
    "Write": ("write_file", {"path": "file_path", "content": "content"}),
    "Grep": ("search", {"pattern": "pattern", "path": "path"}),
}


class ClaudeCode(CliAdapter):
    """The Claude Code adapter (it keeps which call a line is of, and each tool call's name)."""

    kind = "claude-code"
    provider = "anthropic"
    protocol = "anthropic"
    package = PACKAGE
    binary = "claude"
    home = "$HOME/.claude"  # its sessions, kept while a run waits for an answer

    def __init__(self, workdir: str = "/workspace") -> None:
        super().__init__(workdir)
        self._calls = 0
        self._in_call: str | None = None  # the message id of the call whose blocks are coming
        self._names: dict[str, str] = {}  # tool_use id -> errand's name for the tool

    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        words = ["claude", "-p", prompt, "--output-format", "stream-json", "--verbose",
                 "--dangerously-skip-permissions", "--append-system-prompt", system, "--model", access.model,
                 *claude_code_flags(access.tools)]
        return [*words, "--resume", session] if session else words

    def env(self, access: ModelAccess) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": access.base_url, "ANTHROPIC_AUTH_TOKEN": access.token,
                "ANTHROPIC_MODEL": access.model, "IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1", "CI": "1", **claude_code_env(access.tools)}

    def translate(self, line: Mapping[str, Any]) -> list[Said]:
        kind = line.get("type")
        if kind == "system" and line.get("subtype") == "init":
            return [Said("session", {"id": line.get("session_id")})]
        if kind == "assistant" and isinstance(line.get("message"), Mapping):
            return self._assistant(line["message"])
        if kind == "user" and isinstance(line.get("message"), Mapping):
            self._in_call = None
            return self._results(line["message"])
        if kind == "result":
            self._in_call = None
            ok = line.get("subtype") == "success" and not line.get("is_error")
            reason = None if ok else (line.get("result") or line.get("subtype") or "an error")
            return [Said("session", {"id": line.get("session_id")}),
                    Said("result", {"ok": ok, "text": line.get("result") or "", "reason": reason,
                                    "usage": _usage(line.get("usage")), "cost_usd": line.get("total_cost_usd")})]
        return []

    def _assistant(self, message: Mapping[str, Any]) -> list[Said]:
        message_id = str(message.get("id") or "")
        if self._in_call is None or self._in_call != message_id:
            self._calls += 1
        self._in_call = message_id
        blocks = [block for block in message.get("content") or () if isinstance(block, Mapping)]
        text = "".join(str(block.get("text") or "") for block in blocks if block.get("type") == "text")
        calls = [self._call(block) for block in blocks if block.get("type") == "tool_use"]
        usage = _usage(message.get("usage"))
        said = [model_step(f"call-{self._calls}", text, calls, usage, message.get("stop_reason"))]
        return said + [Said("tool_call", call) for call in calls]

    def _call(self, block: Mapping[str, Any]) -> dict[str, Any]:
        call = self.tool_call(str(block.get("id") or ""), str(block.get("name") or ""), block.get("input"),
                              _SAME_TOOLS)
        self._names[call["id"]] = call["name"]
        return call

    def _results(self, message: Mapping[str, Any]) -> list[Said]:
        said: list[Said] = []
        for block in message.get("content") or ():
            if not isinstance(block, Mapping) or block.get("type") != "tool_result":
                continue
            call_id = str(block.get("tool_use_id") or "")
            content = _text(block.get("content"))
            failed = bool(block.get("is_error"))
            name = self._names.get(call_id, "")
            exit_code = None
            if name == "shell":
                match = _EXIT_CODE.match(content)
                exit_code = int(match.group(1)) if match else (1 if failed else 0)
                said.append(Said("output", {"id": call_id, "text": content + ("" if content.endswith("\n") else "\n")}))
            said.append(Said("tool_result", {"id": call_id, "name": name, "ok": not failed, "exit_code": exit_code,
                                             "content": content}))
        return said


def _usage(data: object) -> Usage | None:
    """Anthropic's usage (``input_tokens`` the uncached part) as errand counts it (the whole prompt)."""
    if not isinstance(data, Mapping):
        return None
    read = int(data.get("cache_read_input_tokens") or 0)
    write = int(data.get("cache_creation_input_tokens") or 0)
    return Usage(int(data.get("input_tokens") or 0) + read + write, int(data.get("output_tokens") or 0), read, write)


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text") or "") for part in content if isinstance(part, Mapping))
    return ""
