"""The local engine as it is set up and served: bad settings refused before it takes anything, its
lease from the worker's setting, and an engine on an idle store that says it is ready, holds the
home's lock while it serves and leaves no lease or lock behind when it ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from errand.errors import ConfigError
from errand.tasks.engines.local import LocalEngine, lease_from_environment, worker_running
from errand.tasks.lifecycle import TaskState
from errand.tasks.store.changes import Commits
from errand.tasks.store.tasks import TaskStore
from polling import settled


@pytest.mark.parametrize(("options", "said"), [
    ({"concurrency": 0}, "concurrency must be a positive integer"),
    ({"concurrency": True}, "concurrency must be a positive integer"),
    ({"concurrency": "2"}, "concurrency must be a positive integer"),
    ({"isolation": "vmware"}, "unknown isolation 'vmware'"),
])
def test_bad_settings_are_refused_before_the_engine_takes_anything(store: TaskStore, options: dict[str, Any],
                                                                   said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        LocalEngine(store, memory=None, **options)
    assert store.live_workers() == []


def test_the_lease_is_the_worker_s_setting_and_a_bad_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERRAND_WORKER_LEASE", raising=False)
    assert lease_from_environment() == 30.0
    monkeypatch.setenv("ERRAND_WORKER_LEASE", " 12.5 ")
    assert lease_from_environment() == 12.5
    for bad in ("soon", "0", "-3", "nan"):
        monkeypatch.setenv("ERRAND_WORKER_LEASE", bad)
        with pytest.raises(ConfigError, match="ERRAND_WORKER_LEASE") as refused:
            lease_from_environment()
        assert refused.value.code == "bad_worker_lease"


def test_an_engine_s_own_lease_wins_over_the_setting(store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_WORKER_LEASE", "soon")  # not read when the engine is given its lease
    assert LocalEngine(store, memory=None, lease=7.0).lease == 7.0
    monkeypatch.setenv("ERRAND_WORKER_LEASE", "45")
    engine = LocalEngine(store, memory=None, worker="build-host:1")
    assert engine.lease == 45.0 and engine.worker == "build-host:1" and engine.sandboxes("t-none") == []


async def test_an_engine_on_an_idle_store_serves_then_leaves_no_lease_or_lock(store: TaskStore) -> None:
    seen: list[tuple[list[str], bool]] = []

    def ready() -> None:  # the engine is the home's worker and the store's engine from here
        seen.append((store.live_workers(), worker_running()))

    engine = LocalEngine(store, memory=None, worker="local-test:1", poll_interval=0.05)
    await asyncio.wait_for(engine.serve(exit_when_idle=0.2, ready=ready), 120)
    assert seen == [(["local-test:1"], True)]
    assert store.live_workers() == [] and not worker_running()


async def test_an_engine_stops_when_it_is_told_to(store: TaskStore) -> None:
    stop = asyncio.Event()
    engine = LocalEngine(store, memory=None, worker="local-test:2", poll_interval=0.05)
    serving = asyncio.create_task(engine.serve(stop=stop, ready=stop.set))
    await asyncio.wait_for(serving, 120)
    assert store.live_workers() == [] and not worker_running()


async def test_an_idle_engine_on_sqlite_reads_no_table_until_something_is_committed(
        sqlite_store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle, it asks SQLite's data_version each poll (a few microseconds), not the tasks and events
    tables (a share of a core for a worker that waits all day); a task submitted is still claimed."""
    polls: list[bool] = []
    since_last = Commits.since_last

    def counted(self: Commits) -> bool:
        polls.append(answer := since_last(self))
        return answer

    monkeypatch.setattr(Commits, "since_last", counted)
    reads: list[str] = []
    sa.event.listen(sqlite_store.engine, "before_cursor_execute",
                    lambda _c, _cur, statement, *_: reads.append(statement)
                    if "FROM tasks" in statement or "FROM events" in statement else None)
    engine = LocalEngine(sqlite_store, memory=None, worker="idle-test:1", poll_interval=0.01)
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop=stop))
    try:
        assert await asyncio.to_thread(settled, lambda: len(polls) >= 5, 120), "the engine never polled"
        before = len(reads)
        await asyncio.to_thread(settled, lambda: len(polls) >= 55, 120)
        assert len(reads) == before, f"{len(reads) - before} reads in 50 idle polls: {reads[before:before + 3]}"
        task = sqlite_store.create_task(title="a", instruction="i", repo="/r", model="no-such-provider:model")
        done = await asyncio.to_thread(settled, lambda: sqlite_store.get_task(task.id).state is not TaskState.QUEUED,
                                       120)
        assert done, "the task submitted to the idle engine was never claimed"
    finally:
        stop.set()
        await asyncio.wait_for(serving, 120)
