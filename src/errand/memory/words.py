"""The static query encoder: a query's dense vector made from stored word vectors, with no model call.

    vector = store.words().query_vector(connection, "how do I run the tests?", index)  # None: no word known

Embedding a query with e5 was almost all of ``retrieve()``'s time (about 4 ms
plus 1.35 ms a token on one core, far more on busy cores). A word's e5 query
vector depends on nothing but the word, so each word a memory holds is
embedded once, when the memory is written, into ``memory_words``; a query's
vector is then the IDF-weighted mean of its words' vectors (IDF over the
project's memories, from its BM25 index), less :data:`COMMON_SHARE` of the
words' common direction (the mean vector of every word in the table), made
unit length. Query words the table lacks are skipped; when it has fewer than
:data:`MIN_COVERAGE` of them (none, in particular), :meth:`WordVectors.query_vector`
returns None and retrieval embeds the query with the model as before. The method and its weights were chosen on
the tuning split of ``benchmarks/memory_static.py``; the README has the figures.

The vectors are held in process, one dict of rows per embedder, with a running
sum for the common direction; each search first reads the rows written since
the last one it saw (ids go up as rows are written), so a word another
process wrote is found at once. PostgreSQL may commit rows out of id order,
so there the row count is compared too, and a gap is filled.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray
from sqlalchemy.dialects import postgresql, sqlite

from errand.memory.embedders import Embedder
from errand.memory.lexical import ProjectIndex
from errand.memory.schema import MAX_WORD_CHARS, memory_words
from errand.memory.text import query_words, search_terms, words

__all__ = ["COMMON_SHARE", "MIN_COVERAGE", "WordVectors", "word_idf"]

#: The share of the words' common direction taken off a query's mean (0.9 was best of 0–1 on the
#: tuning split: every e5 vector leans the same way, and the mean of a few words leans further).
COMMON_SHARE = 0.9

#: The share of a query's words that must have vectors for the words to stand for the query. The
#: method skips the words no memory holds, which costs nothing when the store's vocabulary is large
#: (in benchmarks/memory.py's store of 12,400 words, 97% of a query's words have vectors on average
#: and 11 of 2,561 reporting queries have fewer than half); in a young store most of a task's words
#: may be unknown ("Fix add() so 2 + 3 is 5" beside three memories: only "add"), and the model's own
#: query vector says more. Not tuned: a judgement, measured as harmless on the benchmark.
MIN_COVERAGE = 0.5


def word_idf(index: ProjectIndex, word: str) -> float:
    """How rare the word's stem is among the project's memories; a stem it lacks counts as the rarest."""
    span = index.spans.get((search_terms(word) or [word])[0])
    having = span[1] - span[0] if span else 0
    return math.log(1 + (len(index.ids) - having + 0.5) / (having + 0.5))


class WordVectors:
    """The word vectors of one embedder: written beside memories, held in process for queries."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._rows: dict[str, NDArray[np.float32]] = {}
        self._sum: NDArray[np.float64] | None = None
        self._last_id = 0
        self._lock = threading.Lock()

    # -- writing -------------------------------------------------------------------------------

    def new_words(self, connection: sa.Connection, texts: Sequence[str]) -> list[str]:
        """The words of ``texts`` that have no vector yet, in first-seen order."""
        wanted = [word for word in dict.fromkeys(word for text in texts for word in words(text))
                  if len(word) <= MAX_WORD_CHARS]
        self.refresh(connection)
        with self._lock:
            return [word for word in wanted if word not in self._rows]

    def embed(self, new: Sequence[str]) -> list[tuple[str, bytes]]:
        """``(word, vector bytes)`` for words, as queries (outside any transaction: it takes a while)."""
        if not new:
            return []
        vectors = self.embedder.embed(list(new), query=True)
        return [(word, np.ascontiguousarray(vector, dtype="<f4").tobytes())
                for word, vector in zip(new, vectors, strict=True)]

    def write(self, connection: sa.Connection, embedded: Sequence[tuple[str, bytes]]) -> None:
        """Store word vectors; a word another writer stored meanwhile keeps its row."""
        if not embedded:
            return
        insert = (postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert)(memory_words)
        connection.execute(insert.on_conflict_do_nothing(index_elements=[memory_words.c.model, memory_words.c.word]),
                           [{"model": self.embedder.name, "word": word, "vector": vector}
                            for word, vector in embedded])

    # -- the query's vector --------------------------------------------------------------------

    def query_vector(self, connection: sa.Connection, query: str, index: ProjectIndex,
                     share: float = COMMON_SHARE) -> NDArray[np.float32] | None:
        """The query's unit vector from its known words (see the module docstring); None when too few are known."""
        self.refresh(connection)
        asked = [word for word in query_words(query) if len(word) <= MAX_WORD_CHARS]
        with self._lock:
            found = [(self._rows[word], word) for word in asked if word in self._rows]
            if not found or len(found) < MIN_COVERAGE * len(asked) or self._sum is None:
                return None
            common = self._sum / len(self._rows)
        weights = np.array([word_idf(index, word) for _, word in found]) + 1e-9
        mean = np.einsum("i,ij->j", weights / weights.sum(), np.stack([row for row, _ in found]).astype(np.float64))
        mean -= share * common
        norm = float(np.linalg.norm(mean))
        return (mean / norm).astype(np.float32) if norm > 0 else None

    def refresh(self, connection: sa.Connection) -> None:
        """Read the rows written since the last read (and, on PostgreSQL, any committed out of order)."""
        query = (sa.select(memory_words.c.id, memory_words.c.word, memory_words.c.vector)
                 .where(memory_words.c.model == self.embedder.name, memory_words.c.id > self._last_id)
                 .order_by(memory_words.c.id))
        self._add(_plain(connection.execute(query)))
        if connection.dialect.name == "postgresql":
            count = connection.execute(sa.select(sa.func.count()).select_from(memory_words)
                                       .where(memory_words.c.model == self.embedder.name)).scalar_one()
            if count != len(self._rows):
                mine = memory_words.c.model == self.embedder.name
                every = connection.execute(sa.select(memory_words.c.word).where(mine)).scalars()
                with self._lock:
                    unseen = [str(word) for word in every if word not in self._rows]
                for start in range(0, len(unseen), 500):  # under every database's bound-parameter limit
                    self._add(_plain(connection.execute(
                        sa.select(memory_words.c.id, memory_words.c.word, memory_words.c.vector)
                        .where(mine, memory_words.c.word.in_(unseen[start:start + 500])))))

    def _add(self, rows: Sequence[tuple[int, str, bytes]]) -> None:
        if not rows:
            return
        block = np.frombuffer(b"".join(row[2] for row in rows), dtype="<f4").reshape(len(rows), -1)
        with self._lock:
            for row, vector in zip(rows, block, strict=True):
                if row[1] in self._rows:
                    continue
                self._rows[row[1]] = vector
                self._sum = vector.astype(np.float64) if self._sum is None else self._sum + vector
            self._last_id = max(self._last_id, max(row[0] for row in rows))

    def __len__(self) -> int:
        return len(self._rows)


def _plain(result: Iterable[Any]) -> list[tuple[int, str, bytes]]:
    return [(int(row[0]), str(row[1]), bytes(row[2])) for row in result]
