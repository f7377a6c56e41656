"""Gemini CLI as a task's agent: its pinned package, its command line, its stream in errand's terms.

Started as ``gemini -p PROMPT -o stream-json --yolo --skip-trust --debug`` over the
working copy (the sandbox is the boundary: its tools run without asking, in a
folder it is told to trust), its model reached at ``GOOGLE_GEMINI_BASE_URL``
with the run's token as ``GEMINI_API_KEY`` (sent as ``x-goog-api-key``). Headless,
it needs its settings to name the key as its way in
(``security.auth.selectedType``), so errand writes ``~/.gemini/settings.json``
(usage statistics and update checks off too), and errand's instructions and
memories go in ``~/.gemini/GEMINI.md``, the file it reads as the user's own
context: both in the sandbox's home, out of the diff. errand's tools are an MCP
server of its settings (:func:`~errand.agent.mcp_config.gemini_servers`), which
it names ``mcp_errand_<tool>``. A question asked there is answered in the same
session (``--resume latest``: its sessions are kept by project, in its home,
which errand keeps while the run waits).

Its stream, one JSON object a line: ``init`` (the session), ``message`` (the
prompt, then the model's text as ``delta`` pieces), ``tool_use`` and
``tool_result`` for each tool it runs, and a last ``result`` with the run's
``stats``. The stream marks no model call as such: each tool call the model asked
for counts as one step (with the text before it), its last message as one more.

A shell command's exit code is not in its stream's own fields: a command that
fails is a ``tool_result`` of status ``success`` (the tool ran), its ``output``
what the command printed. In debug mode (``--debug``) that ``output`` is what the
model is shown instead — ``Output: …``, then ``Exit Code: N`` when it is not 0,
``Signal: …``, ``Process Group PGID: …`` — so errand runs it so and reads the exit
code there (:func:`shell_result`); its debug log goes to stderr, of which errand
keeps only the tail, for a run that dies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from errand.agent.cli import CliAdapter, ModelAccess, Said, SameTools, model_step
from errand.agent.mcp_config import errand_tool_name, gemini_servers, tools_env
from errand.models import Usage

__all__ = ["PACKAGE", "VERSION", "GeminiCli", "shell_result"]

VERSION = "0.61.0"
PACKAGE = f"@google/gemini-cli@{VERSION}"
HOME = "/root/.gemini"
_SAME_TOOLS: SameTools = {
    "run_shell_command": ("shell", {"command": "command"}),
    "read_file": ("read_file", {"path": "file_path"}),
    "replace": ("edit_file", {"path": "file_path", "old": "old_string", "new": "new_string"}),
    "write_file": ("write_file", {"path": "file_path", "content": "content"}),
    "grep_search": ("search", {"pattern": "pattern", "path": "dir_path"}),
}
# The sections its shell tool's debug output ends with, after the command's own output.
_SECTIONS = re.compile(r"\n(Error|Exit Code|Signal|Background PIDs|Process Group PGID): ([^\n]*)")
_SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}},
             "privacy": {"usageStatisticsEnabled": False},
             "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}


class GeminiCli(CliAdapter):
    """The Gemini CLI adapter (it keeps the model's text not yet part of a step, and each call's tool)."""

    kind = "gemini-cli"
    provider = "gemini"
    protocol = "gemini"
    package = PACKAGE
    binary = "gemini"
    home = HOME  # its sessions, kept while a run waits for an answer

    def __init__(self, workdir: str = "/workspace") -> None:
        super().__init__(workdir)
        self._text = ""  # the model's text since its last step
        self._said = ""  # its last message: the summary, when the run succeeds
        self._steps = 0
        self._names: dict[str, str] = {}

    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        words = ["gemini", "-p", prompt, "-o", "stream-json", "--yolo", "--skip-trust", "--debug", "-m", access.model]
        return [*words, "--resume", "latest"] if session else words

    def env(self, access: ModelAccess) -> dict[str, str]:
        return {"GOOGLE_GEMINI_BASE_URL": access.base_url, "GEMINI_API_KEY": access.token,
                "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_COLOR": "1", **tools_env(access.tools)}

    def files(self, access: ModelAccess, system: str) -> dict[str, str]:
        settings = {**_SETTINGS, "mcpServers": gemini_servers(access.tools)}
        return {f"{HOME}/settings.json": json.dumps(settings, indent=2) + "\n", f"{HOME}/GEMINI.md": system + "\n"}

    def translate(self, line: Mapping[str, Any]) -> list[Said]:
        kind = line.get("type")
        if kind == "init":
            return [Said("session", {"id": line.get("session_id")})]
        if kind == "message" and line.get("role") == "assistant":
            self._text += str(line.get("content") or "")
        elif kind == "tool_use":
            name = errand_tool_name(str(line.get("tool_name") or ""), "mcp_errand_")
            call = self.tool_call(str(line.get("tool_id") or ""), name, line.get("parameters"), _SAME_TOOLS)
            self._names[call["id"]] = call["name"]
            return [self._step([call]), Said("tool_call", call)]
        elif kind == "tool_result":
            return self._result(line)
        elif kind == "result":
            return self._end(line)
        return []

    def _step(self, calls: list[dict[str, Any]]) -> Said:
        self._steps += 1
        text, self._text = self._text, ""
        if text:
            self._said = text
        return model_step(f"step-{self._steps}", text, calls)

    def _result(self, line: Mapping[str, Any]) -> list[Said]:
        call_id = str(line.get("tool_id") or "")
        name = self._names.get(call_id, "")
        ok = line.get("status") == "success"
        error = line.get("error") if isinstance(line.get("error"), Mapping) else {}
        assert isinstance(error, Mapping)
        content = str(line.get("output") or error.get("message") or "")
        if name != "shell":
            return [Said("tool_result", {"id": call_id, "name": name, "ok": ok, "exit_code": None, "content": content})]
        content, exit_code = shell_result(content) if ok else (content, None)
        return [Said("output", {"id": call_id, "text": content + ("" if content.endswith("\n") else "\n")}),
                Said("tool_result", {"id": call_id, "name": name, "ok": ok and exit_code in (0, None),
                                     "exit_code": exit_code, "content": content})]

    def _end(self, line: Mapping[str, Any]) -> list[Said]:
        said = [self._step([])] if self._text else []
        ok = line.get("status") == "success"
        error = line.get("error") if isinstance(line.get("error"), Mapping) else {}
        assert isinstance(error, Mapping)
        reason = None if ok else str(error.get("message") or line.get("status") or "an error")
        return [*said, Said("result", {"ok": ok, "text": self._said, "reason": reason,
                                       "usage": _usage(line.get("stats"))})]


def shell_result(shown: str) -> tuple[str, int | None]:
    """A shell command's output and exit code, out of what its tool showed the model in debug mode
    (``Output: …`` then its sections; no ``Exit Code`` section: 0). Not in that shape (its output
    cut short, a command moved to the background): the text as it came, and no exit code."""
    if not shown.startswith("Output: "):
        return shown, None
    body = shown[len("Output: "):]
    sections: dict[str, str] = {}
    # The sections are the last lines; a line of the command's own output may look like one, so only
    # those after the last line that does not are taken.
    while (found := _last_section(body)) is not None:
        start, key, value = found
        sections.setdefault(key, value)
        body = body[:start]
    if "Signal" in sections and "Exit Code" not in sections:
        return _output(body), None
    code = sections.get("Exit Code", "0")
    return _output(body), int(code) if code.lstrip("-").isdigit() else None


def _last_section(text: str) -> tuple[int, str, str] | None:
    """The section that is ``text``'s last line: where it starts, its name and value."""
    last = None
    for found in _SECTIONS.finditer(text):
        last = found
    if last is None or last.end() != len(text):
        return None
    return last.start(), last.group(1), last.group(2)


def _output(body: str) -> str:
    return "" if body == "(empty)" else body


def _usage(stats: object) -> Usage | None:
    """The run's stats: ``input_tokens`` the whole prompts, ``cached`` of them read from the cache."""
    if not isinstance(stats, Mapping):
        return None
    return Usage(int(stats.get("input_tokens") or 0), int(stats.get("output_tokens") or 0),
                 int(stats.get("cached") or 0))
