"""A task's sandboxes say whose they are (``task`` and ``run`` labels), and what one
errand home caches — the tests' result on a base commit — another never uses."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from errand.sandbox import AsyncSandbox, SandboxInfo
from errand.tasks import steps
from errand.tasks.environment import Environment
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store import TaskStore

from .harness import FIX_SCRIPT, make_repo, running_engine, scripted, wait_for_state


async def test_a_baseline_cached_in_one_home_is_not_taken_by_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script_file: Path) -> None:
    repo = make_repo(tmp_path / "project")
    monkeypatch.delenv("ERRAND_CACHE_DIR", raising=False)
    cached = {}
    for name in ("a", "b"):
        home = tmp_path / name
        home.mkdir()
        monkeypatch.setenv("ERRAND_HOME", str(home))
        with TaskStore.open(f"sqlite:///{home / 'errand.db'}") as store:
            task = TaskService(store).submit("fix", repo=repo, model=f"scripted:{script_file}")
            model = scripted(FIX_SCRIPT)
            async with running_engine(store, lambda _s, _i, model=model: model, concurrency=1):
                done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
            assert done.state is TaskState.READY_FOR_REVIEW
            [before] = [e.data for e in store.events(task.id, kinds=["tests_before"])]
            cached[name] = before["cached"]
    assert cached == {"a": False, "b": False}, "home b took home a's baseline"
    for name in ("a", "b"):
        assert len(list((tmp_path / name / "cache" / "baselines").iterdir())) == 1, "cached under its home"


async def _labelled(labels: dict[str, str]) -> SandboxInfo:
    """The live sandbox that carries ``labels``, once one does (bounded)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for info in await AsyncSandbox.list():
            if info.labels == labels:
                return info
        await asyncio.sleep(0.05)
    raise AssertionError(f"no sandbox labelled {labels}")


async def test_the_run_and_setup_sandboxes_carry_the_task_and_run_labels(
        repo: Path, store: TaskStore, service: TaskService, script_file: Path, tmp_path: Path) -> None:
    task = service.submit("fix", repo=repo, model=f"scripted:{script_file}")
    run = store.start_run(task.id, "test-worker")
    labels = {"task": task.id, "run": run.id}
    copy = await asyncio.to_thread(steps.prepare_copy, task, run)
    try:
        environment = await asyncio.to_thread(Environment.load, copy.path)
        sandbox = await steps.start_sandbox(environment, environment.image, copy, labels=labels)
        try:
            assert (await _labelled(labels)).id == sandbox.id
        finally:
            await sandbox.terminate()

        # Setup that runs until it is stopped: its sandbox is listed, labelled, meanwhile.
        setup = Environment(image=environment.image, setup=(f"sleep 600 # {tmp_path.name}",))
        events: list[tuple[str, dict[str, Any]]] = []

        async def sink(kind: str, data: dict[str, Any]) -> None:
            events.append((kind, data))

        setting_up = asyncio.ensure_future(steps.environment_image(setup, copy, steps.Journal(sink), labels=labels))
        try:
            info = await _labelled(labels)
        finally:
            setting_up.cancel()
            await asyncio.gather(setting_up, return_exceptions=True)
        assert info.id not in {i.id for i in await AsyncSandbox.list()}
    finally:
        await asyncio.to_thread(steps.remove_work, run)
