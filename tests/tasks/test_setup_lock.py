"""Rounds setting up one environment take turns, in every event loop a process runs."""

from __future__ import annotations

import asyncio

from errand.tasks.round import steps


async def contend(key: str) -> list[str]:
    order: list[str] = []

    async def hold(name: str) -> None:
        async with steps.setup_lock(key):
            order.append(f"{name} in")
            await asyncio.sleep(0)
            order.append(f"{name} out")

    await asyncio.gather(hold("a"), hold("b"))
    return order


def test_a_second_event_loop_gets_locks_of_its_own() -> None:
    # The first loop's waiter binds its lock to that loop; a benchmark or harness that runs
    # a second loop in the same process must not meet that lock again.
    assert asyncio.run(contend("env-1")) == ["a in", "a out", "b in", "b out"]
    assert asyncio.run(contend("env-1")) == ["a in", "a out", "b in", "b out"]
