"""The Temporal engine across processes, as a team runs it: a Temporal dev server, one
``errand serve --engine temporal`` and two ``errand worker --engine temporal`` with homes of
their own (two machines), one store. Tasks spread over both workers; when the worker holding
an attempt is SIGKILLed, the other finishes the round; when the Temporal server and both
workers are SIGKILLed while a task waits for an answer, the answer given after they restart
resumes the same run."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from ports import free_port
from temporal import TemporalServer, started

from .cli import script
from .harness import FINISH, FIX, FIX_SCRIPT, READ, TEST
from .machines import Machine, wait_until

pytestmark = pytest.mark.slow
S = TaskState
ASKING = [[READ], [("ask_user", {"question": "Strings too?"})], [FIX], [TEST], [FINISH]]
TEMPORAL_WORKER = ("worker", "--engine", "temporal", "--concurrency", "1")



@pytest.fixture
def team(tmp_path: Path, temporal_queue: str) -> Iterator[Callable[..., Machine]]:
    """Makes machines (a name, the store's URL, the Temporal address, a lease) and ends them after."""
    made: list[Machine] = []

    def make(name: str, database: str, temporal: str, lease: str = "600") -> Machine:
        env = {"ERRAND_TEMPORAL": temporal, "ERRAND_TEMPORAL_QUEUE": temporal_queue}
        made.append(Machine(tmp_path, name, database, env, lease))
        return made[-1]

    yield make
    for machine in made:
        machine.end()


def _serve(machine: Machine) -> None:
    machine.start("serve", "--engine", "temporal", "--port", str(free_port()))


def _tidied(*machines: Machine) -> None:
    """Wait for the rounds' last activity (closing: sandboxes ended, working copies removed)."""
    for machine in machines:
        wait_until(lambda machine=machine: not list((machine.home / "work").glob("*")), "the round to close")


def _finished(store: TaskStore, task_id: str) -> bool:
    return store.get_task(task_id).state in (S.READY_FOR_REVIEW, S.FAILED)


def _wait_finished(store: TaskStore, task_id: str, *machines: Machine) -> None:
    try:
        wait_until(lambda: _finished(store, task_id), "the task to finish")
    except AssertionError as error:  # say where it stood, and what each process said last
        said = "\n".join(f"{m.log.name}: {m.log.read_text()[-1500:]}" for m in machines if m.log.exists())
        events = [(e.kind, e.data) for e in store.events(task_id, limit=100_000)][-6:]
        raise AssertionError(f"{error}; {store.get_task(task_id).state}, last events {events}\n{said}") from None


def test_queued_tasks_spread_over_two_temporal_workers(tmp_path: Path, repo: Path, temporal_server: TemporalServer,
                                                       team: Callable[..., Machine]) -> None:
    # Each task stops on a question and its round holds its worker's one place, so the other
    # task can only go to the other worker. SQLite here: the store every engine shares.
    database = f"sqlite:///{tmp_path / 'errand.db'}"
    store = TaskStore.open(database)
    service = TaskService(store)
    tasks = [service.submit(f"Make test_calc.py pass ({n})", repo=repo,
                            model=script(tmp_path / f"script{n}.json", ASKING)).id for n in range(2)]
    server = team("server", database, temporal_server.address)
    one, two = (team(name, database, temporal_server.address) for name in ("one", "two"))
    _serve(server)
    one.start(*TEMPORAL_WORKER)
    two.start(*TEMPORAL_WORKER)
    for task_id in tasks:
        wait_until(lambda task_id=task_id: store.get_task(task_id).state is S.NEEDS_INPUT, "the question")
    holders = {store.runs(task_id)[0].worker for task_id in tasks}
    assert len(holders) == 2, holders
    for task_id in tasks:
        service.answer(task_id, "No, numbers only")
    for task_id in tasks:
        _wait_finished(store, task_id, server, one, two)
        assert store.get_task(task_id).state is S.READY_FOR_REVIEW, store.events(task_id)[-3:]
        [run] = store.runs(task_id)
        assert run.state is RunState.SUCCEEDED
    _tidied(one, two)
    for machine in (one, two, server):
        machine.stop()
    store.close()


def test_sigkill_of_the_temporal_worker_holding_an_attempt_and_the_other_finishes_the_round(
        tmp_path: Path, repo: Path, temporal_server: TemporalServer, postgres_url: str,
        team: Callable[..., Machine]) -> None:
    store = TaskStore.open(postgres_url)
    model = tmp_path / "script.json"
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo,
                                     model=script(model, [[READ], [("shell", {"command": "sleep 600"})]]))
    # Heartbeats of 5 s: the dispatcher gives the workflow its timeout, each worker beats by its own.
    server, doomed, survivor = (team(name, postgres_url, temporal_server.address, lease="5")
                                for name in ("server", "doomed", "survivor"))
    _serve(server)
    doomed.start(*TEMPORAL_WORKER)
    wait_until(lambda: any(e.kind == "tool_call" and e.data.get("name") == "shell" for e in store.events(task.id)),
               "the agent to start its long command")
    survivor.start(*TEMPORAL_WORKER)
    script(model, FIX_SCRIPT)  # what the next round's model says
    written = store.events(task.id)
    doomed.kill()
    _wait_finished(store, task.id, server, survivor)

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
    ran = doomed.errand(*TEMPORAL_WORKER, "--exit-when-idle", "0")
    assert ran.returncode == 0, ran.stderr
    assert not (doomed.home / "work" / first.id).exists()
    _tidied(survivor)
    survivor.stop()
    server.stop()
    store.close()


def test_an_answer_after_the_temporal_server_and_both_workers_died_resumes_the_same_run(
        tmp_path: Path, repo: Path, postgres_url: str, team: Callable[..., Machine]) -> None:
    temporal = started()  # this test's own: it is killed
    try:
        store = TaskStore.open(postgres_url)
        service = TaskService(store)
        task = service.submit("Make test_calc.py pass", repo=repo, model=script(tmp_path / "script.json", ASKING))
        server = team("server", postgres_url, temporal.address)
        workers = [team(name, postgres_url, temporal.address) for name in ("one", "two")]
        _serve(server)
        for worker in workers:
            worker.start(*TEMPORAL_WORKER)
        wait_until(lambda: store.get_task(task.id).state is S.NEEDS_INPUT, "the question")
        [asked] = store.runs(task.id)

        temporal.kill()
        for worker in workers:
            worker.kill()
        temporal.start()  # the same state file and port
        for worker in workers:
            worker.start(*TEMPORAL_WORKER)
        service.answer(task.id, "No, numbers only")
        _wait_finished(store, task.id, server, *workers)

        assert store.get_task(task.id).state is S.READY_FOR_REVIEW, store.events(task.id)[-3:]
        [run] = store.runs(task.id)  # the same run, resumed: no second one
        assert run.id == asked.id and run.state is RunState.SUCCEEDED and run.worker == asked.worker
        kinds = [e.kind for e in store.events(task.id, limit=100_000)]
        assert kinds.index("question") < kinds.index("answer_delivered") < kinds.index("ready_for_review")
        outcome = run.outcome
        assert outcome is not None and "return a + b" in outcome.patch
        assert json.loads(json.dumps(outcome.to_json())) == run.result  # the store's JSON, as typed
        _tidied(*workers)
        for machine in (*workers, server):
            machine.stop()
        store.close()
    finally:
        temporal.remove()
