"""The Temporal engine's part in ``errand serve --engine temporal``: from the store to workflows.

People act on tasks only through the store (:class:`~errand.tasks.service.TaskService`
writes a message, an answer, a cancellation, a follow-up's requeue there, whichever
engine runs). The dispatcher turns that into Temporal: it claims each queued task
(compare-and-set, as a local engine would) and signals its workflow to run a round,
starting it if it is not running; it reads the control events of every task in one
query and sends them on as signals. On PostgreSQL it is woken by the store's
notifications, on SQLite it polls.

Saying a control twice is harmless (the workflow knows each by its event id), so on
start the dispatcher says again the controls of each active task's last round, and
starts the workflow of any active task that has none running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from errand.tasks.engine_lease import TEMPORAL_PREFIX, temporal_lease
from errand.tasks.events import CONTROL_KINDS
from errand.tasks.lifecycle import ACTIVE, TaskState
from errand.tasks.records import Event
from errand.tasks.store import TaskStore
from errand.tasks.temporal import WORKFLOW, TemporalSettings
from errand.tasks.temporal.workflow import RoundInput

__all__ = ["Dispatcher"]

log = logging.getLogger("errand.engine")
_FORWARDED = (*CONTROL_KINDS, "cancelled")


class Dispatcher:
    """Hands the store's queued tasks and people's controls to the Temporal service."""

    def __init__(self, store: TaskStore, settings: TemporalSettings, *, poll_interval: float = 0.05) -> None:
        self.store = store
        self.settings = settings
        self.poll_interval = poll_interval
        self.worker = f"{TEMPORAL_PREFIX}{socket.gethostname()}:{os.getpid()}"
        self._after = 0
        self._unsent: list[Event] = []
        self._client: Client | None = None

    async def serve(self, *, stop: asyncio.Event | None = None, exit_when_idle: float | None = None,
                    ready: Callable[[], None] | None = None) -> None:
        """Dispatch until ``stop`` is set (``exit_when_idle`` is not for a dispatcher: it waits for work)."""
        stop = stop or asyncio.Event()
        async with temporal_lease(self.store, self.worker, self.settings.heartbeat):
            self._client = await Client.connect(self.settings.address, namespace=self.settings.namespace)
            if ready is not None:
                ready()
            self._after = await asyncio.to_thread(self.store.last_event_id)
            await self._catch_up()
            while not stop.is_set():
                try:
                    await self._claim()
                    await self._forward()
                except RPCError as error:  # the service is away: try again, nothing is lost from the store
                    log.warning("the Temporal service did not answer (%s); trying again", error)
                    await asyncio.sleep(1.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.poll_interval)

    async def _claim(self) -> None:
        while (task := await asyncio.to_thread(self.store.claim_next, self.worker)) is not None:
            await self._start_round(task.id)

    async def _start_round(self, task_id: str) -> None:
        assert self._client is not None
        settings = self.settings
        await self._client.start_workflow(
            WORKFLOW, RoundInput(task_id, settings.heartbeat, settings.begin_queue, settings.tasks_queue),
            id=settings.workflow_id(task_id), task_queue=settings.tasks_queue, start_signal="round")

    async def _forward(self) -> None:
        """Send what people sent since the last look; what could not be sent yet is tried again
        next time (in order, per task), without holding up the other tasks'."""
        events = [*self._unsent, *await asyncio.to_thread(self.store.events_since, self._after, _FORWARDED)]
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

    async def _signal(self, event: Event) -> None:
        assert self._client is not None
        workflow = self.settings.workflow_id(event.task_id)
        handle: WorkflowHandle[object, object] = self._client.get_workflow_handle(workflow)
        data = event.data if isinstance(event.data, dict) else {}
        try:
            if event.kind == "cancelled":
                await handle.signal("cancel")
            elif event.kind == "message_sent":
                await handle.signal("message", args=[str(data.get("text", "")), event.id])
            else:
                await handle.signal("answer", args=[str(data.get("text", "")), event.id])
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
            task = await asyncio.to_thread(self.store.get_task, event.task_id)
            if task.state in ACTIVE and task.state is not TaskState.PREPARING:
                raise  # its workflow must exist (a service just restarted may not know it yet): again later
            # No workflow runs for the task: what a queued task was sent reaches its round's prompt.

    async def _catch_up(self) -> None:
        """After a restart: a workflow for every active task, and its last round's controls again."""
        assert self._client is not None
        for state in sorted(ACTIVE):
            for task in await asyncio.to_thread(self.store.list_tasks, state=state, limit=100_000):
                if not await self._running(task.id):
                    if state is TaskState.PREPARING:
                        await self._start_round(task.id)
                    continue
                began = await asyncio.to_thread(self.store.last_event, task.id, ["round_started"])
                for event in await asyncio.to_thread(self.store.events, task.id, began.id if began else 0,
                                                     kinds=list(_FORWARDED)):
                    await self._signal(event)

    async def _running(self, task_id: str) -> bool:
        assert self._client is not None
        try:
            described = await self._client.get_workflow_handle(self.settings.workflow_id(task_id)).describe()
        except RPCError:
            return False
        return described.status is not None and described.status.name == "RUNNING"
