"""A task as a Temporal workflow: it orders a round's activities and waits for people.

Each ``round`` signal (the dispatcher claimed the task: a first round, a follow-up,
a retry, a requeue after a lost worker) runs one round; the workflow ends when no
round is wanted. A round is as few activities as its steps allow, since each hop
between two costs it tens of milliseconds: ``start`` (begin and prepare, on a worker
with room), the attempts on that worker, the last of which to end also concludes
the round there (``conclude`` runs on its own only when that worker restarted
meanwhile). Workflows begun under an earlier shape of the round replay it as they
began it (``workflow.patched``). A question is an attempt activity that ended with the agent's
conversation saved: the workflow waits for the ``answer`` signal — for nothing, a
timer-free wait, however many days it lasts — and then starts the attempt again
with the answer, on the worker that holds its working copy. ``message`` signals
reach live agents through a small activity on that worker, and later attempts get
them as input; ``cancel`` cancels the activities under way. A worker that dies is
found by its activities' heartbeats running out and its lease in the store lapsing: the
round's runs are interrupted (requeued after a first interruption, failed after a second in
a row, every event kept) and the next round begins wherever a worker has room. An attempt
whose heartbeats ran out while its worker's lease lives (the service restarted, and lost
track of it) is not lost: the workflow takes it up again where it runs.

Workflow code must be deterministic: it reads no clock, file or store here; every
effect is an activity's.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from errand.tasks.engines.temporal import WORKFLOW
    from errand.tasks.round.order import Attempt, Begun, Prepared

__all__ = ["CONCLUDED", "ROUND_CANCELLED", "ROUND_FAILED", "RUN_LOST", "START_STALE", "WORKER_STOPPED", "AttemptInput",
           "RoundInput", "SettleInput", "TaskWorkflow"]

_ONCE = RetryPolicy(maximum_attempts=1)  # a lost worker is the round's business, not a retry's
# Store-only activities retry for a bounded time (the round's ``store_retry``), not a count: a
# database away for longer than five tries (~8 s) failed the workflow and stranded its task.
_STORE_RETRIES = RetryPolicy(maximum_attempts=0, initial_interval=timedelta(seconds=0.5),
                             maximum_interval=timedelta(seconds=10))
_LONG = timedelta(days=30)
_QUICK = timedelta(minutes=2)
_PATIENT = timedelta(seconds=60)
# A round's start may land on a worker that stalled with a poll open (SIGSTOP): it is found silent
# within the lease, floored for the first preparing of a worker (images, checkouts) that can hold its
# loop for seconds. (It was the 60 s floor of concluding: the next round waited ~56 s on a 15 s lease.)
_START_FLOOR = timedelta(seconds=10)
# A store-only activity taken by a worker that stalled is tried elsewhere within this, not two minutes.
_STORE_STEP_FLOOR = timedelta(seconds=10)
ROUND_FAILED = "RoundFailed"  # an activity's ApplicationError type: it failed the round itself
ROUND_CANCELLED = "RoundCancelled"  # the starting activity, cancelled: it says what it began
CONCLUDED = "concluded"  # an attempt's status: it ended last, and its worker concluded the round too
# A change to what a round's activities are marks where it starts (``workflow.patched``), so a workflow
# that began a round before it replays that round the old way; tests/engine/test_replay.py replays
# recorded histories of each shape.
START_IN_ONE = "round-starts-in-one-activity"
# The next round begins without waiting for what a lost worker may still have to close.
ROUND_BEFORE_LEFTOVERS = "the-next-round-does-not-wait-for-a-lost-workers-closing"
# An attempt whose heartbeats ran out is taken up again while its worker's lease lives.
REATTACH = "a-silent-attempt-of-a-live-worker-is-taken-up-again"
# A round's start whose heartbeats ran out is taken up again while its worker's lease lives.
START_REATTACH = "a-silent-start-of-a-live-worker-is-taken-up-again"
WORKER_STOPPED = "WorkerStopped"  # its worker was stopped mid-activity: the round is interrupted
RUN_LOST = "RunLost"  # its worker found the round's runs taken from it (it stalled past its lease)
START_STALE = "StartStale"  # the round's start found its task moved on (no longer under its claim): it began nothing
# A round's start carries the task's claim it is for (the dispatch's id): one a stalled worker held and
# runs on waking, after the round was given up and the task moved on, begins nothing.
START_FENCED = "a-start-carries-its-claim"
# A cancelled round whose worker's lease passed (dead, stalled) has its runs marked at once, its closing
# left to the worker; a live worker's closing is waited for a lease at a time. (It was waited for up to an
# hour on a dead worker's queue, its runs left running; a stalled one woke and recorded its run succeeded.)
CANCEL_SETTLES_LOST = "a-cancelled-round-of-a-lost-worker-is-settled-at-once"


@dataclass(frozen=True)
class RoundInput:
    task_id: str
    heartbeat: float  # seconds a worker may stay silent before its activities count as lost
    begin_queue: str
    tasks_queue: str
    store_retry: float = 300.0  # seconds a store-only activity retries before the workflow gives up


@dataclass(frozen=True)
class AttemptInput:
    prepared: Prepared
    index: int
    messages: list[tuple[str, int]] = field(default_factory=list)
    answer: tuple[str, int] | None = None
    reattach: bool = False  # the attempt runs on its worker already: wait for it there, begin nothing


@dataclass(frozen=True)
class SettleInput:
    """Settle a round that did not conclude: ``how`` is ``cancelled``, ``interrupted`` or ``failed``."""

    task_id: str
    run_ids: tuple[str, ...]
    how: str
    reason: str = ""


class _RoundEnded(Exception):
    """The round ended early (cancelled, failed by an activity, its worker lost, its start found the
    task moved on: ``stale``, nothing to settle); ``begun``, what
    the starting activity said it began, when the round ended while it started; ``silent``, which
    of its activity's timeouts ran out when its worker went silent (None: it did not)."""

    def __init__(self, how: str, reason: str = "", begun: Begun | None = None, silent: str | None = None) -> None:
        super().__init__(how)
        self.how = how
        self.reason = reason
        self.begun = begun
        self.silent = silent


@workflow.defn(name=WORKFLOW)
class TaskWorkflow:
    def __init__(self) -> None:
        self.wanted = 0
        self.dispatches: set[int] = set()
        self.claims: list[int | None] = []  # each round's dispatch (its claim of the task), in order
        self.messages: list[tuple[str, int]] = []
        self.answers: list[tuple[str, int]] = []
        self.seen: set[int] = set()
        self.cancelled = False
        self.stopping = False  # one attempt ended the round: the others stop too
        self.holder: str | None = None
        self.key: str | None = None
        self.deliveries: list[Any] = []
        self.leftovers: list[Any] = []
        self.given: RoundInput | None = None

    # ------------------------------------------------------------ signals

    @workflow.signal(name="round")
    def round_wanted(self, dispatch: int | None = None) -> None:
        """One more round; ``dispatch``, the outbox's key, counts once however often it is sent
        (None: a dispatcher from before the outbox)."""
        if dispatch is not None:
            if dispatch in self.dispatches:
                return
            self.dispatches.add(dispatch)
        self.claims.append(dispatch)
        self.wanted += 1

    @workflow.signal(name="message")
    def message(self, text: str, ref: int) -> None:
        if ref in self.seen:
            return  # the dispatcher says again what it may not have said (after its restart)
        self.seen.add(ref)
        self.messages.append((text, ref))
        if self.holder is not None and self.key is not None:
            self.deliveries.append(workflow.start_activity(
                "errand.deliver", args=[self.key, text, ref], task_queue=self.holder,
                start_to_close_timeout=_QUICK, retry_policy=_ONCE))

    @workflow.signal(name="answer")
    def answer(self, text: str, ref: int) -> None:
        if ref not in self.seen:
            self.seen.add(ref)
            self.answers.append((text, ref))

    @workflow.signal(name="cancel")
    def cancel(self) -> None:
        self.cancelled = True

    # ------------------------------------------------------------ the task

    @workflow.run
    async def run(self, given: RoundInput) -> None:
        done = 0
        await workflow.wait_condition(lambda: self.wanted > 0)
        while True:
            while self.wanted > done:
                done += 1
                await self._round(given, self.claims[done - 1])
            if not self.leftovers:
                return  # no await between the test above and here: a late signal is never lost
            if workflow.patched(ROUND_BEFORE_LEFTOVERS):
                # The next round does not wait for them: a worker that stalled keeps its polls open, and
                # a closing handed to it waits out its timeout (the next round began ~30 s late).
                await workflow.wait_condition(lambda rounds=done: self.wanted > rounds  # type: ignore[misc]
                                              or all(h.done() for h in self.leftovers))
                self.leftovers = [handle for handle in self.leftovers if not _closed(handle)]
                continue
            leftovers, self.leftovers = self.leftovers, []
            for leftover in leftovers:  # what an interrupted round's worker may still have to close
                with contextlib.suppress(ActivityError):
                    await leftover

    async def _round(self, given: RoundInput, claim: int | None = None) -> None:
        self.given = given
        self.cancelled, self.stopping, self.messages, self.holder, self.key = False, False, [], None, None
        heartbeat = timedelta(seconds=given.heartbeat)
        # Starting and concluding make sandboxes and working copies, which on a worker's first task
        # (images, checkouts) can hold its event loop, heartbeats and all, for seconds: a floor.
        patient = max(heartbeat, _PATIENT)
        begun: Begun | None = None
        try:
            if workflow.patched(START_IN_ONE):
                # Beginning and preparing are one activity, on whichever worker has room: each hop between
                # activities costs a round tens of milliseconds, so a round has as few as its steps allow.
                prepared = await self._start(given, max(heartbeat, _START_FLOOR), claim)
                begun = Begun(prepared.task_id, prepared.round, prepared.run_ids, prepared.model, prepared.holder)
            else:  # a workflow whose history began this round under errand's first shape: begin, then prepare
                begun = await self._activity("errand.begin", given.task_id, result_type=Begun,
                                             task_queue=given.begin_queue, heartbeat=heartbeat)
                self.holder, self.key = begun.holder, begun.key
                prepared = await self._activity("errand.prepare", begun, result_type=Prepared,
                                                task_queue=begun.holder, heartbeat=patient)
            self.holder, self.key = prepared.holder, prepared.key
            if not await self._attempts(prepared, heartbeat):  # else the last attempt to end concluded it there
                await self._activity("errand.conclude", prepared, result_type=str, task_queue=prepared.holder,
                                     heartbeat=patient, cancellable=False)
            return  # concluding closed the round too
        except _RoundEnded as ended:
            begun = begun or ended.begun
            if begun is None:
                if ended.how == "interrupted":  # lost before it said which runs it began: the task's running ones
                    await self._settle(given, SettleInput(given.task_id, (), ended.how, ended.reason))
                return
            settled = SettleInput(given.task_id, begun.run_ids, ended.how, ended.reason)
            if ended.how == "interrupted":
                await self._settle(given, settled)
                # Its worker is likelier gone than slow; if only slow, it ends the round's sandboxes
                # and copies now. If gone, it removes them when it comes back.
                self.leftovers.append(self._close_handle(begun, max(heartbeat * 2, timedelta(seconds=30))))
                return
            if ended.how == "cancelled" and workflow.patched(CANCEL_SETTLES_LOST):
                await self._cancelled(given, begun, settled)
                return
            # Its sandboxes end before its runs are marked: a follow-up or retry waits for the marks.
            with contextlib.suppress(ActivityError):  # a worker gone meanwhile tidies up when it is back
                await self._close(begun, max(timedelta(hours=1), timedelta(seconds=given.store_retry)))
            await self._settle(given, settled)
        finally:
            await self._delivered()

    async def _start(self, given: RoundInput, heartbeat: timedelta, claim: int | None) -> Prepared:
        """The round's start on whichever worker has room; one whose heartbeats ran out while its
        worker's lease lives (the service restarted, and lost track of it) is taken up again there."""
        fenced = [claim] if claim is not None and workflow.patched(START_FENCED) else []
        try:
            prepared: Prepared = await self._activity("errand.start", given.task_id, *fenced, result_type=Prepared,
                                                      task_queue=given.begin_queue, heartbeat=heartbeat)
            return prepared
        except _RoundEnded as lost:
            since = workflow.now()
            if lost.silent not in ("heartbeat", "start_to_close") or not workflow.patched(START_REATTACH):
                raise
            # What it said in its heartbeats, or else the store's: a restart of the service can lose the former.
            begun = lost.begun = lost.begun or await self._store_says("errand.begun", [given.task_id], Begun | None)
            if begun is None or not await self._lives(begun.holder):
                raise
        patience = max(heartbeat * 20, timedelta(minutes=10))
        while True:
            try:
                prepared = await self._activity("errand.started", begun, result_type=Prepared,
                                                task_queue=begun.holder, heartbeat=heartbeat,
                                                schedule_to_start=heartbeat)
                return prepared
            except _RoundEnded as again:
                again.begun = begun
                if again.silent is None or workflow.now() - since > patience or not await self._lives(begun.holder):
                    raise

    async def _cancelled(self, given: RoundInput, begun: Begun, settled: SettleInput) -> None:
        """Settle a cancelled round: while its worker lives it closes the round's sandboxes before the
        runs are marked (a retry or follow-up waits for the marks), looked at every lease; once its lease
        has passed (dead, stalled) the runs are marked at once, which fences out whatever it writes on
        waking, and the closing is left to it (a leftover, and its sweep of rounds that ended elsewhere)."""
        heartbeat = timedelta(seconds=given.heartbeat)
        patience = max(heartbeat * 20, timedelta(minutes=10))  # a live worker that never closes is let be
        since = workflow.now()
        closing: Any = None
        while workflow.now() - since <= patience and await self._lives(begun.holder):
            if closing is None:
                closing = self._close_handle(begun, max(timedelta(hours=1), timedelta(seconds=given.store_retry)))
            with contextlib.suppress(asyncio.TimeoutError):
                await workflow.wait_condition(closing.done, timeout=heartbeat)
            if _closed(closing):  # closed, or failed to: a worker gone meanwhile tidies up when it is back
                await self._settle(given, settled)
                return
        await self._settle(given, settled)
        if closing is not None:
            closing.cancel()  # not waited for an hour on a queue no worker may poll again
            closing.add_done_callback(_closed)  # how it ended is let be
        self.leftovers.append(self._close_handle(begun, max(heartbeat * 2, timedelta(seconds=30))))

    async def _close(self, begun: Begun, within: timedelta) -> None:
        await self._close_handle(begun, within)

    def _close_handle(self, begun: Begun, within: timedelta) -> Any:
        return workflow.start_activity("errand.close", args=[begun.key, list(begun.run_ids)], task_queue=begun.holder,
                                       start_to_close_timeout=_QUICK, schedule_to_close_timeout=within,
                                       retry_policy=_STORE_RETRIES)

    async def _attempts(self, prepared: Prepared, heartbeat: timedelta) -> bool:
        """The round's attempts side by side; the first that ends the round stops the others.
        True when the last to end concluded the round on its worker."""
        running = [asyncio.ensure_future(self._attempt(prepared, index, heartbeat))
                   for index in range(len(prepared.run_ids))]
        await workflow.wait(running, return_when=asyncio.FIRST_EXCEPTION)
        if any(attempt.done() and attempt.exception() is not None for attempt in running):
            self.stopping = True
            await workflow.wait(running)
        errors = [error for error in (attempt.exception() for attempt in running) if error is not None]
        if errors:  # the one that ended the round, not the others it stopped
            raise next((e for e in errors if not (isinstance(e, _RoundEnded) and e.how == "cancelled")), errors[0])
        return any(attempt.result() for attempt in running)

    async def _attempt(self, prepared: Prepared, index: int, heartbeat: timedelta) -> bool:
        answer: tuple[str, int] | None = None
        consumed = 0
        reattach = False
        untaken_since = workflow.now()
        while True:
            given = AttemptInput(prepared, index, list(self.messages), answer, reattach)
            # A resumed attempt waits for its worker to come back, but not for ever: then the round
            # is taken for interrupted and begins again elsewhere. One taken up again is looked for
            # on its worker for a while at a time, its lease looked at in between.
            patience = max(heartbeat * 20, timedelta(minutes=10))
            try:
                ended: Attempt = await self._activity(
                    "errand.attempt", given, result_type=Attempt, task_queue=prepared.holder, heartbeat=heartbeat,
                    schedule_to_start=max(heartbeat, _START_FLOOR) if reattach else None if answer is None
                    else patience)
            except _RoundEnded as early:
                taken = early.silent in ("heartbeat", "start_to_close")  # its worker had the attempt, then fell silent
                if taken:
                    untaken_since = workflow.now()
                if not (taken or (reattach and early.silent == "schedule_to_start")) \
                        or workflow.now() - untaken_since > patience or not workflow.patched(REATTACH) \
                        or not await self._lives(prepared.holder):
                    raise
                reattach = True  # its worker lives: the attempt runs there still, the service lost track of it
                continue
            reattach = False
            if ended.status != "waiting":
                return ended.status == CONCLUDED
            await workflow.wait_condition(lambda seen=consumed: len(self.answers) > seen or self.cancelled  # type: ignore[misc]
                                          or self.stopping)
            if self.cancelled or self.stopping:
                raise _RoundEnded("cancelled")
            answer, consumed = self.answers[consumed], consumed + 1

    async def _activity(self, name: str, *arguments: Any, result_type: type[Any], task_queue: str,
                        heartbeat: timedelta, cancellable: bool = True,
                        schedule_to_start: timedelta | None = None) -> Any:
        """Run one of the round's activities; a cancel (while ``cancellable``) stops it."""
        if (self.cancelled or self.stopping) and cancellable:
            raise _RoundEnded("cancelled")
        handle = workflow.start_activity(name, args=list(arguments), result_type=result_type, task_queue=task_queue,
                                         start_to_close_timeout=_LONG, heartbeat_timeout=heartbeat,
                                         schedule_to_start_timeout=schedule_to_start, retry_policy=_ONCE,
                                         cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        waiting = asyncio.ensure_future(workflow.wait_condition(
            lambda: (self.cancelled or self.stopping) and cancellable))
        try:
            await workflow.wait([handle, waiting], return_when=asyncio.FIRST_COMPLETED)
            if not handle.done():
                handle.cancel()
            try:
                return await handle
            except ActivityError as error:
                raise _ended(error, self.cancelled) from error
            except asyncio.CancelledError:
                raise _RoundEnded("cancelled") from None
        finally:
            waiting.cancel()

    async def _lives(self, holder: str) -> bool:
        """Whether the worker ``holder`` lives by its lease in the store (a local activity: no
        task of a queue that a silent worker may have a poll open on)."""
        assert self.given is not None
        # The store away longer than its retry time: its runs are settled as for a lost worker.
        return bool(await self._store_says("errand.lives", [holder, self.given.heartbeat], bool))

    async def _store_says(self, name: str, args: list[Any], result_type: Any) -> Any:
        """What the store-only local activity ``name`` answers; None if the store stays away past its retry time."""
        assert self.given is not None
        within = max(timedelta(seconds=self.given.heartbeat * 3), _STORE_STEP_FLOOR)
        try:
            return await workflow.execute_local_activity(
                name, args=args, result_type=result_type, start_to_close_timeout=within, retry_policy=_STORE_RETRIES,
                schedule_to_close_timeout=within + timedelta(seconds=self.given.store_retry))
        except ActivityError:
            return None

    async def _settle(self, given: RoundInput, settled: SettleInput) -> None:
        step = max(timedelta(seconds=given.heartbeat), _STORE_STEP_FLOOR)
        await workflow.execute_activity("errand.settle", settled, task_queue=given.tasks_queue,
                                        start_to_close_timeout=step, retry_policy=_STORE_RETRIES,
                                        schedule_to_close_timeout=timedelta(seconds=given.store_retry))

    async def _delivered(self) -> None:
        for delivery in self.deliveries:
            try:
                await delivery
            except ActivityError:
                pass  # a message a dead worker never delivered is in the next attempt's input
        self.deliveries = []


def _closed(handle: Any) -> bool:
    """Whether a leftover closing is over (how it ended is the worker's business: an error is let be)."""
    if handle.done() and not handle.cancelled():
        handle.exception()
    return bool(handle.done())


def _ended(error: ActivityError, cancelled: bool) -> _RoundEnded:
    cause = error.cause
    begun = _begun_in(cause)
    if isinstance(cause, CancelledError) or cancelled or (isinstance(cause, ApplicationError)
                                                          and cause.type == ROUND_CANCELLED):
        return _RoundEnded("cancelled", begun=begun)
    if isinstance(cause, ActivityTimeout):
        which = cause.type.name.lower() if cause.type else "timeout"
        return _RoundEnded("interrupted", f"the worker running {error.activity_type} stopped answering ({which})",
                           begun, silent=which)
    if isinstance(cause, ApplicationError) and cause.type == WORKER_STOPPED:
        return _RoundEnded("interrupted", f"the worker running {error.activity_type} was stopped", begun)
    if isinstance(cause, ApplicationError) and cause.type == RUN_LOST:
        return _RoundEnded("interrupted", cause.message, begun)
    if isinstance(cause, ApplicationError) and cause.type == START_STALE:  # nothing began, nothing to settle
        return _RoundEnded("stale", cause.message)
    if isinstance(cause, ApplicationError) and cause.type == ROUND_FAILED:
        return _RoundEnded("failed_already", cause.message, begun)
    return _RoundEnded("failed", str(cause or error), begun)


def _begun_in(cause: BaseException | None) -> Begun | None:
    """What the starting activity began, from its last heartbeat or its error's details."""
    details = (cause.last_heartbeat_details if isinstance(cause, ActivityTimeout)
               else cause.details if isinstance(cause, ApplicationError) else ())
    said = details[0] if details else None
    if not isinstance(said, dict) or "run_ids" not in said:
        return None
    return Begun(said["task_id"], said["round"], tuple(said["run_ids"]), said["model"], said["holder"])
