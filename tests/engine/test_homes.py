"""A task's sandboxes say whose they are (``task`` and ``run`` labels), and what one
errand home caches — the tests' result on a base commit — another never uses."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from errand.sandbox import AsyncSandbox, SandboxInfo
from errand.tasks.lifecycle import TaskState
from errand.tasks.round import steps
from errand.tasks.round.environment import Environment
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from postgres import on_sqlite_only

from .harness import FIX_SCRIPT, GatedModel, make_repo, running_engine, scripted, wait_for_state


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


@on_sqlite_only("store")  # the store plays no part in sandbox labels and what a home caches
async def test_the_run_and_setup_sandboxes_carry_the_task_and_run_labels(
        store: TaskStore, service: TaskService, script_file: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project", toml=f'[setup]\ncommands = ["sleep 600 # {tmp_path.name}"]\n')
    task = service.submit("fix", repo=repo, model=f"scripted:{script_file}")
    run = store.start_run(task.id, "test-worker")
    events: list[tuple[str, dict[str, Any]]] = []

    async def sink(kind: str, data: dict[str, Any]) -> None:
        events.append((kind, data))

    base_tree = await asyncio.to_thread(steps.base_checkout, task)
    environment = await asyncio.to_thread(Environment.load, base_tree)
    # Setup that runs until it is stopped: its sandbox is listed, labelled, meanwhile.
    setting_up = asyncio.ensure_future(steps.set_up(environment, task, run, base_tree, steps.Journal(sink)))
    try:
        info = await _labelled({"task": task.id, "run": run.id, "role": "setup"})
    finally:
        setting_up.cancel()
        await asyncio.gather(setting_up, return_exceptions=True)
        await asyncio.to_thread(steps.remove_work, run)
    assert info.id not in {i.id for i in await AsyncSandbox.list()}


@on_sqlite_only("store")  # the store plays no part in sandbox labels and what a home caches
async def test_an_agents_sandbox_is_labelled_with_its_task_and_run(
        repo: Path, store: TaskStore, service: TaskService, script_file: Path) -> None:
    model = GatedModel(FIX_SCRIPT, gate_at=2)
    task = service.submit("fix", repo=repo, model=f"scripted:{script_file}")
    async with running_engine(store, lambda _s, _i: model):
        await asyncio.wait_for(model.waiting.wait(), 120)
        [run] = store.runs(task.id)
        info = await _labelled({"task": task.id, "run": run.id, "role": "agent"})
        model.gate.set()
        await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
    assert info.id not in {i.id for i in await AsyncSandbox.list()}
