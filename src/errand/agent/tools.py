"""The agent's tools: their schemas for the model, and how each runs against a sandbox.

The loop runs on the host; every tool that touches code runs inside the
sandbox (``shell`` and ``search`` as processes, the file tools through its
files API). A tool that fails — bad arguments, a missing file, an edit whose
text does not match — answers with an ``error:`` result the model can act on;
it never raises. ``ask_user`` and ``finish`` do not run anything: they raise
the :mod:`~errand.agent.exits` that pause or end the run.
"""

from __future__ import annotations

import asyncio
import codecs
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from errand.agent.exits import Finished, NeedsInput
from errand.errors import ConfigError, ExecTimeout, FilesError, SandboxNotFound, SandboxTerminated
from errand.models import Tool, ToolCall
from errand.sandbox import AsyncSandbox

__all__ = ["TOOLS", "OutputHandler", "ToolResult", "run_tool"]

#: Receives a shell command's output as it arrives (text, decoded incrementally).
OutputHandler = Callable[[str], Awaitable[None]]

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


@dataclass(frozen=True)
class ToolResult:
    """What a tool call answered; ``ok`` is false for an ``error:`` result.

    ``exit_code`` is the shell command's (``None`` for other tools, or a command
    killed by its timeout).
    """

    content: str
    ok: bool = True
    exit_code: int | None = None


class ToolArgumentError(Exception):
    """The model called a tool with arguments that do not fit its schema."""


def _error(message: str) -> ToolResult:
    return ToolResult(f"error: {message}", ok=False)


async def run_tool(sandbox: AsyncSandbox, workdir: str, call: ToolCall, *,
                   on_output: OutputHandler | None = None) -> ToolResult:
    """Run one tool call. Raises only the run's exits, and sandbox errors that end it.

    ``on_output`` sees a shell command's output while it runs.
    """
    handler = _HANDLERS.get(call.name)
    if handler is None:
        return _error(f"unknown tool {call.name!r}; the tools are {', '.join(t.name for t in TOOLS)}")
    try:
        return await handler(_Context(sandbox, workdir, call, on_output), call.arguments)
    except ToolArgumentError as error:
        return _error(f"{call.name}: {error}")
    except (SandboxTerminated, SandboxNotFound):
        raise
    except FilesError as error:
        return _error(f"{error.path}: {error.message}")
    except ConfigError as error:
        return _error(error.message)


@dataclass(frozen=True)
class _Context:
    sandbox: AsyncSandbox
    workdir: str
    call: ToolCall
    on_output: OutputHandler | None = None

    def path(self, arguments: dict[str, Any], name: str = "path", default: str | None = None) -> str:
        value = arguments.get(name, default)
        if not isinstance(value, str) or not value:
            raise ToolArgumentError(f"'{name}' must be a non-empty string")
        return posixpath.normpath(posixpath.join(self.workdir, value))


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


# ------------------------------------------------------------------ shell


async def _shell(context: _Context, arguments: dict[str, Any]) -> ToolResult:
    command = _string(arguments, "command", allow_empty=False)
    timeout = arguments.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT:
        raise ToolArgumentError(f"'timeout' must be a number of seconds in (0, {MAX_TIMEOUT:g}]")
    # eval keeps the command's own text intact; exec 2>&1 interleaves stderr as the model would see it.
    process = await context.sandbox.exec("sh", "-c", 'exec 2>&1; eval "$1"', "sh", command,
                                         cwd=context.workdir, timeout=float(timeout))
    tail = _Tail(MAX_SHELL_OUTPUT, context.on_output)
    reader = asyncio.ensure_future(tail.collect(process.stdout.chunks()))
    try:
        exit_code: int | None = await process.wait()
    except ExecTimeout:
        exit_code = None
    finally:
        await asyncio.wait([reader], timeout=_DRAIN)
        reader.cancel()
    status = f"timed out after {timeout:g}s and was killed" if exit_code is None else f"exit code {exit_code}"
    return ToolResult(f"{status}\n{tail.text()}", ok=exit_code == 0, exit_code=exit_code)


class _Tail:
    """Keeps the last ``limit`` bytes of a stream: the end of a log is where the error is.

    Every chunk is also handed, decoded, to ``on_output`` as it arrives.
    """

    def __init__(self, limit: int, on_output: OutputHandler | None = None) -> None:
        self.limit = limit
        self.buffer = bytearray()
        self.dropped = 0
        self._on_output = on_output
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    async def collect(self, chunks: Any) -> None:
        async for chunk in chunks:
            if self._on_output is not None and (text := self._decoder.decode(chunk)):
                await self._on_output(text)
            self.buffer += chunk
            excess = len(self.buffer) - self.limit
            if excess > 0:
                del self.buffer[:excess]
                self.dropped += excess

    def text(self) -> str:
        text = bytes(self.buffer).decode(errors="replace")
        return f"[... {self.dropped} earlier bytes cut ...]\n{text}" if self.dropped else text


# ------------------------------------------------------------------ files


async def _read_text(context: _Context, path: str) -> str:
    data = await context.sandbox.files.read(path, max_bytes=MAX_FILE_BYTES)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ToolArgumentError(f"{path} is not UTF-8 text") from None


async def _read_file(context: _Context, arguments: dict[str, Any]) -> ToolResult:
    path = context.path(arguments)
    start, end = _optional_int(arguments, "start_line"), _optional_int(arguments, "end_line")
    lines = (await _read_text(context, path)).splitlines()
    first = start or 1
    last = min(end or (first + MAX_READ_LINES - 1), len(lines))
    if first > max(len(lines), 1) or (end is not None and end < first):
        return _error(f"{path} has {len(lines)} lines; lines {first}-{end or first} are out of range")
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


async def _edit_file(context: _Context, arguments: dict[str, Any]) -> ToolResult:
    path = context.path(arguments)
    old, new = _string(arguments, "old", allow_empty=False), _string(arguments, "new")
    text = await _read_text(context, path)
    count = text.count(old)
    if count == 0:
        return _error(f"`old` was not found in {path}; read the file and copy the text exactly, "
                      "whitespace included, without the line numbers")
    if count > 1:
        return _error(f"`old` was found {count} times in {path}; include more surrounding lines "
                      "so that it matches exactly once")
    mode = (await context.sandbox.files.stat(path)).mode
    await context.sandbox.files.write(path, text.replace(old, new, 1), mode=mode)
    line = text[:text.index(old)].count("\n") + 1
    return ToolResult(f"edited {path}: replaced 1 occurrence at line {line}")


async def _write_file(context: _Context, arguments: dict[str, Any]) -> ToolResult:
    path = context.path(arguments)
    content = _string(arguments, "content")
    await context.sandbox.files.write(path, content)
    return ToolResult(f"wrote {len(content.encode())} bytes to {path}")


async def _search(context: _Context, arguments: dict[str, Any]) -> ToolResult:
    pattern = _string(arguments, "pattern", allow_empty=False)
    path = context.path(arguments, default=".")
    result = await context.sandbox.run("grep", "-rnIE", "--exclude-dir=.git", "-e", pattern, "--", path,
                                       cwd=context.workdir, timeout=DEFAULT_TIMEOUT, max_output=MAX_READ_CHARS)
    if result.exit_code == 1:
        return ToolResult(f"no matches for {pattern!r} in {path}")
    if result.exit_code != 0:
        return _error(f"grep failed (exit code {result.exit_code}): {result.stderr.strip()}")
    lines = result.stdout.splitlines()
    shown = lines[:MAX_SEARCH_LINES]
    more = len(lines) > MAX_SEARCH_LINES or result.truncated
    return ToolResult("\n".join(shown) + ("\n[more matches not shown; narrow the pattern or path]" if more else ""))


# ------------------------------------------------------------ run control


async def _ask_user(context: _Context, arguments: dict[str, Any]) -> ToolResult:
    raise NeedsInput(_string(arguments, "question", allow_empty=False), context.call.id)


async def _finish(context: _Context, arguments: dict[str, Any]) -> ToolResult:
    summary = _string(arguments, "summary", allow_empty=False)
    assumptions = arguments.get("assumptions", [])
    if not isinstance(assumptions, list) or not all(isinstance(item, str) for item in assumptions):
        raise ToolArgumentError("'assumptions' must be a list of strings (an empty list if there are none)")
    answer = _string(arguments, "answer").strip() if "answer" in arguments else ""
    raise Finished(summary, list(assumptions), answer or None)


_HANDLERS: dict[str, Callable[[_Context, dict[str, Any]], Awaitable[ToolResult]]] = {
    "shell": _shell, "read_file": _read_file, "edit_file": _edit_file, "write_file": _write_file,
    "search": _search, "ask_user": _ask_user, "finish": _finish,
}
