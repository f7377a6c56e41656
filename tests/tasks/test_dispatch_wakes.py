"""The Temporal dispatcher on PostgreSQL looks at the store when the database says a task
changed, not twenty times a second: an idle one reads nothing, and a task submitted to it is
dispatched on word of it alone. Its fallback look is an hour away here, so each test below
fails by waiting if a change goes unheard: one made while its listening connection is being
made again, a signal that failed once, a backlog longer than one look reads."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from temporalio.service import RPCError, RPCStatusCode

from errand.tasks.engines.temporal import TemporalSettings
from errand.tasks.engines.temporal.dispatch import Dispatcher
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event
from errand.tasks.store.tasks import TaskStore, insert_event
from polling import settled
from temporal import TemporalServer

pytestmark = pytest.mark.slow


@pytest.fixture
def settings(temporal_server: TemporalServer, temporal_queue: str, monkeypatch: pytest.MonkeyPatch) -> TemporalSettings:
    monkeypatch.setenv("ERRAND_TEMPORAL", temporal_server.address)
    return TemporalSettings.from_environment()


def outbox_looks(store: TaskStore) -> list[str]:
    """Each read of the outbox from now on: the dispatcher reads it on every look once connected."""
    looks: list[str] = []

    def seen(_connection: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if "FROM dispatches" in statement:
            looks.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    return looks


@contextlib.asynccontextmanager
async def dispatching(store: TaskStore, settings: TemporalSettings) -> AsyncIterator[list[str]]:
    """A dispatcher that looks again 10 ms after a look, and an hour after one without word of a change,
    running once it has looked (connected and caught up); yields its looks at the outbox."""
    looks = outbox_looks(store)
    dispatcher = Dispatcher(store, settings, poll_interval=0.01, notified_poll=3600)
    stop = asyncio.Event()
    serving = asyncio.create_task(dispatcher.serve(stop=stop))
    try:
        assert await asyncio.to_thread(settled, lambda: looks, 120), "the dispatcher never looked"
        yield looks
    finally:
        stop.set()
        await asyncio.wait_for(serving, 60)


def _as_listener_owner(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _listening_connections(url: str) -> list[int]:
    with psycopg.connect(_as_listener_owner(url), autocommit=True) as connection:
        rows = connection.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                  "AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()").fetchall()
    return [row[0] for row in rows]


def _cut(url: str, pid: int) -> None:
    with psycopg.connect(_as_listener_owner(url), autocommit=True) as connection:
        connection.execute("SELECT pg_terminate_backend(%s)", [pid])


async def test_an_idle_dispatcher_reads_nothing_until_a_task_changes(
        postgres_url: str, settings: TemporalSettings) -> None:
    with TaskStore.open(postgres_url) as store:
        async with dispatching(store, settings) as looks:
            before = len(looks)
            await asyncio.sleep(1.0)  # polling every 10 ms would look ~100 times meanwhile
            # One more look at most: the first pass may still have been under way.
            assert len(looks) - before <= 1, f"an idle dispatcher looked {len(looks) - before} times in a second"

            task = await asyncio.to_thread(store.create_task, title="t", instruction="i", repo="/r")
            claimed = await asyncio.to_thread(
                settled, lambda: store.get_task(task.id).state is not TaskState.QUEUED, 120)
            assert claimed, "the submitted task was never claimed: word of it did not wake the dispatcher"


async def test_a_task_submitted_while_the_listening_connection_is_made_again_is_dispatched(
        postgres_url: str, settings: TemporalSettings) -> None:
    with TaskStore.open(postgres_url) as store:
        async with dispatching(store, settings):
            [listener] = await asyncio.to_thread(_listening_connections, postgres_url)
            await asyncio.to_thread(_cut, postgres_url, listener)
            # Before it listens again (it waits a second): this change's word reaches nobody.
            await asyncio.to_thread(settled, lambda: not _listening_connections(postgres_url), 5)
            task = await asyncio.to_thread(store.create_task, title="t", instruction="i", repo="/r")
            claimed = await asyncio.to_thread(
                settled, lambda: store.get_task(task.id).state is not TaskState.QUEUED, 60)
            assert claimed, "a task submitted while the dispatcher's listener reconnected was never dispatched"
            assert store.get_task(task.id).state is TaskState.PREPARING


async def test_a_signal_refused_is_tried_again_without_word_of_another_change(
        postgres_url: str, settings: TemporalSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    tries: list[int] = []

    async def twice_refused(_self: Dispatcher, event: Event) -> None:
        tries.append(event.id)
        if len(tries) <= 2:
            raise RPCError("the service is away", RPCStatusCode.UNAVAILABLE, b"")

    monkeypatch.setattr(Dispatcher, "_signal", twice_refused)
    with TaskStore.open(postgres_url) as store:
        task = store.create_task(title="t", instruction="i", repo="/r")
        store.set_state(task.id, TaskState.CANCELLED)  # never claimed: only its controls matter here
        async with dispatching(store, settings):
            # Refused twice: the change's word may come while the dispatcher's first look is still
            # under way, which gives it one more look; a third try needs none.
            sent = await asyncio.to_thread(store.append_event, task.id, None, "message_sent", {"text": "hi"})
            assert await asyncio.to_thread(settled, lambda: len(tries) >= 3, 60), f"tried {len(tries)} times only"
            assert tries[:3] == [sent, sent, sent]


async def test_a_backlog_longer_than_one_look_reads_is_forwarded_whole(
        postgres_url: str, settings: TemporalSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[int] = []

    async def record(_self: Dispatcher, event: Event) -> None:
        sent.append(event.id)

    monkeypatch.setattr(Dispatcher, "_signal", record)
    with TaskStore.open(postgres_url) as store:
        task = store.create_task(title="t", instruction="i", repo="/r")
        store.set_state(task.id, TaskState.CANCELLED)
        async with dispatching(store, settings):
            def backlog() -> list[int]:
                with store._write() as connection:  # one transaction: one word of it
                    return [insert_event(connection, task.id, None, "message_sent", {"text": f"m{n}"})
                            for n in range(1500)]

            written = await asyncio.to_thread(backlog)
            assert await asyncio.to_thread(settled, lambda: len(sent) >= 1500, 60), \
                f"forwarded {len(sent)} of 1,500 control events"
            assert sent == written
