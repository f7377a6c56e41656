"""Dense vectors of memories: written beside each memory, searched from an in-process matrix.

Vectors live in ``memory_vectors`` (float32 bytes, one row per memory and
embedder); a text already embedded (the same fingerprint) reuses its vector.
Searching reads them once per project into one numpy matrix, kept until the
project's generation moves (a write to its texts or statuses moves it),
so a search is one matrix-vector product (~0.7 ms for 10,000 memories), made
on the caller's thread. Only imported when an embedder is configured (it needs
numpy).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from errand.memory.embedders import Embedder
from errand.memory.schema import memories, memory_vectors
from errand.memory.text import fingerprint

__all__ = ["VectorIndex"]

T = TypeVar("T")

_STATUSES = ("proposed", "active", "archived")


@dataclass(frozen=True)
class _Matrix:
    generation: int
    ids: NDArray[np.int64]
    statuses: NDArray[np.int8]  # index into _STATUSES
    vectors: NDArray[np.float32]


class VectorIndex:
    """The vectors of one embedder, per project, cached by generation."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._cache: dict[str, _Matrix] = {}
        self._lock = threading.Lock()

    def write(self, connection: sa.Connection, project: str, items: Sequence[tuple[int, str]]) -> None:
        """Embed and store (replacing) the vectors of ``(memory id, text)`` pairs."""
        if not items:
            return
        ids = [memory_id for memory_id, _ in items]
        # The vectors these memories hold now are not reused: an edited memory's row already carries
        # its new text's fingerprint beside its old text's vector.
        known = self._known(connection, sorted({fingerprint(text) for _, text in items}), set(ids))
        fresh = list({fingerprint(text): text for _, text in items if fingerprint(text) not in known}.values())
        for text, vector in zip(fresh, self.embedder.embed(fresh), strict=True):
            known[fingerprint(text)] = np.ascontiguousarray(vector, dtype="<f4").tobytes()
        for chunk in _chunks(ids):
            connection.execute(memory_vectors.delete().where(memory_vectors.c.model == self.embedder.name,
                                                             memory_vectors.c.memory_id.in_(chunk)))
        connection.execute(memory_vectors.insert(), [
            {"memory_id": memory_id, "model": self.embedder.name, "project": project,
             "vector": known[fingerprint(text)]}
            for memory_id, text in items
        ])

    def _known(self, connection: sa.Connection, fingerprints: list[str], rewritten: set[int]) -> dict[str, bytes]:
        """Vectors this embedder already made for texts with these fingerprints (in any project), but
        not those of the ``rewritten`` memories."""
        known: dict[str, bytes] = {}
        for chunk in _chunks(fingerprints):
            query = (sa.select(memories.c.fingerprint, memory_vectors.c.memory_id, memory_vectors.c.vector)
                     .join(memories, memories.c.id == memory_vectors.c.memory_id)
                     .where(memory_vectors.c.model == self.embedder.name, memories.c.fingerprint.in_(chunk)))
            known.update((str(row[0]), bytes(row[2])) for row in connection.execute(query)
                         if int(row[1]) not in rewritten)
        return known

    def search(
        self, connection: sa.Connection, project: str, generation: int, query: NDArray[np.float32],
        statuses: Sequence[str], limit: int,
    ) -> list[tuple[int, float]]:
        """``(memory id, cosine)`` best first among memories in ``statuses``, for a query's vector.

        The vectors are read (if not cached) and scored here, on the caller's thread: handing the
        ~1 ms product to a worker so BM25 could run beside it cost more than it saved (waking the
        worker and waiting for it took 7 ms a query when the two cores were busy).
        """
        return _nearest(self._matrix(connection, project, generation), query, statuses, limit)

    def missing(self, connection: sa.Connection, project: str) -> list[tuple[int, str]]:
        """Memories of the project with no vector from this embedder (stored before it was configured)."""
        have = sa.select(memory_vectors.c.memory_id).where(memory_vectors.c.model == self.embedder.name)
        query = sa.select(memories.c.id, memories.c.text).where(
            memories.c.project == project, memories.c.id.not_in(have)
        )
        return [(int(row[0]), str(row[1])) for row in connection.execute(query)]

    def _matrix(self, connection: sa.Connection, project: str, generation: int) -> _Matrix:
        with self._lock:
            cached = self._cache.get(project)
            if cached is not None and cached.generation == generation:
                return cached
        query = (
            sa.select(memory_vectors.c.memory_id, memories.c.status, memory_vectors.c.vector)
            .join(memories, memories.c.id == memory_vectors.c.memory_id)
            .where(memory_vectors.c.project == project, memory_vectors.c.model == self.embedder.name)
            .order_by(memory_vectors.c.memory_id)
        )
        rows = connection.execute(query).all()
        if rows:
            vectors = np.frombuffer(b"".join(row[2] for row in rows), dtype="<f4").reshape(len(rows), -1)
        else:
            vectors = np.zeros((0, 0), dtype=np.float32)
        matrix = _Matrix(
            generation, np.array([row[0] for row in rows], dtype=np.int64),
            np.array([_STATUSES.index(row[1]) for row in rows], dtype=np.int8), vectors.astype(np.float32),
        )
        with self._lock:
            self._cache[project] = matrix
        return matrix


def _nearest(matrix: _Matrix, query: NDArray[np.float32], statuses: Sequence[str],
             limit: int) -> list[tuple[int, float]]:
    if not len(matrix.ids):
        return []
    # einsum, not `@`: a matrix-vector product goes to multi-threaded BLAS, whose threads fight
    # for two busy cores (8 ms for 10,000 × 256 under load); einsum's own loop took ~0.5 ms.
    scores = np.einsum("ij,j->i", matrix.vectors, query)
    wanted = np.array([_STATUSES.index(status) for status in statuses], dtype=np.int8)
    scores = np.where(np.isin(matrix.statuses, wanted), scores, -np.inf)
    count = min(limit, len(scores))
    top = np.argpartition(-scores, count - 1)[:count]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(matrix.ids[i]), float(scores[i])) for i in top if np.isfinite(scores[i])]


def _chunks(values: Sequence[T], size: int = 500) -> list[Sequence[T]]:
    """Slices small enough for every database's bound-parameter limit."""
    return [values[start:start + size] for start in range(0, len(values), size)]
