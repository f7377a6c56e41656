"""The agent's seam to where it works: any Workspace, not only a sandbox.

A directory on the host (``tests/agent/host_workspace.py``) offers only what the
:class:`~errand.agent.Workspace` protocol names; the loop fixes a bug in it with
every one of its tools, as it does in a sandbox.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from errand.agent import Agent, AgentConfig, AgentHooks, Workspace, run_tool
from errand.models import Message, ScriptedModel, ToolCall

from .conftest import CALC, TEST_CALC
from .host_workspace import HostDirectory


def turn(name: str, **arguments: Any) -> Message:
    return Message("assistant", "", [ToolCall(f"c-{name}-{len(arguments)}", name, arguments)])


def project(tmp_path: Path) -> Path:
    root = tmp_path / "calc"
    root.mkdir()
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST_CALC)
    return root


async def test_the_loop_fixes_a_bug_in_a_host_directory_with_no_sandbox(tmp_path: Path) -> None:
    root = project(tmp_path)
    workspace: Workspace = HostDirectory(root)
    test = f"{shlex.quote(sys.executable)} test_calc.py"
    model = ScriptedModel([
        turn("search", pattern="def add"), turn("read_file", path="calc.py"),
        turn("edit_file", path="calc.py", old="return a - b", new="return a + b"),
        turn("write_file", path="notes/why.txt", content="add() subtracted\n"), turn("shell", command=test),
        turn("finish", summary="add() adds now", assumptions=[])])
    events: list[tuple[str, dict[str, Any]]] = []
    agent = Agent(model, workspace, AgentConfig(workdir=str(root)),
                  AgentHooks(on_event=lambda kind, data: events.append((kind, data))))
    result = await agent.run("Make test_calc.py pass.")

    assert result.status == "finished", result.detail
    searched, read, edited, wrote, tested = [m.content for m in result.messages if m.role == "tool"]
    assert searched == f"{root}/calc.py:1:def add(a, b):"
    assert read.startswith(f"{root}/calc.py (6 lines)\n     1\tdef add(a, b):")
    assert edited == f"edited {root}/calc.py: replaced 1 occurrence at line 2"
    assert wrote == f"wrote 17 bytes to {root}/notes/why.txt"
    assert tested == "exit code 0\n1 passed\n"
    assert (root / "calc.py").read_text() == CALC.replace("a - b", "a + b")
    assert (root / "notes" / "why.txt").read_text() == "add() subtracted\n"
    assert "".join(data["text"] for kind, data in events if kind == "output") == "1 passed\n"


async def test_a_workspace_s_failures_come_back_as_tool_results(tmp_path: Path) -> None:
    root = project(tmp_path)
    workspace = HostDirectory(root)

    async def call(name: str, **arguments: Any) -> str:
        result = await run_tool(workspace, str(root), ToolCall("c1", name, arguments))
        assert result.ok is False
        return result.content

    assert (await call("read_file", path="missing.py")).startswith(f"error: {root}/missing.py: ")
    assert (await call("read_file", path="../../etc/passwd")).endswith("is outside the workspace")
    assert await call("shell", command="sleep 30", timeout=0.5) == "timed out after 0.5s and was killed\n"
    assert (await call("shell", command="exit 4")).startswith("exit code 4")
