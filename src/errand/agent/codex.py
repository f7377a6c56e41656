"""Codex as a task's agent: its pinned package, its command line, its stream in errand's terms.

Started as ``codex exec --json`` over the working copy, its own sandbox and
approvals off (errand's sandbox is the boundary), its model reached only by
configuration (Codex ignores ``OPENAI_BASE_URL``): a provider ``errand`` whose
``base_url`` is the model gateway's and whose key is read from
``ERRAND_MODEL_TOKEN``, the run's token, on the Responses wire. errand's
instructions and memories go in as ``developer_instructions``; update checks
and analytics are off.

Its stream, one JSON object a line: ``thread.started`` (the session),
``item.started``/``item.completed`` for each item of the turn (a
``command_execution`` with its output and exit code, a ``file_change``, an
``agent_message``), then ``turn.completed`` with the turn's usage, or
``turn.failed``. The stream marks no model call as such: each item the model
asked for counts as one step, and the tokens come with the turn's end.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from errand.agent.cli import CliAdapter, ModelAccess, Said, model_step
from errand.agent.mcp_config import codex_env, codex_flags
from errand.models import Usage

__all__ = ["PACKAGE", "VERSION", "Codex"]

VERSION = "0.171.0"
PACKAGE = f"@openai/codex@{VERSION}"
_TOKEN = "ERRAND_MODEL_TOKEN"


class Codex(CliAdapter):
    """The Codex adapter (it keeps the last message and error)."""

    kind = "codex"
    provider = "openai"
    protocol = "openai-responses"
    package = PACKAGE
    binary = "codex"
    home = "$CODEX_HOME"  # its sessions, kept while a run waits for an answer

    def __init__(self, workdir: str = "/workspace") -> None:
        super().__init__(workdir)
        self._said = ""  # the last agent message: the summary, when the turn completes
        self._error = ""

    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        provider = (f'model_providers.errand={{name="errand", base_url={json.dumps(access.base_url)}, '
                    f'env_key="{_TOKEN}", wire_api="responses"}}')
        flags = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                 "-c", "model_provider=errand", "-c", provider, "-c", f"model={json.dumps(access.model)}",
                 "-c", f"developer_instructions={json.dumps(system)}", "-c", "check_for_update_on_startup=false",
                 "-c", "analytics.enabled=false", *codex_flags(access.tools)]
        # Its home must exist before it starts; it is in the sandbox's own writable layer, out of the diff.
        return ["sh", "-c", 'mkdir -p "$CODEX_HOME" && exec codex "$@"', "codex", "exec", *flags,
                *(["resume", session] if session else []), prompt]

    def env(self, access: ModelAccess) -> dict[str, str]:
        return {_TOKEN: access.token, "CODEX_HOME": "/root/.codex", "NO_COLOR": "1", "CI": "1",
                **codex_env(access.tools)}

    def translate(self, line: Mapping[str, Any]) -> list[Said]:
        kind = line.get("type")
        if kind == "thread.started":
            return [Said("session", {"id": line.get("thread_id")})]
        if kind in ("item.started", "item.completed") and isinstance(line.get("item"), Mapping):
            return self._item(line["item"], started=kind == "item.started")
        if kind == "error":
            self._error = str(line.get("message") or "")
        if kind == "turn.completed":
            usage = _usage(line.get("usage"))
            return [Said("result", {"ok": True, "text": self._said, "reason": None, "usage": usage})]
        if kind == "turn.failed":
            error = line.get("error") if isinstance(line.get("error"), Mapping) else {}
            assert isinstance(error, Mapping)
            return [Said("result", {"ok": False, "text": self._said,
                                    "reason": str(error.get("message") or self._error or "the turn failed"),
                                    "usage": None})]
        return []

    def _item(self, item: Mapping[str, Any], *, started: bool) -> list[Said]:
        kind, item_id = item.get("type"), str(item.get("id") or "")
        if kind == "command_execution":
            if started:
                call = {"id": item_id, "name": "shell", "arguments": {"command": _command(item.get("command"))}}
                return [model_step(item_id, "", [call]), Said("tool_call", call)]
            output = str(item.get("aggregated_output") or "")
            code = item.get("exit_code")
            return [Said("output", {"id": item_id, "text": output}),
                    Said("tool_result", {"id": item_id, "name": "shell", "ok": code == 0,
                                         "exit_code": code if isinstance(code, int) else None, "content": output})]
        if kind == "file_change" and not started:
            changes = [{"path": self.relative(str(c.get("path") or "")), "kind": c.get("kind")}
                       for c in item.get("changes") or () if isinstance(c, Mapping)]
            call = {"id": item_id, "name": "apply_patch", "arguments": {"changes": changes}}
            ok = item.get("status") != "failed"
            return [model_step(item_id, "", [call]), Said("tool_call", call),
                    Said("tool_result", {"id": item_id, "name": "apply_patch", "ok": ok, "exit_code": None,
                                         "content": "applied" if ok else "the patch failed"})]
        if kind == "mcp_tool_call":
            return _mcp_call(item, item_id, started=started)
        if kind == "agent_message" and not started:
            self._said = str(item.get("text") or "")
            return [model_step(item_id, self._said, [])]
        return []


def _mcp_call(item: Mapping[str, Any], item_id: str, *, started: bool) -> list[Said]:
    """A call of an MCP server's tool (errand's own: ask_person, recall, propose_memory), named as Claude
    Code names one (``mcp__<server>__<tool>``)."""
    name = f"mcp__{item.get('server')}__{item.get('tool')}"
    if started:
        arguments = item.get("arguments") if isinstance(item.get("arguments"), Mapping) else {}
        call = {"id": item_id, "name": name, "arguments": dict(arguments or {})}
        return [model_step(item_id, "", [call]), Said("tool_call", call)]
    result = item.get("result") if isinstance(item.get("result"), Mapping) else {}
    error = item.get("error") if isinstance(item.get("error"), Mapping) else {}
    assert isinstance(result, Mapping) and isinstance(error, Mapping)
    text = "\n".join(str(part.get("text") or "") for part in result.get("content") or () if isinstance(part, Mapping))
    ok = item.get("status") == "completed" and not error and not result.get("is_error")
    return [Said("tool_result", {"id": item_id, "name": name, "ok": ok, "exit_code": None,
                                 "content": text or str(error.get("message") or "")})]


def _command(command: object) -> str:
    """The command the model gave, out of Codex's ``/bin/bash -lc '…'`` wrapping."""
    text = str(command or "")
    try:
        words = shlex.split(text)
    except ValueError:
        return text
    return words[2] if len(words) == 3 and words[0].endswith("sh") and words[1] in ("-lc", "-c") else text


def _usage(data: object) -> Usage | None:
    """The turn's usage (``input_tokens`` the whole prompt, ``cached_input_tokens`` of it read from the cache)."""
    if not isinstance(data, Mapping):
        return None
    return Usage(int(data.get("input_tokens") or 0), int(data.get("output_tokens") or 0),
                 int(data.get("cached_input_tokens") or 0), int(data.get("cache_write_input_tokens") or 0))
