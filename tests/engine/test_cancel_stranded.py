"""A task cancelled while the Temporal worker running its round is dead or stalled. The round's
runs end ``cancelled`` within about a lease (the workflow finds the worker's lease passed, marks
the runs and leaves the closing to the worker), ``retry`` is accepted then, and a stalled worker
that wakes writes nothing more into its run — no event, no ``succeeded`` — and ends its sandbox and
copy. (The workflow waited up to an hour for a closing on the lost worker's queue before it marked
the runs: a dead worker's run stayed ``running``, a woken one ran its attempt on and recorded it
``succeeded`` under the cancelled task.) Real processes: a Temporal dev server, PostgreSQL,
``errand serve --engine temporal`` and ``errand worker --engine temporal`` machines."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from temporal import TemporalServer

from .cli import script
from .harness import FIX_SCRIPT, READ
from .machines import Machine, wait_until
from .test_stranded_temporal import TEMPORAL_WORKER, long_command_started, mounted
from .test_stranded_temporal import _serve as serve

pytestmark = [pytest.mark.faults, pytest.mark.slow]
LEASE = 5.0
# The run ends within a few leases of the cancel: the attempt's heartbeats run out (a lease), the
# worker's lease in the store is found passed (a lease at most), and a saturated machine's steps. The
# bound is generous (the test waits on the store, never asserts a time); before, the wait was an hour.
SETTLED_WITHIN = LEASE * 18
GO = ".errand-test-go"  # the agent's command waits for it: the test ends it while the worker is stopped


@pytest.fixture
def team(tmp_path: Path, temporal_server: TemporalServer, temporal_queue: str,
         postgres_url: str) -> Iterator[Callable[[str], Machine]]:
    made: list[Machine] = []

    def make(name: str) -> Machine:
        env = {"ERRAND_TEMPORAL": temporal_server.address, "ERRAND_TEMPORAL_QUEUE": temporal_queue}
        made.append(Machine(tmp_path, name, postgres_url, env, lease=f"{LEASE:g}"))
        return made[-1]

    yield make
    for machine in made:
        machine.end()


def _round_running(store: TaskStore, task_id: str, model: Path,
                   team: Callable[[str], Machine]) -> tuple[Machine, Machine]:
    """``errand serve`` and a worker, the task's round running the agent's command in its sandbox there."""
    server, worker = team("server"), team("worker")
    serve(server)
    worker.start(*TEMPORAL_WORKER)
    wait_until(lambda: long_command_started(store, task_id), "the agent to start its command")
    script(model, FIX_SCRIPT)  # what a retry's round says
    return server, worker


def _cancel(server: Machine, task_id: str) -> float:
    """Cancel the task as a person does; when."""
    at = time.time()
    cancelled = server.errand("cancel", "--yes", task_id)
    assert cancelled.returncode == 0, cancelled.stderr
    return at


def _run_ended(store: TaskStore, run_id: str, cancelled_at: float, *machines: Machine) -> None:
    try:
        wait_until(lambda: store.get_run(run_id).state is not RunState.RUNNING, "the cancelled run to end",
                   SETTLED_WITHIN)
    except AssertionError as error:
        said = "\n".join(f"{m.log.name}: {m.log.read_text()[-1500:]}" for m in machines if m.log.exists())
        raise AssertionError(f"{error} (lease {LEASE:g} s)\n{said}") from None
    ended_at = store.get_run(run_id).ended_at or 0.0
    print(f"the run ended {ended_at - cancelled_at:.1f} s after the cancel (lease {LEASE:g} s)")


# How the lost worker's run ends: cancelled by the cancel; or, when its lease passed before the cancel
# reached the workflow (a saturated machine can take seconds to run `errand cancel`), interrupted by
# the lost heartbeat, and the cancel then ends the task it requeued. Never succeeded, never running.
ENDED_BY_CANCEL_OR_LOSS = (RunState.CANCELLED, RunState.INTERRUPTED)


def test_a_task_cancelled_while_its_worker_is_dead_ends_its_run_and_can_be_retried(
        tmp_path: Path, repo: Path, postgres_url: str, team: Callable[[str], Machine]) -> None:
    store = TaskStore.open(postgres_url)
    model = tmp_path / "script.json"
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo,
                                     model=script(model, [[READ], [("shell", {"command": "sleep 600"})]]))
    server, dead = _round_running(store, task.id, model, team)
    [run] = store.runs(task.id)
    dead.kill()
    cancelled_at = _cancel(server, task.id)  # at once: its lease still lives, so the round's to end the run

    _run_ended(store, run.id, cancelled_at, server, dead)
    assert store.get_run(run.id).state in ENDED_BY_CANCEL_OR_LOSS
    assert store.get_task(task.id).state is TaskState.CANCELLED
    retried = server.errand("retry", task.id)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert store.events(task.id, kinds=["retried"]), retried.stdout  # queued, and claimed by now, perhaps
    # A worker back on the same home runs the retry, and ends the dead one's sandbox and copy.
    dead.start(*TEMPORAL_WORKER)
    try:
        wait_until(lambda: store.get_task(task.id).state in (TaskState.READY_FOR_REVIEW, TaskState.FAILED),
                   "the retry's round to finish")
    except AssertionError as error:  # what the task and both machines show, to say why
        said = [f"task: {store.get_task(task.id).state}; runs: {[(r.id, r.state) for r in store.runs(task.id)]}",
                f"last events: {[(e.kind, e.data) for e in store.events(task.id, 0, 100_000)][-8:]}",
                *(f"{m.log.name}: {m.log.read_text()[-1500:]}" for m in (server, dead) if m.log.exists())]
        raise AssertionError("\n".join([str(error), *said])) from None
    assert store.get_task(task.id).state is TaskState.READY_FOR_REVIEW
    first, second = store.runs(task.id)
    assert first.state in ENDED_BY_CANCEL_OR_LOSS and second.state is RunState.SUCCEEDED
    copy = dead.home / "work" / run.id / "repo"
    wait_until(lambda: not mounted(copy) and not copy.parent.exists(), "the dead worker's copy to go")
    wait_until(lambda: not dead.sandboxes(), "the dead worker's sandbox to end")
    for machine in (dead, server):
        machine.stop()
    store.close()


def test_a_task_cancelled_while_its_worker_is_stalled_is_not_succeeded_when_the_worker_wakes(
        tmp_path: Path, repo: Path, postgres_url: str, team: Callable[[str], Machine]) -> None:
    store = TaskStore.open(postgres_url)
    model = tmp_path / "script.json"
    # The agent's command ends while its worker is stopped: on waking the attempt has its output to write,
    # and the rest of its script to run to a finished round.
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=script(
        model, [[READ], [("shell", {"command": f"until [ -e {GO} ]; do sleep 0.1; done"})], *FIX_SCRIPT]))
    server, stalled = _round_running(store, task.id, model, team)
    [run] = store.runs(task.id)
    copy = stalled.home / "work" / run.id / "repo"
    assert stalled.process is not None
    stalled.process.send_signal(signal.SIGSTOP)
    try:
        _run_ended(store, run.id, _cancel(server, task.id), server, stalled)
        ended = store.get_run(run.id).state
        assert ended in ENDED_BY_CANCEL_OR_LOSS
        settled = max(e.id for e in store.events(task.id, limit=100_000))
        (copy / GO).touch()  # its command is done: on waking its agent goes on
    finally:
        stalled.process.send_signal(signal.SIGCONT)

    # Woken, it ends the run's sandbox and copy, and writes nothing into the run it lost.
    wait_until(lambda: not mounted(copy) and not copy.parent.exists(), "the stalled worker's copy to go")
    wait_until(lambda: not stalled.sandboxes(), "the stalled worker's sandbox to end")
    assert store.get_run(run.id).state is ended
    assert store.get_task(task.id).state is TaskState.CANCELLED
    late = [(e.kind, e.data) for e in store.events(task.id, limit=100_000, run_id=run.id) if e.id > settled]
    assert late == [], late
    for machine in (stalled, server):
        machine.stop()
    store.close()
