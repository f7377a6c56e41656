"""The fence that keeps a stalled Temporal worker out of the runs it lost (without a Temporal
service): what it writes into a run is written only while the run is still its own."""

from __future__ import annotations

import pytest

from errand.tasks.engines.temporal.fence import append_if_held, lost
from errand.tasks.errors import RunNotRunning
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
