"""Live task events for many watchers: one store reader per watched task, fanned out.

A watcher names the last event id it has (``Last-Event-ID``, or 0) and gets
every later event of the task, in order, with none missed and none twice:
first from the store (catching up), then from the task's :class:`Feed`, a
bounded window of recent events that a single poller keeps filled. Five
hundred watchers of one busy task cost one query per poll, not five hundred.
On PostgreSQL the poller reads when the database says the task changed
(LISTEN/NOTIFY, :mod:`errand.tasks.store.changes`), whichever process changed it,
and polls only slowly as a fallback.

Event ids are the store's ids, so a reconnecting client resumes exactly where
it stopped, even across a server restart.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import asdict

from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event
from errand.tasks.store import changes
from errand.tasks.store.tasks import TaskStore

__all__ = ["TICK", "Feed", "Hub", "Tick", "sse_comment", "sse_frame"]

log = logging.getLogger("errand.server")
WINDOW = 5000  # events a feed keeps; a watcher further behind reads the store
PAGE = 500
KEEPALIVE = 15.0
NOTIFIED_POLL = 5.0  # the fallback poll of a feed the database notifies: what a lost notification costs


class Tick:
    """What a watch yields when it woke without a new event: the task's state may have
    changed, or it is time for a keepalive."""


TICK = Tick()


def sse_frame(event_id: int, kind: str, data: str) -> bytes:
    """One server-sent event; a multi-line ``data`` is split over several ``data:`` lines."""
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"id: {event_id}\nevent: {kind}\n{lines}\n".encode()


def sse_comment(text: str) -> bytes:
    return f": {text}\n\n".encode()


def json_frame(event: Event) -> bytes:
    return sse_frame(event.id, event.kind, json.dumps(asdict(event), separators=(",", ":")))


class Feed:
    """The recent events of one task: every event with ``floor < id <= cursor`` is in ``events``."""

    def __init__(self, store: TaskStore, task_id: str, after: int, poll_interval: float) -> None:
        self.store = store
        self.task_id = task_id
        self.floor = after
        self.cursor = after
        self.events: list[Event] = []
        self.ids: list[int] = []
        self.frames: dict[int, bytes] = {}
        self.watchers = 0
        self.state: TaskState | None = None
        self.poll_interval = poll_interval
        self._changed = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """The task changed: read the store now instead of at the next poll."""
        self._wake.set()

    def since(self, after: int) -> list[Event]:
        return self.events[bisect.bisect_right(self.ids, after):]

    def frame(self, event: Event) -> bytes:
        """The event as JSON in an SSE frame, encoded once however many watch. Only events in the
        window are kept (it evicts them as they leave); catch-up reads of older ones are not."""
        frame = self.frames.get(event.id)
        if frame is None:
            frame = json_frame(event)
            if event.id > self.floor:
                self.frames[event.id] = frame
        return frame

    def changed(self) -> asyncio.Event:
        return self._changed

    def start(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name=f"errand-feed-{self.task_id}")

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    async def _poll(self) -> None:
        while True:
            try:
                state = (await asyncio.to_thread(self.store.get_task, self.task_id)).state
                batch = await asyncio.to_thread(self.store.events, self.task_id, self.cursor, PAGE)
            except Exception:  # a store hiccup must not end every watcher's stream
                log.exception("reading the events of task %s failed; retrying", self.task_id)
                await asyncio.sleep(1.0)
                continue
            if batch:
                self._append(batch)
            if state is not self.state:
                self.state = state
                self._notify()
            if len(batch) < PAGE:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval)
                self._wake.clear()

    def _append(self, batch: list[Event]) -> None:
        self.events.extend(batch)
        self.ids.extend(e.id for e in batch)
        self.cursor = batch[-1].id
        if len(self.events) > WINDOW:
            dropped = self.events[:-WINDOW]
            del self.events[:-WINDOW]
            del self.ids[:-WINDOW]
            self.floor = dropped[-1].id
            for event in dropped:
                self.frames.pop(event.id, None)
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


class Hub:
    """The feeds of the tasks being watched; a feed lives while someone watches it."""

    def __init__(self, store: TaskStore, poll_interval: float = 0.1, *,
                 notified_poll: float = NOTIFIED_POLL) -> None:
        """``poll_interval``: how often a feed reads the store; where the database notifies
        changes (PostgreSQL), ``notified_poll`` instead, since it reads on each notification."""
        self.store = store
        self.changes = changes.TaskChanges(store.engine) if changes.supported(store.engine) else None
        self.poll_interval = poll_interval if self.changes is None else notified_poll
        self.feeds: dict[str, Feed] = {}

    async def watch(self, task_id: str, after: int, *, keepalive: float = KEEPALIVE
                    ) -> AsyncIterator[list[Event] | Tick]:
        """Every event of the task after ``after``, in order, in batches as they come;
        :data:`TICK` when the task's state changed or nothing came for ``keepalive`` seconds."""
        feed = self.feeds.get(task_id)
        if feed is None:
            feed = self.feeds[task_id] = Feed(self.store, task_id, after, self.poll_interval)
        feed.watchers += 1
        unsubscribe = self.changes.subscribe(task_id, feed.wake) if self.changes is not None else None
        try:
            if self.changes is not None:
                await self.changes.start()  # listening before the feed's first read: nothing slips between
            feed.start()
            async for batch in self._follow(feed, after, keepalive):
                yield batch
        finally:
            feed.watchers -= 1
            if unsubscribe is not None:
                unsubscribe()
            if feed.watchers == 0 and self.feeds.get(task_id) is feed:
                del self.feeds[task_id]
                await feed.stop()

    async def _follow(self, feed: Feed, after: int, keepalive: float) -> AsyncIterator[list[Event] | Tick]:
        while True:
            if after < feed.floor:
                batch = await asyncio.to_thread(self.store.events, feed.task_id, after, PAGE)
                batch = [event for event in batch if event.id <= feed.floor]
                if batch:
                    yield batch
                after = batch[-1].id if batch else feed.floor
                continue
            changed = feed.changed()  # taken before reading: an append after this wakes us
            fresh = feed.since(after)
            if fresh:
                yield fresh
                after = fresh[-1].id
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), keepalive)
            if not feed.since(after):
                yield TICK

    async def close(self) -> None:
        for feed in list(self.feeds.values()):
            await feed.stop()
        self.feeds.clear()
        if self.changes is not None:
            await self.changes.close()
