"""Live events: many watchers of one task share one store reader, and each gets every
event once, in order, whether it starts from the beginning or resumes from an id."""

from __future__ import annotations

import asyncio
from pathlib import Path

from errand.server.live import Hub, Tick
from errand.tasks.store.tasks import TaskStore


async def collect(hub: Hub, task_id: str, after: int, count: int) -> list[int]:
    seen: list[int] = []
    async for batch in hub.watch(task_id, after, keepalive=0.05):
        if not isinstance(batch, Tick):
            seen += [event.id for event in batch]
        if len(seen) >= count:
            return seen
    return seen


async def test_every_watcher_gets_every_event_once_in_order(tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        task = store.create_task(title="t", instruction="i", repo="/r")
        early = [store.append_event(task.id, None, "output", {"text": str(n)}) for n in range(5)]
        hub = Hub(store, poll_interval=0.01)
        watchers = [asyncio.create_task(collect(hub, task.id, 0, 25)) for _ in range(20)]
        resumed = asyncio.create_task(collect(hub, task.id, early[2], 22))
        late = []
        for n in range(20):
            late.append(await asyncio.to_thread(store.append_event, task.id, None, "output", {"text": str(n)}))
            await asyncio.sleep(0.002)
        results = await asyncio.wait_for(asyncio.gather(*watchers, resumed), 30)
        assert all(result == early + late for result in results[:-1])
        assert results[-1] == early[3:] + late
        assert len(hub.feeds) == 0  # the last watcher gone, its feed stopped
        await hub.close()
