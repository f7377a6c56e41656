"""The local engine: a worker pool in one process that runs queued tasks through the steps.

``LocalEngine.serve()`` claims queued tasks (compare-and-set, so several
engines may share a store), runs each claim as a *round* — one run per
parallel attempt — and watches the store for what people send while it works:
messages (delivered at the agent's next step), answers (resuming a run paused
on a question, its sandbox frozen meanwhile) and cancellation.

One engine serves one errand home, holding ``worker.lock``; several engines,
on one machine or many, may share one store (PostgreSQL across machines). Each
holds a lease in the store and renews it every third of its length; on start
and at every renewal it settles what dead workers left behind (see
:meth:`~errand.tasks.store.tasks.TaskStore.recover_dead_workers`): a worker whose
lease expired, or that served this engine's own home (its lock is ours now, so
it ended). The rule is *requeue after a first interruption, fail after a second
in a row*, every event kept. An engine that finds its own lease gone (it was
too slow to renew, and another worker took its runs) stops its rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from errand import _settings
from errand.agent import Budgets
from errand.errors import ConfigError
from errand.memory import MemoryStore
from errand.models import Model, ModelEndpoint
from errand.repo import checkouts
from errand.sandbox import AsyncSandbox
from errand.sandbox.backend import get_backend
from errand.tasks.engines.lease import new_worker_id, refuse_other_engine
from errand.tasks.engines.reconcile import RULE, Action, Heal, act
from errand.tasks.engines.workers import EngineBusy, WorkerInfo, hold, worker_running
from errand.tasks.errors import RunNotFound
from errand.tasks.events import CONTROL_KINDS, text_of
from errand.tasks.lifecycle import ACTIVE, TaskState
from errand.tasks.records import Event, RunState, Task
from errand.tasks.round import order as rounds
from errand.tasks.round import steps
from errand.tasks.store.changes import Commits
from errand.tasks.store.tasks import LOST_RULE, TaskStore

__all__ = ["EngineBusy", "LocalEngine", "ModelFactory", "worker_running"]

log = logging.getLogger("errand.engine")

ModelFactory = rounds.ModelFactory
#: How long a worker's lease lasts unless renewed (``ERRAND_WORKER_LEASE``, seconds): how long
#: a dead worker's tasks wait before another machine takes them over.
DEFAULT_LEASE = 30.0

_OWN = object()


@dataclass
class _Round:
    task: Task
    handle: asyncio.Task[None] | None = None
    control_after: int = 0
    begun: rounds.Begun | None = None
    prepared: rounds.Prepared | None = None
    answers: dict[int, asyncio.Future[tuple[str, int]]] = field(default_factory=dict)
    messages: list[tuple[str, int]] = field(default_factory=list)
    settling: bool = False  # finishing or cancelled: no more cancellation

    @property
    def key(self) -> str:
        return f"{self.task.id}/{self.begun.round}" if self.begun is not None else self.task.id


@dataclass
class _HeldHere:
    """The local engine's controls: an attempt that asks waits in this process for the answer
    the store brings (its sandbox paused meanwhile)."""

    round: _Round
    hold: bool = True

    async def wait_for_answer(self, index: int) -> tuple[str, int]:
        future: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
        self.round.answers[index] = future
        try:
            return await future
        finally:
            self.round.answers.pop(index, None)


class LocalEngine:
    """Runs tasks from ``store``, ``concurrency`` tasks at a time."""

    def __init__(self, store: TaskStore, *, concurrency: int = 2, worker: str | None = None,
                 poll_interval: float = 0.1, default_model: str | None = None, budgets: Budgets | None = None,
                 models: ModelFactory = rounds.default_models, memory: MemoryStore | object | None = _OWN,
                 distiller: Callable[[ModelEndpoint], Model | None] = rounds.default_distiller,
                 isolation: str | None = None, lease: float | None = None) -> None:
        """``memory`` is the project memory tasks are given and teach (default: one on the
        store's own database; ``None`` runs without memory). ``distiller(endpoint)`` gives the
        model that distils a finished task into proposed memories (default: the task's
        own model, unless it is a scripted one; ``None`` from it: no distilling). ``isolation``
        is the sandbox tier tasks run on (default ``ERRAND_ISOLATION``, else ``namespace``). ``lease``
        is how long, in seconds, this worker's lease lasts unless renewed (default
        ``ERRAND_WORKER_LEASE``, else 30)."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be a positive integer, not {concurrency!r}")
        self.store = store
        self.concurrency = concurrency
        self.worker = worker or new_worker_id()
        self.poll_interval = poll_interval
        self.default_model = default_model or os.environ.get("ERRAND_MODEL") or None
        self.budgets = budgets or Budgets()
        self._models = models
        self._distiller = distiller
        self.memory: MemoryStore | None = MemoryStore(store.engine) if memory is _OWN else memory  # type: ignore[assignment]
        self._rounds: dict[str, _Round] = {}
        self._ended = False  # a round ended since the last look: its slot is free for a claim
        self.isolation = isolation or os.environ.get("ERRAND_ISOLATION") or "namespace"
        self.lease = lease if lease is not None else lease_from_environment()
        self._renewed = 0.0
        get_backend(self.isolation)  # an unknown tier is refused here, not at the first task
        self.bench = rounds.Bench(store, self.worker, isolation=self.isolation, budgets=self.budgets, models=models,
                                  distiller=distiller, memory=self.memory, default_model=self.default_model)

    def sandboxes(self, task_id: str) -> list[AsyncSandbox | None]:
        """The sandboxes of the task's round running here, one per attempt (None: not started)."""
        held = self._rounds.get(task_id)
        return self.bench.sandboxes(held.key) if held is not None else []

    # ------------------------------------------------------------ serving

    async def serve(self, *, stop: asyncio.Event | None = None, exit_when_idle: float | None = None,
                    ready: Callable[[], None] | None = None) -> None:
        """Work until ``stop`` is set (or, with ``exit_when_idle``, until nothing was
        queued or running for that many seconds). ``ready`` is called once this engine is the
        home's worker and the store's engine (it raises :class:`EngineBusy` before then if another
        worker serves the home, :class:`EnginesMixed` if the other engine serves the store)."""
        stop = stop or asyncio.Event()
        with hold(WorkerInfo.of_this_process(self.worker, self.concurrency, os.environ)):
            await asyncio.to_thread(self.store.register_worker, self.worker, home=_settings.home_identity(),
                                    lease=self.lease)
            self._renewed = time.monotonic()
            # Before recovering: the Temporal engine's runs have no lease here and would look abandoned.
            await asyncio.to_thread(refuse_other_engine, self.store, "local", self.worker)
            if ready is not None:
                ready()
            await self._recover()
            await self._remove_stale_work()
            await self._prune()
            idle_since = time.monotonic()
            commits = Commits(self.store.engine)
            try:
                while not stop.is_set():
                    try:
                        await self._keep_lease()
                        # Only after a commit (anyone's: a task queued, a message, a cancel) or a round
                        # ended here (a slot free) can a look find something new: an idle worker on
                        # SQLite asks one pragma, not the tasks and events tables, every poll.
                        changed = (commits.since_last() if commits.connected  # microseconds: no thread hop
                                   else await asyncio.to_thread(commits.since_last))
                        if changed or self._ended:
                            self._ended = False
                            await self._claim()
                            await self._poll_controls()
                    except SQLAlchemyError as error:  # the database away: the rounds go on, and so do we
                        commits.forget()  # the next poll looks again, on a new connection
                        log.warning("worker %s cannot reach the store (%s); trying again", self.worker, error)
                    if self._rounds:
                        idle_since = time.monotonic()
                    elif exit_when_idle is not None and time.monotonic() - idle_since >= exit_when_idle:
                        return
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.poll_interval)
            finally:
                commits.close()
                await self._shutdown()

    async def _keep_lease(self) -> None:
        """Renew the lease every third of its length, and take over what dead workers left."""
        if time.monotonic() - self._renewed < self.lease / 3:
            return
        self._renewed = time.monotonic()
        if not await asyncio.to_thread(self.store.renew_lease, self.worker, self.lease):
            log.error("worker %s lost its lease (it did not renew it within %g s); its runs were requeued "
                      "by another worker, so its rounds stop here", self.worker, self.lease)
            await self._stop_rounds()
            await asyncio.to_thread(self.store.register_worker, self.worker, home=_settings.home_identity(),
                                    lease=self.lease)
        await self._recover()
        await self._settle_lost_runs()
        await self._remove_stale_work()

    async def _settle_lost_runs(self) -> None:
        """Settle this worker's runs whose round it no longer runs: the round ended while the store
        was away (a cancel, a failure, a lost lease), so nobody else would ever end them; and queue
        again the tasks it claimed, holds no round of, and has no run running."""
        runs = await asyncio.to_thread(self.store.running_runs)
        lost: dict[str, list[str]] = {}
        for run in runs:
            if run.worker == self.worker and run.task_id not in self._rounds:
                lost.setdefault(run.task_id, []).append(run.id)
        for task_id, run_ids in lost.items():
            task = await asyncio.to_thread(self.store.get_task, task_id)
            action = Action.CANCEL_RUNS if task.state is TaskState.CANCELLED else Action.INTERRUPT
            reason = (f"its worker {self.worker} no longer runs its round (the round ended while the store was "
                      "away, so its runs were not marked)")
            await asyncio.to_thread(act, self.store, Heal(task_id, action, task.state, reason, tuple(run_ids),
                                                          reap=tuple(run_ids)))
        # Tasks it claimed and holds no round of, with no run running: their round was lost as it began
        # or ended. Queued again, and not counted as an interruption: no run of theirs is interrupted.
        await asyncio.to_thread(
            self.store.requeue_unheld, self.worker, set(self._rounds),
            reason=f"its worker {self.worker} claimed it, but runs no round of it and no run of it is running "
                   "(the round was lost as it started or ended, as when the store is away then)",
            rule=LOST_RULE)

    async def _stop_rounds(self) -> None:
        handles = [r.handle for r in self._rounds.values() if r.handle is not None]
        for handle in handles:
            handle.cancel()
        await asyncio.gather(*handles, return_exceptions=True)

    async def _recover(self) -> None:
        recoveries = await asyncio.to_thread(self.store.recover_dead_workers, self.worker,
                                             home=_settings.home_identity())
        for recovery in recoveries:
            if recovery.run_id is None:
                continue  # a task requeued with no run: the store wrote its event as it moved it
            steps.remove_work(await asyncio.to_thread(self.store.get_run, recovery.run_id))
            await self.bench.event(recovery.task_id, None, "recovered", {
                "run_id": recovery.run_id, "previous": recovery.previous.value, "state": recovery.state.value,
                "rule": RULE})

    async def _remove_stale_work(self) -> None:
        """Remove the work of runs that are no longer running and whose round this engine does not
        hold: a worker on another machine recovered them while this home's worker was dead (and
        could not reach this disk), or a person cancelled them while the store was away."""
        for run_id in await asyncio.to_thread(steps.work_runs):
            try:
                run = await asyncio.to_thread(self.store.get_run, run_id)
            except RunNotFound:
                continue  # not this store's (a home may have served another database before)
            if run.state is not RunState.RUNNING and run.task_id not in self._rounds:  # a round held closes its own
                await asyncio.to_thread(steps.remove_work, run)

    async def _prune(self) -> None:
        """Remove pristine checkouts no task has used for a while (the next task on them checks out again)."""
        try:
            removed = await asyncio.to_thread(checkouts.prune)
        except OSError as error:  # a full or read-only disk must not stop the worker
            log.warning("pruning unused checkouts failed: %s", error)
            return
        if removed:
            log.info("removed %d unused checkouts", len(removed))

    async def _claim(self) -> None:
        while len(self._rounds) < self.concurrency:
            # Controls sent before this round began were for an earlier one (or are in its prompt);
            # known before the round is polled at all, or an old message reaches the new attempts.
            claimed = await asyncio.to_thread(self.store.claim_round, self.worker, CONTROL_KINDS)
            if claimed is None:
                return
            task, control_after = claimed
            held = _Round(task, control_after=control_after)
            self._rounds[task.id] = held
            held.handle = asyncio.create_task(self._run_round(held), name=f"errand-task-{task.id}")

    async def _shutdown(self) -> None:
        """Stop every round; their runs are left to recovery, which requeues them."""
        await self._stop_rounds()
        if self.bench.gateway is not None:
            await self.bench.gateway.close()
        await asyncio.to_thread(self.store.recover_interrupted, self.worker)
        await asyncio.to_thread(self.store.release_worker, self.worker)

    # ------------------------------------------------------------ control

    async def _poll_controls(self) -> None:
        """What people did to the rounds held here since the last look, read for all of them at once."""
        held = dict(self._rounds)
        if not held:
            return
        try:
            polled = await asyncio.to_thread(self.store.controls,
                                             {task_id: r.control_after for task_id, r in held.items()}, CONTROL_KINDS)
        except SQLAlchemyError:
            raise  # the store away: serve() says so and goes on
        except Exception:  # a row this errand cannot read (another version's state, say) must not stop the engine
            log.exception("reading the controls of tasks %s failed", ", ".join(held))
            return
        for task_id, (state, controls) in polled.items():
            try:
                self._take_controls(held[task_id], state, controls)
            except Exception:  # one task's trouble must not stop the engine
                log.exception("taking controls of task %s failed", task_id)

    def _take_controls(self, held: _Round, state: TaskState, controls: list[Event]) -> None:
        if state is TaskState.CANCELLED:
            if held.handle is not None and not held.handle.done() and not held.settling:
                held.settling = True
                held.handle.cancel()  # a person cancelled it
            return
        if state not in ACTIVE:
            return  # the round is ending it
        for event in controls:
            held.control_after = event.id
            try:
                text = text_of(event)
                if event.kind == "message_sent":
                    self._deliver_message(held, text, event.id)
                else:
                    self._deliver_answer(held, text, event.id)
            except Exception:  # one control's trouble must not hold up the ones after it (no commit announces them)
                log.exception("delivering control %d of task %s failed", event.id, event.task_id)

    def _deliver_message(self, held: _Round, text: str, ref: int) -> None:
        held.messages.append((text, ref))  # for attempts not started yet
        rounds.deliver_message(self.bench, held.key, text, ref)

    def _deliver_answer(self, held: _Round, text: str, ref: int) -> None:
        for answer in held.answers.values():
            if not answer.done():
                answer.set_result((text, ref))

    # ------------------------------------------------------------ a round

    async def _run_round(self, held: _Round) -> None:
        task = held.task
        try:
            held.begun = await rounds.begin(self.bench, task)
            held.prepared = prepared = await rounds.prepare(self.bench, held.begun)
            controls = _HeldHere(held)
            await asyncio.gather(*(rounds.attempt(self.bench, prepared, index, controls, messages=held.messages)
                                   for index in range(len(prepared.run_ids))))

            def settled() -> None:
                held.settling = True  # from here a cancel comes too late: the result is being written
            await rounds.conclude(self.bench, prepared, settled=settled)
        except asyncio.CancelledError:
            if held.begun is not None:
                await asyncio.to_thread(rounds.cancel_runs, self.store, task.id, held.begun.run_ids)
        except Exception as error:  # noqa: BLE001 - any failure ends the task as failed, with its reason
            held.settling = True
            run_ids = held.begun.run_ids if held.begun is not None else ()
            await asyncio.to_thread(rounds.fail, self.store, task.id, run_ids, error)
        finally:
            held.settling = True
            try:
                if held.begun is not None:
                    await _uncancellable(rounds.close(self.bench, held.begun.key, held.begun.run_ids))
            finally:
                # A retry may have queued, and this engine claimed, the task's next round already.
                if self._rounds.get(task.id) is held:
                    del self._rounds[task.id]
                    self._ended = True


def lease_from_environment() -> float:
    text = os.environ.get("ERRAND_WORKER_LEASE", "").strip()
    if not text:
        return DEFAULT_LEASE
    try:
        lease = float(text)
    except ValueError:
        lease = 0.0
    if not lease > 0:
        raise ConfigError(f"ERRAND_WORKER_LEASE must be a positive number of seconds, not {text!r}",
                          code="bad_worker_lease")
    return lease


async def _uncancellable(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even if the caller is cancelled meanwhile (then re-raise):
    a sandbox must be ended and a working copy removed whatever stops the round."""
    done, cancelled = await steps.to_its_end(work)
    done.result()
    if cancelled:
        raise asyncio.CancelledError
