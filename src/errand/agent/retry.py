"""Retrying a model call the provider failed, and the clock the waits are counted on.

The adapters classify a failure (:class:`~errand.models.ModelError` ``retryable``
and ``retry_after``) and leave their SDK's own retries off; the loop retries here,
so every retry is an event a person sees and every wait counts against the run's
time budget. The clock is injected, so a test of a ``retry-after`` of a minute
takes no minute.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from errand.errors import ConfigError

__all__ = ["Clock", "RetryPolicy", "SystemClock"]


class Clock(Protocol):
    """Where the loop reads the time and waits."""

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed model call is tried again.

    ``max_retries`` tries after the first for one call; the wait before retry
    *n* is ``base_delay * 2 ** (n - 1)`` seconds, at most ``max_delay``, unless
    the provider said how long to wait (``retry-after``), which is obeyed up to
    ``max_retry_after``. A wait that would pass the run's time budget is not
    begun: the run ends instead.
    """

    max_retries: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_retry_after: float = 600.0

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ConfigError(f"max_retries must be a non-negative integer, not {self.max_retries!r}",
                              code="invalid_budget")
        for name in ("base_delay", "max_delay", "max_retry_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise ConfigError(f"{name} must be a non-negative number of seconds, not {value!r}",
                                  code="invalid_budget")

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``retry`` (from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return float(min(self.base_delay * 2 ** (retry - 1), self.max_delay))
