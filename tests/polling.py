"""Waiting in a test: ask again, quickly at first, then less often.

A test that waits polls something: the store, errand's API, an ``errand`` command. Asked
every 20–100 ms through the minutes a whole task takes, the asking alone costs a share of
a core (a store read is ~1 ms of CPU, an ``errand`` command ~0.6 s), on a machine whose two
cores the suite keeps busy. Each wait here asks after 20 ms, then backs off to half a
second: a short wait ends as soon as before, a long one asks twice a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = ["LAST", "pauses", "settled", "until"]

T = TypeVar("T")

FIRST = 0.02
LAST = 0.5
GROWTH = 1.5


def pauses(first: float = FIRST, last: float = LAST) -> Iterator[float]:
    """The pauses between one probe and the next: ``first``, growing by half each time to ``last``."""
    pause = first
    while True:
        yield pause
        pause = min(last, pause * GROWTH)


def settled(probe: Callable[[], T | None], seconds: float, *, last: float = LAST) -> T | None:
    """The probe's first truthy answer, or None once ``seconds`` have passed without one."""
    deadline = time.monotonic() + seconds
    for pause in pauses(last=last):
        found = probe()
        if found:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(pause, left))
    raise AssertionError("unreachable")  # pauses() never ends


def until(probe: Callable[[], T | None], what: str, seconds: float = 120, *, last: float = LAST) -> T:
    """The probe's first truthy answer; an AssertionError naming ``what`` after ``seconds`` without one."""
    found = settled(probe, seconds, last=last)
    if not found:
        raise AssertionError(f"timed out after {seconds:g} s waiting for {what}")
    return found

