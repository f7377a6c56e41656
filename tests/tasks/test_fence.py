"""The fence that keeps a stalled Temporal worker out of the runs it lost (without a Temporal
service): what it writes into a run is written only while the run is still its own."""

from __future__ import annotations

import pytest

from errand.tasks.engines.temporal.fence import append_if_held, lost
from errand.tasks.errors import RunNotRunning
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.tasks import TaskStore


def _task(store: TaskStore) -> str:
    return store.create_task(title="t", instruction="i", repo="/r").id


def test_a_stalled_worker_writes_nothing_into_a_run_it_lost(store: TaskStore) -> None:
    task_id = _task(store)
    run = store.start_run(task_id, "worker-a")
    append_if_held(store, "worker-a", task_id, run.id, "output", {"text": "mine"})
    with pytest.raises(RunNotRunning):
        append_if_held(store, "worker-b", task_id, run.id, "output", {"text": "not mine"})
    assert not lost(store, "worker-a", [run.id])
    store.interrupt_runs([run.id])  # its workflow found it silent and took the round
    assert lost(store, "worker-a", [run.id])
    with pytest.raises(RunNotRunning):
        append_if_held(store, "worker-a", task_id, run.id, "output", {"text": "late"})
    assert [e.data.get("text") for e in store.events(task_id, run_id=run.id)] == ["mine"]


def test_a_run_of_a_cancelled_task_takes_no_more_events(store: TaskStore) -> None:
    """A person cancelled the task while the cancel could not reach the worker (Temporal away):
    the agent must not go on working in the task's name, so its next event is refused."""
    task_id = _task(store)
    run = store.start_run(task_id, "worker-a")
    append_if_held(store, "worker-a", task_id, run.id, "output", {"text": "before"})
    store.set_state(task_id, TaskState.CANCELLED, event=("cancelled", {}))
    with pytest.raises(RunNotRunning, match="was cancelled"):
        append_if_held(store, "worker-a", task_id, run.id, "output", {"text": "after"})
    assert [e.data.get("text") for e in store.events(task_id, run_id=run.id)] == ["before"]
