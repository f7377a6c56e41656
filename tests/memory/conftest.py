from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from errand.memory import E5Embedder, MemoryStore
from stores import migrated


@pytest.fixture(scope="session")
def embedder() -> E5Embedder:
    # One loaded model for the whole session (its weights are mapped; loading takes a fraction of a second).
    return E5Embedder()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'errand.db'}"


@pytest.fixture
def store(url: str, embedder: E5Embedder) -> Iterator[MemoryStore]:
    with MemoryStore.open(migrated(url), embedder=embedder) as opened:
        yield opened


@pytest.fixture
def lexical_store(url: str) -> Iterator[MemoryStore]:
    """A store with no embedder: BM25 alone."""
    with MemoryStore.open(migrated(url), embedder=None) as opened:
        yield opened
