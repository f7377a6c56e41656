"""The baseline nobody tuned: plain SQLite FTS5 ``bm25()``, one table per project, a common stop list.

This is what someone would write in ten minutes with the sqlite3 module: the
default tokenizer (``unicode61``, no stemming), the query's words minus common
English function words OR-ed together, ranked by ``bm25()`` with its default
parameters. Nothing here was chosen by looking at the benchmark's results;
errand's retrievers have to beat it on data they were not tuned on.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

__all__ = ["STOP_WORDS", "PlainFts5"]

# Common English function words (our own list, the kind every search tutorial starts with).
STOP_WORDS = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be",
    "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do",
    "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he",
    "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its",
    "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "of", "off", "on", "once", "only",
    "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such",
    "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this",
    "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where",
    "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself",
    "yourselves",
))


class PlainFts5:
    """Per-project FTS5 tables in one in-memory database."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:")
        self._tables: dict[str, str] = {}

    def add(self, project: str, rows: Iterable[tuple[int, str]]) -> None:
        table = self._tables.get(project)
        if table is None:
            table = self._tables[project] = f"p{len(self._tables)}"
            self._db.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(text)")
        self._db.executemany(f"INSERT INTO {table}(rowid, text) VALUES (?, ?)", rows)

    def search(self, project: str, query: str, k: int) -> list[int]:
        table = self._tables.get(project)
        words = [word for word in re.findall(r"\w+", query.lower()) if word not in STOP_WORDS]
        if table is None or not words:
            return []
        expression = " OR ".join(f'"{word}"' for word in dict.fromkeys(words))
        rows = self._db.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY bm25({table}) LIMIT ?",
                                (expression, k)).fetchall()
        return [int(row[0]) for row in rows]
