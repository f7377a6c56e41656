"""The Temporal engine's part in ``errand serve --engine temporal``: from the store to workflows.

People act on tasks only through the store (:class:`~errand.tasks.service.TaskService`
writes a message, an answer, a cancellation, a follow-up's requeue there, whichever
engine runs). The dispatcher turns that into Temporal: it claims each queued task
(compare-and-set, as a local engine would) and writes its round into the store's outbox
(:mod:`.outbox`) in the same transaction, then sends every round of the outbox — the
workflow's ``round`` signal, starting the workflow if it is not running — until the
service acknowledges it, however long the service is away. It reads the control events
of every task in one query and sends them on as signals. It looks again ``poll_interval``
after each look; on PostgreSQL only once the store's notifications say a task changed (or
``notified_poll`` passed: what a lost notification costs), so an idle dispatcher does
not read the store twenty times a second. Once connected, it runs the workflows themselves
beside it (:mod:`.conductor`).

Saying a control or a round twice is harmless (the workflow knows each by its event id or
its dispatch's), so on start the dispatcher says again the controls of each active task's
last round, and writes a round for any task claimed whose workflow is not running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from sqlalchemy.exc import SQLAlchemyError
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from errand.tasks.engines.lease import TEMPORAL_PREFIX, new_worker_id, temporal_lease
from errand.tasks.engines.temporal import WORKFLOW, TemporalSettings
from errand.tasks.engines.temporal.conductor import Conductor
from errand.tasks.engines.temporal.outbox import Dispatch, Outbox
from errand.tasks.engines.temporal.workflow import RoundInput
from errand.tasks.events import FORWARDED_KINDS, text_of
from errand.tasks.lifecycle import ACTIVE, TaskState
from errand.tasks.records import Event
from errand.tasks.store import changes
from errand.tasks.store.tasks import TaskStore

__all__ = ["Dispatcher", "workflow_step"]

log = logging.getLogger("errand.engine")
#: The longest wait between two tries while the Temporal service or the store is away, seconds.
_BACKOFF_CEILING = 5.0
#: Where the database notifies, the longest wait for a notification before looking anyway, seconds.
NOTIFIED_POLL = 2.0
#: The wait before looking again when the last look left work (a signal to try again, a full page), seconds.
_AGAIN = 0.5
#: The most rounds, or control events, one look reads.
_PAGE = 1000


class Dispatcher:
    """Hands the store's queued tasks and people's controls to the Temporal service."""

    def __init__(self, store: TaskStore, settings: TemporalSettings, *, poll_interval: float = 0.05,
                 notified_poll: float = NOTIFIED_POLL) -> None:
        self.store = store.patient(settings.store_retry)
        self.settings = settings
        self.poll_interval = poll_interval
        self.notified_poll = notified_poll
        self.worker = f"{TEMPORAL_PREFIX}{new_worker_id()}"
        self.outbox = Outbox(self.store)
        self._after = 0
        self._unsent: list[Event] = []
        self._client: Client | None = None
        self._caught_up = False
        self.conductor = Conductor(self.store, settings)
        self._conducting: asyncio.Task[None] | None = None
        self._ended = asyncio.Event()

    async def serve(self, *, stop: asyncio.Event | None = None, exit_when_idle: float | None = None,
                    ready: Callable[[], None] | None = None) -> None:
        """Dispatch until ``stop`` is set (``exit_when_idle`` is not for a dispatcher: it waits for work).
        ``ready`` is called once it holds its lease, before the service answers: the rounds claimed
        meanwhile wait in the outbox."""
        stop = stop or asyncio.Event()
        try:
            await self._dispatch(stop, ready)
        finally:
            self._ended.set()  # the workflows' worker stops with the dispatcher, however that ends
            if self._conducting is not None:
                await self._conducting

    async def _dispatch(self, stop: asyncio.Event, ready: Callable[[], None] | None) -> None:
        async with temporal_lease(self.store, self.worker, self.settings.heartbeat), self._woken() as woken:
            if ready is not None:
                ready()
            self._after = await asyncio.to_thread(self.store.last_forwarded_id)
            backoff = 0.0
            while not stop.is_set():
                if woken is not None:
                    woken.clear()  # a change from here on is looked at next time
                left = False  # work the look left for the next one, which no notification will announce
                try:
                    # Claiming needs only the store: a task submitted while the service is away is
                    # claimed, and its round waits in the outbox, before any connection is made.
                    await self._claim()
                    if await self._connected():
                        if not self._caught_up:
                            await self._catch_up()
                        left = await self._send()
                        left = await self._forward() or left
                        backoff = 0.0
                    else:
                        backoff = min(max(backoff * 2, 0.5), _BACKOFF_CEILING)
                except (RPCError, SQLAlchemyError) as error:  # away: try again, nothing is lost from the store
                    backoff = min(max(backoff * 2, 0.5), _BACKOFF_CEILING)
                    log.warning("the %s did not answer (%s); trying again in %g s",
                                "Temporal service" if isinstance(error, RPCError) else "store", error, backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(self.poll_interval, backoff))
                if woken is not None and not backoff:
                    await _first(stop, woken, _AGAIN if left else self.notified_poll)

    @contextlib.asynccontextmanager
    async def _woken(self) -> AsyncIterator[asyncio.Event | None]:
        """Set whenever a task changes, where the database says so (None where it cannot)."""
        if not changes.supported(self.store.engine):
            yield None
            return
        woken = asyncio.Event()
        listener = changes.TaskChanges(self.store.engine)
        listener.subscribe_all(woken.set)
        try:
            await listener.start()  # listening before the first look: nothing slips between
            yield woken
        finally:
            await listener.close()

    async def _connected(self) -> bool:
        """Connect to the service if not yet connected; False while it does not answer."""
        if self._client is not None:
            return True
        try:
            self._client = await Client.connect(self.settings.address, namespace=self.settings.namespace)
        except (RuntimeError, RPCError) as error:
            log.warning("cannot reach the Temporal service at %s (%s); rounds wait in the store's outbox",
                        self.settings.address, error)
            return False
        self._conducting = asyncio.create_task(self.conductor.serve(self._ended))
        return True

    async def _claim(self) -> None:
        while await asyncio.to_thread(self.outbox.claim, self.worker) is not None:
            pass

    async def _send(self) -> bool:
        """Send the outbox's rounds, oldest first, each until the service acknowledges it; True when
        there may be more than one look read."""
        pending = await asyncio.to_thread(self.outbox.pending, _PAGE)
        for dispatch in pending:
            try:
                await self._start_round(dispatch)
            except RPCError as error:
                await asyncio.to_thread(self.outbox.unanswered, dispatch, error)
                raise
            await asyncio.to_thread(self.outbox.acknowledged, dispatch)
        return len(pending) >= _PAGE

    async def _start_round(self, dispatch: Dispatch) -> None:
        assert self._client is not None
        settings = self.settings
        await self._client.start_workflow(
            WORKFLOW, RoundInput(dispatch.task_id, settings.heartbeat, settings.begin_queue, settings.tasks_queue,
                                 settings.store_retry),
            id=settings.workflow_id(dispatch.task_id), task_queue=settings.tasks_queue, start_signal="round",
            start_signal_args=[dispatch.id], task_timeout=workflow_step(settings.heartbeat))

    async def _forward(self) -> bool:
        """Send what people sent since the last look; what could not be sent yet is tried again
        next time (in order, per task), without holding up the other tasks'. True when something
        is left: a signal to try again, or more than one look read."""
        read = await asyncio.to_thread(self.store.events_since, self._after, FORWARDED_KINDS, _PAGE)
        events = [*self._unsent, *read]
        self._unsent = []
        for event in events:
            self._after = max(self._after, event.id)
            if any(unsent.task_id == event.task_id for unsent in self._unsent):
                self._unsent.append(event)  # after an earlier one of its task that waits
                continue
            try:
                await self._signal(event)
            except RPCError as error:
                log.warning("could not signal task %s's workflow yet (%s); trying again", event.task_id, error)
                self._unsent.append(event)
        return bool(self._unsent) or len(read) >= _PAGE

    async def _signal(self, event: Event) -> None:
        assert self._client is not None
        workflow = self.settings.workflow_id(event.task_id)
        handle: WorkflowHandle[object, object] = self._client.get_workflow_handle(workflow)
        try:
            if event.kind == "cancelled":
                await handle.signal("cancel")
            elif event.kind == "message_sent":
                await handle.signal("message", args=[text_of(event), event.id])
            else:
                await handle.signal("answer", args=[text_of(event), event.id])
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
            task = await asyncio.to_thread(self.store.get_task, event.task_id)
            if task.state in ACTIVE and task.state is not TaskState.PREPARING:
                raise  # its workflow must exist (a service just restarted may not know it yet): again later
            # No workflow runs for the task: what a queued task was sent reaches its round's prompt.

    async def _catch_up(self) -> None:
        """After a restart: a round for every task claimed whose workflow is not running and has
        none in the outbox, and the last round's controls again to each running workflow."""
        assert self._client is not None
        waiting = {dispatch.task_id for dispatch in await asyncio.to_thread(self.outbox.pending)}
        for state in sorted(ACTIVE):
            for task in await asyncio.to_thread(self.store.list_tasks, state=state, limit=100_000):
                if not await self._running(task.id):
                    if state is TaskState.PREPARING and task.id not in waiting:
                        await asyncio.to_thread(self.outbox.add, task.id)
                    continue
                began = await asyncio.to_thread(self.store.last_event, task.id, ["round_started"])
                for event in await asyncio.to_thread(self.store.events, task.id, began.id if began else 0,
                                                     kinds=list(FORWARDED_KINDS)):
                    await self._signal(event)
        self._caught_up = True

    async def _running(self, task_id: str) -> bool:
        assert self._client is not None
        try:
            described = await self._client.get_workflow_handle(self.settings.workflow_id(task_id)).describe()
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise  # the service is away: it cannot say yet
            return False
        return described.status is not None and described.status.name == "RUNNING"


def workflow_step(lease: float) -> timedelta:
    """How long an ``errand serve`` may hold a workflow task: one handed to a process that stalled with
    a poll open goes elsewhere after this (round workers poll for none: see :mod:`.conductor`)."""
    return timedelta(seconds=min(max(lease, 3.0), 10.0))


async def _first(stop: asyncio.Event, woken: asyncio.Event, seconds: float) -> None:
    """Wait until ``stop`` or ``woken`` is set, or ``seconds`` have passed."""
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(woken.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
