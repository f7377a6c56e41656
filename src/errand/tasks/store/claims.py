"""The fence of a round's start: a round begins only for the claim it was issued for.

A task is claimed for each round (``preparing``); the Temporal engine's dispatcher writes the
claim on the task (its dispatch's id), and the round's start carries it. A worker that stalls
with a start in hand (its poll of the begin queue was open when it was SIGSTOPped) runs it on
waking, after the workflow gave the start up and the task moved on: claimed again and run by
another worker, finished, cancelled. The moves here are checked under the task's row lock, in
the transaction that makes them, so such a start begins nothing (:func:`begin_round`), a round
given up is queued again only with none of its runs running (:func:`requeue_unbegun`), and a
round whose runs were taken moves no task to ``running`` (:func:`run_round`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict

import sqlalchemy as sa

from errand.database import patiently
from errand.tasks.errors import RunNotRunning, StaleStart, StateConflict
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Run, RunState
from errand.tasks.store.schema import runs
from errand.tasks.store.tasks import TaskStore, move_state, task_row

__all__ = ["begin_round", "requeue_unbegun", "run_round"]


@patiently
def begin_round(store: TaskStore, task_id: str, worker: str, attempts: int, *, claim: int | None = None) -> list[Run]:
    """Record the runs of the task's next round for ``worker`` (``attempts`` side by side), all or
    none: only while the task is ``preparing`` and, with ``claim``, still under that claim. Else
    :class:`StaleStart`, and nothing is recorded."""
    now = time.time()
    with store._write() as connection:
        task = task_row(connection, task_id, lock=True)
        if task["state"] != TaskState.PREPARING.value or (claim is not None and task["claim"] != claim):
            raise StaleStart(
                f"task {task_id} is {task['state']}{_under(task['claim'])}, not preparing{_under(claim)} as when "
                "this round's start was issued: the round was given up and the task moved on",
                task_id=task_id, state=task["state"], claim=task["claim"])
        last_attempt, last_round = connection.execute(
            sa.select(sa.func.max(runs.c.attempt), sa.func.max(runs.c.round)).where(runs.c.task_id == task_id)).one()
        first = (last_attempt or 0) + 1
        begun = [Run(f"{task_id}-r{attempt}", task_id, attempt, (last_round or 0) + 1, RunState.RUNNING, worker, now,
                     None, None) for attempt in range(first, first + attempts)]
        connection.execute(runs.insert(), [{**asdict(run), "state": run.state.value} for run in begun])
    return begun


@patiently
def requeue_unbegun(store: TaskStore, task_id: str, *, reason: str, rule: str) -> bool:
    """Queue again a ``preparing`` task none of whose runs is running (its round was lost before
    it began one), with its ``recovered`` event, or fail it once that happened too often in a row
    (:meth:`TaskStore.requeue_lost`); False, changing nothing, if it is not so: a start that began
    runs meanwhile keeps them, and the caller settles them instead."""
    return store.requeue_lost(task_id, TaskState.PREPARING, reason=reason, rule=rule) is not None


@patiently
def run_round(store: TaskStore, task_id: str, run_ids: Sequence[str]) -> None:
    """Move the prepared round's task from ``preparing`` to ``running`` while every one of its
    runs is running: a round whose runs were taken meanwhile (settled elsewhere, the task queued
    and claimed again) gets :class:`RunNotRunning` and moves nothing; a task not ``preparing``,
    :class:`StateConflict` (as :meth:`TaskStore.set_state`)."""
    query = sa.select(runs.c.id, runs.c.state).where(runs.c.id.in_(list(run_ids)))
    with store._write() as connection:
        current = TaskState(task_row(connection, task_id, lock=True)["state"])
        taken = [run_id for run_id, state in connection.execute(query) if state != RunState.RUNNING.value]
        if taken:
            raise RunNotRunning(f"run {taken[0]} of task {task_id} is no longer running: its round was given up, "
                                "and it does not move the task", task_id=task_id, run_id=taken[0])
        if current is not TaskState.PREPARING:
            raise StateConflict(f"task {task_id} is {current}, not preparing; another writer changed it",
                                task_id=task_id, expected=TaskState.PREPARING.value, actual=current.value)
        move_state(connection, task_id, current, TaskState.RUNNING)


def _under(claim: int | None) -> str:
    return f" under claim {claim}" if claim is not None else ""
