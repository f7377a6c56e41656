"""Which engine runs tasks, by name: an unknown engine or one that cannot start with what was given
is refused before anything starts; ``errand serve`` runs the engine with the reconciler beside it,
for as long as the engine serves."""

from __future__ import annotations

import asyncio

import pytest

from errand.errors import ConfigError
from errand.tasks.engines import choice as engines
from errand.tasks.engines.local import LocalEngine, worker_running
from errand.tasks.engines.reconcile import Reconciler
from errand.tasks.engines.temporal.leftovers import Swept
from errand.tasks.store.tasks import TaskStore


def test_a_bad_reconcile_setting_is_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    from errand.errors import ConfigError
    from errand.tasks.engines import choice as engines

    for variable, value in (("ERRAND_RECONCILE_INTERVAL", "0"), ("ERRAND_RECONCILE_GRACE", "soon")):
        monkeypatch.setenv(variable, value)
        with pytest.raises(ConfigError) as refused:
            engines.check("local")
        assert refused.value.code == "bad_reconcile_setting" and variable in refused.value.message
        monkeypatch.delenv(variable)
    engines.check("local")


def test_an_unknown_engine_is_refused_by_every_face(store: TaskStore) -> None:
    for face in (lambda: engines.check("celery"), lambda: engines.worker_engine("celery", store, concurrency=1),
                 lambda: engines.server_engine("celery", store, None, concurrency=1),
                 lambda: engines.reconciler("celery", store)):
        with pytest.raises(ConfigError, match="unknown engine 'celery'; use one of local, temporal") as refused:
            face()
        assert refused.value.code == "unknown_engine"
    assert store.live_workers() == []


def test_the_temporal_engine_needs_the_service_s_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERRAND_TEMPORAL", raising=False)
    with pytest.raises(ConfigError) as refused:
        engines.check("temporal")
    assert refused.value.code == "temporal_address_missing"
    engines.check("temporal", "127.0.0.1:7233")  # checked, not connected to
    monkeypatch.setenv("ERRAND_TEMPORAL", "127.0.0.1:7233")
    engines.check("temporal")


def test_a_worker_runs_the_local_engine_or_a_temporal_worker_with_its_sweeper(store: TaskStore) -> None:
    local = engines.worker_engine("local", store, concurrency=3)
    assert isinstance(local, LocalEngine) and local.concurrency == 3
    assert isinstance(engines.worker_engine("temporal", store, concurrency=1, temporal="127.0.0.1:9"), Swept)
    assert isinstance(engines.reconciler("local", store, grace=5), Reconciler)


async def test_serve_runs_the_reconciler_beside_the_engine_and_stops_it_with_the_engine(store: TaskStore) -> None:
    served = engines.server_engine("local", store, None, concurrency=1)
    seen: list[bool] = []

    def ready() -> None:
        seen.append(worker_running())

    await asyncio.wait_for(served.serve(exit_when_idle=0.2, ready=ready), 120)
    assert seen == [True] and served.worker == served.engine.worker  # type: ignore[attr-defined]
    assert not worker_running() and store.live_workers() == []
    assert [task for task in asyncio.all_tasks() if task is not asyncio.current_task()] == []
