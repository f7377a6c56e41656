"""A Temporal worker that is started again when it fails, until told to stop.

A temporalio ``Worker`` ends with an error when the service cannot be reached as it
starts (its namespace is checked first) or is away for longer than its polls retry. A
process that serves errand's queues must outlast that: the service comes back, and a
worker that died with it would leave its queue unpolled (rounds never begun, workflows
never advanced) while the process looks alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from temporalio.worker import Worker

__all__ = ["BACKOFF_CEILING", "serve_restarting"]

log = logging.getLogger("errand.engine")
#: The longest wait before a failed worker starts again (the service away), seconds.
BACKOFF_CEILING = 5.0


async def serve_restarting(make: Callable[[], Awaitable[Worker]], stop: asyncio.Event, what: str) -> None:
    """Run the worker ``make()`` builds until ``stop`` is set; one that cannot be built (no
    connection to the service yet) or that fails is built and started again after a backoff
    (0.5 s doubling to :data:`BACKOFF_CEILING`)."""
    backoff = 0.0
    while not stop.is_set():
        try:
            worker = await make()
        except RuntimeError as error:  # temporalio's "Failed client connect"
            backoff = min(max(backoff * 2, 0.5), BACKOFF_CEILING)
            log.warning("%s could not start (%s); trying again in %g s", what, error, backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            continue
        running = asyncio.ensure_future(worker.run())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not running.done():
                await worker.shutdown()
                with contextlib.suppress(Exception):
                    await running
        if stop.is_set() or running.cancelled():
            return
        backoff = min(max(backoff * 2, 0.5), BACKOFF_CEILING)
        log.warning("%s ended (%s); starting it again in %g s", what, running.exception(), backoff)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), backoff)
