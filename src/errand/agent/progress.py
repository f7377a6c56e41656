"""What every agent behind the seam keeps while it works, whichever agent it is.

errand's own loop (:mod:`errand.agent.loop`) and an agent CLI's run
(:mod:`errand.agent.external`) report each step the same way (:func:`emit`),
keep the run's time the same way (:class:`RunClock`: a run paused on a question
does not count the pause), and take the same tool call too often in a row for
stuck the same way (:class:`Repeats`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from errand.agent.exits import Stuck
from errand.agent.retry import Clock, SystemClock

__all__ = ["EventHandler", "Repeats", "RunClock", "emit"]

EventHandler = Callable[[str, dict[str, Any]], Awaitable[None] | None]


async def emit(handler: EventHandler | None, step: int, kind: str, data: dict[str, Any]) -> None:
    """Report ``kind`` at ``step`` to ``handler`` (sync or async), if there is one."""
    if handler is None:
        return
    outcome = handler(kind, {"step": step, **data})
    if inspect.isawaitable(outcome):
        await outcome


class RunClock:
    """Seconds a run has worked: those of earlier segments (``before``) and the one under way."""

    def __init__(self, clock: Clock | None = None, before: float = 0.0) -> None:
        self.clock = clock or SystemClock()
        self.before = before
        self._start: float | None = None

    def start(self) -> None:
        self._start = self.clock.monotonic()

    def stop(self) -> None:
        """End the segment under way: what it worked is kept in ``before``."""
        self.before = self.seconds()
        self._start = None

    def seconds(self) -> float:
        running = self.clock.monotonic() - self._start if self._start is not None else 0.0
        return self.before + running

    def left(self, limit: float | None) -> float | None:
        """Seconds to ``limit`` (None: no limit)."""
        return None if limit is None else limit - self.seconds()


class Repeats:
    """The last tool call's signature and how many times in a row it came."""

    def __init__(self, last: tuple[str, int] = ("", 0)) -> None:
        self.last = last

    def check(self, name: object, arguments: Mapping[str, Any] | None, limit: int) -> None:
        """Count this call; :class:`Stuck` when it is the ``limit``-th same call in a row."""
        signature = f"{name} {json.dumps(arguments, sort_keys=True, default=str)}"
        previous, count = self.last
        count = count + 1 if signature == previous else 1
        self.last = (signature, count)
        if count >= limit:
            raise Stuck(f"the same tool call {count} times in a row: {signature}")
