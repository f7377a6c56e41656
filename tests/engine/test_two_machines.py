"""Two workers with homes of their own and one PostgreSQL store, standing in for two machines:
queued tasks spread over both, and when the worker holding an attempt is killed, the other
finds its lease expired, requeues the round and finishes it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from models.wire import WireServer

from .cli import script
from .harness import FINISH, FIX, FIX_SCRIPT, READ, TEST, openai_turn
from .machines import Machine, wait_until

pytestmark = pytest.mark.slow
S = TaskState
LEASE = "3"  # seconds: how long the survivor waits for a dead worker's lease to run out


@pytest.fixture
def machines(tmp_path: Path, postgres_url: str) -> Iterator[Callable[..., Machine]]:
    made: list[Machine] = []

    def make(name: str, **env: str) -> Machine:
        made.append(Machine(tmp_path, name, postgres_url, env, LEASE))
        return made[-1]

    yield make
    for machine in made:
        machine.end()


def test_queued_tasks_spread_over_two_workers(tmp_path: Path, repo: Path, postgres_url: str,
                                              machines: Callable[..., Machine]) -> None:
    # Each task stops on a question, holding its worker's only slot: the other task can only
    # be taken by the other worker.
    asking = [[READ], [("ask_user", {"question": "Strings too?"})], [FIX], [TEST], [FINISH]]
    store = TaskStore.open(postgres_url)
    service = TaskService(store)
    tasks = [service.submit(f"Make test_calc.py pass ({n})", repo=repo,
                            model=script(tmp_path / f"script{n}.json", asking)).id for n in range(2)]
    # Nobody dies here: leases long enough that a worker slowed by a loaded machine is not taken
    # for dead (with 3 s, one was, under CI's load, and its round was requeued under it).
    one, two = machines("one", ERRAND_WORKER_LEASE="600"), machines("two", ERRAND_WORKER_LEASE="600")
    one.start()
    two.start()
    try:
        for task_id in tasks:
            wait_until(lambda task_id=task_id: store.get_task(task_id).state is S.NEEDS_INPUT, "the question")
        holders = {store.runs(task_id)[0].worker for task_id in tasks}
        assert len(holders) == 2 and set(store.live_workers()) == holders
        for task_id in tasks:
            service.answer(task_id, "No, numbers only")
        for task_id in tasks:
            wait_until(lambda task_id=task_id: store.get_task(task_id).state in (S.READY_FOR_REVIEW, S.FAILED),
                       "the task to finish")
            assert store.get_task(task_id).state is S.READY_FOR_REVIEW, store.events(task_id)[-3:]
    finally:
        one.stop()
        two.stop()
    assert store.live_workers() == []  # each released its lease as it stopped
    store.close()


def test_sigkill_of_the_worker_holding_an_attempt_and_the_other_finishes_the_round(
        repo: Path, postgres_url: str, machines: Callable[..., Machine], monkeypatch: pytest.MonkeyPatch) -> None:
    wire = WireServer().start()
    try:
        env = {"OPENAI_API_KEY": "sk-wire", "OPENAI_BASE_URL": f"{wire.url}/v1"}
        for name, value in env.items():
            monkeypatch.setenv(name, value)  # the task records the submitter's endpoint
        store = TaskStore.open(postgres_url)
        task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model="openai:wire-model")
        wire.answer(openai_turn([READ], 0))
        wire.answer(openai_turn([("shell", {"command": "sleep 600"})], 1))
        doomed, survivor = machines("doomed", **env), machines("survivor", **env)
        doomed.start()
        wait_until(lambda: any(e.kind == "tool_call" and e.data.get("name") == "shell"
                               for e in store.events(task.id)), "the agent to start its long command")
        survivor.start()
        wait_until(lambda: len(store.live_workers()) == 2, "the second worker's lease")
        for n, turn in enumerate(FIX_SCRIPT):
            wire.answer(openai_turn(turn, 10 + n))
        written = store.events(task.id)
        doomed.kill()
        wait_until(lambda: store.get_task(task.id).state in (S.READY_FOR_REVIEW, S.FAILED), "the task to finish")
        survivor.stop()

        assert store.get_task(task.id).state is S.READY_FOR_REVIEW, store.events(task.id)[-3:]
        first, second = store.runs(task.id)
        assert first.state is RunState.INTERRUPTED and second.state is RunState.SUCCEEDED
        assert first.worker != second.worker and second.round == 2
        kept = store.events(task.id, limit=100_000)
        assert [e for e in kept if e.id <= written[-1].id] == written  # nothing the dead worker wrote is lost
        [recovered] = [e for e in kept if e.kind == "recovered"]
        assert recovered.data["run_id"] == first.id and recovered.data["state"] == "queued"

        # The dead machine comes back: its worker removes the work of the run taken from it.
        assert (doomed.home / "work" / first.id).exists()
        orphans = doomed.sandboxes()
        ran = doomed.errand("worker", "--exit-when-idle", "0")
        assert ran.returncode == 0, ran.stderr
        assert not (doomed.home / "work" / first.id).exists()
        assert doomed.errand("sandbox", "gc").returncode == 0
        assert not orphans & doomed.sandboxes()
        store.close()
    finally:
        with contextlib.suppress(Exception):
            wire.stop()
