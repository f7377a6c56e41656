"""The local engine as it is set up and served: bad settings refused before it takes anything, its
lease from the worker's setting, and an engine on an idle store that says it is ready, holds the
home's lock while it serves and leaves no lease or lock behind when it ends."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from errand.errors import ConfigError
from errand.tasks.engines import local
from errand.tasks.engines.local import LocalEngine, lease_from_environment, worker_running
from errand.tasks.events import Failed
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store import claims
from errand.tasks.store.changes import Commits
from errand.tasks.store.tasks import MAX_LOST_BEFORE_A_RUN, TaskStore, insert_event
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
    # The lease's renewal is a read of the tables, and is not what this test looks at.
    engine = LocalEngine(sqlite_store, memory=None, worker="idle-test:1", poll_interval=0.01, lease=3600)
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


async def test_the_engines_event_loop_never_waits_for_a_connection(
        sqlite_store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection from the pool can take its timeout (30 s) to come when a busy server's threads hold
    them all: the pragma's connection is made on a thread, after a look that failed too, so the event
    loop, and every round and request on it, never waits for one."""
    on_the_loop: list[str] = []
    raw_connection = type(sqlite_store.engine).raw_connection

    def made(self: sa.Engine) -> Any:
        if threading.current_thread() is threading.main_thread():
            on_the_loop.append("a connection made on the event loop's thread")
        return raw_connection(self)

    monkeypatch.setattr(type(sqlite_store.engine), "raw_connection", made)
    looks: list[int] = []
    claim = LocalEngine._claim

    async def counted(self: LocalEngine) -> None:
        looks.append(1)
        if len(looks) == 2:
            raise sa.exc.OperationalError("SELECT", {}, Exception("the database is away"))  # a look that failed
        await claim(self)

    monkeypatch.setattr(LocalEngine, "_claim", counted)
    engine = LocalEngine(sqlite_store, memory=None, worker="loop-test:1", poll_interval=0.01, lease=3600)
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop=stop))
    try:
        assert await asyncio.to_thread(settled, lambda: looks, 120)
        await asyncio.to_thread(sqlite_store.create_task, title="a", instruction="i", repo="/r",
                                model="no-such-provider:model")
        assert await asyncio.to_thread(settled, lambda: len(looks) >= 3, 120), "no look after the failed one"
    finally:
        stop.set()
        await asyncio.wait_for(serving, 120)
    assert on_the_loop == []


async def test_controls_after_one_that_could_not_be_delivered_are_taken_in_the_same_look(
        sqlite_store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """No commit would announce them again: an answer could wait, its attempt paused, until another."""
    task = sqlite_store.create_task(title="a", instruction="i", repo="/r", model="no-such-provider:model")
    sqlite_store.set_state(task.id, TaskState.PREPARING)
    task = sqlite_store.set_state(task.id, TaskState.RUNNING)
    engine = LocalEngine(sqlite_store, memory=None, worker="controls-test:1", poll_interval=0.01, lease=3600)
    delivered: list[str] = []

    def deliver(_held: object, text: str, _ref: int) -> None:
        if text == "bad":
            raise RuntimeError("an agent that could not take it")
        delivered.append(text)

    async def nothing() -> None:
        return None

    async def holding() -> None:  # the task's round, held here and never ending
        if task.id not in engine._rounds:
            engine._rounds[task.id] = local._Round(task, handle=asyncio.create_task(asyncio.sleep(3600)))

    monkeypatch.setattr(engine, "_deliver_message", deliver)
    monkeypatch.setattr(engine, "_recover", nothing)
    monkeypatch.setattr(engine, "_claim", holding)
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop=stop))
    try:
        assert await asyncio.to_thread(settled, lambda: task.id in engine._rounds, 120)
        with sqlite_store._write() as connection:  # one commit, two messages
            insert_event(connection, task.id, None, "message_sent", {"text": "bad"})
            insert_event(connection, task.id, None, "message_sent", {"text": "good"})
        assert await asyncio.to_thread(settled, lambda: delivered, 120) == ["good"]
    finally:
        stop.set()
        round_ = engine._rounds.get(task.id)
        if round_ is not None and round_.handle is not None:
            round_.handle.cancel()
        await asyncio.wait_for(serving, 120)


async def test_a_task_whose_claim_was_lost_before_its_round_began_is_queued_again_and_run(
        sqlite_store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store goes away just after the engine's claim of a task, before the round holds it: the
    task is ``preparing`` under a worker that is alive, so no recovery of dead workers takes it; the
    engine's own look at what it claimed queues it again, says why, and the next claim runs it."""
    looks: list[int] = []
    claim = LocalEngine._claim

    async def lost_after_the_claim(self: LocalEngine) -> None:
        looks.append(1)
        if len(looks) == 1:
            assert await asyncio.to_thread(self.store.claim_next, self.worker) is not None
            raise sa.exc.OperationalError("SELECT", {}, Exception("the database is away"))
        await claim(self)

    monkeypatch.setattr(LocalEngine, "_claim", lost_after_the_claim)
    task = sqlite_store.create_task(title="a", instruction="i", repo="/r", model="no-such-provider:model")
    # A short lease: the engine looks at what it holds every third of it.
    engine = LocalEngine(sqlite_store, memory=None, worker="claim-test:1", poll_interval=0.01, lease=0.6)
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop=stop))
    try:
        # Its round runs, and fails at once: the task's model has no provider.
        ran = await asyncio.to_thread(settled, lambda: sqlite_store.get_task(task.id).state is TaskState.FAILED, 120)
        assert ran, f"the task was never run; it is {sqlite_store.get_task(task.id).state.value}"
    finally:
        stop.set()
        await asyncio.wait_for(serving, 120)
    [recovered] = [e for e in sqlite_store.events(task.id, 0, 1000) if e.kind == "recovered"]
    assert recovered.data["previous"] == "preparing" and recovered.data["state"] == "queued"
    assert "claim-test:1 claimed it, but runs no round of it" in recovered.data["reason"]


def test_a_stale_look_does_not_queue_again_a_task_another_worker_took_over_and_began(store: TaskStore) -> None:
    """w1 looks (the task is w1's, preparing, with no run); before its write, w1's lease is lost,
    and the task queued again, claimed by w2 and its round begun. w1's write queues nothing."""
    task = store.create_task(title="a", instruction="i", repo="/r", model="no-such-provider:model")
    assert store.claim_next("w1").id == task.id  # type: ignore[union-attr]
    write = store._write
    taken: list[bool] = []

    @contextlib.contextmanager
    def taken_over_first() -> Iterator[sa.Connection]:
        if not taken:
            taken.append(True)  # what another worker's recovery and claim do while w1's look is in flight
            store.set_state(task.id, TaskState.QUEUED, expected=TaskState.PREPARING)
            assert store.claim_next("w2").id == task.id  # type: ignore[union-attr]
            claims.begin_round(store, task.id, "w2", 1)
        with write() as connection:
            yield connection

    store._write = taken_over_first  # type: ignore[method-assign]
    try:
        requeued = store.requeue_unheld("w1", set(), reason="r", rule="q")
    finally:
        del store._write
    assert taken and requeued == []
    assert store.get_task(task.id).state is TaskState.PREPARING and store.claimer(task.id) == "w2"
    assert [e for e in store.events(task.id, 0, 1000) if e.kind == "recovered"] == []


async def test_a_task_whose_runs_ended_but_that_was_never_moved_on_is_queued_again_and_said_so(
        sqlite_store: TaskStore) -> None:
    """The round failed its runs, then the store went away before it failed the task: the task is
    preparing with no run running. It is queued again each time it is so, never taken for an
    interruption, and its event says what is true of it."""
    store = sqlite_store
    task = store.create_task(title="a", instruction="i", repo="/r", model="no-such-provider:model")
    engine = LocalEngine(store, memory=None, worker="w1")
    for _ in range(2):
        store.claim_next("w1")
        [run] = claims.begin_round(store, task.id, "w1", 1)
        store.finish_run(run.id, RunState.FAILED, {})
        await engine._settle_lost_runs()
    said = [e.data for e in store.events(task.id, 0, 1000) if e.kind == "recovered"]
    assert [data["state"] for data in said] == ["queued", "queued"]
    assert store.get_task(task.id).state is TaskState.QUEUED
    assert "no run of it is running" in said[0]["reason"] and "not counted as an interruption" in said[0]["rule"]


async def test_a_task_whose_round_is_lost_before_a_run_every_time_is_failed_not_queued_for_ever(
        store: TaskStore) -> None:
    """Its round is lost as it begins, every time (its begin fails, the store away just then): the
    worker claimed it, holds no round of it, and no run of it began. Each lease renewal queues it
    again, and the worker claims it again; after MAX_LOST_BEFORE_A_RUN times in a row the next
    loss fails it, saying why. A run begun between, or a person's retry, starts the count again."""
    task = store.create_task(title="a", instruction="i", repo="/r", model="no-such-provider:model")
    engine = LocalEngine(store, memory=None, worker="w1")

    async def lost_before_a_run(times: int) -> None:
        for _ in range(times):
            assert store.claim_next("w1").id == task.id  # type: ignore[union-attr]
            await engine._settle_lost_runs()

    await lost_before_a_run(MAX_LOST_BEFORE_A_RUN - 1)
    store.claim_next("w1")  # this round begins a run, which ends; then the round is lost
    [run] = claims.begin_round(store, task.id, "w1", 1)
    store.finish_run(run.id, RunState.FAILED, {})
    await engine._settle_lost_runs()
    await lost_before_a_run(MAX_LOST_BEFORE_A_RUN - 1)
    assert store.get_task(task.id).state is TaskState.QUEUED  # MAX in a row since that run: queued still
    await lost_before_a_run(1)
    assert store.get_task(task.id).state is TaskState.FAILED
    failed = Failed.last(store.events(task.id, kinds=["failed", "recovered"], limit=1000))
    assert failed is not None and failed.code == "lost_before_a_run"
    assert failed.reason.startswith(f"queued again {MAX_LOST_BEFORE_A_RUN} times after its round was lost before "
                                    "a run began; stopping: its worker w1 claimed it, but runs no round of it")
    recovered = [e for e in store.events(task.id, limit=1000) if e.kind == "recovered"]
    assert len(recovered) == 2 * MAX_LOST_BEFORE_A_RUN - 1 and store.claimer(task.id) == "w1"

    TaskService(store).retry(task.id)  # a fresh start: lost once more, it is queued again, not failed
    await lost_before_a_run(1)
    assert store.get_task(task.id).state is TaskState.QUEUED


async def test_a_worker_leaves_alone_the_runs_of_another_of_the_same_host_name_and_pid(store: TaskStore) -> None:
    """Two engines made in one process have one host name and pid, as two containers' workers on the
    host's network do. One holds a running run; the other's look for its own lost runs must not take
    that run for one of its own and end it."""
    holder, other = LocalEngine(store, memory=None), LocalEngine(store, memory=None)
    store.register_worker(holder.worker, home="a", lease=600)
    store.register_worker(other.worker, home="b", lease=600)
    store.create_task(title="t", instruction="i", repo="/r")
    task = store.claim_next(holder.worker)
    assert task is not None
    run = store.start_run(task.id, holder.worker)
    await other._settle_lost_runs()
    assert store.get_run(run.id).state is RunState.RUNNING
    assert [e for e in store.events(task.id, 0, 1000) if e.kind == "recovered"] == []
