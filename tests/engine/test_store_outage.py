"""PostgreSQL away (``pg_ctl stop -m immediate``) for longer than the store's retry time: no
task fails with the driver's message, what was cut short is requeued and runs again once the
database is back, and a person's command says what is wrong in a line, not a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import forkserver
import postgres
from errand.tasks.engines.choice import reconciler
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.round import steps
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from ports import free_port, listening_ports
from temporal import TemporalServer

from .harness import FINISH, FIX, READ, TEST, running_engine, scripted, wait_for_event, wait_for_state

pytestmark = [pytest.mark.faults]
S = TaskState


class Postgres:
    """A PostgreSQL cluster of this test's own, stopped at once (``-m immediate``) and started again."""

    def __init__(self) -> None:
        self.cluster = postgres.start()
        self.data = self.cluster.directory / "data"
        self.url = self.cluster.url(self.cluster.create_database())

    def _ctl(self, *args: str) -> None:
        subprocess.run(postgres._as_owner([str(postgres.BIN / "pg_ctl"), "-D", str(self.data), *args]),
                       check=True, capture_output=True)

    def stop(self) -> None:
        self._ctl("-m", "immediate", "-w", "stop")

    def start(self) -> None:
        options = f"-c listen_addresses='' -k {self.cluster.directory} -c fsync=off -c max_connections=200"
        self._ctl("-o", options, "-l", str(self.cluster.directory / "log"), "-w", "start")


@pytest.fixture
def pg() -> Iterator[Postgres]:
    reason = postgres.missing()
    if reason is not None:
        pytest.skip(reason)
    cluster = Postgres()
    try:
        yield cluster
    finally:
        postgres.stop(cluster.cluster)


def _errand(pg: Postgres, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "ERRAND_HOME": str(tmp_path / "home"), "ERRAND_DATABASE_URL": pg.url, **extra}


# -- the store ------------------------------------------------------------------------------------


def test_a_patient_store_tries_a_transaction_again_whose_connection_was_lost(pg: Postgres) -> None:
    """The database lost the connection in the middle of a write (its backend ended, as a stop
    or a failover ends it): the patient store writes it again once, instead of failing the step."""
    store = TaskStore.open(pg.url)
    task_id = store.create_task(title="t", instruction="i", repo="/r").id
    patient = store.patient(30)
    cut: list[int] = []

    @sa.event.listens_for(store.engine, "before_cursor_execute")
    def cut_once(connection: sa.Connection, _cursor: object, statement: str, *_args: object) -> None:
        if statement.startswith("INSERT INTO events") and not cut:
            cut.append(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
            pg.cluster.sql(f"SELECT pg_terminate_backend({cut[0]})")

    patient.append_event(task_id, None, "note", {"text": "written once"})
    assert cut, "the write's connection was not cut"
    assert [e.data for e in store.events(task_id, kinds=["note"])] == [{"text": "written once"}]
    sa.event.remove(store.engine, "before_cursor_execute", cut_once)
    store.close()


def test_a_store_that_cannot_reach_the_database_says_so_in_words(pg: Postgres) -> None:
    from errand.database import StoreUnreachable

    store = TaskStore.open(pg.url)
    task_id = store.create_task(title="t", instruction="i", repo="/r").id
    pg.stop()
    with pytest.raises(StoreUnreachable) as away:
        store.patient(1).get_task(task_id)
    assert away.value.code == "store_unreachable" and "could not be reached for 1 s" in away.value.message
    assert "running" in away.value.message and "Traceback" not in str(away.value)
    pg.start()
    assert store.patient(1).get_task(task_id).id == task_id  # back: the same store answers again
    store.close()


# -- a person's commands ------------------------------------------------------------------------


def test_errand_recover_with_the_database_down_says_what_is_wrong_in_a_line(pg: Postgres, tmp_path: Path) -> None:
    TaskStore.open(pg.url).close()
    pg.stop()
    ran = forkserver.run(["recover"], env=_errand(pg, tmp_path), timeout=120)
    assert ran.returncode == 1, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) <= 2 and "Traceback" not in ran.stderr, ran.stderr
    assert lines[-1].startswith("error: the database postgresql+psycopg://errand@/"), lines
    assert "could not be reached (" in lines[-1] and "running" in lines[-1], lines



@pytest.mark.parametrize("command", ["serve", "worker"])
def test_errand_serve_or_worker_with_the_database_down_waits_its_retry_time_then_says_why(
        command: str, pg: Postgres, tmp_path: Path) -> None:
    """A long-running process started while its database restarts does not exit at the first try (the
    worker did)."""
    TaskStore.open(pg.url).close()
    pg.stop()
    arguments = ["serve", "--no-engine", "--port", str(free_port())] if command == "serve" else ["worker"]
    ran = forkserver.run([*arguments], env=_errand(pg, tmp_path, ERRAND_STORE_RETRY_SECONDS="2"), timeout=120)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert any(line.startswith("cannot reach the database") and "trying again" in line for line in lines), lines
    assert lines[-1].startswith("error: the database ") and "could not be reached for 2 s" in lines[-1], lines


@pytest.mark.parametrize("command", [["worker"], ["ls"]])
def test_a_database_url_the_server_refuses_is_said_at_once_not_waited_for(command: list[str], pg: Postgres,
                                                                            tmp_path: Path) -> None:
    """A database or role that does not exist is the URL's fault: a worker does not wait its retry time
    (300 s here) for it (a red team's find), and a command says what to check."""
    TaskStore.open(pg.url).close()
    for wrong in (re.sub(r"@/[^?]+\?", "@/nope?", pg.url), pg.url.replace("errand@", "ghost@")):
        assert wrong != pg.url
        ran = forkserver.run([*command], env={**_errand(pg, tmp_path, ERRAND_STORE_RETRY_SECONDS="300"),
                                  "ERRAND_DATABASE_URL": wrong}, timeout=120)
        assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr
        lines = ran.stderr.strip().splitlines()
        assert not any(line.startswith("cannot reach the database") for line in lines), lines
        assert lines[-1].startswith("error: the database ") and "refused errand" in lines[-1], lines
        assert "does not exist" in lines[-1] and "check ERRAND_DATABASE_URL" in lines[-1], lines


def _started_while_the_database_is_down(pg: Postgres, tmp_path: Path, *arguments: str) -> subprocess.Popen[str]:
    """``errand ARGUMENTS`` started with the database stopped: its first line says it waits; then the
    database is started again."""
    TaskStore.open(pg.url).close()
    pg.stop()
    started = subprocess.Popen([sys.executable, "-m", "errand", *arguments],
                               env=_errand(pg, tmp_path, ERRAND_STORE_RETRY_SECONDS="300"),
                               stderr=subprocess.PIPE, text=True)
    assert started.stderr is not None
    waiting = started.stderr.readline()
    assert waiting.startswith("cannot reach the database"), waiting
    pg.start()
    return started


@pytest.mark.slow
def test_errand_worker_started_before_the_database_starts_once_it_is_up(pg: Postgres, tmp_path: Path) -> None:
    working = _started_while_the_database_is_down(pg, tmp_path, "worker")
    try:
        assert working.stderr is not None
        while True:  # the test's own timeout bounds the wait
            line = working.stderr.readline()
            assert line, f"the worker ended: {working.wait()}"
            if line.startswith("errand worker "):  # its banner: the home and the store are its
                break
        assert working.poll() is None
    finally:
        working.terminate()
        working.communicate(timeout=60)


@pytest.mark.slow
def test_errand_serve_started_before_the_database_serves_once_it_is_up(pg: Postgres, tmp_path: Path) -> None:
    port = free_port()
    serving = _started_while_the_database_is_down(pg, tmp_path, "serve", "--no-engine", "--port", str(port))
    try:
        assert serving.stderr is not None
        deadline = time.monotonic() + 120
        while True:
            assert serving.poll() is None, serving.stderr.read()
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                if answer.status == 200 and port in listening_ports(serving.pid):  # ours (tests/ports.py)
                    break
            assert time.monotonic() < deadline, "serve did not answer once the database was up"
            time.sleep(0.2)
    finally:
        serving.terminate()
        serving.communicate(timeout=60)


def test_the_api_with_the_database_down_says_so_and_answers_again_once_it_is_back(
        pg: Postgres, tmp_path: Path) -> None:
    """A person's commands against a server whose database went away: 503 and a sentence that
    names the database (not "the server failed unexpectedly"), no traceback in the server's log;
    the same commands work once it is back."""
    TaskStore.open(pg.url).close()
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as output:
        serving = subprocess.Popen([sys.executable, "-m", "errand", "serve", "--no-engine", "--port", str(port)],
                                   env=_errand(pg, tmp_path, ERRAND_STORE_RETRY_SECONDS="1"), stdout=output,
                                   stderr=output)
    person = {**os.environ, "ERRAND_HOME": str(tmp_path / "person"), "ERRAND_SERVER": f"http://127.0.0.1:{port}"}

    def errand(*args: str) -> subprocess.CompletedProcess[str]:
        return forkserver.run([*args], env=person, timeout=120)

    try:
        deadline = time.monotonic() + 120
        while (listed := errand("ls")).returncode != 0 or port not in listening_ports(serving.pid):
            assert serving.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        pg.stop()
        for args in (("ls",), ("show", "t-00000000")):
            away = errand(*args)
            assert away.returncode != 0, away.stdout
            assert "cannot reach its database" in away.stderr and "unexpectedly" not in away.stderr, away.stderr
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tasks", timeout=60)
        problem = json.loads(refused.value.read())
        assert (refused.value.code, problem["code"]) == (503, "store_unreachable"), problem
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
        pg.start()
        deadline = time.monotonic() + 120
        while (listed := errand("ls")).returncode != 0:
            assert time.monotonic() < deadline, listed.stderr
            time.sleep(0.2)
    finally:
        serving.terminate()
        serving.wait(timeout=60)


async def _until(condition: Callable[[], object], *, seconds: float) -> None:
    """Wait until ``condition()`` says nothing is left (what it returns is shown if something stays)."""
    deadline = time.monotonic() + seconds
    while left := condition():
        assert time.monotonic() < deadline, f"still there after {seconds} s: {left}"
        await asyncio.sleep(0.1)


# -- the Temporal engine ------------------------------------------------------------------------

#: The store's retry time in this test, and an outage well past it: the agent's long command ends
#: (and the attempt with it) while the database is away.
RETRY = 3.0
AWAY = 20.0
SLOW_COMMAND = [[READ], [("shell", {"command": "sleep 6"})], [FIX], [TEST], [FINISH]]


@pytest.mark.slow
@pytest.mark.serial  # an outage timed against a retry time, as test_outages.py's
async def test_postgres_away_past_the_retry_time_while_an_attempt_ends_requeues_the_round(
        repo: Path, script_file: Path, pg: Postgres, temporal_server: TemporalServer, temporal_queue: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_TEMPORAL", temporal_server.address)
    monkeypatch.setenv("ERRAND_STORE_RETRY_SECONDS", str(RETRY))
    store = TaskStore.open(pg.url)
    task_id = TaskService(store).submit("Make test_calc.py pass", repo=repo, model=f"scripted:{script_file}").id
    stop = asyncio.Event()
    async with running_engine(store, lambda _s, _i: scripted(SLOW_COMMAND), kind="temporal") as worker:
        # errand serve's reconciler, as it runs there (a pass a second, here).
        healing = asyncio.create_task(reconciler("temporal", store, grace=1.0).serve(stop, interval=1.0))
        try:
            await wait_for_event(store, task_id, lambda e: e.kind == "tool_call" and e.data.get("name") == "shell")
            await asyncio.to_thread(pg.stop)
            await asyncio.sleep(AWAY)
            await asyncio.to_thread(pg.start)
            await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED, seconds=300)
            # The worker let the cut round go: it holds no round, and no copy of a run is left.
            await _until(lambda: (*worker.held(), *steps.work_runs()), seconds=120)
        finally:
            stop.set()
            await healing
    events = store.events(task_id)
    said = [str(event.data) for event in events]
    assert not [text for text in said if "OperationalError" in text], said
    assert store.get_task(task_id).state is S.READY_FOR_REVIEW, said[-4:]
    assert [run.state for run in store.runs(task_id)] == [RunState.INTERRUPTED, RunState.SUCCEEDED]
    reasons = [event.data["reason"] for event in events if event.kind == "recovered"]
    assert reasons and all("database" in reason for reason in reasons), reasons
    store.close()
