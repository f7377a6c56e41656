"""errand's own tools: their schemas for the model, and how each acts in a workspace.

The loop runs on the host; every tool that touches code acts in the
:class:`~errand.agent.workspace.Workspace` (a task's sandbox): ``shell`` and
``search`` as processes, the file tools through its files API. A tool that
fails — bad arguments, a missing file, an edit whose text does not match —
answers with an ``error:`` result the model can act on; it never raises.
``ask_user`` and ``finish`` do not run anything: they raise the
:mod:`~errand.agent.exits` that pause or end the run. They are registered into
the agent's :class:`~errand.agent.registry.ToolRegistry` by
:func:`register_core_tools`.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import posixpath
from typing import Any

from errand.agent.exits import Finished, NeedsInput
from errand.agent.registry import (
    Handler,
    Invocation,
    OutputHandler,
    ToolArgumentError,
    ToolRegistry,
    ToolResult,
    error_result,
)
from errand.agent.workspace import Workspace
from errand.errors import ExecTimeout
from errand.models import Tool, ToolCall

__all__ = ["TOOLS", "OutputHandler", "ToolResult", "register_core_tools", "run_tool"]

log = logging.getLogger("errand.agent")

MAX_SHELL_OUTPUT = 16_000  # characters of a command's output the model sees (the tail)
MAX_READ_LINES = 400  # lines read_file returns when no range is asked for
MAX_READ_CHARS = 24_000
MAX_FILE_BYTES = 8 * 1024 * 1024  # files bigger than this are refused by the file tools
MAX_SEARCH_LINES = 200
DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 1800.0
_DRAIN = 0.5  # seconds to keep reading after a command ends (a daemon may hold its pipes)


def _schema(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": {**required, **(optional or {})},
            "required": list(required), "additionalProperties": False}


_STRING = {"type": "string"}
_LINE = {"type": "integer", "minimum": 1}

TOOLS: tuple[Tool, ...] = (
    Tool("shell", "Run a shell command (sh -c) in the working directory. Returns the exit code and the "
         f"combined stdout/stderr (the last {MAX_SHELL_OUTPUT} characters). Commands cannot be interactive.",
         _schema({"command": _STRING}, {"timeout": {"type": "number", "description":
                  f"seconds before the command is killed (default {DEFAULT_TIMEOUT:g}, at most {MAX_TIMEOUT:g})"}})),
    Tool("read_file", "Read a text file with numbered lines; give start_line/end_line for a range "
         f"(without a range, the first {MAX_READ_LINES} lines).",
         _schema({"path": _STRING}, {"start_line": _LINE, "end_line": _LINE})),
    Tool("edit_file", "Replace the exact text `old` with `new` in a file. `old` must occur exactly once: "
         "copy it from read_file output (without line numbers), with enough context to be unique.",
         _schema({"path": _STRING, "old": _STRING, "new": _STRING})),
    Tool("write_file", "Create or overwrite a file with `content` (parent directories are created).",
         _schema({"path": _STRING, "content": _STRING})),
    Tool("search", "Search file contents for a regular expression (grep -rnE); `path` defaults to the "
         "working directory.", _schema({"pattern": _STRING}, {"path": _STRING})),
    Tool("ask_user", "Ask the person who gave you the task a question and wait for the answer. Ask early, "
         "when the task is ambiguous, rather than guess.", _schema({"question": _STRING})),
    Tool("finish", "End the task. `summary` says what you changed and how you checked it; `assumptions` "
         "lists every decision you made that the task did not settle. When the task asked a question rather "
         "than for a change, change nothing and give your answer in `answer`.",
         _schema({"summary": _STRING, "assumptions": {"type": "array", "items": _STRING}}, {"answer": _STRING})),
)


def register_core_tools(registry: ToolRegistry, workspace: Workspace, workdir: str) -> None:
    """Register errand's own tools (:data:`TOOLS`, in that order), acting in ``workspace`` at ``workdir``."""
    place = _Place(workspace, workdir)
    handlers: dict[str, Handler] = {
        "shell": place.shell, "read_file": place.read_file, "edit_file": place.edit_file,
        "write_file": place.write_file, "search": place.search, "ask_user": _ask_user, "finish": _finish,
    }
    for tool in TOOLS:
        registry.register(tool, handlers[tool.name])


async def run_tool(workspace: Workspace, workdir: str, call: ToolCall, *,
                   on_output: OutputHandler | None = None) -> ToolResult:
    """Run one call of errand's own tools. Raises only the run's exits, and sandbox errors that end it.

    ``on_output`` sees a shell command's output while it runs.
    """
    registry = ToolRegistry()
    register_core_tools(registry, workspace, workdir)
    return await registry.run(call, on_output=on_output)


def _string(arguments: dict[str, Any], name: str, *, allow_empty: bool = True) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or (not allow_empty and not value):
        raise ToolArgumentError(f"'{name}' must be a {'' if allow_empty else 'non-empty '}string")
    return value


def _optional_int(arguments: dict[str, Any], name: str) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolArgumentError(f"'{name}' must be a positive integer (lines count from 1)")
    return value


class _Place:
    """errand's own tools acting in one workspace, paths resolved against ``workdir``."""

    def __init__(self, workspace: Workspace, workdir: str) -> None:
        self.workspace = workspace
        self.workdir = workdir

    def path(self, arguments: dict[str, Any], name: str = "path", default: str | None = None) -> str:
        value = arguments.get(name, default)
        if not isinstance(value, str) or not value:
            raise ToolArgumentError(f"'{name}' must be a non-empty string")
        return posixpath.normpath(posixpath.join(self.workdir, value))

    # -------------------------------------------------------------- shell

    async def shell(self, invocation: Invocation) -> ToolResult:
        arguments = invocation.arguments
        command = _string(arguments, "command", allow_empty=False)
        timeout = arguments.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT:
            raise ToolArgumentError(f"'timeout' must be a number of seconds in (0, {MAX_TIMEOUT:g}]")
        # eval keeps the command's own text intact; exec 2>&1 interleaves stderr as the model would see it.
        process = await self.workspace.exec("sh", "-c", 'exec 2>&1; eval "$1"', "sh", command,
                                            cwd=self.workdir, timeout=float(timeout))
        tail = _Tail(MAX_SHELL_OUTPUT, invocation.on_output)
        reader = asyncio.ensure_future(tail.collect(process.stdout.chunks()))
        try:
            exit_code: int | None = await process.wait()
        except ExecTimeout:
            exit_code = None
        finally:
            await asyncio.wait([reader], timeout=_DRAIN)
            reader.cancel()
        if tail.refused is not None:
            log.warning("the output of %r was not all passed on: %s", command[:80], tail.refused)
        status = f"timed out after {timeout:g}s and was killed" if exit_code is None else f"exit code {exit_code}"
        return ToolResult(f"{status}\n{tail.text()}", ok=exit_code == 0, exit_code=exit_code)

    # -------------------------------------------------------------- files

    async def _read_text(self, path: str) -> str:
        data = await self.workspace.files.read(path, max_bytes=MAX_FILE_BYTES)
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise ToolArgumentError(f"{path} is not UTF-8 text") from None

    async def read_file(self, invocation: Invocation) -> ToolResult:
        arguments = invocation.arguments
        path = self.path(arguments)
        start, end = _optional_int(arguments, "start_line"), _optional_int(arguments, "end_line")
        lines = (await self._read_text(path)).splitlines()
        first = start or 1
        last = min(end or (first + MAX_READ_LINES - 1), len(lines))
        if first > max(len(lines), 1) or (end is not None and end < first):
            return error_result(f"{path} has {len(lines)} lines; lines {first}-{end or first} are out of range")
        shown, size = [], 0
        for number in range(first, last + 1):
            line = f"{number:6}\t{lines[number - 1]}"
            size += len(line) + 1
            if size > MAX_READ_CHARS:
                last = number - 1
                break
            shown.append(line)
        more = f"\n[lines {last + 1}-{len(lines)} not shown; ask with start_line]" if last < len(lines) else ""
        return ToolResult(f"{path} ({len(lines)} lines)\n" + "\n".join(shown) + more)

    async def edit_file(self, invocation: Invocation) -> ToolResult:
        arguments = invocation.arguments
        path = self.path(arguments)
        old, new = _string(arguments, "old", allow_empty=False), _string(arguments, "new")
        text = await self._read_text(path)
        count = text.count(old)
        if count == 0:
            return error_result(f"`old` was not found in {path}; read the file and copy the text exactly, "
                                "whitespace included, without the line numbers")
        if count > 1:
            return error_result(f"`old` was found {count} times in {path}; include more surrounding lines "
                                "so that it matches exactly once")
        mode = (await self.workspace.files.stat(path)).mode
        await self.workspace.files.write(path, text.replace(old, new, 1), mode=mode)
        line = text[:text.index(old)].count("\n") + 1
        return ToolResult(f"edited {path}: replaced 1 occurrence at line {line}")

    async def write_file(self, invocation: Invocation) -> ToolResult:
        path = self.path(invocation.arguments)
        content = _string(invocation.arguments, "content")
        await self.workspace.files.write(path, content)
        return ToolResult(f"wrote {len(content.encode())} bytes to {path}")

    async def search(self, invocation: Invocation) -> ToolResult:
        pattern = _string(invocation.arguments, "pattern", allow_empty=False)
        path = self.path(invocation.arguments, default=".")
        result = await self.workspace.run("grep", "-rnIE", "--exclude-dir=.git", "-e", pattern, "--", path,
                                          cwd=self.workdir, timeout=DEFAULT_TIMEOUT, max_output=MAX_READ_CHARS)
        if result.exit_code == 1:
            return ToolResult(f"no matches for {pattern!r} in {path}")
        if result.exit_code != 0:
            return error_result(f"grep failed (exit code {result.exit_code}): {result.stderr.strip()}")
        lines = result.stdout.splitlines()
        shown = lines[:MAX_SEARCH_LINES]
        more = len(lines) > MAX_SEARCH_LINES or result.truncated
        return ToolResult("\n".join(shown) + ("\n[more matches not shown; narrow the pattern or path]" if more else ""))


class _Tail:
    """Keeps the last ``limit`` bytes of a stream: the end of a log is where the error is.

    Every chunk is also handed, decoded, to ``on_output`` as it arrives. A handler that
    refuses (its run was taken from this worker, say) is handed no more, and its error is
    kept in ``refused``: the command's output is still collected for its result.
    """

    def __init__(self, limit: int, on_output: OutputHandler | None = None) -> None:
        self.limit = limit
        self.buffer = bytearray()
        self.dropped = 0
        self.refused: Exception | None = None
        self._on_output = on_output
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    async def collect(self, chunks: Any) -> None:
        async for chunk in chunks:
            self.buffer += chunk
            excess = len(self.buffer) - self.limit
            if excess > 0:
                del self.buffer[:excess]
                self.dropped += excess
            if self._on_output is not None and (text := self._decoder.decode(chunk)):
                try:
                    await self._on_output(text)
                except Exception as error:  # noqa: BLE001 - whatever the handler's store raised, the result stands
                    self.refused, self._on_output = error, None

    def text(self) -> str:
        text = bytes(self.buffer).decode(errors="replace")
        return f"[... {self.dropped} earlier bytes cut ...]\n{text}" if self.dropped else text


# ------------------------------------------------------------ run control


async def _ask_user(invocation: Invocation) -> ToolResult:
    raise NeedsInput(_string(invocation.arguments, "question", allow_empty=False), invocation.call.id)


async def _finish(invocation: Invocation) -> ToolResult:
    arguments = invocation.arguments
    summary = _string(arguments, "summary", allow_empty=False)
    assumptions = arguments.get("assumptions", [])
    if not isinstance(assumptions, list) or not all(isinstance(item, str) for item in assumptions):
        raise ToolArgumentError("'assumptions' must be a list of strings (an empty list if there are none)")
    answer = _string(arguments, "answer").strip() if "answer" in arguments else ""
    raise Finished(summary, list(assumptions), answer or None)
