"""aider as a task's agent: its pinned package (from the Python registry), its command line, its
transcript in errand's terms.

Started as ``aider --message PROMPT`` over the working copy (one request, then it
exits), its model ``openai/MODEL`` reached at ``--openai-api-base`` (the model
gateway's) with the run's token as ``OPENAI_API_KEY``, edits as SEARCH/REPLACE
blocks (``--edit-format diff``), every question it would ask answered yes. It has
no tools: it runs no command (a shell command the model suggests is refused by
``--yes-always``), it edits files the model names in its reply, and lints what it
edited. errand's instructions and memories are a read-only file of its chat
(``--read``, as aider reads a conventions file), out of the working copy.

What aider would otherwise leave in the working copy is kept out of it: its input
and chat histories go to ``/tmp/errand-aider`` (flags), it does not add
``.aider*`` to ``.gitignore`` (``--no-gitignore``), nor commit (``--no-auto-commits``:
errand diffs the files against the base commit, and aider would ask the model for
each commit's message), and its repo map's cache, which has no flag, is moved to
``/tmp/errand-aider`` by the wrapper below. It fetches no price table: the cache
file it would fill is seeded before each invocation, and litellm reads its own
table (``LITELLM_LOCAL_MODEL_COST_MAP``); update checks and analytics are off.

aider prints for a person, not a program. A short wrapper (:data:`WRAPPER`, run by
the sandbox's ``python3``, aider's) starts aider in its own process with what it
prints sent to stderr, and puts each entry of its chat transcript (what it writes
to its chat history file) on stdout as one JSON line, as it writes it: ``user`` (the
prompt), ``reply`` (the model's reply, whole), ``notice`` (aider's own messages:
``Applied edit to calc.py``, ``# 1 SEARCH/REPLACE block failed to match!…``, a
lint report, ``Tokens: 2.5k sent, 45 received.``) and ``error`` (an error it
reported), each whole; then ``exit`` when aider returned. A crash (an exception, a
non-zero exit) prints no ``exit`` line: its run ends with aider's last output.

Each reply is a step, its SEARCH/REPLACE blocks ``edit_file`` calls whose results
are aider's ``Applied edit`` notices or the blocks it says failed to match. Its
tokens are the gateway's (aider prints them rounded, ``2.5k``, so the stream
reports none and the gateway's count is the run's). The run went well when aider
exited after a reply with no error after it; else its errors are the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from errand.agent.cli import CliAdapter, ModelAccess, Said, model_step

__all__ = ["PACKAGE", "VERSION", "WRAPPER", "Aider", "edit_blocks"]

VERSION = "0.86.2"
PACKAGE = f"aider-chat=={VERSION}"
DIRECTORY = "/tmp/errand-aider"  # its histories, its repo map's cache, errand's instructions: out of the tree
RUNNER = f"{DIRECTORY}/run.py"
INSTRUCTIONS = f"{DIRECTORY}/errand.md"
CHAT = f"{DIRECTORY}/chat.history.md"
#: The cache aider fills with a price table fetched at start when it is missing, empty or a day old.
PRICES = "/root/.aider/caches/model_prices_and_context_window.json"
#: Kept non-empty so aider fetches nothing; litellm's own table gives the models' prices and windows.
SEEDED = {"errand": {"note": "seeded by errand: aider's models are looked up in litellm's own table"}}

WRAPPER = f'''\
"""errand's wrapper of aider: each entry of its chat transcript as a JSON line on stdout."""
import json, os, sys

stream = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)  # what aider prints for a person goes to stderr


def say(**line):
    stream.write(json.dumps(line) + "\\n")


from aider import repomap
from aider.io import InputOutput

repomap.RepoMap.TAGS_CACHE_DIR = "{DIRECTORY}/tags.cache"  # it has no flag; it would be in the working copy
append = InputOutput.append_chat_history


def appended(self, text, linebreak=False, blockquote=False, strip=True):
    append(self, text, linebreak, blockquote, strip)
    lines = getattr(self, "_errand_lines", None)
    if lines is not None:  # a line of a warning or an error: said whole when it ends
        lines.append(text.strip())
    elif blockquote or text.lstrip().startswith("# aider chat started"):
        say(kind="notice", text=text.strip())
    else:
        say(kind="user" if text.lstrip().startswith("####") else "reply", text=text.strip())


def whole(method, kind):
    def said(self, message="", strip=True):
        self._errand_lines = []
        try:
            method(self, message, strip)
        finally:
            lines, self._errand_lines = self._errand_lines, None
            if lines:
                say(kind=kind, text="\\n".join(lines).strip())
    return said


InputOutput.append_chat_history = appended
InputOutput.tool_error = whole(InputOutput.tool_error, "error")
InputOutput.tool_warning = whole(InputOutput.tool_warning, "notice")
from aider.main import main

code = main()
if code:
    sys.exit(code)
say(kind="exit", code=0)
'''

_FLAGS = ("--edit-format", "diff", "--yes-always", "--no-pretty", "--no-fancy-input", "--no-auto-commits",
          "--no-dirty-commits", "--no-gitignore", "--no-check-update", "--analytics-disable",
          "--no-show-model-warnings", "--no-show-release-notes", "--no-detect-urls",
          "--no-suggest-shell-commands", "--encoding", "utf-8", "--input-history-file",
          f"{DIRECTORY}/input.history", "--chat-history-file", CHAT, "--read", INSTRUCTIONS)
_HEAD = re.compile(r"^<{5,9} SEARCH\s*$")
_DIVIDER = re.compile(r"^={5,9}\s*$")
_UPDATED = re.compile(r"^>{5,9} REPLACE\s*$")
_APPLIED = re.compile(r"^Applied edit to (.+)$")


class Aider(CliAdapter):
    """The aider adapter (it keeps the edits awaiting their results, its last reply and the errors since)."""

    kind = "aider"
    provider = "openai"
    protocol = "openai-chat"
    package = PACKAGE
    binary = "aider"
    registry = "pip"

    def __init__(self, workdir: str = "/workspace") -> None:
        super().__init__(workdir)
        self._replies = 0
        self._pending: list[dict[str, Any]] = []  # the last reply's edits, until aider says how they went
        self._said = ""  # the last reply's words (its edit blocks left out): the summary, when it ends
        self._errors: list[str] = []  # since the last reply: its errors, and notices of an exception
        self._failed = False  # whether aider reported an error since the last reply
        self._edited = ""  # the last reply's last edit: the call a lint report is the output of
        self._sessioned = False

    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        # A session goes on from its chat history (the sandbox's, where the last invocation wrote it).
        return ["python3", RUNNER, "--model", f"openai/{access.model}", "--openai-api-base", access.base_url,
                *_FLAGS, *(["--restore-chat-history"] if session else []), "--message", prompt]

    def env(self, access: ModelAccess) -> dict[str, str]:
        return {"OPENAI_API_KEY": access.token, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1",
                "HOME": "/root"}

    def files(self, access: ModelAccess, system: str) -> dict[str, str]:
        # Written before each invocation, so the price table's cache is never a day old.
        return {RUNNER: WRAPPER, INSTRUCTIONS: system + "\n", PRICES: json.dumps(SEEDED)}

    def translate(self, line: Mapping[str, Any]) -> list[Said]:
        kind, text = line.get("kind"), str(line.get("text") or "")
        if kind == "user" and not self._sessioned:
            self._sessioned = True
            return [Said("session", {"id": CHAT})]
        if kind == "reply":
            return self._reply(text)
        if kind == "error" and text:
            self._errors.append(text)
            self._failed = True
        if kind == "notice":
            if "Error: " in text.split("\n", 1)[0]:  # litellm's exception, before aider's words on it
                self._errors.append(text)
            return self._notice(text)
        if kind == "exit":
            ok = self._replies > 0 and not self._failed
            reason = None if ok else ("; ".join(self._errors) if self._errors else "the model never replied")
            return [Said("result", {"ok": ok, "text": self._said, "reason": reason, "usage": None})]
        return []

    def _reply(self, text: str) -> list[Said]:
        self._replies += 1
        self._errors, self._failed = [], False
        call_id = f"reply-{self._replies}"
        self._pending = [{"id": f"{call_id}-edit-{index}", "name": "edit_file",
                          "arguments": {"path": self.relative(path), "old": old, "new": new}}
                         for index, (path, old, new) in enumerate(edit_blocks(text), 1)]
        self._said = _prose(text)
        self._edited = self._pending[-1]["id"] if self._pending else ""
        return [model_step(call_id, self._said, self._pending), *(Said("tool_call", call) for call in self._pending)]

    def _notice(self, text: str) -> list[Said]:
        applied = _APPLIED.match(text)
        if applied:
            path = self.relative(applied.group(1).strip())
            done = [call for call in self._pending if call["arguments"]["path"] == path]
            self._pending = [call for call in self._pending if call not in done]
            return [_result(call, True, f"Applied edit to {path}") for call in done]
        if "SEARCH/REPLACE block" in text and "failed to match" in text:
            failed = {(old, new) for _path, old, new in edit_blocks(text)}
            done, self._pending = self._pending, []
            return [_result(call, (call["arguments"]["old"], call["arguments"]["new"]) not in failed, text)
                    for call in done]
        if text.startswith("# Fix any errors below") and self._edited:
            # aider's lint of what it edited (its flake8 of Python files): the output of the reply's edits
            return [Said("output", {"id": self._edited, "text": text + "\n"})]
        return []


def _result(call: dict[str, Any], ok: bool, content: str) -> Said:
    return Said("tool_result", {"id": call["id"], "name": "edit_file", "ok": ok, "exit_code": None,
                                "content": content if not ok else f"Applied edit to {call['arguments']['path']}"})


def edit_blocks(text: str) -> list[tuple[str, str, str]]:
    """The SEARCH/REPLACE blocks of ``text`` as (path, old, new), the path the line before each block
    (its fence skipped), or the previous block's when that line is none."""
    lines = text.splitlines()
    found: list[tuple[str, str, str]] = []
    path = ""
    index = 0
    while index < len(lines):
        if not _HEAD.match(lines[index]):
            index += 1
            continue
        path = _path_before(lines, index) or path
        old: list[str] = []
        new: list[str] = []
        index += 1
        while index < len(lines) and not _DIVIDER.match(lines[index]):
            old.append(lines[index])
            index += 1
        index += 1
        while index < len(lines) and not _UPDATED.match(lines[index]):
            new.append(lines[index])
            index += 1
        if index < len(lines):
            found.append((path, "\n".join(old), "\n".join(new)))
        index += 1
    return found


def _path_before(lines: list[str], head: int) -> str:
    at = head - 1
    if at >= 0 and lines[at].strip().startswith("```"):
        at -= 1
    if at < 0:
        return ""
    name = lines[at].strip().strip("`*#:").strip()
    return "" if not name or " " in name or _UPDATED.match(lines[at]) else name


def _prose(text: str) -> str:
    """A reply's words without its edit blocks (each with its path line and fences)."""
    lines = text.splitlines()
    kept: list[str] = []
    inside = False
    for line in lines:
        if _HEAD.match(line):
            inside = True
            while kept and kept[-1].strip().startswith("```"):
                kept.pop()
            if kept and kept[-1].strip() and " " not in kept[-1].strip():
                kept.pop()  # its path
            continue
        if inside:
            inside = not _UPDATED.match(line)
            if not inside:
                kept.append("\0")  # where a closing fence may follow
            continue
        if kept and kept[-1] == "\0" and line.strip().startswith("```"):
            continue
        kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(line for line in kept if line != "\0")).strip()
