"""Closing a round whatever ended it: a baseline that failed before the round's checks awaited it
is said once in the log, not left for asyncio to report with a traceback when it is collected; a
worker stopped while a working copy of the round is being mounted leaves nothing mounted."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from engine.harness import READ, GatedModel, git
from errand.database import StoreUnreachable
from errand.repo import checkouts
from errand.tasks.engines.local import LocalEngine
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.round import order, steps
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from mounts import mounted_under


async def test_a_round_closed_after_its_base_tests_failed_leaves_no_error_unretrieved(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    unretrieved: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: unretrieved.append(context))

    async def base_tests() -> None:  # as a drill's outage ended it, while the round was being lost
        raise StoreUnreachable("the database was unreachable (gone)", lost=True)

    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        bench = order.Bench(store, "worker-1")
        baseline = asyncio.ensure_future(base_tests())
        await asyncio.wait([baseline])
        unknown = cast(Any, None)
        bench.rounds["t-1:1"] = order._Live(unknown, unknown, unknown, unknown, unknown, copies=[], journals=[],
                                            link=None, sandboxes=[], agents=[], results=[], baseline=baseline)
        with caplog.at_level(logging.INFO, logger="errand.engine"):
            await order.close(bench, "t-1:1", [])
        del baseline
        gc.collect()
    assert unretrieved == []
    assert "round t-1:1: the base's tests ended with: the database was unreachable (gone)" in caplog.text


async def test_a_worker_stopped_while_the_base_copy_is_being_mounted_leaves_nothing_mounted(
        sqlite_store: TaskStore, repo: Path, script_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What `errand serve` and `errand worker` do on SIGTERM: stop the engine mid-round. The round's
    # baseline is mounting its copy of the base in a thread then (a mount on a busy machine, or a
    # git that takes its time). A stop cannot cut a thread short: it must wait for its end and
    # remove what it mounted, not close the round beside it and leave the mount to outlive it.
    (repo / "unique.txt").write_text(str(repo))  # a base commit of its own: no baseline cached for it
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a commit of this test's own")
    reached, gate, returned = threading.Event(), threading.Event(), threading.Event()
    real_mount = checkouts.mount_overlay

    def slow_mount(lower: Path | Sequence[Path], upper: Path, work: Path, merged: Path) -> None:
        if merged.name != "base":
            return real_mount(lower, upper, work, merged)
        reached.set()
        try:
            gate.wait(120)
            return real_mount(lower, upper, work, merged)
        finally:
            returned.set()

    monkeypatch.setattr(checkouts, "mount_overlay", slow_mount)
    model = GatedModel([[READ]], gate_at=1)  # the attempt waits for its model: the round runs on
    task = TaskService(sqlite_store).submit("fix", repo=repo, model=f"scripted:{script_file}")
    engine = LocalEngine(sqlite_store, concurrency=1, poll_interval=0.02, models=lambda _e, _i: model)
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop=stop))
    try:
        assert await asyncio.to_thread(reached.wait, 120), "the round's baseline never mounted its copy"
        await asyncio.wait_for(model.waiting.wait(), 120)
        [run] = sqlite_store.runs(task.id)
        stop.set()
        # The stop is given its time (it closed the round and returned at once, the mount still to
        # come, before the fix; its process then waited for the thread to mount it, and exited)...
        await asyncio.wait([serving], timeout=2)
    finally:
        gate.set()  # ... then the mount goes on
        await asyncio.wait_for(serving, 60)
    assert await asyncio.to_thread(returned.wait, 60)
    work = steps.work_dir_of(run.id)
    assert mounted_under(work) == [], "the round's copy of the base outlived the stop"
    assert not work.exists()
    assert sqlite_store.get_task(task.id).state is TaskState.QUEUED  # requeued: the next worker runs the round
    assert sqlite_store.get_run(run.id).state is RunState.INTERRUPTED


async def test_a_cancel_while_a_copy_is_made_is_still_a_cancel_when_removing_the_copy_fails(
        caplog: pytest.LogCaptureFixture) -> None:
    """Raised, the removal's error would stand for the cancel, and a stopping worker's round would be
    failed (its task failed) instead of left for recovery to queue again: it is said in the log."""
    started, release = threading.Event(), threading.Event()

    def make() -> str:
        started.set()
        release.wait(60)
        return "copy"

    def undo(_made: str) -> None:
        raise OSError(16, "Device or resource busy")

    call = asyncio.ensure_future(steps.in_thread_to_its_end(make, undo))
    await asyncio.to_thread(started.wait, 60)
    call.cancel()
    await asyncio.sleep(0.05)
    release.set()
    with caplog.at_level(logging.WARNING, logger="errand.tasks.round.steps"), pytest.raises(asyncio.CancelledError):
        await call
    assert "undoing what a cancelled step made failed: [Errno 16] Device or resource busy" in caplog.text


async def test_a_cancelled_rebuild_of_a_rounds_handles_leaves_mounted_what_another_attempt_uses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two attempts of one round rebuild its live handles at once (the Temporal engine's attempts, after
    their worker restarted); one is cancelled. The copies stay mounted for the other; the round's
    close unmounts them."""
    mounted: set[Path] = set()
    second_in = threading.Event()
    path = Path("/nowhere/work/t-1-r1/repo")

    def rebuilt(_bench: object, _prepared: object) -> object:
        mounted.add(path)  # as _reopened: mounted again only if it is not
        second_in.wait(60)
        return types.SimpleNamespace(copies=[types.SimpleNamespace(overlay=True, path=path)])

    monkeypatch.setattr(order, "_rebuilt", rebuilt)
    monkeypatch.setattr(checkouts, "unmount", lambda where: mounted.discard(where))
    bench = types.SimpleNamespace(rounds={}, rebuilding={})
    prepared = types.SimpleNamespace(key="t-1/1")
    first = asyncio.ensure_future(order._live(bench, prepared))  # type: ignore[arg-type]
    second = asyncio.ensure_future(order._live(bench, prepared))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    second.cancel()
    second_in.set()
    live = await first
    with pytest.raises(asyncio.CancelledError):
        await second
    assert bench.rounds[prepared.key] is live and path in mounted
