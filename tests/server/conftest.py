"""A real ``errand serve`` on loopback (uvicorn, SQLite, sandboxes), with a model that
answers over the OpenAI wire protocol from a loopback server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import components
import forkserver
from engine.harness import Turn, make_repo, openai_turn
from errand.tasks.lifecycle import FINAL
from models.wire import WireServer
from mounts import unmount_under
from polling import pauses
from ports import free_port, listening_ports

from .agents import Agents
from .browsing import CHROMIUM


@dataclass
class Served:
    url: str
    process: forkserver.Process
    log: Path
    database: str
    root: Path

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                # Killed mid-round, it could not unmount the round's working copy: do it here, or
                # the overlay outlives the test (and pytest's clean-up of its directory).
                unmount_under(self.root)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(tmp: Path, *args: str, env: dict[str, str] | None = None, host: str = "127.0.0.1",
                 token: str | None = None) -> Served:
    port = free_port()
    database = f"sqlite:///{tmp / 'errand.db'}"
    environment = {**os.environ, "ERRAND_DATABASE_URL": database, **(env or {})}
    environment.pop("ERRAND_TOKEN", None)
    log = tmp / f"serve-{port}.log"
    command = ["serve", "--host", host, "--port", str(port), *args]
    if token:
        command += ["--token", token]
    with open(log, "wb") as output:
        process = forkserver.start(command, env=environment, stdout=output, stderr=output, cwd=tmp)
    served = Served(f"http://127.0.0.1:{port}", process, log, database, tmp)
    _logs[served.url] = log
    deadline = time.monotonic() + 60
    while True:
        try:
            if port in listening_ports(process.pid):  # not another test's server on the port (tests/ports.py)
                httpx.get(f"{served.url}/static/style.css", timeout=2)
                return served
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            served.stop()
            raise AssertionError(f"errand serve did not start:\n{served.output()}") from None
        time.sleep(0.1)


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


@pytest.fixture
def serve(tmp_path: Path, wire: WireServer) -> Iterator[Callable[..., Served]]:
    """Start servers pointed at ``wire``; each is stopped (SIGTERM) after the test."""
    started: list[Served] = []

    def start(*args: str, **options: object) -> Served:
        env = {"OPENAI_BASE_URL": f"{wire.url}/v1", "OPENAI_API_KEY": "sk-wire", **dict(options.pop("env", {}))}
        served = start_server(tmp_path, *args, env=env, **options)  # type: ignore[arg-type]
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


@pytest.fixture
def agents() -> Iterator[Agents]:
    """A model server playing one script per conversation (see :mod:`.agents`)."""
    server = Agents().start()
    yield server
    server.stop()


@pytest.fixture
def served(tmp_path: Path, agents: Agents) -> Iterator[Served]:
    server = start_server(tmp_path, env={"OPENAI_BASE_URL": f"{agents.url}/v1", "OPENAI_API_KEY": "sk-wire"})
    yield server
    server.stop()


@pytest.fixture
def artifacts() -> Path:
    root = Path(os.environ.get("ERRAND_TEST_ARTIFACTS") or tempfile.gettempdir()) / "errand-browser"
    directory = root / time.strftime("%Y%m%d-%H%M%S")
    directory.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {directory}")
    return directory


@pytest.fixture
def browser() -> Iterator[Any]:
    components.require("chromium")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project")


def queue_turns(wire: WireServer, script: list[Turn]) -> None:
    for n, turn in enumerate(script):
        wire.answer(openai_turn(turn, n))


_logs: dict[str, Path] = {}  # each started server's log, by its URL: wait_state quotes it


def wait_state(client: httpx.Client, task_id: str, *states: str, seconds: float = 120) -> dict[str, object]:
    """Wait for the task to reach one of ``states``. A task that ends elsewhere (failed, say) or
    stays put fails the test with its last events and the tail of the server's log, where a
    failure's traceback is: CI keeps the assertion's message, not the test's directory."""
    deadline = time.monotonic() + seconds
    for pause in pauses():
        task: dict[str, object] = client.get(f"/api/tasks/{task_id}").json()
        if task["state"] in states:
            return task
        if task["state"] in FINAL or time.monotonic() > deadline:
            events = client.get(f"/api/tasks/{task_id}/events").json()[-6:]
            raise AssertionError(f"task is {task['state']}, not {states}: {json.dumps(events)[:2000]}"
                                 f"{_log_tail(client)}")
        time.sleep(pause)
    raise AssertionError("unreachable")  # pauses() never ends


def _log_tail(client: httpx.Client, lines: int = 60) -> str:
    log = _logs.get(str(client.base_url).rstrip("/"))
    if log is None or not log.exists():
        return ""
    tail = log.read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- the last {len(tail)} lines of {log.name} ---\n" + "\n".join(tail)
