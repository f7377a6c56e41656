"""Any number of processes may open a fresh database at once (``errand serve`` and its workers
started together): the migrations take a lock, and every process ends up on the newest schema."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from errand.tasks.store.tasks import TaskStore

pytestmark = pytest.mark.faults

# Each process connects first, then waits for the go file: they all migrate in the same instant.
OPEN_AT_ONCE = """
import os, sys, time
from pathlib import Path
from errand.database import connect, migrate
engine = connect(sys.argv[1])
engine.connect().close()
Path(sys.argv[2] + f".{os.getpid()}").touch()
while not Path(sys.argv[2]).exists():
    time.sleep(0.001)
migrate(engine)
print("migrated")
"""
PROCESSES = 6


def _migrate_at_once(url: str, tmp_path: Path) -> list[subprocess.CompletedProcess[str]]:
    go = tmp_path / "go"
    started = [subprocess.Popen([sys.executable, "-c", OPEN_AT_ONCE, url, str(go)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(PROCESSES)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.*"))) < PROCESSES:
        if time.monotonic() > deadline or any(p.poll() is not None for p in started):
            # One died (or none got there): the others wait for a go that never comes. End them
            # first, or reading what they said waits for ever (it did, in CI).
            for process in started:
                process.kill()
            said = [process.communicate(timeout=60) for process in started]
            raise AssertionError(f"the processes did not all connect: {said}")
        time.sleep(0.01)
    go.touch()
    ended = []
    for process in started:
        out, err = process.communicate(timeout=300)
        ended.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return ended


def _fresh_url(database: str, directory: Path, request: pytest.FixtureRequest) -> str:
    if database == "sqlite":
        return f"sqlite:///{directory / 'errand.db'}"
    cluster = request.getfixturevalue("postgres_cluster")
    name = cluster.create_database()
    request.addfinalizer(lambda: cluster.drop_database(name))
    return str(cluster.url(name))


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def test_processes_migrating_a_fresh_database_at_once_all_start(database: str, tmp_path: Path,
                                                                request: pytest.FixtureRequest) -> None:
    for attempt in range(3):  # a race lost once is a failure; won three times over is evidence
        directory = tmp_path / f"round{attempt}"
        directory.mkdir()
        url = _fresh_url(database, directory, request)
        ended = _migrate_at_once(url, directory)
        assert [e.returncode for e in ended] == [0] * PROCESSES, "\n".join(e.stderr[-2000:] for e in ended)
        with TaskStore.open(url) as store:
            task = store.create_task(title="t", instruction="i", repo="/r")
            assert store.get_task(task.id) == task
