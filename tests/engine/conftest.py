from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from errand.tasks.service import TaskService
from errand.tasks.store import TaskStore

from .harness import make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TaskStore]:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as opened:
        yield opened


@pytest.fixture
def service(store: TaskStore) -> TaskService:
    return TaskService(store)


@pytest.fixture
def script_file(tmp_path: Path) -> Path:
    """A model script for submissions; the engine under test gets its models from a factory."""
    path = tmp_path / "script.json"
    path.write_text("[]")
    return path
