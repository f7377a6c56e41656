"""One store, one engine at a time: the local engine and the Temporal dispatcher refuse to
serve a store the other serves.

Mixed, each would undo the other's work: a local engine takes every run whose worker
holds no lease in the store for dead, and Temporal's workers hold none of their own
(their heartbeats go to the Temporal service), so it would requeue each round they
hold; the dispatcher would start workflows for tasks a local engine claimed. Each
engine's lease in the store says which engine it is: the Temporal dispatcher's and
workers' ids begin ``temporal:`` (they hold a lease for this alone), any other is a
local engine's. An engine records its lease first and looks second, so two starting
at once cannot both miss the other (both may refuse; the first to retry wins).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from errand.tasks.errors import EnginesMixed

if TYPE_CHECKING:
    from errand.tasks.store.tasks import TaskStore

__all__ = ["TEMPORAL_PREFIX", "lease_lives", "new_worker_id", "refuse_other_engine", "temporal_lease"]

TEMPORAL_PREFIX = "temporal:"
log = logging.getLogger("errand.engine")


def new_worker_id() -> str:
    """A name for this worker process: its host, its pid and 64 random bits. Host and pid alone
    repeat where containers share the host's network and each runs errand as pid 1, and a worker
    restarted so would take its dead predecessor's name: the predecessor's runs would look held,
    and two such workers alive at once would each end the other's runs as lost. The random part is
    wide enough that no two names meet by chance: 24 bits met within 100 names in one CI run."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(8)}"


def _engine_of(worker: str) -> str:
    return "temporal" if worker.startswith(TEMPORAL_PREFIX) else "local"


def refuse_other_engine(store: TaskStore, engine: str, worker: str) -> None:
    """Raise :class:`EnginesMixed` (and forget ``worker``'s own lease) if another engine than
    ``engine`` holds a live lease on ``store``; ``worker``'s lease is recorded already."""
    others = [other for other in store.live_workers() if other != worker and _engine_of(other) != engine]
    if not others:
        return
    store.release_worker(worker)
    raise EnginesMixed(
        f"the store {store.engine.url} is served by the {_engine_of(others[0])} engine ({others[0]}): one store, "
        f"one engine at a time (the {engine} engine would take the other's rounds for abandoned). Stop it first, "
        "or give this one a database of its own (ERRAND_DATABASE_URL)")


def _renew_unexpired(store: TaskStore, worker: str, lease: float) -> bool:
    """Extend ``worker``'s lease if it has not passed; False if it had (or is gone): the worker
    was silent for longer than its lease, and what it held may have been taken from it."""
    from errand.tasks.store.schema import workers

    now = time.time()
    with store._write() as connection:
        renewed = connection.execute(workers.update().where(workers.c.id == worker, workers.c.expires_at >= now)
                                     .values(heartbeat_at=now, expires_at=now + lease))
        return renewed.rowcount == 1


def lease_lives(store: TaskStore, worker: str, lease: float) -> bool:
    """Whether ``worker`` lives by its lease in the store: True once the lease is renewed after
    this first reads it, False once it has passed unrenewed (or is gone: the worker stopped).
    A live worker renews every third of its lease, so the answer comes within one. Renewals are
    compared with each other, never with this machine's clock. No worker can renew while the
    store is away, so a read that waited for the store gives the worker a lease more."""
    from errand.tasks.store.schema import workers

    query = sa.select(workers.c.heartbeat_at, workers.c.expires_at).where(workers.c.id == worker)
    first: float | None = None
    grace = 0.0
    while True:
        began = time.time()
        with store._read() as connection:
            row = connection.execute(query).first()
        now = time.time()
        if row is None:
            return False
        if first is None:
            first = row.heartbeat_at
        elif row.heartbeat_at != first:
            return True
        if now - began > lease / 3:
            grace = now + lease
        if row.expires_at < now and now >= grace:
            return False
        time.sleep(lease / 10)


@contextlib.asynccontextmanager
async def temporal_lease(store: TaskStore, worker: str, lease: float, *,
                         lapsed: Callable[[], Awaitable[None]] | None = None) -> AsyncIterator[None]:
    """A Temporal process's lease in the store while the block runs (renewed every third of
    ``lease``), once no local engine serves it. When a renewal finds the lease passed (the
    process stalled, or the database was away), the lease is taken again and ``lapsed`` is
    awaited: a worker ends there the rounds that were taken from it meanwhile."""
    assert worker.startswith(TEMPORAL_PREFIX)
    await asyncio.to_thread(store.register_worker, worker, home="temporal", lease=lease)
    await asyncio.to_thread(refuse_other_engine, store, "temporal", worker)

    async def renew() -> None:
        while True:
            await asyncio.sleep(lease / 3)
            try:
                if not await asyncio.to_thread(_renew_unexpired, store, worker, lease):
                    log.warning("%s's lease in the store passed before it was renewed; taking it again", worker)
                    await asyncio.to_thread(store.register_worker, worker, home="temporal", lease=lease)
                    if lapsed is not None:
                        await lapsed()
            except SQLAlchemyError as error:  # the database away for a while: keep trying, the work goes on
                log.warning("could not renew %s's lease in the store (%s); trying again", worker, error)

    renewing = asyncio.create_task(renew())
    try:
        yield
    finally:
        renewing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewing
        await asyncio.to_thread(store.release_worker, worker)
