"""What the tests of errand's tools for each agent CLI share (test_gemini_cli_mcp.py, test_opencode_mcp.py, …).

As in test_claude_code_mcp.py: the model, played on the CLI's wire, recalls the
project's memory, tries a token of a run that has ended, asks the person and ends
its turn; the task waits; ``errand answer`` (the service's) resumes the CLI, which
makes the fix. The test records the worker's tool server, so it can open a run of
its own there and close it: that run's token, sent from inside the sandbox, is
refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from errand.agent.mcp_server import PATH, Desk, ToolServer
from errand.sandbox import GATEWAY_URL
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Task
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .agent_clis import cli_processes, submit, task_sandboxes
from .harness import running_engine, wait_for_event, wait_for_state
from .test_claude_code_mcp import ANSWER, OURS, QUESTION, THEIRS, remember

__all__ = ["ANSWER", "QUESTION"]


@pytest.fixture
def tool_servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ToolServer]]:
    """The worker's tool servers, as they are made."""
    servers: list[ToolServer] = []
    real_init = ToolServer.__init__

    def recorded(self: ToolServer) -> None:
        real_init(self)
        servers.append(self)

    monkeypatch.setattr(ToolServer, "__init__", recorded)
    yield servers


def ended_runs_token(servers: list[ToolServer], loop: asyncio.AbstractEventLoop) -> str:
    """The token of another run of the worker's tool server, that has ended (called from the wire
    server's thread while the test's loop runs the worker)."""
    async def open_and_close() -> str:
        token = await servers[-1].open("another-run", Desk())
        await servers[-1].close("another-run")
        return token

    return asyncio.run_coroutine_threadsafe(open_and_close(), loop).result(60)


def probe(token: str) -> str:
    """A shell command that calls errand's tools from inside the sandbox with ``token`` and prints
    the status it got (Python's standard library: the base image has no curl)."""
    address = urlsplit(GATEWAY_URL)
    script = (f"import http.client as h, json; c = h.HTTPConnection(\"{address.hostname}\", {address.port}); "
              f"c.request(\"POST\", \"{PATH}\", "
              "json.dumps({\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/list\"}), "
              f"{{\"Authorization\": \"Bearer {token}\", \"Content-Type\": \"application/json\", "
              "\"Accept\": \"application/json, text/event-stream\"}); r = c.getresponse(); "
              "print(\"status\", r.status, r.read().decode())")
    return f"python3 -c '{script}'"


async def run_answered(store: TaskStore, tmp_path: Path, *, model: str, agent: str) -> tuple[str, Task, int]:
    """Submit the fix to ``agent`` with a memory of its project's (and one of another's), run it on a local
    engine, answer its question: the task's id, the task at its end, the memory's id."""
    task_id = submit(store, tmp_path, model=model, agent=agent)
    ours = remember(store, Path(store.get_task(task_id).repo), OURS)
    remember(store, tmp_path / "another-project", THEIRS)
    async with running_engine(store, default_model=model):
        task = await ask_and_answer(store, task_id)
    return task_id, task, ours


async def ask_and_answer(store: TaskStore, task_id: str) -> Task:
    """Wait for the question the CLI asked on errand's tool, answer it, wait for the task's end."""
    task = await wait_for_state(store, task_id, TaskState.NEEDS_INPUT, TaskState.FAILED,
                                TaskState.READY_FOR_REVIEW, seconds=1800)  # mini-swe-agent's layer is ~730 MB
    assert task.state is TaskState.NEEDS_INPUT, ([r.result for r in store.runs(task_id)],
                                                 [(e.kind, e.data) for e in store.events(task_id)][-8:])
    question = await wait_for_event(store, task_id, lambda e: e.kind == "question")
    assert question.data["text"] == QUESTION
    TaskService(store).answer(task_id, ANSWER)
    return await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)


async def assert_answered_fix(store: TaskStore, task_id: str, task: Task, ours: int) -> list[dict[str, object]]:
    """The task ended as the fix, its question asked once and answered, its recall of this project's
    memory only, nothing of it left running; the tool calls of its log."""
    events = store.events(task_id, 0, 100_000)
    assert task.state is TaskState.READY_FOR_REVIEW, [(e.kind, e.data) for e in events][-10:]
    [run] = store.runs(task_id)
    outcome = run.outcome
    assert outcome is not None and outcome.status == "finished"
    assert "+    return a + b" in outcome.patch
    assert outcome.evidence["tests_after"]["exit_code"] == 0
    kinds = [e.kind for e in events]
    assert kinds.count("question") == 1 and "answer_delivered" in kinds
    results = [e.data for e in events if e.kind == "tool_result"]
    said = "\n".join(str(r["content"]) for r in results)  # recall's answer: this project's memory, not another's
    assert f"[memory {ours}]" in said and "told by Ana" in said and "make check-everything" not in said, results
    assert await task_sandboxes(task_id) == []
    assert cli_processes(task_id, store) == []
    return [e.data for e in events if e.kind == "tool_call"]
