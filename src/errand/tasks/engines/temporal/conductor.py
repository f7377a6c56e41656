"""The task workflows' own worker, in ``errand serve --engine temporal``: the workflows and
their store-only activities run here, never on the workers that run rounds.

Temporal hands a task to whichever poll is open, and a process that stalls (SIGSTOP, a frozen
machine) keeps its polls open: each poll it had open takes one task and holds it until the
task's timeout. When the round workers ran the workflows too, a worker stalled past its lease
held the workflow's next steps (its sticky queue's poll and one of the shared queue's, a
workflow task timeout each), and the next round began two steps after the lease had passed. A
short workflow task timeout is no cure: on a saturated machine a step can take seconds, and
one cut short is replayed, slower. So the round workers poll only the queues whose tasks are
theirs to hold (a new round's start, while they have room, and their own queue); the
workflows' queue is polled here, by the light process that already hands the rounds to
Temporal. While ``errand serve`` is away the rounds under way go on on their workers, and
the workflows' next steps wait in Temporal for it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from errand.tasks.engines.lease import TEMPORAL_PREFIX, lease_lives
from errand.tasks.engines.temporal import TemporalSettings
from errand.tasks.engines.temporal.restarting import serve_restarting
from errand.tasks.engines.temporal.workflow import SettleInput, TaskWorkflow
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.round import order as rounds
from errand.tasks.store import claims
from errand.tasks.store.tasks import LOST_RULE, TaskStore

__all__ = ["WORKFLOW_RUNNER", "Conductor"]

log = logging.getLogger("errand.engine")
# Each workflow runs in a sandbox that imports its module afresh, with the packages above it: the
# ``errand`` package imported the whole sandbox layer (~50 ms of CPU a task, a third of what the engine
# cost a task here; its face is lazy now, errand._lazy), and ``errand.tasks.engines.temporal`` the
# store's settings, with SQLAlchemy and Alembic (~300 ms). What those packages import comes from the
# process's own modules instead; the workflow's module itself is still imported into the sandbox and
# held to its rules.
WORKFLOW_RUNNER = SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(
    "errand.errors", "errand._lazy", "errand.sandbox", "errand._settings", "errand.database"))


class Conductor:
    """Runs the task workflows, and the activities that need only the store, on ``settings``'s
    workflows queue."""

    def __init__(self, store: TaskStore, settings: TemporalSettings) -> None:
        self.store = store
        self.settings = settings
        # Asking whether a worker lives waits up to a third of a lease for its renewal: after a
        # restart of the service every workflow asks at once. Not on the threads the dispatcher
        # and the API share.
        self._asking = ThreadPoolExecutor(max_workers=32, thread_name_prefix="errand-lives")

    def activities(self) -> list[Any]:
        return [self.settle, self.lives, self.begun]

    async def serve(self, stop: asyncio.Event) -> None:
        """Run the workflows until ``stop`` is set; a worker that failed (the service away when it
        started) starts again, on a connection of its own (see :mod:`.restarting`)."""
        def make(client: Client) -> Worker:
            # A sticky queue whose serve died is given up after a lease (not the default 10 s).
            return Worker(client, task_queue=self.settings.tasks_queue, workflows=[TaskWorkflow],
                          activities=self.activities(), workflow_runner=WORKFLOW_RUNNER,
                          sticky_queue_schedule_to_start_timeout=timedelta(seconds=min(self.settings.heartbeat, 10.0)))

        try:
            await serve_restarting(self.settings, make, stop, "the workflows' worker")
        finally:
            self._asking.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ activities

    @activity.defn(name="errand.lives")
    async def lives(self, holder: str, lease: float) -> bool:
        """Whether the worker of the queue ``holder`` lives, by its lease in the store (a local
        activity of the workflow's: it waits up to a lease for the answer)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._asking, lease_lives, self.store, f"{TEMPORAL_PREFIX}{holder}", lease)

    @activity.defn(name="errand.begun")
    async def begun(self, task_id: str) -> rounds.Begun | None:
        """The task's round whose runs are running, by the store (a local activity of the workflow's:
        what a start said in its heartbeats can go with a restart of the service)."""
        runs = [run for run in await asyncio.to_thread(self.store.runs, task_id) if run.state is RunState.RUNNING]
        if not runs:
            return None
        number = max(run.round for run in runs)
        mine = [run for run in runs if run.round == number]
        return rounds.Begun(task_id, number, tuple(run.id for run in mine), {}, mine[0].worker)

    @activity.defn(name="errand.settle")
    async def settle(self, settled: SettleInput) -> None:
        """End a round that did not conclude, in the store (none of it is on a worker's disk)."""
        if settled.how == "cancelled":
            await asyncio.to_thread(rounds.cancel_runs, self.store, settled.task_id, settled.run_ids)
        elif settled.how == "interrupted":
            run_ids = settled.run_ids or await asyncio.to_thread(self._unbegun_or_running, settled)
            for recovery in await asyncio.to_thread(self.store.interrupt_runs, run_ids):
                await asyncio.to_thread(self.store.append_event, recovery.task_id, None, "recovered", {
                    "run_id": recovery.run_id, "previous": recovery.previous.value, "state": recovery.state.value,
                    "reason": settled.reason,
                    "rule": "requeued after a first interruption, failed after a second in a row"})
        elif settled.how == "failed":
            await asyncio.to_thread(rounds.fail, self.store, settled.task_id, settled.run_ids,
                                    RuntimeError(settled.reason))

    def _unbegun_or_running(self, settled: SettleInput) -> tuple[str, ...]:
        """Queue again a task whose round was lost before it began a run (a stalled worker took the
        start); () then. If the lost start began runs meanwhile (its worker woke), those runs, to be
        interrupted: requeued with them running, the task's next round raced the woken worker's."""
        while True:
            running = self._running_runs(settled.task_id)
            if running or claims.requeue_unbegun(self.store, settled.task_id, reason=settled.reason,
                                                 rule=LOST_RULE):
                return running
            if self.store.get_task(settled.task_id).state is not TaskState.PREPARING:
                return ()  # moved on meanwhile (cancelled, say): nothing of the round to settle

    def _running_runs(self, task_id: str) -> tuple[str, ...]:
        """The task's runs still running: those of the round a lost ``start`` began (one round at a time)."""
        return tuple(run.id for run in self.store.runs(task_id) if run.state is RunState.RUNNING)
