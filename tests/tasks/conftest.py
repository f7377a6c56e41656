from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from errand.tasks.store import TaskStore


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'errand.db'}"


@pytest.fixture
def store(url: str) -> Iterator[TaskStore]:
    with TaskStore.open(url) as opened:
        yield opened
