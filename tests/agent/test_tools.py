"""Each tool against a real sandbox; failures come back as results, never raised."""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path
from typing import Any

import pytest

from errand.agent import TOOLS, run_tool
from errand.agent.exits import Finished, NeedsInput
from errand.agent.tools import ToolResult
from errand.models import ToolCall
from errand.sandbox import AsyncSandbox


async def call(sandbox: AsyncSandbox, name: str, **arguments: Any) -> ToolResult:
    return await run_tool(sandbox, "/workspace", ToolCall("call_1", name, arguments))


def test_every_tool_has_an_object_schema() -> None:
    assert [t.name for t in TOOLS] == ["shell", "read_file", "edit_file", "write_file", "search", "ask_user",
                                       "finish"]
    for tool in TOOLS:
        assert tool.parameters["type"] == "object"
        assert set(tool.parameters["required"]) <= set(tool.parameters["properties"])


async def test_shell_reports_exit_code_and_interleaved_output(sandbox: AsyncSandbox) -> None:
    result = await call(sandbox, "shell", command="echo out; echo err >&2; pwd; exit 3")
    assert not result.ok
    assert result.content == "exit code 3\nout\nerr\n/workspace\n"
    assert (await call(sandbox, "shell", command="python3 test_calc.py")).content.startswith("exit code 1")


async def test_shell_keeps_the_tail_of_long_output(sandbox: AsyncSandbox) -> None:
    result = await call(sandbox, "shell", command="python3 -c \"print('a' * 40000 + 'END')\"")
    assert result.ok
    assert "earlier bytes cut" in result.content
    assert result.content.rstrip().endswith("END")
    assert len(result.content) < 17_000


async def test_shell_timeout_is_a_result(sandbox: AsyncSandbox) -> None:
    result = await call(sandbox, "shell", command="echo started; sleep 30", timeout=0.5)
    assert not result.ok
    assert result.content.startswith("timed out after 0.5s")
    assert "started" in result.content


async def test_read_file_numbers_lines_and_takes_a_range(sandbox: AsyncSandbox) -> None:
    whole = await call(sandbox, "read_file", path="calc.py")
    assert whole.content.splitlines()[:3] == ["/workspace/calc.py (6 lines)", "     1\tdef add(a, b):",
                                              "     2\t    return a - b"]
    part = await call(sandbox, "read_file", path="/workspace/calc.py", start_line=5, end_line=6)
    assert part.content.splitlines()[1:] == ["     5\tdef double(x):", "     6\t    return x * 2"]
    assert "out of range" in (await call(sandbox, "read_file", path="calc.py", start_line=50)).content


async def test_read_file_truncates_and_says_how_to_continue(sandbox: AsyncSandbox) -> None:
    await call(sandbox, "write_file", path="big.txt", content="".join(f"line {n}\n" for n in range(1000)))
    result = await call(sandbox, "read_file", path="big.txt")
    assert "   400\tline 399" in result.content
    assert "[lines 401-1000 not shown; ask with start_line]" in result.content


async def test_missing_file_is_an_error_result(sandbox: AsyncSandbox) -> None:
    result = await call(sandbox, "read_file", path="nope.py")
    assert not result.ok
    assert result.content.startswith("error: /workspace/nope.py")


async def test_edit_file_replaces_exactly_one_match(sandbox: AsyncSandbox) -> None:
    result = await call(sandbox, "edit_file", path="calc.py", old="return a - b", new="return a + b")
    assert result.ok, result.content
    assert result.content == "edited /workspace/calc.py: replaced 1 occurrence at line 2"
    assert "return a + b" in await sandbox.files.read_text("/workspace/calc.py")


async def test_edit_file_errors_say_what_went_wrong(sandbox: AsyncSandbox) -> None:
    missing = await call(sandbox, "edit_file", path="calc.py", old="return a * b", new="x")
    assert not missing.ok
    assert "was not found in /workspace/calc.py" in missing.content
    several = await call(sandbox, "edit_file", path="calc.py", old="return", new="yield")
    assert not several.ok
    assert "was found 2 times" in several.content
    assert await sandbox.files.read_text("/workspace/calc.py") == (
        "def add(a, b):\n    return a - b\n\n\ndef double(x):\n    return x * 2\n")


async def test_write_file_creates_parents(sandbox: AsyncSandbox) -> None:
    result = await call(sandbox, "write_file", path="pkg/new.py", content="X = 1\n")
    assert result.content == "wrote 6 bytes to /workspace/pkg/new.py"
    assert await sandbox.files.read_text("/workspace/pkg/new.py") == "X = 1\n"


async def test_search_finds_lines_and_reports_no_match(sandbox: AsyncSandbox) -> None:
    result = await call(sandbox, "search", pattern="def (add|double)")
    assert sorted(result.content.splitlines()) == ["/workspace/calc.py:1:def add(a, b):",
                                                   "/workspace/calc.py:5:def double(x):"]
    assert (await call(sandbox, "search", pattern="nothing_like_this", path="calc.py")).content.startswith(
        "no matches")


async def test_bad_arguments_and_unknown_tools_are_error_results(sandbox: AsyncSandbox) -> None:
    assert (await call(sandbox, "shell")).content == "error: shell: 'command' must be a non-empty string"
    assert "positive integer" in (await call(sandbox, "read_file", path="calc.py", start_line=0)).content
    assert (await call(sandbox, "rm_rf")).content.startswith("error: unknown tool 'rm_rf'")
    assert "list of strings" in (await call(sandbox, "finish", summary="s", assumptions="none")).content


async def test_ask_user_and_finish_end_the_run(sandbox: AsyncSandbox) -> None:
    with pytest.raises(NeedsInput) as asked:
        await call(sandbox, "ask_user", question="Which add?")
    assert (asked.value.question, asked.value.call_id) == ("Which add?", "call_1")
    with pytest.raises(Finished) as finished:
        await call(sandbox, "finish", summary="done", assumptions=["a"])
    assert (finished.value.summary, finished.value.assumptions) == ("done", ["a"])


async def test_an_output_handler_that_refuses_leaves_the_commands_result_and_says_so_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The handler that records a command's output refused (its run was taken from this worker):
    the command's result stands, and the refusal is logged, not left as an error nobody reads
    ("Task exception was never retrieved" at the next garbage collection)."""
    from .host_workspace import HostDirectory

    async def refuse(_text: str) -> None:
        raise RuntimeError("the run took no more events")

    loop = asyncio.get_running_loop()
    unread: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unread.append(context))
    call = ToolCall("c-1", "shell", {"command": "echo one; echo two"})
    with caplog.at_level(logging.WARNING, logger="errand.agent"):
        result = await run_tool(HostDirectory(tmp_path), str(tmp_path), call, on_output=refuse)
    gc.collect()
    await asyncio.sleep(0)
    assert result.ok and result.content == "exit code 0\none\ntwo\n"
    assert [r.getMessage() for r in caplog.records] == [
        "the output of 'echo one; echo two' was not all passed on: the run took no more events"]
    assert unread == []
