"""The repository's setup commands: logged, cached as an image layer, and a failure ends
the task with its log."""

from __future__ import annotations

import os
from pathlib import Path

import forkserver
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from postgres import on_sqlite_only

from .harness import FIX_SCRIPT, make_repo, running_engine, scripted, wait_for_state

SETUP = """\
[setup]
commands = ["mkdir -p /opt/tool && echo ready-{tag} > /opt/tool/marker", "echo setup done"]
[test]
command = "grep -q ready-{tag} /opt/tool/marker && python3 test_calc.py"
"""


@on_sqlite_only("store")  # the store plays no part in setup commands and their cached layer
async def test_setup_runs_once_and_is_cached_for_the_next_task(
        store: TaskStore, service: TaskService, tmp_path: Path, script_file: Path) -> None:
    repo = make_repo(tmp_path / "setup", toml=SETUP.format(tag=tmp_path.name))
    first = service.submit("fix", repo=repo, model=f"scripted:{script_file}")
    second = service.submit("fix again", repo=repo, model=f"scripted:{script_file}")
    models = iter([scripted(FIX_SCRIPT), scripted(FIX_SCRIPT)])
    async with running_engine(store, lambda _s, _i: next(models), concurrency=1):
        for task in (first, second):
            done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED)
            assert done.state is TaskState.READY_FOR_REVIEW
    first_kinds = [e.kind for e in store.events(first.id)]
    second_kinds = [e.kind for e in store.events(second.id)]
    assert "setup_started" in first_kinds and "setup_finished" in first_kinds
    assert "setup_cached" in second_kinds and "setup_started" not in second_kinds
    # The second task's baseline comes from the cache, and its log says so.
    [first_before], [second_before] = ([e.data for e in store.events(t.id, kinds=["tests_before"])]
                                       for t in (first, second))
    assert second_before["cached"] is True and first_before == {**second_before, "cached": False}
    output = "".join(e.data["text"] for e in store.events(first.id, kinds=["setup_output"]))
    assert "$ echo setup done\nsetup done\n" in output
    shown = forkserver.run(["show", second.id], env={**os.environ, "ERRAND_DATABASE_URL": str(store.engine.url),
                                                        "COLUMNS": "200"})
    assert "reused (set up for this commit before)" in shown.stdout and "from the cache)" in shown.stdout, shown.stdout
    for task in (first, second):  # the tests ran in the set-up environment, before and after
        evidence = service.evidence(service.chosen_run(task.id))
        assert evidence is not None and evidence.tests_after is not None and evidence.tests_after.ok
        assert evidence.tests_before is not None and evidence.tests_before.exit_code == 1


@on_sqlite_only("store")  # the store plays no part in setup commands and their cached layer
async def test_a_failing_setup_fails_the_task_with_its_log(
        store: TaskStore, service: TaskService, tmp_path: Path, script_file: Path) -> None:
    # The setup a person writes first: pip into the image's own Python, which Debian manages (PEP 668).
    toml = '[setup]\ncommands = ["echo installing; echo no such package >&2; python3 -m pip install -e . || exit 3"]\n'
    repo = make_repo(tmp_path / "broken", toml=toml)
    task = service.submit("fix", repo=repo, model=f"scripted:{script_file}")
    model = scripted(FIX_SCRIPT)
    async with running_engine(store, lambda _s, _i: model):
        done = await wait_for_state(store, task.id, TaskState.FAILED, TaskState.READY_FOR_REVIEW)
    assert done.state is TaskState.FAILED
    assert model.calls == []  # no model time was spent on a broken environment
    [failed] = [e for e in store.events(task.id) if e.kind == "failed"]
    assert failed.data["code"] == "setup_failed" and failed.data["exit_code"] == 3
    assert "installing\nno such package\n" in failed.data["log"]
    assert "exited with code 3" in failed.data["reason"]
    assert "externally-managed-environment" in failed.data["log"]  # pip's words, and errand's:
    assert "install into a virtual environment: `python3 -m venv .venv`" in failed.data["reason"]
