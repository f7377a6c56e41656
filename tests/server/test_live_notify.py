"""Live events across processes on PostgreSQL: the database says when a task changed
(LISTEN/NOTIFY), so a watcher sees another process's event without the feed polling."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from errand.server.live import Hub, Tick
from errand.tasks.store.tasks import TaskStore

pytestmark = pytest.mark.slow

APPEND = "import sys; from errand.tasks.store.tasks import TaskStore; " \
         "TaskStore.open(sys.argv[1]).append_event(sys.argv[2], None, 'output', {'text': 'from afar'})"
MOVE = "import sys; from errand.tasks.store.tasks import TaskStore; " \
       "TaskStore.open(sys.argv[1]).set_state(sys.argv[2], 'cancelled')"


async def next_events(watch: object) -> list[str]:
    async for batch in watch:  # type: ignore[attr-defined]
        if not isinstance(batch, Tick):
            return [str(event.data["text"]) for event in batch]
    return []


async def watching(store: TaskStore) -> tuple[Hub, str, Any]:
    """A hub whose feeds would poll once an hour (only a notification brings a change in time),
    watching a task that has one event, seen."""
    task = store.create_task(title="t", instruction="i", repo="/r")
    store.append_event(task.id, None, "output", {"text": "before"})
    hub = Hub(store, poll_interval=3600, notified_poll=3600)
    watch = hub.watch(task.id, 0, keepalive=3600)
    assert await asyncio.wait_for(next_events(watch), 30) == ["before"]
    return hub, task.id, watch


async def test_an_event_another_process_writes_reaches_a_watcher_without_polling(postgres_url: str) -> None:
    with TaskStore.open(postgres_url) as store:
        hub, task_id, watch = await watching(store)
        subprocess.run([sys.executable, "-c", APPEND, postgres_url, task_id], check=True)
        assert await asyncio.wait_for(next_events(watch), 30) == ["from afar"]
        await watch.aclose()  # type: ignore[attr-defined]
        await hub.close()


async def test_a_state_change_elsewhere_wakes_the_watcher(postgres_url: str) -> None:
    with TaskStore.open(postgres_url) as store:
        hub, task_id, watch = await watching(store)
        subprocess.run([sys.executable, "-c", MOVE, postgres_url, task_id], check=True)
        tick = await asyncio.wait_for(anext(watch), 30)  # type: ignore[call-overload]
        assert isinstance(tick, Tick) and hub.feeds[task_id].state is not None
        assert hub.feeds[task_id].state.value == "cancelled"
        await watch.aclose()  # type: ignore[attr-defined]
        await hub.close()
