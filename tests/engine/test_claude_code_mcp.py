"""errand's own tools for Claude Code, over MCP: the real CLI, from the npm registry, in the task's sandbox.

The test plays the model on a loopback Anthropic wire server (as in
test_claude_code.py) and scripts it to call errand's tools on the MCP server the
CLI is configured with — served on the host, reached through the sandbox's relay
with the run's own token: it recalls the project's memory, proposes one, asks the
person a question and ends its turn; the task waits on the question; the
person's answer resumes the CLI's session — in the paused sandbox (the local
engine), or in a new one given the session's files kept from the first (the
Temporal engine) — which makes the fix.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from errand.agent.mcp_server import ToolServer
from errand.memory import MemoryStore, Provenance, project_key
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from models.provider_wire import Provider, Turn
from models.wire import WireServer

from .agent_clis import FAILING, cli_processes, submit, task_sandboxes
from .agent_clis import wire as wire  # the fixture: a loopback wire server the test owns
from .harness import running_engine, wait_for_event, wait_for_state
from .test_claude_code import from_the_cli, keyed, tool_results

pytestmark = [pytest.mark.slow, pytest.mark.network]
__all__ = ["keyed"]

QUESTION = "Should add() also accept strings, or numbers only?"
ANSWER = "Numbers only; just fix the sign."
OURS = "Run the project's checks with python3 test_calc.py (it prints the failing case)"
THEIRS = "Run the project's checks with make check-everything in the other repository"
PROPOSED = "calc.py's add() had its sign wrong once; test_calc.py catches it"


def tool(n: int, name: str, arguments: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    return (f"toolu_{n}", f"mcp__errand__{name}", arguments)


def script(*turns: Turn) -> Callable[[int], Turn]:
    return lambda step: turns[min(step, len(turns)) - 1]


def remember(store: TaskStore, repo: Path, text: str) -> int:
    memories = MemoryStore(store.engine, embedder=None)
    return memories.add(project_key(repo), text, kind="command", provenance=Provenance.person("told by Ana")).id


async def test_claude_code_asks_the_person_recalls_and_proposes_over_errands_mcp_server(
        keyed: None, wire: WireServer, tmp_path: Path, engine_kind: str) -> None:
    provider = Provider("anthropic", script(
        Turn("", [tool(1, "recall", {"query": "how to run the project's checks"})]),
        Turn("", [tool(2, "propose_memory", {"text": PROPOSED})]),
        Turn("", [tool(3, "ask_person", {"question": QUESTION})]),
        Turn("I have asked; waiting for the answer."),
        Turn("Numbers only, then.", [("toolu_5", "Edit", {"file_path": "/workspace/calc.py",
                                                           "old_string": "return a - b",
                                                           "new_string": "return a + b"})]),
        Turn("", [("toolu_6", "Bash", {"command": FAILING, "description": "run the tests"})]),
        Turn("add() subtracted; now it adds, and the test passes.\n\nAssumptions:\n- none"),
    ), streaming=True)
    wire.respond(provider)
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path)
        repo = Path(store.get_task(task_id).repo)
        ours = remember(store, repo, OURS)
        remember(store, tmp_path / "another-project", THEIRS)
        async with running_engine(store, default_model="anthropic:test-model", kind=engine_kind):
            task = await wait_for_state(store, task_id, TaskState.NEEDS_INPUT, TaskState.FAILED,
                                        TaskState.READY_FOR_REVIEW, seconds=900)
            assert task.state is TaskState.NEEDS_INPUT, [(e.kind, e.data) for e in store.events(task_id)][-8:]
            # The task shows the question the CLI asked on errand's tool.
            question = await wait_for_event(store, task_id, lambda e: e.kind == "question")
            assert question.data["text"] == QUESTION
            TaskService(store).answer(task_id, ANSWER)
            task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)
        events = store.events(task_id, 0, 100_000)
        assert task.state is TaskState.READY_FOR_REVIEW, [(e.kind, e.data) for e in events][-10:]
        [run] = store.runs(task_id)
        outcome = run.outcome
        assert outcome is not None and outcome.status == "finished"
        assert "+    return a + b" in outcome.patch
        assert outcome.evidence["tests_after"]["exit_code"] == 0
        results = tool_results([r for r in wire.requests if from_the_cli(r)])
        # recall: this project's memory, with where it came from; not another project's.
        assert f"[memory {ours}]" in results["toolu_1"] and "told by Ana" in results["toolu_1"]
        assert "make check-everything" not in results["toolu_1"]
        # propose_memory: a proposal, for a person to accept.
        proposed = next(e for e in events if e.kind == "memory_proposed")
        memory = MemoryStore(store.engine, embedder=None).get(proposed.data["id"])
        assert memory.text == PROPOSED and memory.status.value == "proposed"
        assert memory.project == project_key(repo)
        # The answer resumed the CLI's own session: its next request holds the question's call and the answer
        # (on Temporal too, whose sandbox ended while the task waited: the session's files were kept).
        resumed = [r for r in wire.requests if from_the_cli(r) and ANSWER in json.dumps(r.body)]
        assert resumed and "toolu_3" in json.dumps(resumed[0].body["messages"])
        kinds = [e.kind for e in events]
        assert kinds.count("question") == 1 and "answer_delivered" in kinds
        assert await task_sandboxes(task_id) == []
        assert cli_processes(task_id, store) == []


@pytest.mark.faults
async def test_errands_tools_gone_mid_run_are_a_tool_error_for_the_cli_not_a_hung_task(
        keyed: None, wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    servers: list[ToolServer] = []
    real_init = ToolServer.__init__

    def recorded(self: ToolServer) -> None:
        real_init(self)
        servers.append(self)

    monkeypatch.setattr(ToolServer, "__init__", recorded)
    loop = asyncio.get_running_loop()
    turns = script(
        Turn("", [tool(1, "recall", {"query": "the tests"})]),
        Turn("", [tool(2, "recall", {"query": "the tests, again"})]),
        Turn("", [("toolu_3", "Edit", {"file_path": "/workspace/calc.py", "old_string": "return a - b",
                                        "new_string": "return a + b"})]),
        Turn("Fixed add() without errand's memory.\n\nAssumptions:\n- none"))

    def play(step: int) -> Turn:
        if step == 2:  # the server goes away between the CLI's first call of it and its second
            asyncio.run_coroutine_threadsafe(servers[-1].stop(), loop).result(30)
        return turns(step)

    wire.respond(Provider("anthropic", play, streaming=True))
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task_id = submit(store, tmp_path)
        async with running_engine(store, default_model="anthropic:test-model"):
            task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)
        events = store.events(task_id, 0, 100_000)
        assert task.state is TaskState.READY_FOR_REVIEW, [(e.kind, e.data) for e in events][-10:]
        results = {e.data["id"]: e.data for e in events if e.kind == "tool_result"}
        assert results["toolu_1"]["ok"] is True
        assert results["toolu_2"]["ok"] is False  # the CLI got an error for the call, and went on
        [run] = store.runs(task_id)
        assert run.outcome is not None and "+    return a + b" in run.outcome.patch
        assert await task_sandboxes(task_id) == []
        assert cli_processes(task_id, store) == []
