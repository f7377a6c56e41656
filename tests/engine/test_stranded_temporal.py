"""Nothing stranded, with the Temporal engine: a task whose workflow is gone (it failed — a
store outage outlasted its retries —, was terminated, or was never started) while its task and
run stay ``running``. `errand serve`'s reconciler requeues it and the next round finishes it;
`errand cancel` ends its run; `errand worker stop` really requeues it. Real processes: a
Temporal dev server, PostgreSQL, `errand serve --engine temporal`, `errand worker --engine
temporal` machines with homes of their own."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from errand.repo.accept import branch_name
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.service import TaskService, resolve_model
from errand.tasks.store.schema import tasks
from errand.tasks.store.tasks import TaskStore
from ports import free_port
from temporal import TemporalServer

from .cli import script
from .harness import FIX_SCRIPT, READ, git
from .machines import Machine, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]
S = TaskState
LONG = [[READ], [("shell", {"command": "sleep 600"})]]
TEMPORAL_WORKER = ("worker", "--engine", "temporal", "--concurrency", "1")
# The reconciler looks twice a second at tasks still for a second: a test waits seconds, not minutes.
QUICK = {"ERRAND_RECONCILE_INTERVAL": "0.5", "ERRAND_RECONCILE_GRACE": "1"}



@pytest.fixture
def team(tmp_path: Path, temporal_server: TemporalServer, temporal_queue: str,
         postgres_url: str) -> Iterator[Callable[[str], Machine]]:
    made: list[Machine] = []

    def make(name: str) -> Machine:
        env = {"ERRAND_TEMPORAL": temporal_server.address, "ERRAND_TEMPORAL_QUEUE": temporal_queue, **QUICK}
        made.append(Machine(tmp_path, name, postgres_url, env, lease="5"))
        return made[-1]

    yield make
    for machine in made:
        machine.end()


def _serve(machine: Machine) -> None:
    machine.start("serve", "--engine", "temporal", "--port", str(free_port()))


def mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == str(path) for line in mounts)


def long_command_started(store: TaskStore, task_id: str) -> bool:
    return any(e.kind == "tool_call" and e.data.get("name") == "shell" for e in store.events(task_id, limit=100_000))


def terminate_workflow(address: str, queue: str, task_id: str) -> None:
    """End the task's workflow without settling the task: the state a workflow that failed (its
    store activities out of retries) leaves, its task and run still ``running``."""
    async def terminate() -> None:
        client = await Client.connect(address)
        await client.get_workflow_handle(f"{queue}-task-{task_id}").terminate("a drill: the workflow is gone")
    asyncio.run(terminate())


def wait_settled(store: TaskStore, task_id: str, *machines: Machine, seconds: float = 180) -> None:
    try:
        wait_until(lambda: store.get_task(task_id).state in (S.READY_FOR_REVIEW, S.FAILED), "the task to finish",
                   seconds)
    except AssertionError as error:
        said = "\n".join(f"{m.log.name}: {m.log.read_text()[-1500:]}" for m in machines if m.log.exists())
        events = [(e.kind, e.data) for e in store.events(task_id, limit=100_000)][-6:]
        raise AssertionError(f"{error}; {store.get_task(task_id).state}, last events {events}\n{said}") from None


def test_serve_requeues_a_task_whose_workflow_failed_and_the_next_round_finishes_it(
        tmp_path: Path, repo: Path, postgres_url: str, temporal_server: TemporalServer, temporal_queue: str,
        team: Callable[[str], Machine]) -> None:
    store = TaskStore.open(postgres_url)
    model = tmp_path / "script.json"
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=script(model, LONG))
    server, one, two = team("server"), team("one"), team("two")
    _serve(server)
    one.start(*TEMPORAL_WORKER)
    wait_until(lambda: long_command_started(store, task.id), "the agent's long command")
    two.start(*TEMPORAL_WORKER)
    script(model, FIX_SCRIPT)  # what the next round's model says
    terminate_workflow(temporal_server.address, temporal_queue, task.id)

    wait_settled(store, task.id, server, one, two)
    assert store.get_task(task.id).state is S.READY_FOR_REVIEW
    first, second = store.runs(task.id)
    assert first.state is RunState.INTERRUPTED and second.state is RunState.SUCCEEDED
    [recovered] = store.events(task.id, kinds=["recovered"])
    assert recovered.data["state"] == "queued" and "its workflow failed" in recovered.data["reason"]
    logged = server.errand("logs", task.id)
    assert "its workflow failed" in logged.stdout  # what a person reads
    # The worker that held the first run lives: it ended that round's sandbox and removed its copy.
    wait_until(lambda: not (one.home / "work" / first.id).exists(), "the first run's copy to go", 120)
    assert not one.sandboxes()
    for machine in (two, one, server):
        machine.stop()
    store.close()


def test_serve_requeues_a_claimed_task_that_has_no_workflow(
        tmp_path: Path, repo: Path, postgres_url: str, team: Callable[[str], Machine]) -> None:
    store = TaskStore.open(postgres_url)
    server, one = team("server"), team("one")
    _serve(server)
    one.start(*TEMPORAL_WORKER)
    # A first task through: the dispatcher has caught up (on start it starts the workflow of any
    # claimed task that has none, which would hide what this test is about).
    first = TaskService(store).submit("Make test_calc.py pass", repo=repo,
                                      model=script(tmp_path / "first.json", FIX_SCRIPT))
    wait_settled(store, first.id, server, one)
    # As a dispatcher leaves a task it claimed while the Temporal service was away: `preparing`,
    # no workflow. Written in one transaction, so that the running dispatcher cannot claim it first.
    task_id = _claimed_without_workflow(store, repo, script(tmp_path / "script.json", FIX_SCRIPT))

    wait_settled(store, task_id, server, one)
    assert store.get_task(task_id).state is S.READY_FOR_REVIEW
    [recovered] = store.events(task_id, kinds=["recovered"])
    assert recovered.data["previous"] == "preparing" and "no workflow" in recovered.data["reason"]
    for machine in (one, server):
        machine.stop()
    store.close()


def _claimed_without_workflow(store: TaskStore, repo: Path, model: str) -> str:
    spec, endpoint = resolve_model(model)
    task_id, title, now = f"t-{secrets.token_hex(4)}", "Make test_calc.py pass", time.time() - 5
    with store.engine.begin() as connection:
        connection.execute(tasks.insert().values(
            id=task_id, title=title, instruction=title, repo=str(repo), base_ref="HEAD",
            base_commit=git(repo, "rev-parse", "HEAD").strip(), model=spec, model_endpoint=endpoint.to_json(),
            attempts=1, state="preparing", branch=branch_name(task_id, title), parent_id=None,
            claimed_by="temporal:gone:1", created_at=now, updated_at=now))
    return task_id


def test_cancel_ends_the_run_of_a_task_whose_workflow_failed(
        tmp_path: Path, repo: Path, postgres_url: str, temporal_server: TemporalServer, temporal_queue: str,
        team: Callable[[str], Machine]) -> None:
    store = TaskStore.open(postgres_url)
    service = TaskService(store)
    task = service.submit("Make test_calc.py pass", repo=repo, model=script(tmp_path / "script.json", LONG))
    server, one = team("server"), team("one")
    _serve(server)
    one.start(*TEMPORAL_WORKER)
    wait_until(lambda: long_command_started(store, task.id), "the agent's long command")
    [run] = store.runs(task.id)
    # The server's reconciler would take the workflow's end for an orphaned round, and interrupt the run,
    # if it looked between the workflow's end and the cancel: it is away meanwhile, and looks after.
    server.stop()
    terminate_workflow(temporal_server.address, temporal_queue, task.id)

    service.cancel(task.id)
    _serve(server)
    wait_until(lambda: store.get_run(run.id).state is not RunState.RUNNING, "the run to end", 120)
    assert store.get_run(run.id).state is RunState.CANCELLED
    assert store.get_task(task.id).state is S.CANCELLED
    # Its worker lives: it ends the sandbox and removes the copy of a run it no longer runs.
    copy = one.home / "work" / run.id / "repo"
    wait_until(lambda: not mounted(copy) and not copy.parent.exists(), "the copy to be unmounted and removed", 120)
    assert not one.sandboxes()
    for machine in (one, server):
        machine.stop()
    store.close()


def test_worker_stop_really_requeues_a_task_whose_workflow_failed(
        tmp_path: Path, repo: Path, postgres_url: str, temporal_server: TemporalServer, temporal_queue: str,
        team: Callable[[str], Machine]) -> None:
    store = TaskStore.open(postgres_url)
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo,
                                     model=script(tmp_path / "script.json", LONG))
    server, one = team("server"), team("one")
    _serve(server)
    one.start(*TEMPORAL_WORKER)
    wait_until(lambda: long_command_started(store, task.id), "the agent's long command")
    server.stop()  # no reconciler runs meanwhile: what heals the task is `worker stop` alone
    [run] = store.runs(task.id)
    terminate_workflow(temporal_server.address, temporal_queue, task.id)

    stopped = one.errand("worker", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert store.get_task(task.id).state is S.QUEUED, stopped.stdout
    assert store.get_run(run.id).state is RunState.INTERRUPTED
    assert f"{task.id}: requeued" in stopped.stdout, stopped.stdout  # what it said is what the store says
    assert not mounted(one.home / "work" / run.id / "repo")
    store.close()
