"""The reconciler: it heals what a lost hand-off left orphaned, whatever outlasted the retries.

Every hand-off between errand's processes is retried until acknowledged, but a
dependency can be away for longer than any budget, and a process can die between
two writes. What is then left has nobody to move it on:

- an active task whose round nothing drives: with the Temporal engine, its workflow
  is missing (it was never started), failed (a store outage outlasted its activities'
  retries) or ended without settling it; with the local engine, the worker that
  claimed it holds no live lease and no run of it began;
- a run marked ``running`` that nobody will end: its worker holds no live lease (the
  local engine), or its workflow no longer runs (Temporal: a live worker's attempt
  that no workflow waits for any more) — of an active task, or of one a person
  cancelled meanwhile.

:func:`decide` maps what the store (and Temporal) say of one task to a :class:`Heal`,
a pure function tested row by row; :func:`act` is the one place that performs it,
each change compare-and-set, so two reconcilers (``errand serve``'s and a person's
``errand recover``) racing do it once. The rule is the engines' own: the runs are
interrupted and the task requeued after a first interruption, failed after a second in
a row, with the reason in its log (``errand show`` says it). A task that changed within
``grace`` seconds is left alone: its engine may be between two steps of a hand-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from errand.errors import ConfigError, ErrandError
from errand.tasks.engines.lease import TEMPORAL_PREFIX
from errand.tasks.errors import EnginesMixed
from errand.tasks.lifecycle import ACTIVE, TaskState
from errand.tasks.records import Run, RunState, Task
from errand.tasks.store.tasks import LOST_RULE, TaskStore

__all__ = ["DEFAULT_GRACE", "DEFAULT_INTERVAL", "Action", "Heal", "Healed", "Reconciler", "Seen", "WorkflowState",
           "Workflows", "act", "cancel_runs", "decide", "end_abandoned_runs", "grace_from_environment", "holder_alive",
           "interval_from_environment", "reap_work"]

log = logging.getLogger("errand.engine")

#: Seconds a task must have stood still before it is taken for orphaned (``ERRAND_RECONCILE_GRACE``).
DEFAULT_GRACE = 60.0
#: Seconds between two passes of ``errand serve``'s reconciler (``ERRAND_RECONCILE_INTERVAL``).
DEFAULT_INTERVAL = 30.0
RULE = "requeued after a first interruption, failed after a second in a row"


class WorkflowState(enum.StrEnum):
    """What the Temporal service says of a task's workflow."""

    RUNNING = "running"
    MISSING = "missing"  # never started, or forgotten by the service
    FAILED = "failed"  # failed, timed out, terminated or cancelled
    COMPLETED = "completed"  # it ended as a workflow ends: no round wanted


class Workflows(Protocol):
    """Where the reconciler learns the state of a task's workflow (the Temporal engine's is
    :class:`errand.tasks.engines.temporal.workflows.TemporalWorkflows`). Raising means "cannot say
    now" (the service is away): the task is left alone until the next pass."""

    async def state(self, task_id: str) -> WorkflowState: ...


class Action(enum.StrEnum):
    INTERRUPT = "interrupt"  # end the runs as interrupted; an active task requeued (failed after a second time)
    CANCEL_RUNS = "cancel_runs"  # a person cancelled the task: its runs end as cancelled
    REQUEUE = "requeue"  # an active task with no run and nothing driving it: queued again
    END_RUNS = "end_runs"  # a task already settled (failed, say) left a run running: it ends, the task stays


@dataclass(frozen=True)
class Seen:
    """What the store and the engine say of one task at one moment."""

    task: Task
    running: tuple[Run, ...]  # its runs marked running
    live: frozenset[str]  # the workers holding a live lease in the store
    now: float
    claimer: str | None = None  # the worker that claimed its current round
    workflow: WorkflowState | None = None  # None: the local engine, which has no workflows
    dispatching: bool = False  # a hand-off of it is written down and not yet acknowledged (an outbox's)


@dataclass(frozen=True)
class Heal:
    """What to do about one orphaned task, and why, in words a person reads."""

    task_id: str
    action: Action
    previous: TaskState  # the task's state when it was seen (a requeue is compare-and-set on it)
    reason: str
    run_ids: tuple[str, ...] = ()
    reap: tuple[str, ...] = ()  # runs whose working copies nobody else will remove (no live holder)


@dataclass(frozen=True)
class Healed:
    """What :func:`act` did: the task's state afterwards, and the reason it gave."""

    task_id: str
    action: Action
    previous: TaskState
    state: TaskState
    reason: str
    run_ids: tuple[str, ...] = ()

    def change(self) -> str:
        """What became of the task, in words: ``running → queued``, or ``stays failed`` for a task
        whose state was not changed (only its runs ended)."""
        if self.state is self.previous:
            ended = f"; run {', '.join(self.run_ids)} ended" if self.run_ids else ""
            return f"stays {self.state.value}{ended}"
        return f"{self.previous.value} → {self.state.value}"

    def to_json(self) -> dict[str, object]:
        return {"task_id": self.task_id, "action": self.action.value, "previous": self.previous.value,
                "state": self.state.value, "reason": self.reason, "run_ids": list(self.run_ids)}


_NO_WORKFLOW = {
    WorkflowState.MISSING: "it has no workflow in Temporal (it was handed over while the Temporal service was away, "
                           "or the service lost it)",
    WorkflowState.FAILED: "its workflow failed (a dependency, such as the database, was away for longer than "
                          "its retries), so nothing would move it on",
    WorkflowState.COMPLETED: "its workflow ended without settling it",
}


def holder_alive(worker: str, live: Collection[str]) -> bool:
    """Whether ``worker`` (as a run names it) holds a live lease: a local engine's lease is its
    own id, a Temporal worker's its queue's behind the ``temporal:`` prefix."""
    return worker in live or f"{TEMPORAL_PREFIX}{worker}" in live


def decide(seen: Seen, *, grace: float = DEFAULT_GRACE) -> Heal | None:
    """The heal one task needs, or None. Pure: the same ``seen`` gives the same answer."""
    task = seen.task
    if seen.now - task.updated_at < grace or seen.workflow is WorkflowState.RUNNING or seen.dispatching:
        return None  # too fresh to judge; a workflow drives it (its heartbeats find a dead worker); or it is on its way
    if seen.workflow is not None:
        orphaned = seen.running  # no workflow will settle them, whoever holds them
        why = _NO_WORKFLOW[seen.workflow]
    else:
        orphaned = tuple(run for run in seen.running if not holder_alive(run.worker, seen.live))
        holders = ", ".join(sorted({run.worker for run in orphaned}))
        why = f"its worker {holders} holds no live lease (it died, or lost the database for longer than its lease)"
    reap = tuple(run.id for run in orphaned if not holder_alive(run.worker, seen.live))
    run_ids = tuple(run.id for run in orphaned)
    if orphaned:
        if task.state is TaskState.CANCELLED:
            return Heal(task.id, Action.CANCEL_RUNS, task.state, f"the task was cancelled and {why}", run_ids, reap)
        if task.state not in ACTIVE:  # it settled already: nothing to requeue or fail, only the runs to end
            return Heal(task.id, Action.END_RUNS, task.state, f"the task is {task.state.value} already and {why}",
                        run_ids, reap)
        return Heal(task.id, Action.INTERRUPT, task.state, why, run_ids, reap)
    if task.state not in ACTIVE or seen.running:
        return None
    if seen.workflow is not None:
        return Heal(task.id, Action.REQUEUE, task.state, f"it was claimed, but {why}")
    if seen.claimer is None or not holder_alive(seen.claimer, seen.live):
        claimer = seen.claimer or "a worker that did not say"
        return Heal(task.id, Action.REQUEUE, task.state,
                    f"it was claimed by {claimer}, which holds no live lease, before any run of it began")
    return None


def act(store: TaskStore, heal: Heal) -> Healed | None:
    """Perform ``heal`` (None: the task moved on meanwhile, and nothing was done). The one place
    the reconciler changes anything; every change is compare-and-set."""
    if heal.action is Action.REQUEUE:
        return _requeue(store, heal)
    healed = _cancel_runs(store, heal) if heal.action is Action.CANCEL_RUNS else _interrupt(store, heal)
    _reap(store, heal.reap)
    return healed


def _requeue(store: TaskStore, heal: Heal) -> Healed | None:
    """Queue again a task whose round was lost before a run of it began (failed instead once that
    happened too often in a row); None if it moved on (claimed, cancelled, a run begun) since it was seen."""
    try:
        recovery = store.requeue_lost(heal.task_id, heal.previous, reason=heal.reason, rule=LOST_RULE)
    except ErrandError:  # the lifecycle refuses the move from the state it was seen in
        return None
    if recovery is None:
        return None
    return Healed(heal.task_id, heal.action, heal.previous, recovery.state, heal.reason)


def _interrupt(store: TaskStore, heal: Heal) -> Healed | None:
    recoveries = store.interrupt_runs(heal.run_ids)
    if not recoveries:
        return None  # their worker or workflow ended them since they were seen
    rule = RULE if heal.action is Action.INTERRUPT else "a run its settled task left running ends as interrupted"
    for recovery in recoveries:
        store.append_event(heal.task_id, None, "recovered", {
            "run_id": recovery.run_id, "previous": recovery.previous.value, "state": recovery.state.value,
            "reason": heal.reason, "rule": rule})
    state = recoveries[-1].state
    if state is TaskState.FAILED and recoveries[-1].previous is not TaskState.FAILED:  # this heal failed it
        store.append_event(heal.task_id, None, "failed", {
            "reason": f"{heal.reason}; its round was interrupted a second time in a row, so errand gave up "
                      f"(`errand retry {heal.task_id}` runs it again)", "code": "orphaned"})
    return Healed(heal.task_id, heal.action, heal.previous, state, heal.reason,
                  tuple(r.run_id for r in recoveries if r.run_id is not None))


def _cancel_runs(store: TaskStore, heal: Heal) -> Healed | None:
    ended = cancel_runs(store, heal.task_id, heal.run_ids, heal.reason)
    if not ended:
        return None
    store.append_event(heal.task_id, None, "recovered", {
        "run_id": ended[0], "previous": heal.previous.value, "state": heal.previous.value, "reason": heal.reason,
        "rule": "a cancelled task's runs end as cancelled"})
    return Healed(heal.task_id, heal.action, heal.previous, heal.previous, heal.reason, tuple(ended))


def cancel_runs(store: TaskStore, task_id: str, run_ids: Sequence[str], reason: str) -> list[str]:
    """End the runs still running as cancelled; the ids of those this call ended."""
    ended = []
    for run_id in run_ids:
        with contextlib.suppress(ErrandError):  # ended meanwhile, by its worker or another reconciler
            store.finish_run(run_id, RunState.CANCELLED, {"reason": reason})
            ended.append(run_id)
    return ended


def _reap(store: TaskStore, run_ids: Sequence[str]) -> None:
    """Remove the working copies (unmounting their overlays) of ended runs no live worker holds,
    where they are on this machine's disk."""
    from errand.tasks.round import steps  # the round's machinery, only where there is a copy to remove

    for run_id in run_ids:
        if not steps.work_dir_of(run_id).exists():
            continue
        try:
            steps.remove_work(store.get_run(run_id))
        except (OSError, ErrandError) as error:
            log.warning("could not remove the working copies of run %s: %s", run_id, error)


def end_abandoned_runs(store: TaskStore, task_id: str) -> list[str]:
    """End, as cancelled, the runs of a cancelled task that no live worker holds, and remove their
    copies here: a worker that died will never see the cancel. Runs a live worker holds are its to end."""
    live = frozenset(store.live_workers())
    abandoned = [run.id for run in store.runs(task_id)
                 if run.state is RunState.RUNNING and not holder_alive(run.worker, live)]
    ended = cancel_runs(store, task_id, abandoned, "the task was cancelled and its worker holds no live lease")
    _reap(store, ended)
    return ended


def reap_work(store: TaskStore) -> list[str]:
    """Remove the working copies (unmounting their overlays) that this home's dead worker left of
    runs that have ended; the ids of the runs whose copies went. Nothing while a worker serves
    the home (it removes its own), and nothing of a run still marked running (end it first:
    ``errand recover``; a Temporal round waiting for an answer keeps its copy for its worker)."""
    from errand.tasks.engines.workers import worker_running
    from errand.tasks.round import steps

    if worker_running():
        return []
    reaped = []
    for run_id in steps.work_runs():
        try:
            run = store.get_run(run_id)
        except ErrandError:
            continue  # not this store's: the home served another database before
        if run.state is not RunState.RUNNING:
            steps.remove_work(run)
            reaped.append(run_id)
    return reaped


class Reconciler:
    """Finds orphans in ``store`` and heals them; with ``workflows``, the Temporal engine's (whose
    tasks are judged by their workflows), else the local engine's (judged by leases)."""

    def __init__(self, store: TaskStore, workflows: Workflows | None = None, *, grace: float = DEFAULT_GRACE,
                 dispatching: Callable[[], Collection[str]] = frozenset) -> None:
        """``dispatching()`` names the tasks whose hand-off to the engine is written down and not yet
        acknowledged (the Temporal engine's outbox sends those until it is): none is judged."""
        self.store = store
        self.workflows = workflows
        self.grace = grace
        self._dispatching = dispatching

    async def once(self, task_ids: Collection[str] | None = None) -> list[Healed]:
        """One pass over every active task and every run marked running (or those of ``task_ids``)."""
        healed = []
        looked = await asyncio.to_thread(self._look, task_ids)
        if self.workflows is None and looked and any(w.startswith(TEMPORAL_PREFIX) for w in looked[0].live):
            # Its runs would look abandoned to the local rule: a task waiting for an answer, say.
            raise EnginesMixed("the Temporal engine serves this store: its tasks are judged by their workflows "
                               "(`errand recover --engine temporal --temporal HOST:PORT`)")
        for seen in looked:
            if self.workflows is not None:
                try:
                    seen = replace(seen, workflow=await self.workflows.state(seen.task.id))
                except Exception as error:  # noqa: BLE001 - cannot say now: the next pass asks again
                    log.warning("could not learn the workflow of task %s (%s); it is left for the next pass",
                                seen.task.id, error)
                    continue
            heal = decide(seen, grace=self.grace)
            if heal is None:
                continue
            done = await asyncio.to_thread(act, self.store, heal)
            if done is not None:
                log.warning("reconciler: task %s %s: %s", done.task_id, done.change(), done.reason)
                healed.append(done)
        return healed

    async def serve(self, stop: asyncio.Event, interval: float = DEFAULT_INTERVAL) -> None:
        """A pass every ``interval`` seconds until ``stop``; a pass that fails (the store away) is logged."""
        while not stop.is_set():
            try:
                await self.once()
            except Exception as error:  # noqa: BLE001 - the next pass tries again
                log.warning("the reconciler's pass failed (%s); it tries again in %g s", error, interval)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    def _look(self, task_ids: Collection[str] | None) -> list[Seen]:
        store = self.store
        running: dict[str, list[Run]] = {}
        for run in store.running_runs():
            running.setdefault(run.task_id, []).append(run)
        tasks = {task.id: task for state in sorted(ACTIVE) for task in store.list_tasks(state=state, limit=1_000_000)}
        for task_id in running.keys() - tasks.keys():
            tasks[task_id] = store.get_task(task_id)
        live = frozenset(store.live_workers())
        dispatching = frozenset(self._dispatching())
        now = time.time()
        return [Seen(task, tuple(running.get(task.id, ())), live, now,
                     claimer=store.claimer(task.id) if task.state in ACTIVE and task.id not in running else None,
                     dispatching=task.id in dispatching)
                for task in tasks.values() if task_ids is None or task.id in task_ids]


def _seconds(variable: str, default: float) -> float:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError(f"{variable} must be a number of seconds, not {text!r}", code="bad_reconcile_setting")
    return value


def grace_from_environment() -> float:
    return _seconds("ERRAND_RECONCILE_GRACE", DEFAULT_GRACE)


def interval_from_environment() -> float:
    interval = _seconds("ERRAND_RECONCILE_INTERVAL", DEFAULT_INTERVAL)
    if interval <= 0:
        raise ConfigError("ERRAND_RECONCILE_INTERVAL must be more than 0 seconds", code="bad_reconcile_setting")
    return interval
