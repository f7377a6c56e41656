"""The Temporal engine through outages longer than any retry budget: the Temporal dev server
killed while a task is submitted, PostgreSQL stopped with ``pg_ctl`` while rounds run. When the
dependency comes back, the work goes on; nothing stays ``preparing`` or ``running`` for good."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import postgres
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event, RunState
from errand.tasks.round import steps
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from temporal import TemporalServer, started

from .harness import (
    ERRAND_TOML,
    FINISH,
    FIX,
    FIX_SCRIPT,
    READ,
    TEST,
    make_repo,
    running_engine,
    scripted,
    wait_for_event,
    wait_for_state,
)

# serial: a dependency taken away and brought back is timed against retry budgets; beside three other
# workers a PostgreSQL restart once took minutes and the budget ran out (the test alone: 40 s).
pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.serial]
S = TaskState
#: The Temporal client retries a call for ~17 s before it gives up (FIELD-NOTES): an outage longer.
PAST_THE_CLIENTS_RETRIES = 25.0


@pytest.fixture
def own_temporal(monkeypatch: pytest.MonkeyPatch, temporal_queue: str) -> Iterator[TemporalServer]:
    """A Temporal dev server of this test's own (it is killed), in this process's environment."""
    server = started()
    monkeypatch.setenv("ERRAND_TEMPORAL", server.address)
    try:
        yield server
    finally:
        server.remove()


async def _why_stranded(store: TaskStore, task_id: str, server: TemporalServer) -> str:
    """What a task left stranded shows: its last events, the outbox, its workflow's history as the
    service tells it, and the end of the server's log (the engine's own log is pytest's captured log)."""
    from temporalio.client import Client
    from temporalio.service import RPCError

    from errand.tasks.engines.temporal import TemporalSettings
    from errand.tasks.engines.temporal.outbox import Outbox

    said = [f"task {task_id}: {store.get_task(task_id).state}",
            f"last events: {[(e.kind, e.data) for e in store.events(task_id)][-8:]}",
            f"outbox: {Outbox(store).pending()}"]
    settings = TemporalSettings.from_environment()
    try:
        client = await asyncio.wait_for(Client.connect(settings.address, namespace=settings.namespace), 30)
        handle = client.get_workflow_handle(settings.workflow_id(task_id))
        described = await asyncio.wait_for(handle.describe(), 30)
        said.append(f"workflow {handle.id}: {described.status}, pending activities: "
                    f"{described.raw_description.pending_activities}")
        history = await asyncio.wait_for(handle.fetch_history(), 30)
        said += [f"  {event.event_id} {event.event_time.ToDatetime():%H:%M:%S.%f} "
                 f"{event.WhichOneof('attributes')}: {str(getattr(event, event.WhichOneof('attributes') or ''))[:600]}"
                 for event in history.events]
    except (RuntimeError, RPCError, TimeoutError) as error:  # what the service could not say is part of the story
        said.append(f"the service said nothing of the workflow: {error!r}")
    log = (server.directory / "server.log").read_text(errors="replace").splitlines()
    said += ["the server's log, its end:", *log[-40:]]
    return "\n".join(said)


async def _finished(store: TaskStore, task_id: str, server: TemporalServer) -> TaskState:
    """The task's state once it finished (the story of what stranded it, if it did not)."""
    try:
        return (await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED, seconds=300)).state
    except AssertionError as stranded:
        raise AssertionError(f"{stranded}\n{await _why_stranded(store, task_id, server)}") from None


async def test_a_task_submitted_while_temporal_is_down_runs_when_it_is_back(
        tmp_path: Path, repo: Path, script_file: Path, own_temporal: TemporalServer) -> None:
    store = TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}")
    service = TaskService(store)
    model = scripted(FIX_SCRIPT)
    async with running_engine(store, lambda _s, _i: model, kind="temporal"):
        own_temporal.kill()
        task = service.submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
        await wait_for_state(store, task.id, S.PREPARING)  # claimed: its round is on its way to Temporal
        await asyncio.sleep(PAST_THE_CLIENTS_RETRIES)
        assert store.get_task(task.id).state is S.PREPARING
        await asyncio.to_thread(own_temporal.start)  # the same state file and port
        finished = await _finished(store, task.id, own_temporal)
    assert finished is S.READY_FOR_REVIEW, store.events(task.id)[-4:]
    [run] = store.runs(task.id)  # one round, though its dispatch was tried again and again
    assert run.state is RunState.SUCCEEDED
    store.close()


async def test_an_engine_started_while_temporal_is_down_begins_rounds_when_it_is_back(
        tmp_path: Path, repo: Path, script_file: Path, own_temporal: TemporalServer) -> None:
    """The round worker's and the workflows' temporalio workers fail their first check of the service
    while it is away; each is started again, so the round begins once it is back. (The final run of a
    session saw the round worker die with "Worker validation failed", which nothing restarted: the
    task stayed preparing.)"""
    store = TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}")
    service = TaskService(store)
    model = scripted(FIX_SCRIPT)
    own_temporal.kill()
    async with running_engine(store, lambda _s, _i: model, kind="temporal"):
        task = service.submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
        await asyncio.sleep(PAST_THE_CLIENTS_RETRIES)
        await asyncio.to_thread(own_temporal.start)  # the same state file and port
        finished = await _finished(store, task.id, own_temporal)
    assert finished is S.READY_FOR_REVIEW, store.events(task.id)[-4:]
    [run] = store.runs(task.id)
    assert run.state is RunState.SUCCEEDED
    store.close()


async def test_an_engine_started_before_its_namespace_exists_begins_rounds_once_it_does(
        tmp_path: Path, repo: Path, script_file: Path, temporal_server: TemporalServer, temporal_queue: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Each of the engine's temporalio workers connects, then fails its first check of the service
    (its namespace is not there yet, as after a restart that lost it, or a deploy that starts the
    workers first), and is started again. A worker that fails that check stays registered with its
    client: made again on the same client, it was refused ("Registration of multiple workers") at
    every try, and the task stayed preparing for good once the namespace was there."""
    from datetime import timedelta

    from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
    from temporalio.client import Client

    namespace = f"{temporal_queue}-later"
    monkeypatch.setenv("ERRAND_TEMPORAL", temporal_server.address)
    monkeypatch.setenv("ERRAND_TEMPORAL_NAMESPACE", namespace)
    store = TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}")
    model = scripted(FIX_SCRIPT)
    failed = ("the begin queue's worker ended", "this worker's own queue's worker ended", "the workflows' worker ended")
    async with running_engine(store, lambda _s, _i: model, kind="temporal"):
        task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
        for _ in range(1200):  # each of the three failed its check at least once
            said = [record.getMessage() for record in caplog.records]
            if all(any(line.startswith(which) for line in said) for which in failed):
                break
            await asyncio.sleep(0.1)
        client = await Client.connect(temporal_server.address)
        await client.workflow_service.register_namespace(RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=timedelta(days=1)))
        finished = await _finished(store, task.id, temporal_server)
    assert all(any(r.getMessage().startswith(which) for r in caplog.records) for which in failed), failed
    assert finished is S.READY_FOR_REVIEW, store.events(task.id)[-4:]
    store.close()


#: Past the outage and the server's start again: the agent's command still runs when the service is back.
OUTLASTING_THE_OUTAGE = [[READ], [("shell", {"command": f"sleep {PAST_THE_CLIENTS_RETRIES + 20:g}"})], [FIX], [TEST],
                         [FINISH]]


async def _restarted_while(store: TaskStore, task_id: str, server: TemporalServer, worker: Any,
                           caught: Callable[[Event], bool]) -> list[Event]:
    """Kill the service once ``caught`` is seen, for longer than the client retries, and start it again
    on its state; the task's events once it finished with one round, one succeeded run, nothing taken
    for lost, and the round closed on its worker (its copies gone)."""
    await wait_for_event(store, task_id, caught, last=0.05)
    server.kill()
    await asyncio.sleep(PAST_THE_CLIENTS_RETRIES)
    await asyncio.to_thread(server.start)  # the same state file and port
    finished = await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED, seconds=300)
    for _ in range(600):
        if not steps.work_runs():
            break
        await asyncio.sleep(0.1)
    assert not steps.work_runs() and not worker.held()
    events = store.events(task_id, limit=100_000)
    assert finished.state is S.READY_FOR_REVIEW, [(e.kind, e.data) for e in events][-6:]
    said = [(e.kind, e.data) for e in events if e.kind in ("recovered", "round_started")]
    assert len(store.runs(task_id)) == 1, said  # it went on where it was: no second round
    [run] = store.runs(task_id)
    assert run.state is RunState.SUCCEEDED
    assert [e for e in events if e.kind in ("recovered", "run_interrupted")] == []
    assert len([e for e in events if e.kind == "round_started"]) == 1
    return events


async def test_a_temporal_restart_does_not_interrupt_an_attempt_whose_worker_lives(
        tmp_path: Path, repo: Path, script_file: Path, own_temporal: TemporalServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A lease far shorter than the outage: the attempt's heartbeats time out while the service is away.
    monkeypatch.setenv("ERRAND_WORKER_LEASE", "5")
    store = TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}")
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
    async with running_engine(store, lambda _s, _i: scripted(OUTLASTING_THE_OUTAGE), kind="temporal") as worker:
        events = await _restarted_while(store, task.id, own_temporal, worker,
                                        lambda e: e.kind == "tool_call" and e.data.get("name") == "shell")
    # The agent's long command ran once: the attempt was not begun again on the same worker either.
    assert len([e for e in events if e.kind == "tool_call" and "sleep" in str(e.data.get("arguments"))]) == 1
    store.close()


#: A command that ends while the service is away: the agent's next step comes after the cancel.
ENDING_WHILE_AWAY = [[READ], [("shell", {"command": "sleep 3"})], [FIX], [TEST], [FINISH]]


async def test_a_task_cancelled_while_temporal_is_down_is_worked_on_no_further(
        tmp_path: Path, repo: Path, script_file: Path, own_temporal: TemporalServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A person cancels while the service is away, so the cancel cannot reach the worker: the
    agent's next step is refused (its run takes no more events), the worker ends the round, and
    once the service is back the run ends as taken, never ``succeeded`` (a stranger's find: the
    agent edited, tested and finished, and the run was recorded succeeded under the cancelled task)."""
    monkeypatch.setenv("ERRAND_WORKER_LEASE", "5")
    store = TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}")
    service = TaskService(store)
    task = service.submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
    async with running_engine(store, lambda _s, _i: scripted(ENDING_WHILE_AWAY), kind="temporal") as worker:
        await wait_for_event(store, task.id, lambda e: e.kind == "tool_call" and e.data.get("name") == "shell",
                             last=0.05)
        own_temporal.kill()
        service.cancel(task.id)
        [cancel] = [e for e in store.events(task.id, limit=100_000) if e.kind == "cancelled"]
        await asyncio.sleep(PAST_THE_CLIENTS_RETRIES)
        await asyncio.to_thread(own_temporal.start)  # the same state file and port
        for _ in range(3000):
            if not any(run.state is RunState.RUNNING for run in store.runs(task.id)) and not worker.held() \
                    and not steps.work_runs():
                break
            await asyncio.sleep(0.1)
    [run] = store.runs(task.id)
    events = store.events(task.id, limit=100_000)
    assert store.get_task(task.id).state is S.CANCELLED
    assert run.state in (RunState.CANCELLED, RunState.INTERRUPTED), [(e.kind, e.data) for e in events][-6:]
    after = [(e.kind, e.data) for e in events if e.id > cancel.id and e.run_id == run.id]
    assert after == [], after  # the agent took no step in the cancelled task's name
    store.close()


async def test_a_temporal_restart_during_a_rounds_start_does_not_begin_the_round_again(
        tmp_path: Path, script_file: Path, own_temporal: TemporalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # The round's start (its setup command) outlasts the outage: its heartbeats time out while the
    # service is away, and its worker goes on preparing the round.
    monkeypatch.setenv("ERRAND_WORKER_LEASE", "5")
    repo = make_repo(tmp_path / "project", toml=ERRAND_TOML + "[setup]\ncommands = "
                     f'["echo {tmp_path.name}; sleep {PAST_THE_CLIENTS_RETRIES + 20:g}"]\n')
    store = TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}")
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
    async with running_engine(store, lambda _s, _i: scripted(FIX_SCRIPT), kind="temporal") as worker:
        events = await _restarted_while(store, task.id, own_temporal, worker, lambda e: e.kind == "setup_started")
    assert len([e for e in events if e.kind == "setup_started"]) == 1  # its setup ran once
    store.close()


async def test_a_temporal_restart_while_a_round_concludes_takes_the_concluded_round_as_it_ended(
        tmp_path: Path, repo: Path, script_file: Path, own_temporal: TemporalServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The service goes as the agent finishes: the round concludes on its worker while the service is
    # away, so the attempt's end (it concluded) does not reach it. Taken up again, the attempt is found
    # ended on its worker, with that end.
    monkeypatch.setenv("ERRAND_WORKER_LEASE", "5")
    store = TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}")
    task = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}")
    async with running_engine(store, lambda _s, _i: scripted(FIX_SCRIPT), kind="temporal") as worker:
        events = await _restarted_while(store, task.id, own_temporal, worker,
                                        lambda e: e.kind == "tool_call" and e.data.get("name") == "finish")
    checks = [str(e.data.get("command")) for e in events if e.kind == "check_started"]
    assert checks and len(checks) == len(set(checks)), checks  # each check ran once: concluded once
    store.close()


class OwnCluster:
    """A PostgreSQL cluster of this test's own, stopped with ``pg_ctl`` and started again on its data."""

    def __init__(self) -> None:
        self.cluster = postgres.start()
        self.data = self.cluster.directory / "data"

    def url(self) -> str:
        name = self.cluster.create_database()
        return self.cluster.url(name)

    def stop(self) -> None:
        subprocess.run(postgres._as_owner([str(postgres.BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                                           "stop"]), check=True, capture_output=True)

    def start(self) -> None:
        options = f"-c listen_addresses='' -k {self.cluster.directory} -c fsync=off -c max_connections=200"
        subprocess.run(postgres._as_owner([str(postgres.BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                                           str(self.cluster.directory / "log"), "-w", "start"]),
                       check=True, capture_output=True)

    def remove(self) -> None:
        postgres.stop(self.cluster)


@pytest.fixture
def own_postgres() -> Iterator[OwnCluster]:
    reason = postgres.missing()
    if reason is not None:
        pytest.skip(reason)
    cluster = OwnCluster()
    try:
        yield cluster
    finally:
        cluster.remove()


#: Past what errand.settle's five tries lasted on main (~8 s), well within the store's retry time.
POSTGRES_AWAY = 20.0
SLOW_COMMAND = [[READ], [("shell", {"command": "sleep 6"})], [FIX], [TEST], [FINISH]]


async def test_postgres_stopped_during_rounds_and_started_again_the_rounds_settle(
        repo: Path, script_file: Path, own_postgres: OwnCluster, temporal_server: TemporalServer,
        temporal_queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_TEMPORAL", temporal_server.address)
    monkeypatch.setenv("ERRAND_STORE_RETRY_SECONDS", "180")
    # An outage within the workers' lease is what this drills: 20 s away, then PostgreSQL's start and
    # a retry's pause of up to 5 s on a machine running other drills, passed the default 30 s lease
    # once in CI (the worker's lease lapsed, its run was requeued and succeeded as a second run).
    monkeypatch.setenv("ERRAND_WORKER_LEASE", "90")
    store = TaskStore.open(own_postgres.url())
    service = TaskService(store)
    tasks = [service.submit(f"Make test_calc.py pass ({n})", repo=repo, model=f"scripted:{script_file}").id
             for n in range(2)]
    async with running_engine(store, lambda _s, _i: scripted(SLOW_COMMAND), kind="temporal"):
        for task_id in tasks:  # both rounds are in their agents' long command
            await wait_for_event(store, task_id, lambda e: e.kind == "tool_call" and e.data.get("name") == "shell")
        await asyncio.to_thread(own_postgres.stop)
        await asyncio.sleep(POSTGRES_AWAY)
        await asyncio.to_thread(own_postgres.start)
        for task_id in tasks:
            await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED, seconds=300)
    for task_id in tasks:
        assert store.get_task(task_id).state is S.READY_FOR_REVIEW, store.events(task_id)[-4:]
        assert [run.state for run in store.runs(task_id)] == [RunState.SUCCEEDED]
    store.close()
