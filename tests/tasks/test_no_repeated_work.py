"""No repeated work: tasks on one base share one run of its tests (one in flight, the others
wait for it), and a result that changed nothing is not tested again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from engine.harness import FINISH, READ, make_repo, running_engine, scripted, wait_for_state
from errand.tasks.lifecycle import TaskState
from errand.tasks.round import steps
from errand.tasks.round.environment import Environment
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

# Slow enough that the second task asks while the first one's run is in flight.
SLOW_TEST = '[test]\ncommand = "sleep 2; python3 test_calc.py"\n'


async def test_two_tasks_on_one_base_share_one_base_test_run(
        tmp_path: Path, sqlite_store: TaskStore, script_file: Path) -> None:
    store = sqlite_store
    repo = make_repo(tmp_path / "project", toml=SLOW_TEST)
    service = TaskService(store)
    journals: list[list[tuple[str, dict[str, Any]]]] = []
    calls = []
    for _ in range(2):
        task = service.submit("fix", repo=repo, model=f"scripted:{script_file}")
        run = store.start_run(task.id, "test-worker")
        base_tree = await asyncio.to_thread(steps.base_checkout, task)
        environment = await asyncio.to_thread(Environment.load, base_tree)
        setup = await steps.set_up(environment, task, run, base_tree, steps.Journal(lambda *_: asyncio.sleep(0)))
        copy = await asyncio.to_thread(steps.prepare_copy, task, run, setup=setup)
        events: list[tuple[str, dict[str, Any]]] = []
        journals.append(events)

        async def sink(kind: str, data: dict[str, Any], events: list[tuple[str, dict[str, Any]]] = events) -> None:
            events.append((kind, data))

        calls.append((environment, setup, copy, steps.Journal(sink), run))
    try:
        results = await asyncio.gather(*(steps.tests_on_base(env, setup, copy, journal)
                                         for env, setup, copy, journal, _run in calls))
    finally:
        for *_rest, run in calls:
            await asyncio.to_thread(steps.remove_work, run)
    assert [r.exit_code for r in results if r is not None] == [1, 1]  # the base's test fails, for both
    cached = sorted(data["cached"] for events in journals for kind, data in events if kind == "tests_before")
    assert cached == [False, True], "both tasks ran the base's tests"


async def test_a_result_that_changed_nothing_is_not_tested_again(
        tmp_path: Path, sqlite_store: TaskStore, script_file: Path) -> None:
    store = sqlite_store
    repo = make_repo(tmp_path / "project")
    task = TaskService(store).submit("look only", repo=repo, model=f"scripted:{script_file}")
    model = scripted([[READ], [FINISH]])
    async with running_engine(store, lambda _s, _i: model, concurrency=1):
        done = await wait_for_state(store, task.id, TaskState.FAILED, TaskState.READY_FOR_REVIEW)
    assert done.state is TaskState.FAILED  # it changed nothing
    kinds = [(e.kind, e.data.get("what")) for e in store.events(task.id, kinds=["check_started", "check_skipped"])]
    assert kinds == [("check_skipped", "tests")], kinds
    [run] = store.runs(task.id)
    evidence = run.result["evidence"]
    assert evidence["tests_after"]["exit_code"] == evidence["tests_before"]["exit_code"] == 1
