"""The Temporal dispatcher on PostgreSQL looks at the store when the database says a task
changed, not twenty times a second: an idle one reads nothing, and a task submitted to it is
dispatched on word of it alone (its fallback look is an hour away here)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from errand.tasks.engines.temporal import TemporalSettings
from errand.tasks.engines.temporal.dispatch import Dispatcher
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.tasks import TaskStore
from polling import settled
from temporal import TemporalServer


@pytest.mark.slow
async def test_an_idle_dispatcher_reads_nothing_until_a_task_changes(
        postgres_url: str, temporal_server: TemporalServer, temporal_queue: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_TEMPORAL", temporal_server.address)
    looks: list[str] = []

    def seen(_connection: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if "FROM dispatches" in statement:  # the outbox, read on every look once connected
            looks.append(statement)

    with TaskStore.open(postgres_url) as store:
        sa.event.listen(store.engine, "before_cursor_execute", seen)
        dispatcher = Dispatcher(store, TemporalSettings.from_environment(), poll_interval=0.01, notified_poll=3600)
        stop = asyncio.Event()
        serving = asyncio.create_task(dispatcher.serve(stop=stop))
        try:
            # Connected and caught up: it has looked at the outbox at least once.
            assert await asyncio.to_thread(settled, lambda: looks, 120), "the dispatcher never looked"
            before = len(looks)
            await asyncio.sleep(1.0)  # polling every 10 ms would look ~100 times meanwhile
            # One more look at most: the first pass may still have been under way.
            assert len(looks) - before <= 1, f"an idle dispatcher looked {len(looks) - before} times in a second"

            task = await asyncio.to_thread(store.create_task, title="t", instruction="i", repo="/r")
            claimed = await asyncio.to_thread(
                settled, lambda: store.get_task(task.id).state is not TaskState.QUEUED, 120)
            assert claimed, "the submitted task was never claimed: word of it did not wake the dispatcher"
        finally:
            stop.set()
            await asyncio.wait_for(serving, 60)
