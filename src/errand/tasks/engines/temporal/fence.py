"""The fence between a Temporal worker and the runs it lost.

A worker that stalls (SIGSTOP, a frozen machine, a long pause of its loop) past its lease
has its rounds taken from it: the workflow finds its heartbeats gone, marks the runs
``interrupted`` and begins the next round elsewhere. When the stalled worker wakes it
still holds those rounds' agents, sandboxes and working copies, and its next step would
write into a run that is settled. The fence refuses that write: a worker's event goes into
a run only while the run is ``running`` and the worker's own, checked in the transaction
that writes it; a refused write raises :class:`~errand.tasks.errors.RunNotRunning`, and the
worker then ends the round's sandboxes and copies instead of failing a task that has moved on.
A run of a task a person cancelled takes no more events either: the cancel may not reach the
worker at once (Temporal away, say), and the agent must not go on working in its name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from errand.database import patiently
from errand.tasks.errors import RunNotRunning
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.round.order import Bench
from errand.tasks.store.schema import runs, tasks
from errand.tasks.store.tasks import TaskStore, insert_event

__all__ = ["FencedBench", "append_if_held", "lost"]


#: States a run is put in by someone else than the worker that held it (recovery, a cancel).
TAKEN = frozenset({RunState.INTERRUPTED.value, RunState.CANCELLED.value})


@patiently
def append_if_held(store: TaskStore, worker: str, task_id: str, run_id: str, kind: str, data: Any) -> int:
    """Append the run's event if the run is still ``worker``'s and was not taken from it (see
    :data:`TAKEN`); else :class:`RunNotRunning`."""
    query = (sa.select(runs.c.state, runs.c.worker, tasks.c.state.label("task_state"))
             .join(tasks, tasks.c.id == runs.c.task_id).where(runs.c.id == run_id).with_for_update(of=runs))
    with store._write() as connection:
        row = connection.execute(query).first()
        # A run this worker ended itself (succeeded, failed) still takes its round's closing events (the
        # distilled memories, the egress record); one taken from it (interrupted, cancelled) takes none.
        if row is not None and (row.state in TAKEN or row.worker != worker):
            raise RunNotRunning(f"run {run_id} is {row.state} and no longer {worker}'s: the worker lost it while it "
                                "was not answering, and writes nothing more into it", task_id=task_id, run_id=run_id)
        if row is not None and row.state == RunState.RUNNING.value and row.task_state == TaskState.CANCELLED.value:
            raise RunNotRunning(f"task {task_id} was cancelled: its run {run_id} takes no more events, and its "
                                "worker ends it", task_id=task_id, run_id=run_id)
        return insert_event(connection, task_id, run_id, kind, data)


@patiently
def lost(store: TaskStore, worker: str, run_ids: Sequence[str]) -> bool:
    """Whether none of ``run_ids`` is running as ``worker``'s any more (the round was taken away)."""
    query = sa.select(sa.func.count()).select_from(runs).where(
        runs.c.id.in_(list(run_ids)), runs.c.state == RunState.RUNNING.value, runs.c.worker == worker)
    with store._read() as connection:
        return bool(run_ids) and connection.execute(query).scalar_one() == 0


@dataclass
class FencedBench(Bench):
    """A bench whose events of a run are written only while the run is this worker's."""

    async def event(self, task_id: str, run_id: str | None, kind: str, data: dict[str, Any]) -> None:
        if run_id is None:
            await super().event(task_id, run_id, kind, data)
            return
        await asyncio.to_thread(append_if_held, self.store, self.worker, task_id, run_id, kind, data)
