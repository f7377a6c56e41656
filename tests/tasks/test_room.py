"""A worker polls the begin queue only while it has room: a slot while the rounds it holds and the
starts it took are fewer than its concurrency, none when full, and a waiting poll goes on once a
round ends or a start is given back."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from errand.tasks.engines.temporal.room import Room

CONTEXT = cast(Any, None)  # the slot contexts say which activity; the room grants by count alone


async def test_slots_are_granted_while_held_and_taken_are_fewer_than_the_concurrency() -> None:
    held = [1]
    room = Room(3, lambda: held[0])
    assert room.try_reserve_slot(CONTEXT) is not None and room.try_reserve_slot(CONTEXT) is not None
    assert room.taken == 2 and room.try_reserve_slot(CONTEXT) is None  # 1 held + 2 taken: full
    held[0] = 0
    assert room.try_reserve_slot(CONTEXT) is not None and room.try_reserve_slot(CONTEXT) is None
    room.mark_slot_used(CONTEXT)  # a start taken up is still counted until it is released
    assert room.taken == 3


async def test_a_full_worker_s_poll_waits_until_a_round_ends_or_a_start_is_released() -> None:
    held = [2]
    room = Room(2, lambda: held[0])
    waiting = asyncio.create_task(room.reserve_slot(CONTEXT))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    room.changed()  # something changed, but the worker is still full
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    held[0] = 1
    room.changed()  # a round it held ended
    await asyncio.wait_for(waiting, 60)
    assert room.taken == 1
    second = asyncio.create_task(room.reserve_slot(CONTEXT))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not second.done()
    room.release_slot(CONTEXT)  # the start it took went elsewhere
    await asyncio.wait_for(second, 60)
    assert room.taken == 1

