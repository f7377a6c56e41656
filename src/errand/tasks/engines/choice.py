"""Which engine runs tasks: the one place that knows the engines by name.

``local`` (the default) runs rounds in the serving process, as ``errand worker``
does; ``temporal`` hands them to a Temporal service whose workers run them
(:mod:`errand.tasks.engines.temporal`). The faces — ``errand serve``, ``errand worker``,
``errand recover`` — pass the name they were given and know nothing more of either.
Beside either engine, ``errand serve`` runs the reconciler (:mod:`errand.tasks.engines.reconcile`),
which heals what a lost hand-off left orphaned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from errand.errors import ConfigError
from errand.tasks.engines.reconcile import Reconciler, grace_from_environment, interval_from_environment
from errand.tasks.store.tasks import TaskStore

if TYPE_CHECKING:
    from errand.memory import MemoryStore

__all__ = ["ENGINES", "Served", "check", "reconciler", "server_engine", "worker_engine"]

ENGINES = ("local", "temporal")


class Served(Protocol):
    """An engine's part in one process: it works until ``stop`` is set (or, with
    ``exit_when_idle``, until it had nothing to do for that many seconds)."""

    worker: str

    async def serve(self, *, stop: asyncio.Event | None = None, exit_when_idle: float | None = None,
                    ready: Callable[[], None] | None = None) -> None: ...


def check(kind: str, temporal: str | None = None) -> None:
    """Refuse an engine that cannot start with what was given (before anything starts)."""
    grace_from_environment()
    interval_from_environment()
    if _checked(kind) == "temporal":
        from errand.tasks.engines.temporal import TemporalSettings

        TemporalSettings.from_environment(temporal)


def _checked(kind: str) -> str:
    if kind not in ENGINES:
        raise ConfigError(f"unknown engine {kind!r}; use one of {', '.join(ENGINES)}", code="unknown_engine")
    return kind


def server_engine(kind: str, store: TaskStore, memory: MemoryStore | None, *, concurrency: int,
                  temporal: str | None = None) -> Served:
    """What ``errand serve`` runs beside the API: the local engine, or the Temporal dispatcher
    (the rounds themselves run on ``errand worker --engine temporal`` processes), and beside
    either the reconciler, a pass every ``ERRAND_RECONCILE_INTERVAL`` seconds."""
    healer = reconciler(kind, store, temporal=temporal)
    if _checked(kind) == "local":
        from errand.tasks.engines.local import LocalEngine

        return _Reconciled(LocalEngine(store, concurrency=concurrency, memory=memory), healer)
    from errand.tasks.engines.temporal import TemporalSettings
    from errand.tasks.engines.temporal.dispatch import Dispatcher

    return _Reconciled(Dispatcher(store, TemporalSettings.from_environment(temporal)), healer)


def reconciler(kind: str, store: TaskStore, *, temporal: str | None = None, grace: float | None = None) -> Reconciler:
    """The reconciler of the engine ``kind``: the Temporal engine's asks the service about workflows."""
    grace = grace_from_environment() if grace is None else grace
    if _checked(kind) == "local":
        return Reconciler(store, grace=grace)
    from errand.tasks.engines.temporal import TemporalSettings
    from errand.tasks.engines.temporal.outbox import Outbox
    from errand.tasks.engines.temporal.workflows import TemporalWorkflows

    outbox = Outbox(store)  # a round still waiting in the outbox is handed off, not stranded
    return Reconciler(store, TemporalWorkflows(TemporalSettings.from_environment(temporal)), grace=grace,
                      dispatching=lambda: {dispatch.task_id for dispatch in outbox.pending()})


class _Reconciled:
    """An engine with the reconciler beside it, for as long as the engine serves."""

    def __init__(self, engine: Served, healer: Reconciler) -> None:
        self.engine = engine
        self.healer = healer
        self.worker = engine.worker
        self.interval = interval_from_environment()

    async def serve(self, *, stop: asyncio.Event | None = None, exit_when_idle: float | None = None,
                    ready: Callable[[], None] | None = None) -> None:
        stop = stop or asyncio.Event()
        ended = asyncio.Event()
        healing: list[asyncio.Task[None]] = []

        def serving() -> None:  # the engine holds the store now (it refuses one the other engine serves)
            healing.append(asyncio.create_task(self.healer.serve(ended, self.interval)))
            if ready is not None:
                ready()
        try:
            await self.engine.serve(stop=stop, exit_when_idle=exit_when_idle, ready=serving)
        finally:
            ended.set()
            await asyncio.gather(*healing)


def worker_engine(kind: str, store: TaskStore, *, concurrency: int, temporal: str | None = None) -> Served:
    """What ``errand worker`` runs: the local engine, or a Temporal worker."""
    if _checked(kind) == "local":
        from errand.tasks.engines.local import LocalEngine

        return LocalEngine(store, concurrency=concurrency)
    from errand.tasks.engines.temporal import TemporalSettings
    from errand.tasks.engines.temporal.leftovers import Swept
    from errand.tasks.engines.temporal.worker import TemporalWorker

    return Swept(TemporalWorker(store, TemporalSettings.from_environment(temporal), concurrency=concurrency))
