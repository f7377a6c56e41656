"""The Temporal engine's outbox: rounds handed to Temporal, written down before they are sent.

The dispatcher claims a queued task and writes its round into ``dispatches`` in one
transaction; the row stays until the Temporal service has acknowledged the round, however
long the service is away (a claim sent straight to Temporal during an outage was lost, and
its task stayed ``preparing`` for good). A dispatch's id is the round's key: the workflow
counts a round once however often its dispatch is sent (an acknowledgement lost on the way
back sends it again), and the task's claim: the round's start carries it, and begins nothing
if the task is no longer under it (see :func:`~errand.tasks.store.claims.begin_round`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlalchemy as sa

from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Task
from errand.tasks.store.schema import dispatches, tasks
from errand.tasks.store.tasks import TaskStore, move_state, next_queued, task_record, task_row

__all__ = ["Dispatch", "Outbox"]

_ERROR_CHARS = 500


@dataclass(frozen=True)
class Dispatch:
    """A round of ``task_id`` to hand to Temporal; ``id`` is its key."""

    id: int
    task_id: str
    created_at: float
    tries: int = 0
    last_error: str | None = None


class Outbox:
    """The dispatches of one store."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store

    def claim(self, worker: str) -> tuple[Task, Dispatch] | None:
        """Move the oldest queued task to ``preparing`` for ``worker`` and write its round's
        dispatch, in one transaction; None when none is queued. Racing claimers take different
        tasks (as :meth:`TaskStore.claim_next`)."""
        if not self.store.any_queued():
            return None
        with self.store._write() as connection:
            task_id = connection.execute(next_queued()).scalar()
            if task_id is None:
                return None
            dispatch = _insert(connection, task_id)
            move_state(connection, task_id, TaskState.QUEUED, TaskState.PREPARING, claimed_by=worker,
                       claim=dispatch.id)
            return task_record(task_row(connection, task_id)), dispatch

    def add(self, task_id: str) -> Dispatch:
        """Write a round's dispatch for a task claimed already (one whose round was lost); the task
        is under its claim from now on (a start issued for the lost round's begins nothing)."""
        with self.store._write() as connection:
            dispatch = _insert(connection, task_id)
            connection.execute(tasks.update().where(tasks.c.id == task_id).values(claim=dispatch.id))
            return dispatch

    def pending(self, limit: int = 1000) -> list[Dispatch]:
        """The dispatches not acknowledged yet, oldest first."""
        query = sa.select(dispatches).order_by(dispatches.c.id).limit(limit)
        with self.store._read() as connection:
            return [Dispatch(**row) for row in connection.execute(query).mappings()]

    def acknowledged(self, dispatch: Dispatch) -> None:
        """The service has the round: the dispatch is done."""
        with self.store._write() as connection:
            connection.execute(dispatches.delete().where(dispatches.c.id == dispatch.id))

    def unanswered(self, dispatch: Dispatch, error: BaseException) -> None:
        """A send that was not acknowledged: counted, and what was said kept for a person."""
        with self.store._write() as connection:
            connection.execute(dispatches.update().where(dispatches.c.id == dispatch.id).values(
                tries=dispatches.c.tries + 1, last_error=str(error)[:_ERROR_CHARS]))


def _insert(connection: sa.Connection, task_id: str) -> Dispatch:
    now = time.time()
    inserted = connection.execute(dispatches.insert().values(task_id=task_id, created_at=now))
    key = inserted.inserted_primary_key
    assert key is not None
    return Dispatch(int(key[0]), task_id, now)
