"""End to end through the real provider SDKs: the engine's default models, built by name
from ``openai:`` / ``anthropic:`` and the SDKs' own environment variables, talking to a
loopback server that speaks each wire protocol."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import forkserver
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from models.wire import WireServer
from postgres import on_sqlite_only

from .harness import (
    FIX_SCRIPT,
    anthropic_turn,
    git,
    openai_turn,
    running_engine,
    wait_for_event,
    wait_for_state,
    worktree_state,
)


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


@on_sqlite_only("store")  # the store plays no part in the provider's wire protocol
@pytest.mark.parametrize(("provider", "encode", "variables", "path"), [
    ("openai", openai_turn, {"OPENAI_BASE_URL": "{url}/v1", "OPENAI_API_KEY": "sk-wire"}, "/v1/chat/completions"),
    ("anthropic", anthropic_turn, {"ANTHROPIC_BASE_URL": "{url}", "ANTHROPIC_API_KEY": "sk-ant-wire"},
     "/v1/messages"),
])
async def test_a_task_through_the_provider_wire_protocol(
        provider: str, encode: Callable[[Any, int], dict[str, Any]], variables: dict[str, str], path: str,
        wire: WireServer, store: TaskStore, service: TaskService, repo: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ERRAND_MODEL"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"ERRAND_{name}", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value.format(url=wire.url))
    for n, turn in enumerate(FIX_SCRIPT):
        wire.answer(encode(turn, n))
    wire.answer(encode([("propose_memory", {"kind": "command", "text": "Run the tests with python3 test_calc.py"})],
                       len(FIX_SCRIPT)))  # the distiller's turn, after the task is ready
    before = worktree_state(repo)

    task = service.submit("Make test_calc.py pass", repo=repo, model=f"{provider}:wire-model")
    assert task.state is TaskState.QUEUED
    async with running_engine(store, default_model="unused:x"):
        done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
        await wait_for_event(store, task.id, lambda e: e.kind in ("memories_proposed", "distill_failed"))
    assert done.state is TaskState.READY_FOR_REVIEW

    assert [r.path for r in wire.requests] == [path] * 5
    distilling = wire.requests[4].body
    assert [tool.get("name") or tool["function"]["name"] for tool in distilling["tools"]] == ["propose_memory"]
    [proposed] = store.events(task.id, kinds=["memories_proposed"])
    assert len(proposed.data["ids"]) == 1
    first = wire.requests[0].body
    assert first["model"] == "wire-model"
    assert "Make test_calc.py pass" in str(first["messages"])
    assert {"shell", "read_file", "edit_file", "write_file", "search", "ask_user", "finish"} <= {
        tool.get("name") or tool["function"]["name"] for tool in first["tools"]}
    assert "1 passed" in str(wire.requests[3].body["messages"])  # the test's output went back to the model
    evidence = service.evidence(service.chosen_run(task.id))
    assert evidence is not None and evidence.tests_after is not None and evidence.tests_after.ok
    assert evidence.tests_before is not None and not evidence.tests_before.ok

    figures = service.progress(task.id)  # what the provider said it used: the run's 4 steps, then distilling
    assert {k: figures["usage"][k] for k in ("steps", "input_tokens", "output_tokens", "tokens")} == {
        "steps": 4, "input_tokens": 500, "output_tokens": 100, "tokens": 600}
    assert figures["budgets"]["max_steps"] == 100 and figures["attempts"][0]["usage"]["steps"] == 4
    shown = forkserver.run(["show", task.id], env={**os.environ, "ERRAND_DATABASE_URL": str(store.engine.url),
                                                      "COLUMNS": "200"})
    assert "4 steps · 600 tokens (500 in, 100 out)" in shown.stdout, shown.stdout + shown.stderr
    assert "round 1 (succeeded): 4 of 100 steps" in shown.stdout

    accepted = service.accept(task.id)
    assert "return a + b" in git(repo, "show", f"{accepted.branch}:calc.py")
    assert git(repo, "rev-parse", f"{accepted.branch}^").strip() == task.base_commit
    assert worktree_state(repo) == before
    assert git(repo, "status", "--porcelain") == ""
