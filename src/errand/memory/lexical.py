"""Lexical (BM25) search over one project's memories, with that project's own statistics.

:class:`ProjectIndex` ranks a project's memories by Okapi BM25 computed over
that project alone: how rare a word is, and how long a memory is, are measured
among its own memories, so adding another project's memories to the store
never moves this one's ranking (FTS5's ``bm25()`` measures over the whole
table, every project together). It is held in memory per project, as numpy
arrays, and rebuilt when the project's generation moves; a rebuild reuses the
terms of every memory whose text did not change. Scoring is a few vector
additions per query term (about a millisecond for 10,000 memories).

Queries are built for what agents ask: questions and task descriptions lose
their framing words (:func:`~errand.memory.text.query_terms`); terms are OR-ed.

The FTS5 table ``memories_fts`` is still what :func:`fts5_search` reads: the
store's duplicate check asks it for a few candidates on every ``add()``, where
the per-project statistics do not matter and a rebuild per write would.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from errand.memory.schema import FTS_TABLE, memories
from errand.memory.text import query_terms, search_terms

__all__ = ["MAX_QUERY_TERMS", "ProjectIndex", "fts5_available", "fts5_search", "query_terms"]

MAX_QUERY_TERMS = 32
_STATUSES = ("proposed", "active", "archived")


def fts5_available(connection: sa.Connection) -> bool:
    if connection.dialect.name != "sqlite":
        return False
    found = connection.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (FTS_TABLE,)
    ).first()
    return found is not None


def fts5_search(
    connection: sa.Connection, project: str, query: str, statuses: Sequence[str], limit: int
) -> list[tuple[int, float]]:
    """``(memory id, score)`` best first by FTS5's ``bm25()`` (higher is better): candidates, not a ranking."""
    words = query_terms(query)[:MAX_QUERY_TERMS]
    if not words:
        return []
    expression = " OR ".join('"' + word.replace('"', '""') + '"' for word in words)
    marks = ", ".join("?" for _ in statuses)
    rows = connection.exec_driver_sql(
        f"SELECT m.id, bm25({FTS_TABLE}) FROM {FTS_TABLE} JOIN memories m ON m.id = {FTS_TABLE}.rowid "
        f"WHERE {FTS_TABLE} MATCH ? AND m.project = ? AND m.status IN ({marks}) "
        f"ORDER BY bm25({FTS_TABLE}) LIMIT ?",
        (expression, project, *statuses, limit),
    ).all()
    return [(int(row[0]), -float(row[1])) for row in rows]


@dataclass
class ProjectIndex:
    """Okapi BM25 over one project's memories. ``k1`` and ``b`` were chosen on the tuning split of
    ``benchmarks/memory.py`` (a grid of 0.9–1.6 by 0.4–0.9; length normalisation matters less for
    one-statement memories than for documents).

    Postings are held as one pair of flat arrays sorted by term (``rows``, ``counts``), with each term's
    slice in ``spans``: a build makes three arrays, not one per word of the vocabulary.
    """

    generation: int
    ids: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    statuses: NDArray[np.int8] = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    norms: NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    rows: NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    counts: NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    texts: dict[int, tuple[str, Counter[str]]] = field(default_factory=dict)  # reused by the next build
    k1: float = 0.9
    b: float = 0.5

    @classmethod
    def build(cls, connection: sa.Connection, project: str, generation: int,
              previous: ProjectIndex | None = None) -> ProjectIndex:
        index = cls(generation)
        known = previous.texts if previous is not None else {}
        query = (sa.select(memories.c.id, memories.c.text, memories.c.status)
                 .where(memories.c.project == project).order_by(memories.c.id))
        rows = connection.execute(query).all()
        if previous is not None and len(previous.texts) == len(rows) and all(
                previous.texts.get(memory_id, ("",))[0] == text for memory_id, text, _ in rows):
            # Only statuses moved (approve, reject, archive): the postings stand.
            statuses = np.array([_STATUSES.index(row[2]) for row in rows], dtype=np.int8)
            return dataclasses.replace(previous, generation=generation, statuses=statuses)
        vocabulary: dict[str, int] = {}
        term_of: list[int] = []
        row_of: list[int] = []
        count_of: list[int] = []
        lengths = np.zeros(len(rows), dtype=np.float32)
        for row, (memory_id, text, _status) in enumerate(rows):
            cached = known.get(memory_id)
            counts = cached[1] if cached is not None and cached[0] == text else Counter(search_terms(text))
            index.texts[memory_id] = (text, counts)
            lengths[row] = sum(counts.values())
            term_of.extend(vocabulary.setdefault(word, len(vocabulary)) for word in counts)
            count_of.extend(counts.values())
            row_of.extend([row] * len(counts))
        order = np.argsort(np.array(term_of, dtype=np.int32), kind="stable")
        index.rows = np.array(row_of, dtype=np.int32)[order]
        index.counts = np.array(count_of, dtype=np.float32)[order]
        starts = np.searchsorted(np.array(term_of, dtype=np.int32)[order], np.arange(len(vocabulary) + 1))
        index.spans = {word: (int(starts[term]), int(starts[term + 1])) for word, term in vocabulary.items()}
        index.ids = np.array([row[0] for row in rows], dtype=np.int64)
        index.statuses = np.array([_STATUSES.index(row[2]) for row in rows], dtype=np.int8)
        average = float(lengths.mean()) if len(rows) and lengths.mean() > 0 else 1.0
        index.norms = (index.k1 * (1 - index.b + index.b * lengths / average)).astype(np.float32)
        return index

    def search(self, query: str, statuses: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """``(memory id, BM25 score)`` best first among memories in ``statuses``."""
        if not len(self.ids):
            return []
        scores = np.zeros(len(self.ids), dtype=np.float32)
        matched = False
        for word in query_terms(query)[:MAX_QUERY_TERMS]:
            span = self.spans.get(word)
            if span is None:
                continue
            matched = True
            rows, counts = self.rows[span[0]:span[1]], self.counts[span[0]:span[1]]
            scores[rows] += self.idf(word) * counts * (self.k1 + 1) / (counts + self.norms[rows])
        if not matched:
            return []
        wanted = np.array([_STATUSES.index(status) for status in statuses], dtype=np.int8)
        scores = np.where(np.isin(self.statuses, wanted), scores, 0.0)
        count = min(limit, int(np.count_nonzero(scores)))
        if count == 0:
            return []
        top = np.argpartition(-scores, count - 1)[:count]
        top = top[np.lexsort((self.ids[top], -scores[top]))]
        return [(int(self.ids[i]), float(scores[i])) for i in top]

    def idf(self, word: str) -> float:
        """How rare ``word`` is in this project (0 for a word it does not have)."""
        span = self.spans.get(word)
        if span is None:
            return 0.0
        documents, having = len(self.ids), span[1] - span[0]
        return math.log(1 + (documents - having + 0.5) / (having + 0.5))

    def best_possible(self, query: str) -> float:
        """The score of a memory holding each of the query's known terms once (a yardstick for a floor)."""
        return sum(self.idf(word) for word in query_terms(query)[:MAX_QUERY_TERMS]) or 1.0
