"""Lexical (BM25) search over a project's memories.

On SQLite the FTS5 table ``memories_fts`` ranks with its built-in ``bm25()``
(Porter-stemmed). On any other database, or a SQLite built without FTS5,
:class:`Bm25Index` ranks the same way in Python over the project's memories,
rebuilt when the project's generation moves. Both take a query in plain words:
terms are OR-ed, so a memory needs to share only some of them, and rank by how
rare the shared ones are.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa

from errand.memory.schema import FTS_TABLE, memories
from errand.memory.text import terms

__all__ = ["Bm25Index", "fts5_available", "fts5_search", "query_terms"]

MAX_QUERY_TERMS = 32


def query_terms(query: str) -> list[str]:
    """The distinct content words of a query (stop words dropped unless nothing else is left)."""
    words = terms(query) or re.findall(r"\w+", query.casefold())
    return list(dict.fromkeys(words))[:MAX_QUERY_TERMS]


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
    """``(memory id, score)`` best first; the score is ``-bm25()``, so higher is better."""
    words = query_terms(query)
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
class Bm25Index:
    """Okapi BM25 over one project's memories, held in memory (the fallback where FTS5 is missing)."""

    generation: int
    statuses: dict[int, str] = field(default_factory=dict)
    lengths: dict[int, int] = field(default_factory=dict)
    postings: dict[str, dict[int, int]] = field(default_factory=dict)
    k1: float = 1.2
    b: float = 0.75

    @classmethod
    def build(cls, connection: sa.Connection, project: str, generation: int) -> Bm25Index:
        index = cls(generation)
        query = sa.select(memories.c.id, memories.c.text, memories.c.status).where(memories.c.project == project)
        for memory_id, text, status in connection.execute(query):
            words = terms(text)
            index.statuses[memory_id] = status
            index.lengths[memory_id] = len(words)
            for word, count in Counter(words).items():
                index.postings.setdefault(word, {})[memory_id] = count
        return index

    def search(self, query: str, statuses: Sequence[str], limit: int) -> list[tuple[int, float]]:
        allowed = set(statuses)
        documents = len(self.lengths) or 1
        average = sum(self.lengths.values()) / documents or 1.0
        scores: dict[int, float] = {}
        for word in query_terms(query):
            posting = self.postings.get(word, {})
            if not posting:
                continue
            idf = math.log(1 + (documents - len(posting) + 0.5) / (len(posting) + 0.5))
            for memory_id, count in posting.items():
                if self.statuses[memory_id] not in allowed:
                    continue
                norm = count + self.k1 * (1 - self.b + self.b * self.lengths[memory_id] / average)
                scores[memory_id] = scores.get(memory_id, 0.0) + idf * count * (self.k1 + 1) / norm
        return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]
