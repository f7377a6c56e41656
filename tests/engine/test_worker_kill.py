"""A worker killed with SIGKILL mid-run loses no task and no event: restarted, it marks the
run interrupted, requeues the task by the stated rule, and finishes it. One stopped with SIGTERM
does so as it stops, and leaves none of the round's working copies mounted."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import forkserver
from errand.sandbox import Sandbox
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from models.wire import WireServer
from mounts import mounted_under
from polling import until

from .harness import FIX_SCRIPT, READ, openai_turn

S = TaskState


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


def start_worker(database: str, wire: WireServer, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ERRAND_DATABASE_URL": database, "OPENAI_BASE_URL": f"{wire.url}/v1",
           "OPENAI_API_KEY": "sk-wire"}
    with open(log, "ab") as output:
        return forkserver.start(["worker"], env=env, stdout=output, stderr=output)


def wait_until(condition: Callable[[], object], what: str, seconds: float = 120) -> None:
    until(condition, what, seconds)


def test_sigkill_mid_run_then_restart_loses_nothing(tmp_path: Path, repo: Path, wire: WireServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    database = f"sqlite:///{tmp_path / 'errand.db'}"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wire")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{wire.url}/v1")  # the task records the submitter's endpoint
    store = TaskStore.open(database)
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model="openai:wire-model")
    wire.answer(openai_turn([READ], 0))
    wire.answer(openai_turn([("shell", {"command": "sleep 600"})], 1))
    sandboxes_before = {info.id for info in Sandbox.list()}

    worker = start_worker(database, wire, tmp_path / "worker.log")
    try:
        wait_until(lambda: any(e.kind == "tool_call" and e.data.get("name") == "shell"
                               for e in store.events(task.id)), "the agent to start its long command")
        written = store.events(task.id)
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    orphans = {info.id for info in Sandbox.list()} - sandboxes_before
    assert store.get_task(task.id).state is S.RUNNING  # as the dead worker left it

    for n, turn in enumerate(FIX_SCRIPT):
        wire.answer(openai_turn(turn, 10 + n))
    restarted = start_worker(database, wire, tmp_path / "worker.log")
    try:
        wait_until(lambda: store.get_task(task.id).state in (S.READY_FOR_REVIEW, S.FAILED), "the task to finish")
    finally:
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(60) == 0, (tmp_path / "worker.log").read_text()

    assert store.get_task(task.id).state is S.READY_FOR_REVIEW
    first, second = store.runs(task.id)
    assert first.state is RunState.INTERRUPTED and first.ended_at is not None
    assert (second.round, second.state) == (2, RunState.SUCCEEDED)
    kept = store.events(task.id, limit=100_000)
    assert [e for e in kept if e.id <= written[-1].id] == written  # every event written before the kill
    [recovered] = [e for e in kept if e.kind == "recovered"]
    assert recovered.data["run_id"] == first.id and recovered.data["state"] == "queued"
    # The killed worker's sandbox was reaped when the new worker started its first one.
    assert not orphans & {info.id for info in Sandbox.list()}
    assert not (Path(os.environ["ERRAND_HOME"]) / "work" / first.id).exists()
    store.close()


def test_sigterm_mid_run_requeues_the_task_and_leaves_nothing_mounted(tmp_path: Path, repo: Path, wire: WireServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    database = f"sqlite:///{tmp_path / 'errand.db'}"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wire")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{wire.url}/v1")
    store = TaskStore.open(database)
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model="openai:wire-model")
    wire.answer(openai_turn([("shell", {"command": "sleep 600"})], 0))
    worker = start_worker(database, wire, tmp_path / "worker.log")
    try:
        wait_until(lambda: any(e.kind == "tool_call" for e in store.events(task.id)), "the agent's long command")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, (tmp_path / "worker.log").read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    [run] = store.runs(task.id)
    work = Path(os.environ["ERRAND_HOME"]) / "work" / run.id
    assert mounted_under(work) == []
    assert not work.exists()
    assert store.get_task(task.id).state is S.QUEUED  # the next worker runs the round again
    assert store.get_run(run.id).state is RunState.INTERRUPTED
    store.close()
