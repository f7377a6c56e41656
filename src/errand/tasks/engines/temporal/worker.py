"""``errand worker --engine temporal``: the activities of :mod:`.workflow`, on this machine.

One worker serves one errand home (its lock, as the local engine's). It takes a
round's ``start`` from ``errand-begin`` only while it holds fewer rounds than its
concurrency, so new rounds go to workers with room; every later activity of a
round it began comes to its own queue, where its working copies and sandboxes
are. It polls no other queue: the workflows run in ``errand serve``
(:mod:`.conductor`), so a worker that stalls holds none of their steps. Each
activity calls the functions of :mod:`errand.tasks.round.order` and heartbeats
meanwhile (``start`` says in its heartbeats which runs it began, so a workflow
that loses it still knows them); an activity that fails ends the round as failed
itself (the same reasons in the log as the local engine's) and tells the
workflow so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from errand.agent import Budgets
from errand.database import outage
from errand.errors import ErrandError
from errand.memory import MemoryStore
from errand.sandbox import AsyncSandbox
from errand.tasks.engines.lease import TEMPORAL_PREFIX, temporal_lease
from errand.tasks.engines.temporal import TemporalSettings
from errand.tasks.engines.temporal.fence import FencedBench, lost
from errand.tasks.engines.temporal.restarting import serve_restarting
from errand.tasks.engines.temporal.room import Room
from errand.tasks.engines.temporal.workflow import (
    CONCLUDED,
    ROUND_CANCELLED,
    ROUND_FAILED,
    RUN_LOST,
    START_STALE,
    WORKER_STOPPED,
    AttemptInput,
)
from errand.tasks.engines.workers import WorkerInfo, hold
from errand.tasks.errors import RunNotFound, RunNotRunning, StaleStart
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.round import order as rounds
from errand.tasks.round import steps
from errand.tasks.store.tasks import TaskStore

__all__ = ["TemporalWorker"]

log = logging.getLogger("errand.engine")
T = TypeVar("T")
_START = -1  # a round's start, where its attempts have their index (see TemporalWorker._attempts)


class _Immediately:
    """An attempt that asks ends here; the workflow waits for the answer (see :mod:`.workflow`)."""

    hold = False

    async def wait_for_answer(self, index: int) -> tuple[str, int]:
        raise AssertionError("a durable engine does not wait in the activity")


class TemporalWorker:
    """Runs rounds of tasks for the Temporal service at ``settings``, ``concurrency`` at a time."""

    def __init__(self, store: TaskStore, settings: TemporalSettings, *, concurrency: int = 2,
                 models: rounds.ModelFactory = rounds.default_models, memory: MemoryStore | object | None = ...,
                 budgets: Budgets | None = None, isolation: str | None = None) -> None:
        # Its store waits for a database that is away (ERRAND_STORE_RETRY_SECONDS) instead of failing
        # the step under way: a restart of the database holds the rounds up, it does not end them.
        self.store = store = store.patient(settings.store_retry)
        self.settings = settings
        self.concurrency = concurrency
        self.queue = self.worker = settings.worker_queue()
        self.bench = FencedBench(
            store, self.queue, isolation=isolation or os.environ.get("ERRAND_ISOLATION") or "namespace",
            budgets=budgets or Budgets(), models=models, default_model=os.environ.get("ERRAND_MODEL") or None,
            memory=MemoryStore(store.engine).patient(settings.store_retry) if memory is ... else memory)  # type: ignore[arg-type]
        self._held: set[str] = set()
        self._concluding: set[str] = set()
        self._stopping = False
        self._room = asyncio.Condition()
        self._room_slots: Room | None = None
        # Each attempt under way, by its round's key and its index (a start's, by ``_START``): it runs
        # beside its activity (see :meth:`attempt`), and its end is kept a while after (:meth:`_attached`).
        self._attempts: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self._ending: set[asyncio.Future[None]] = set()  # rounds a database outage cut short, ending here

    async def serve(self, *, stop: asyncio.Event | None = None, exit_when_idle: float | None = None,
                    ready: Callable[[], None] | None = None) -> None:
        """Work until ``stop`` is set, or (``exit_when_idle``) until no round was held for that long."""
        stop = stop or asyncio.Event()
        with hold(WorkerInfo.of_this_process(self.queue, self.concurrency, os.environ)):
            async with temporal_lease(self.store, f"{TEMPORAL_PREFIX}{self.queue}", self.settings.heartbeat,
                                      lapsed=self._end_lost_rounds):
                await self._serve(stop, exit_when_idle, ready)

    async def _serve(self, stop: asyncio.Event, exit_when_idle: float | None,
                     ready: Callable[[], None] | None) -> None:
        await asyncio.to_thread(self._remove_stale_work)
        settings = self.settings
        # What ``start`` says in a heartbeat reaches the service within a second (not throttled
        # for most of a minute): a workflow that loses the worker still learns the runs it began.
        served = self.activities()
        # It polls for a new round only while it has room for one (see :mod:`.room`).
        room = self._room_slots = Room(self.concurrency, lambda: len(self._held))

        def beginning(client: Client) -> Worker:
            return Worker(client, task_queue=settings.begin_queue, activities=served[settings.begin_queue],
                          tuner=room.tuner(), max_heartbeat_throttle_interval=timedelta(seconds=1))

        def own(client: Client) -> Worker:
            return Worker(client, task_queue=self.queue, activities=served[self.queue],
                          max_concurrent_activities=max(100, 4 * self.concurrency))

        # Each is started again when it fails (the service away as it starts, or for longer than its
        # polls retry): a worker whose queues nobody polls would hold its lease and begin nothing.
        serving = asyncio.Event()
        running = [asyncio.ensure_future(serve_restarting(settings, beginning, serving, "the begin queue's worker")),
                   asyncio.ensure_future(serve_restarting(settings, own, serving, "this worker's own queue's worker"))]
        if ready is not None:
            ready()
        idle = asyncio.ensure_future(self._idle(exit_when_idle)) if exit_when_idle is not None else None
        try:
            await asyncio.wait([asyncio.ensure_future(stop.wait()), *running, *([idle] if idle else [])],
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._stopping = True
            # Stopping cleanly, its rounds are left to the workflow: a worker that does not
            # come back is found by its heartbeats, and the round begins again elsewhere.
            serving.set()
            await asyncio.gather(*running, return_exceptions=True)
            for key in {place[0] for place in self._attempts}:  # those the service had lost track of
                self._forget(key, taken=True)
            await self._end_sandboxes()
            if self.bench.gateway is not None:
                await self.bench.gateway.close()
            # A round whose result is in but whose closing was cut short by the stop: its copies go
            # now (those of rounds still running, or waiting for an answer, stay for a restart).
            await asyncio.to_thread(self._remove_stale_work)
        for done in running:
            if done.done() and not done.cancelled() and done.exception() is not None:
                raise done.exception()  # type: ignore[misc]

    def activities(self) -> dict[str, list[Callable[..., Any]]]:
        """The activities this worker serves, by task queue: a round's start (and the first shape's
        begin) where workers with room take them, the rest of a round (the first shape's prepare
        too) on this worker's own queue. It polls no other queue: the workflows and their store-only
        activities run in ``errand serve`` (see :mod:`.conductor`)."""
        return {self.settings.begin_queue: [self.start, self.begin],
                self.queue: [self.prepare, self.started, self.attempt, self.deliver, self.conclude, self.close]}

    def held(self) -> set[str]:
        """The keys of the rounds this worker holds (a place each), concluding ones left out."""
        return set(self._held) - self._concluding

    def sandboxes(self, task_id: str) -> list[AsyncSandbox | None]:
        """The sandboxes of the task's round held here, one per attempt (None: not running now)."""
        keys = [key for key in self.bench.rounds if key.split("/")[0] == task_id]
        return self.bench.sandboxes(keys[-1]) if keys else []

    async def _idle(self, seconds: float) -> None:
        idle_since = loop_time = asyncio.get_running_loop().time
        since = idle_since()
        while True:
            await asyncio.sleep(min(0.1, seconds / 3 or 0.05))
            if self._held:
                since = loop_time()
            elif loop_time() - since >= seconds:
                return

    # ------------------------------------------------------------ activities

    @activity.defn(name="errand.start")
    async def start(self, task_id: str, claim: int | None = None) -> rounds.Prepared:
        """Begin a round here once there is room, and prepare it: what its attempts start from.
        ``claim``, the task's claim the workflow issued the start for: a start this worker held
        while it stalled, run on waking after the task moved on, begins nothing (see :meth:`_begin`)."""
        said: list[Any] = []
        async with self._heartbeating(said):
            begun = await self._begin(task_id, claim)
            said.append(begun)
            activity.heartbeat(begun)
            # It prepares beside the activity, as an attempt runs (see :meth:`attempt`): a restart of the
            # service that catches it does not begin the round again; the workflow takes it up (``started``).
            place = (begun.key, _START)
            running = self._attempts[place] = asyncio.ensure_future(self._guarded(
                begun.task_id, begun.run_ids, lambda: rounds.prepare(self.bench, begun), key=begun.key, said=begun))
            return await self._attached(place, running)

    @activity.defn(name="errand.started")
    async def started(self, begun: rounds.Begun) -> rounds.Prepared:
        """The end of a round's start that went on here while the service lost track of it."""
        place = (begun.key, _START)
        async with self._heartbeating():
            running = self._attempts.get(place)
            if running is None:
                raise ApplicationError(f"the start of round {begun.key} no longer runs on {self.queue} (it restarted "
                                       "since)", type=RUN_LOST, non_retryable=True)
            return await self._attached(place, running)

    @activity.defn(name="errand.begin")
    async def begin(self, task_id: str) -> rounds.Begun:
        """A round's beginning alone, for workflows begun under the first shape of the round."""
        async with self._heartbeating():
            return await self._begin(task_id)

    @activity.defn(name="errand.prepare")
    async def prepare(self, begun: rounds.Begun) -> rounds.Prepared:
        """A round's preparing alone, for workflows begun under the first shape of the round."""
        async with self._heartbeating():
            return await self._guarded(begun.task_id, begun.run_ids, lambda: rounds.prepare(self.bench, begun),
                                       key=begun.key)

    async def _begin(self, task_id: str, claim: int | None = None) -> rounds.Begun:
        async with self._room:
            await self._room.wait_for(lambda: len(self._held) < self.concurrency)
            task = await asyncio.to_thread(self.store.get_task, task_id)
            try:
                begun = await self._guarded(task_id, (), lambda: self._past_cancelling(
                    rounds.begin(self.bench, task, claim=claim)))
            except StaleStart as stale:
                # The workflow gave this start up (its worker stalled holding it) and the task moved on: it
                # is not this start's to fail. Nothing was begun here, so nothing is left to end.
                log.warning("a start of task %s's round came too late, and begins nothing: %s", task_id, stale)
                raise ApplicationError(str(stale), type=START_STALE, non_retryable=True) from None
            self._held.add(begun.key)
            self._changed()
            return begun

    @activity.defn(name="errand.attempt")
    async def attempt(self, given: AttemptInput) -> rounds.Attempt:
        """An attempt until it ends or asks; the last of the round's to end here concludes the round.
        The attempt runs beside the activity: when the service loses track of the activity (it
        restarted, and timed it out meanwhile), the attempt goes on here, and the workflow takes it
        up again (``reattach``) once the store says this worker lives."""
        place = (given.prepared.key, given.index)
        async with self._heartbeating():
            running = self._attempts.get(place)
            if given.reattach and running is None:
                raise ApplicationError(f"attempt {given.index + 1} of round {place[0]} no longer runs on {self.queue} "
                                       "(it restarted since)", type=RUN_LOST, non_retryable=True)
            if not given.reattach:
                running = self._attempts[place] = asyncio.ensure_future(self._attempt(given))
            assert running is not None
            return await self._attached(place, running)

    async def _attached(self, place: tuple[str, int], running: asyncio.Future[T]) -> T:
        """The step's end (an attempt's, or a start's); a cancel by the workflow (or this worker's
        stop) ends the step too, the service losing track of the activity does not. Its end is kept
        for as long as the workflow may look for it: the service, away when it came, may not have it."""
        try:
            ended = await asyncio.shield(running)
        except asyncio.CancelledError:
            why = activity.cancellation_details()
            if not self._stopping and why is not None and (why.not_found or why.timed_out):
                log.warning("the service lost track of %s of round %s; it goes on here",
                            "the start" if place[1] == _START else f"attempt {place[1] + 1}", place[0])
                raise
            running.cancel()
            ended = await running  # it ends in the cancel, or in the stopping worker's error
        finally:
            if running.done() and self._attempts.get(place) is running:
                asyncio.get_running_loop().call_later(max(20 * self.settings.heartbeat, 600.0), self._drop, place,
                                                      running)
        return ended

    def _drop(self, place: tuple[str, int], running: asyncio.Future[Any]) -> None:
        if self._attempts.get(place) is running:
            del self._attempts[place]

    async def _attempt(self, given: AttemptInput) -> rounds.Attempt:
        prepared = given.prepared
        self._held.add(prepared.key)  # a worker restarted while the task waited: the round is its again
        self._changed()
        ended = await self._guarded(prepared.task_id, prepared.run_ids, lambda: rounds.attempt(
            self.bench, prepared, given.index, _Immediately(),
            messages=[(text, ref) for text, ref in given.messages],
            answer=(given.answer[0], given.answer[1]) if given.answer is not None else None), key=prepared.key)
        if ended.status != "ended" or prepared.key in self._concluding \
                or not rounds.all_ended(self.bench, prepared.key):
            return ended
        self._concluding.add(prepared.key)  # no await since the test: one attempt concludes
        try:
            await self._past_cancelling(self._conclude(prepared))
        finally:
            self._concluding.discard(prepared.key)
        return replace(ended, status=CONCLUDED)

    @activity.defn(name="errand.deliver")
    async def deliver(self, key: str, text: str, ref: int) -> None:
        rounds.deliver_message(self.bench, key, text, ref)

    @activity.defn(name="errand.conclude")
    async def conclude(self, prepared: rounds.Prepared) -> str:
        """Conclude a round whose attempts ended here before this worker restarted, and close it."""
        async with self._heartbeating():
            return await self._conclude(prepared)

    async def _conclude(self, prepared: rounds.Prepared) -> str:
        """Conclude the round and close it here (one step less to wait for between rounds)."""
        result = await self._guarded(prepared.task_id, prepared.run_ids, lambda: rounds.conclude(self.bench, prepared),
                                     key=prepared.key)
        await self.close(prepared.key, list(prepared.run_ids))
        return result.state.value

    @activity.defn(name="errand.close")
    async def close(self, key: str, run_ids: list[str]) -> None:
        self._forget(key, taken=False)
        try:
            await rounds.close(self.bench, key, run_ids)
        finally:
            async with self._room:
                self._held.discard(key)
                self._room.notify_all()
            self._changed()

    # ------------------------------------------------------------ helpers

    async def _guarded(self, task_id: str, run_ids: tuple[str, ...], work: Callable[[], Awaitable[T]], *,
                       key: str | None = None, said: rounds.Begun | None = None) -> T:
        """Run a step of the round ``key`` (None: none begun yet); if it fails, fail the round here and
        tell the workflow (no retry). With ``said``, every way it ends tells the workflow what began
        (its details)."""
        details = [said] if said is not None else []
        try:
            return await work()
        except StaleStart:
            raise  # nothing was begun: the task is not this step's (see :meth:`_begin`)
        except asyncio.CancelledError:
            if self._stopping:  # not the workflow's cancel: this worker stops, and its rounds move on
                raise ApplicationError("the worker stopped", *details, type=WORKER_STOPPED,
                                       non_retryable=True) from None
            if said is not None:  # a cancel's own report carries nothing: a failure that says it
                raise ApplicationError("cancelled", said, type=ROUND_CANCELLED, non_retryable=True) from None
            raise
        except Exception as error:
            away = outage(error)
            if away is not None:
                # Not the task's fault: the round is interrupted (the task requeued), not failed. It ends here
                # at once, beside the step: its sandboxes, copies and place (closing needs no store).
                ending = asyncio.ensure_future(self._end_round_here(key, run_ids))
                self._ending.add(ending)
                ending.add_done_callback(self._ending.discard)
                raise ApplicationError(f"{away.message}, so the round was cut short", *details, type=RUN_LOST,
                                       non_retryable=True) from error
            if isinstance(error, RunNotRunning) or await asyncio.to_thread(lost, self.store, self.queue, run_ids):
                # Fenced: the round was taken from this worker while it did not answer (its lease passed), or
                # its task was cancelled before the cancel reached the step; the task has moved on, so it is
                # not failed here, and what the round holds here ends.
                await self._end_round_here(key, run_ids)
                if await asyncio.to_thread(self._cancelled, task_id):
                    raise ApplicationError(f"cancelled: {error}", *details, type=ROUND_CANCELLED,
                                           non_retryable=True) from error
                raise ApplicationError(f"the round's runs are no longer this worker's: {error}", *details,
                                       type=RUN_LOST, non_retryable=True) from error
            await asyncio.to_thread(rounds.fail, self.store, task_id, run_ids, error)
            raise ApplicationError(str(error), *details, type=ROUND_FAILED, non_retryable=True) from error

    def _cancelled(self, task_id: str) -> bool:
        with contextlib.suppress(ErrandError):
            return self.store.get_task(task_id).state is TaskState.CANCELLED
        return False

    async def _past_cancelling(self, work: Awaitable[T]) -> T:
        """``work`` to its end although the workflow cancels (a round that concludes is past a
        cancel, as the local engine's); a stopping worker still stops it."""
        running = asyncio.ensure_future(work)
        while True:
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                if self._stopping:
                    running.cancel()
                    return await running  # it ends in the stopping worker's error

    @contextlib.asynccontextmanager
    async def _heartbeating(self, said: list[Any] | None = None) -> AsyncIterator[None]:
        """Heartbeat every third of the timeout while the block runs: the service knows this worker
        lives (and, with ``said``, what it says of its work)."""
        async def beat() -> None:
            while True:
                activity.heartbeat(*(said or ()))
                await asyncio.sleep(self.settings.heartbeat / 3)

        beating = asyncio.create_task(beat())
        try:
            yield
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    def _remove_stale_work(self) -> None:
        """The work of runs no longer running (recovered while this home's worker was away)."""
        for run_id in steps.work_runs():
            try:
                run = self.store.get_run(run_id)
            except RunNotFound:
                continue
            if run.state is not RunState.RUNNING:
                steps.remove_work(run)

    async def _end_round_here(self, key: str | None, run_ids: tuple[str, ...]) -> None:
        """End the sandboxes and remove the working copies of the round ``key`` this worker lost (its
        runs ``run_ids``), and free its place (held here but not on the bench, closed already or not
        prepared yet, too). That round alone: the task's next round, begun here since (the task was
        requeued while this worker stalled, and it woke to take the start), runs on. ``None``: a start
        that began no round here; nothing of it is held."""
        if key is None:
            return
        self._forget(key, taken=True)
        try:
            await rounds.close(self.bench, key, run_ids)
        except Exception:  # what is left goes when this worker next starts
            log.exception("ending the lost round %s here failed", key)
        async with self._room:
            self._held.discard(key)
            self._room.notify_all()
        self._changed()

    async def _end_lost_rounds(self) -> None:
        """This worker's lease passed (it stalled): end every round it holds whose runs were taken
        from it meanwhile, and the work of runs no longer running."""
        for key in list(self.bench.rounds):
            task_id, number = key.split("/")
            run_ids = tuple(run.id for run in await asyncio.to_thread(self.store.runs, task_id, round=int(number))
                            if run.worker == self.queue)
            if await asyncio.to_thread(lost, self.store, self.queue, run_ids):
                log.warning("round %s was taken from this worker while it did not answer; ending it here", key)
                await self._end_round_here(key, run_ids)
        await asyncio.to_thread(self._remove_stale_work)

    def _forget(self, key: str, *, taken: bool) -> None:
        """Stop the round's attempts still under way here, but one that concludes it; with ``taken``
        (the round was taken from this worker), forget their ends too. Never awaited: the caller may
        be a step of one of them (a concluding that closes its own round, an attempt that found its
        run taken). That one is not cancelled: cancelled, it cut short the ending of its own round
        (the copy went, the sandbox ran on)."""
        for place, running in list(self._attempts.items()):
            if place[0] != key or (not taken and (running.done() or key in self._concluding)):
                continue
            del self._attempts[place]
            if running is asyncio.current_task():
                continue
            running.cancel()
            running.add_done_callback(lambda ended: ended.cancelled() or ended.exception())

    def _changed(self) -> None:
        if self._room_slots is not None:
            self._room_slots.changed()

    async def _end_sandboxes(self) -> None:
        for key in list(self.bench.rounds):
            for sandbox in self.bench.sandboxes(key):
                if sandbox is not None:
                    with contextlib.suppress(Exception):
                        await sandbox.terminate()

