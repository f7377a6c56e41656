"""Nothing stranded, with the local engine: a worker SIGKILLed mid-run leaves a run marked
``running`` and its working copy mounted, and no other worker comes. `errand recover`
requeues the task (and fails it, with a reason `errand show` prints, the second time in a
row), `errand cancel` ends the run and unmounts its copy, and `errand gc` reaps the copies
of runs that ended while their worker was dead. Each through real processes, bubblewrap,
overlays and the store (SQLite, and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import postgres
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from postgres import DATABASES, database_url

from .cli import script
from .harness import READ, per_attempt, running_engine, wait_for_event
from .machines import Machine, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]
S = TaskState
LONG = [[READ], [("shell", {"command": "sleep 600"})]]


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return database_url(request, tmp_path)


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[Callable[[str, str], Machine]]:
    made: list[Machine] = []

    def make(name: str, database: str) -> Machine:
        made.append(Machine(tmp_path, name, database, {}, lease="2"))
        return made[-1]

    yield make
    for machine in made:
        machine.end()


def mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == str(path) for line in mounts)


def killed_mid_run(store: TaskStore, machine: Machine, task_id: str) -> str:
    """Start the machine's worker, wait until the task's agent runs its long command, SIGKILL the
    worker, and wait until its lease has lapsed; the id of the run it left running."""
    after = store.last_event_id()
    machine.start()
    wait_until(lambda: any(e.kind == "tool_call" and e.data.get("name") == "shell"
                           for e in store.events(task_id, after, 100_000)), "the agent's long command")
    machine.kill()
    [run] = [r for r in store.runs(task_id) if r.state is RunState.RUNNING]
    wait_until(lambda: run.worker not in store.live_workers(), "the dead worker's lease to lapse", 60)
    assert mounted(machine.home / "work" / run.id / "repo")  # as the dead worker left it
    return run.id


def test_recover_requeues_a_dead_workers_task_then_fails_it_with_a_reason_show_prints(
        tmp_path: Path, repo: Path, database: str, machines: Callable[[str, str], Machine]) -> None:
    store = TaskStore.open(database)
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=script(tmp_path / "s.json", LONG))
    machine = machines("one", database)
    first = killed_mid_run(store, machine, task.id)

    ran = machine.errand("recover", "--grace", "0")
    assert ran.returncode == 0, ran.stderr
    assert f"{task.id}: running → queued (runs {first})" in ran.stdout
    assert "holds no live lease" in ran.stdout
    assert store.get_task(task.id).state is S.QUEUED
    assert store.get_run(first).state is RunState.INTERRUPTED
    assert not mounted(machine.home / "work" / first / "repo")  # its copy went with it
    assert not (machine.home / "work" / first).exists()
    again = machine.errand("recover", "--grace", "0", "--json")
    assert json.loads(again.stdout) == []  # healed once

    second = killed_mid_run(store, machine, task.id)  # the same again: a second interruption in a row
    ran = machine.errand("recover", "--grace", "0")
    assert f"{task.id}: running → failed (runs {second})" in ran.stdout, ran.stdout + ran.stderr
    assert store.get_task(task.id).state is S.FAILED
    shown = " ".join(machine.errand("show", task.id).stdout.split())  # as one line, however it wrapped
    assert "failed: its worker" in shown and "holds no live lease" in shown, shown
    assert "interrupted a second time in a row" in shown
    logged = machine.errand("logs", task.id)
    assert "holds no live lease" in logged.stdout  # the recovered events say why
    store.close()


def test_cancel_ends_a_dead_workers_run_and_unmounts_its_copy(
        tmp_path: Path, repo: Path, database: str, machines: Callable[[str, str], Machine]) -> None:
    store = TaskStore.open(database)
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=script(tmp_path / "s.json", LONG))
    machine = machines("one", database)
    run_id = killed_mid_run(store, machine, task.id)

    ran = machine.errand("cancel", task.id, "--yes")
    assert ran.returncode == 0, ran.stderr
    assert store.get_task(task.id).state is S.CANCELLED
    run = store.get_run(run_id)
    assert run.state is RunState.CANCELLED and run.ended_at is not None
    assert not mounted(machine.home / "work" / run_id / "repo")
    assert not (machine.home / "work" / run_id).exists()
    # Nothing is left for a retry to wait on: it starts a new round at once.
    retried = machine.errand("retry", task.id, "--no-worker")
    assert retried.returncode == 0, retried.stderr
    store.close()


def test_gc_reaps_the_copies_a_dead_worker_left_of_runs_that_ended(
        tmp_path: Path, repo: Path, database: str, machines: Callable[[str, str], Machine]) -> None:
    store = TaskStore.open(database)
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=script(tmp_path / "s.json", LONG))
    machine = machines("one", database)
    run_id = killed_mid_run(store, machine, task.id)
    # Another machine's worker took the run over; it cannot reach this machine's disk.
    store.interrupt_runs([run_id])
    copy = machine.home / "work" / run_id / "repo"
    assert mounted(copy)

    ran = machine.errand("gc")
    assert ran.returncode == 0, ran.stderr
    assert f"removed working copy of run {run_id}" in ran.stdout
    assert not mounted(copy) and not (machine.home / "work" / run_id).exists()
    assert "working copy" not in machine.errand("gc").stdout  # nothing twice
    store.close()


def test_cancel_after_a_store_outage_ends_the_run_and_unmounts_its_copy(
        repo: Path, script_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL stopped for longer than the worker's lease while its agent runs a long command,
    then started: the worker lives through it, and a cancel afterwards ends the run and its copy."""
    monkeypatch.setenv("ERRAND_WORKER_LEASE", "2")  # renewals fall every 2/3 s, inside the outage
    cluster = postgres.start()
    try:
        url = cluster.url(cluster.create_database())
        asyncio.run(_cancel_after_outage(url, cluster, repo, f"scripted:{script_file}"))
    finally:
        postgres.stop(cluster)


async def _cancel_after_outage(url: str, cluster: postgres.Cluster, repo: Path, model: str) -> None:
    store = TaskStore.open(url)
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=model)
    models, _ = per_attempt(LONG)
    async with running_engine(store, models, concurrency=1):
        await wait_for_event(store, task.id, lambda e: e.kind == "tool_call" and e.data.get("name") == "shell")
        [run] = store.runs(task.id)
        copy = Path(os.environ["ERRAND_HOME"]) / "work" / run.id / "repo"
        assert mounted(copy)
        await asyncio.to_thread(_away, cluster, 6.0)
        with TaskStore.open(url) as person:  # a person's `errand cancel`, a process of its own
            TaskService(person).cancel(task.id)
            assert await _ended(person, run.id) is RunState.CANCELLED
            await _unmounted(copy)
            assert person.get_task(task.id).state is S.CANCELLED
    store.close()


def _away(cluster: postgres.Cluster, seconds: float) -> None:
    data = cluster.directory / "data"
    postgres._run(postgres.BIN / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
    time.sleep(seconds)
    options = f"-c listen_addresses='' -k {cluster.directory} -c fsync=off -c max_connections=200"
    postgres._run(postgres.BIN / "pg_ctl", "-D", data, "-o", options, "-l", cluster.directory / "log", "-w", "start")


async def _ended(store: TaskStore, run_id: str, seconds: float = 120) -> RunState:
    deadline = time.monotonic() + seconds
    while (state := (await asyncio.to_thread(store.get_run, run_id)).state) is RunState.RUNNING:
        assert time.monotonic() < deadline, f"run {run_id} is still running"
        await asyncio.sleep(0.1)
    return state


async def _unmounted(copy: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while mounted(copy) or copy.parent.exists():
        assert time.monotonic() < deadline, f"{copy} is still there"
        await asyncio.sleep(0.1)
