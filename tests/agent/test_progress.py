"""What every agent keeps while it works: each step reported to a sync or async handler, the run's
time without its pauses, and the same tool call too often in a row ended as stuck."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from errand.agent.exits import Stuck
from errand.agent.progress import Repeats, RunClock, emit


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_step_is_reported_with_its_number_to_a_sync_or_an_async_handler_or_to_none() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def sync(kind: str, data: dict[str, Any]) -> None:
        seen.append((kind, data))

    async def later(kind: str, data: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        seen.append((kind, data))

    async def run() -> None:
        await emit(sync, 1, "tool_call", {"name": "shell"})
        await emit(later, 2, "model", {"content": "x"})
        await emit(None, 3, "model", {})

    asyncio.run(run())
    assert seen == [("tool_call", {"step": 1, "name": "shell"}), ("model", {"step": 2, "content": "x"})]


def test_a_run_s_clock_counts_its_segments_and_not_the_pauses_between_them() -> None:
    clock = Clock()
    run = RunClock(clock, before=5.0)
    assert run.seconds() == 5.0 and run.left(None) is None  # not started: what earlier segments worked
    run.start()
    clock.now += 30
    assert run.seconds() == 35.0 and run.left(60.0) == 25.0
    run.stop()
    clock.now += 1000  # paused on a question: not counted
    assert run.seconds() == 35.0
    run.start()
    clock.now += 40
    assert run.seconds() == 75.0 and run.left(60.0) == -15.0


def test_the_same_call_the_limit_th_time_in_a_row_is_stuck_and_another_call_starts_the_count_again() -> None:
    repeats = Repeats()
    for _ in range(2):
        repeats.check("shell", {"command": "ls", "timeout": 5}, limit=3)
    repeats.check("shell", {"command": "pwd"}, limit=3)  # another call: the count starts again
    repeats.check("shell", {"timeout": 5, "command": "ls"}, limit=3)
    repeats.check("shell", {"command": "ls", "timeout": 5}, limit=3)  # the same arguments in any order
    with pytest.raises(Stuck, match="3 times in a row: shell") as stuck:
        repeats.check("shell", {"command": "ls", "timeout": 5}, limit=3)
    assert stuck.value.status == "stuck"
    assert repeats.last[1] == 3


def test_a_run_that_goes_on_keeps_the_count_it_was_given() -> None:
    first = Repeats()
    first.check("read_file", {"path": "a.py"}, limit=5)
    later = Repeats(first.last)
    with pytest.raises(Stuck):
        later.check("read_file", {"path": "a.py"}, limit=2)
    Repeats(first.last).check("read_file", None, limit=2)  # no arguments is another call
