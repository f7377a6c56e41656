"""A Temporal worker that is started again when it fails, until told to stop.

A temporalio ``Worker`` ends with an error when the service cannot be reached as it
starts (its namespace is checked first) or is away for longer than its polls retry. A
process that serves errand's queues must outlast that: the service comes back, and a
worker that died with it would leave its queue unpolled (rounds never begun, workflows
never advanced) while the process looks alive.

Each start connects a client of its own. A worker registers with its client's
connection when it is made, and one that fails its first check of the service is never
shut down by temporalio, so it stays registered: a worker made again for the same queue
on that client was refused ("Registration of multiple workers with overlapping worker
task types") at every try, for good, and the queue was never polled again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from errand.tasks.engines.temporal import TemporalSettings

__all__ = ["BACKOFF_CEILING", "connect", "serve_restarting"]

log = logging.getLogger("errand.engine")
#: The longest wait before a failed worker starts again (the service away), seconds.
BACKOFF_CEILING = 5.0


async def connect(settings: TemporalSettings) -> Client:
    return await Client.connect(settings.address, namespace=settings.namespace)


async def serve_restarting(settings: TemporalSettings, make: Callable[[Client], Worker], stop: asyncio.Event,
                           what: str) -> None:
    """Run the worker ``make`` builds on a client of its own until ``stop`` is set; one that cannot
    be built (no connection to the service yet) or that fails is built again, on a new client,
    after a backoff (0.5 s doubling to :data:`BACKOFF_CEILING`), however long the service is away."""
    backoff = 0.0
    while not stop.is_set():
        try:
            worker = make(await connect(settings))
        except (RuntimeError, RPCError) as error:  # temporalio's "Failed client connect"
            backoff = min(max(backoff * 2, 0.5), BACKOFF_CEILING)
            log.warning("%s could not start (%s); trying again in %g s", what, error, backoff)
        else:
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
