"""A worker killed with SIGKILL mid-run loses no task and no event it wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.store.tasks import TaskStore

S = TaskState

# Claims the task, starts a run, and appends events forever, printing each id once committed.
WORKER = textwrap.dedent(
    """
    import sys
    from errand.tasks.store.tasks import TaskStore

    url, task_id = sys.argv[1:]
    store = TaskStore.open(url)
    store.set_state(task_id, "preparing", expected="queued")
    run = store.start_run(task_id, "worker-1")
    store.set_state(task_id, "running")
    n = 0
    while True:
        print(store.append_event(task_id, run.id, "step", {"n": n}), flush=True)
        n += 1
    """
)


def run_and_kill(url: str, task_id: str, events_before_kill: int = 15) -> list[int]:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, url, task_id], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert worker.stdout is not None
    committed = [int(worker.stdout.readline()) for _ in range(events_before_kill)]
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    assert worker.returncode == -signal.SIGKILL
    return committed


def test_sigkilled_worker_keeps_events_and_requeues_then_fails(url: str) -> None:
    with TaskStore.open(url) as store:
        task_id = store.create_task(title="t", instruction="i", repo="/r").id

    committed = run_and_kill(url, task_id)

    with TaskStore.open(url) as store:  # the restarted worker
        assert store.get_task(task_id).state is S.RUNNING
        [recovery] = store.recover_interrupted(worker="worker-1")
        assert (recovery.previous, recovery.state) == (S.RUNNING, S.QUEUED)
        [run] = store.runs(task_id)
        assert run.interrupted and run.ended_at is not None
        kept = store.events(task_id)
        assert set(committed) <= {event.id for event in kept}
        assert [event.seq for event in kept] == list(range(1, len(kept) + 1))
        assert [event.data["n"] for event in kept] == list(range(len(kept)))
        assert store.get_task(task_id).state is S.QUEUED
        assert store.recover_interrupted() == []  # nothing left to recover

    run_and_kill(url, task_id)  # a second interruption in a row fails the task

    with TaskStore.open(url) as store:
        [recovery] = store.recover_interrupted()
        assert recovery.state is S.FAILED
        assert [run.state for run in store.runs(task_id)] == [RunState.INTERRUPTED] * 2


def test_a_finished_run_resets_the_count(store: TaskStore) -> None:
    task_id = store.create_task(title="t", instruction="i", repo="/r").id
    for outcome in ("interrupted", "succeeded", "interrupted"):
        store.set_state(task_id, S.PREPARING)
        run = store.start_run(task_id, "w")
        store.set_state(task_id, S.RUNNING)
        if outcome == "succeeded":
            store.finish_run(run.id, RunState.SUCCEEDED)
            store.set_state(task_id, S.READY_FOR_REVIEW)
            store.add_review(task_id, "followup", "more")
        else:
            [recovery] = store.recover_interrupted(worker="w")
            assert recovery.state is S.QUEUED


def test_recovery_only_touches_the_named_worker_and_leaves_inactive_tasks(store: TaskStore) -> None:
    mine = store.create_task(title="a", instruction="i", repo="/r").id
    theirs = store.create_task(title="b", instruction="i", repo="/r").id
    for task_id, worker in ((mine, "me"), (theirs, "them")):
        store.set_state(task_id, S.PREPARING)
        store.start_run(task_id, worker)
    store.set_state(mine, S.CANCELLED)
    [recovery] = store.recover_interrupted(worker="me")
    assert (recovery.task_id, recovery.state) == (mine, S.CANCELLED)
    assert store.get_task(theirs).state is S.PREPARING
    assert store.runs(theirs)[0].state is RunState.RUNNING


def test_parallel_attempts_interrupted_together_count_as_one_interruption(url: str) -> None:
    with TaskStore.open(url) as store:
        task = store.create_task(title="t", instruction="i", repo="/r", attempts=3)
        store.set_state(task.id, S.PREPARING)
        for _ in range(3):
            store.start_run(task.id, "w", round=1)
        recoveries = store.recover_interrupted()
        assert store.get_task(task.id).state is S.QUEUED
        assert [r.state for r in recoveries] == [S.QUEUED, S.QUEUED, S.QUEUED]
        # A second interrupted round in a row fails the task.
        store.set_state(task.id, S.PREPARING)
        for _ in range(3):
            store.start_run(task.id, "w", round=2)
        store.recover_interrupted()
        assert store.get_task(task.id).state is S.FAILED


def test_an_active_task_without_a_running_run_is_requeued_at_start_up(url: str) -> None:
    with TaskStore.open(url) as store:
        task = store.create_task(title="t", instruction="i", repo="/r")
        assert store.claim_next("w") is not None  # the worker died right after claiming
        assert store.recover_interrupted(worker="w") == []  # one worker's recovery cannot tell
        [recovery] = store.recover_interrupted()
        assert (recovery.run_id, recovery.previous, recovery.state) == (None, S.PREPARING, S.QUEUED)
        assert store.get_task(task.id).state is S.QUEUED
