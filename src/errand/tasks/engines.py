"""Which engine runs tasks: the one place that knows the engines by name.

``local`` (the default) runs rounds in the serving process, as ``errand worker``
does; ``temporal`` hands them to a Temporal service whose workers run them
(:mod:`errand.tasks.temporal`). The faces — ``errand serve``, ``errand worker`` —
pass the name they were given and know nothing more of either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from errand.errors import ConfigError
from errand.memory import MemoryStore
from errand.tasks.store import TaskStore

__all__ = ["ENGINES", "Served", "check", "server_engine", "worker_engine"]

ENGINES = ("local", "temporal")


class Served(Protocol):
    """An engine's part in one process: it works until ``stop`` is set (or, with
    ``exit_when_idle``, until it had nothing to do for that many seconds)."""

    worker: str

    async def serve(self, *, stop: asyncio.Event | None = None, exit_when_idle: float | None = None,
                    ready: Callable[[], None] | None = None) -> None: ...


def check(kind: str, temporal: str | None = None) -> None:
    """Refuse an engine that cannot start with what was given (before anything starts)."""
    if _checked(kind) == "temporal":
        from errand.tasks.temporal import TemporalSettings

        TemporalSettings.from_environment(temporal)


def _checked(kind: str) -> str:
    if kind not in ENGINES:
        raise ConfigError(f"unknown engine {kind!r}; use one of {', '.join(ENGINES)}", code="unknown_engine")
    return kind


def server_engine(kind: str, store: TaskStore, memory: MemoryStore | None, *, concurrency: int,
                  temporal: str | None = None) -> Served:
    """What ``errand serve`` runs beside the API: the local engine, or the Temporal dispatcher
    (the rounds themselves run on ``errand worker --engine temporal`` processes)."""
    if _checked(kind) == "local":
        from errand.tasks.engine import LocalEngine

        return LocalEngine(store, concurrency=concurrency, memory=memory)
    from errand.tasks.temporal import TemporalSettings
    from errand.tasks.temporal.dispatch import Dispatcher

    return Dispatcher(store, TemporalSettings.from_environment(temporal))


def worker_engine(kind: str, store: TaskStore, *, concurrency: int, temporal: str | None = None) -> Served:
    """What ``errand worker`` runs: the local engine, or a Temporal worker."""
    if _checked(kind) == "local":
        from errand.tasks.engine import LocalEngine

        return LocalEngine(store, concurrency=concurrency)
    from errand.tasks.temporal import TemporalSettings
    from errand.tasks.temporal.worker import TemporalWorker

    return TemporalWorker(store, TemporalSettings.from_environment(temporal), concurrency=concurrency)
