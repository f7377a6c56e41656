from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from postgres import DATABASES, database_url
from stores import migrated

from .cli import stop_worker
from .harness import make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project")


@pytest.fixture(params=DATABASES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TaskStore]:
    """The engine's store: SQLite in the test's directory, or a fresh PostgreSQL database."""
    with TaskStore.open(migrated(database_url(request, tmp_path))) as opened:
        yield opened


#: The engines the conformance tests run on (the Temporal engine against a dev server of the session's).
ENGINES = ["local", "temporal"]


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which engine runs the test's tasks; for Temporal, its service and a task queue of the test's own."""
    if request.param == "temporal":
        server = request.getfixturevalue("temporal_server")
        request.getfixturevalue("temporal_queue")
        monkeypatch.setenv("ERRAND_TEMPORAL", server.address)
    return str(request.param)


@pytest.fixture
def service(store: TaskStore) -> TaskService:
    return TaskService(store)


@pytest.fixture
def script_file(tmp_path: Path) -> Path:
    """A model script for submissions; the engine under test gets its models from a factory."""
    path = tmp_path / "script.json"
    path.write_text("[]")
    return path


@pytest.fixture
def errand_home(tmp_path: Path) -> Iterator[Path]:
    """An errand home of this test's own; the worker `errand run` starts in it is stopped after."""
    home = tmp_path / "home"
    yield home
    stop_worker(home)
