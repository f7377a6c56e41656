"""A worker polls for a new round only while it has room for one.

Temporal hands a task to whichever poll is open, and a worker that stalls (SIGSTOP, a
frozen machine) keeps its polls open: a round's ``start`` handed to it waits out a timeout
before it goes elsewhere (the next round went to the idle worker ~56 s after a stall, with
a 15 s lease). So the begin queue's polls are rationed by room: a slot to poll is granted
only while the rounds this worker holds, and the starts it has taken, are fewer than its
concurrency. A full worker that stalls has no poll open on the begin queue, and the next
round goes to a live worker with room.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio.worker import (
    CustomSlotSupplier,
    FixedSizeSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
    WorkerTuner,
)

__all__ = ["Room"]


class Room(CustomSlotSupplier):
    """Slots for the begin queue's activities while ``held() + taken < concurrency``."""

    def __init__(self, concurrency: int, held: Callable[[], int]) -> None:
        self.concurrency = concurrency
        self.held = held
        self.taken = 0
        self._changed = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def tuner(self) -> WorkerTuner:
        return WorkerTuner.create_composite(workflow_supplier=FixedSizeSlotSupplier(1), activity_supplier=self,
                                            local_activity_supplier=FixedSizeSlotSupplier(1),
                                            nexus_supplier=FixedSizeSlotSupplier(1))

    def changed(self) -> None:
        """The rounds held changed (callable from any thread)."""
        self._loop.call_soon_threadsafe(self._changed.set)

    def _free(self) -> bool:
        return self.held() + self.taken < self.concurrency

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        while not self._free():
            self._changed.clear()
            await self._changed.wait()
        self.taken += 1
        return SlotPermit()

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        if not self._free():
            return None
        self.taken += 1
        return SlotPermit()

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        pass

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        def release() -> None:
            self.taken -= 1
            self._changed.set()
        self._loop.call_soon_threadsafe(release)
