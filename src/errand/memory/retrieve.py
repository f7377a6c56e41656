"""Hybrid retrieval: BM25 and dense candidates fused by score, a floor, then signals, de-duplication and
a staleness check against the working tree.

    recalled = retrieve(store, project, "how do I run the tests", k=8, repo_dir=checkout)

1. **Candidates**: the best ``candidates`` memories by BM25 over the
   project's own statistics (:class:`~errand.memory.lexical.ProjectIndex`)
   and, when the store has an embedder, the best by cosine similarity.
2. **Fusion**: each side's score on a scale that means the same in every
   project (BM25 against a memory holding each query term once; cosine above
   the level unrelated texts reach), weighted and added (:class:`Weights`;
   chosen on the tuning split of ``benchmarks/memory.py``, reported on the
   other). Reciprocal rank fusion is there too (``fusion="rrf"``).
3. **Floor**: a memory whose fused score stays under ``Weights.floor`` is not
   given at all: an unrelated task gets few memories or none, not the ``k``
   least unrelated.
4. **Signals**: small multipliers for confidence, for evidence and use (a
   memory observed or recalled again and again), and for recency (a
   half-life on the last update). They reorder near-ties, never a clear
   winner: the fused score dominates.
5. **De-duplication**: a result too like one ranked above it is dropped.
6. **Staleness**: with ``repo_dir``, every cited file and symbol is looked up in
   the tree; a memory whose citations no longer hold is flagged with the
   reasons (and demoted), not hidden — the agent should see it and check.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from errand.memory.citations import TreeIndex, check
from errand.memory.records import Kind, Memory, Recalled, Status
from errand.memory.schema import memories
from errand.memory.store import DUPLICATE_LIKENESS, MemoryStore, memory_from_row
from errand.memory.text import jaccard, terms, without_lone_surrogates

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from errand.memory.lexical import ProjectIndex

__all__ = ["DEFAULT_WEIGHTS", "WORD_WEIGHTS", "Weights", "fuse", "fuse_scores", "retrieve"]

_DAY = 86_400.0


@dataclass(frozen=True)
class Weights:
    """How retrieval weighs its parts. The defaults were chosen on the tuning split of
    ``benchmarks/memory.py``'s datasets (``benchmarks/memory_tune.py``) and are reported on the other split.

    ``fusion="scores"`` adds the two sides' scores, each put on a scale that means the same in every
    project: BM25 over the score of a memory holding each query term once, and cosine above
    ``dense_center`` (e5's cosines of unrelated texts sit near 0.8) over what is left up to 1.
    ``fusion="rrf"`` is reciprocal rank fusion, ``Σ weight / (rrf_k + rank)``.
    """

    lexical: float = 1.0
    dense: float = 2.0  # tuned: 2.0–2.5 with dense_center 0.8 led the grid; RRF's best was 0.007 NDCG behind
    fusion: str = "scores"
    rrf_k: float = 60.0
    dense_center: float = 0.8
    floor: float = 0.15  # below this on the scores scale a memory is not given at all, however few are left
    confidence: float = 0.2  # score × (1 - confidence + confidence × memory.confidence)
    usage: float = 0.05  # score × (1 + usage × ln(1 + uses + extra evidence))
    recency: float = 0.1  # score × (1 - recency × (1 - 0.5 ** (age / half-life)))
    half_life_days: float = 180.0
    stale: float = 0.8  # score × stale for a memory whose citations no longer hold

    def __post_init__(self) -> None:
        if self.lexical < 0 or self.dense < 0 or self.lexical + self.dense == 0 or self.rrf_k <= 0:
            raise ValueError("retrieval weights: lexical and dense are ≥ 0 and not both 0; rrf_k is > 0")
        if self.fusion not in ("scores", "rrf") or not 0 <= self.dense_center < 1 or self.floor < 0:
            raise ValueError("retrieval weights: fusion is 'scores' or 'rrf', 0 ≤ dense_center < 1, floor ≥ 0")


#: The weights when the query's vector is e5's own (the fallback; see :func:`retrieve`).
DEFAULT_WEIGHTS = Weights()
#: The weights when the query's vector is made from stored word vectors (:mod:`errand.memory.words`),
#: chosen on the tuning split of ``benchmarks/memory_static.py``: such a vector's cosines with the
#: memories' passage vectors sit lower and spread wider than e5's query vector's, so the centre is
#: lower and the dense side weighs more.
WORD_WEIGHTS = Weights(dense=3.0, dense_center=0.3, floor=0.05)


def fuse(rankings: Sequence[tuple[float, Sequence[int]]], rrf_k: float) -> dict[int, tuple[float, dict[int, int]]]:
    """Reciprocal rank fusion of ``(weight, ids best first)`` lists → id → (score, {list index: 1-based rank})."""
    fused: dict[int, tuple[float, dict[int, int]]] = {}
    for index, (weight, ids) in enumerate(rankings):
        for rank, memory_id in enumerate(ids, start=1):
            score, ranks = fused.get(memory_id, (0.0, {}))
            fused[memory_id] = (score + weight / (rrf_k + rank), {**ranks, index: rank})
    return fused


def fuse_scores(lexical: Sequence[tuple[int, float]], dense: Sequence[tuple[int, float]], best_lexical: float,
                weights: Weights) -> dict[int, float]:
    """id → fused score of the two candidate lists (``(id, score)`` best first), floor applied."""
    relevance: dict[int, float] = {}
    for memory_id, score in lexical:
        relevance[memory_id] = weights.lexical * min(score / best_lexical, 1.5)
    for memory_id, cosine in dense:
        scaled = max(0.0, (cosine - weights.dense_center) / (1 - weights.dense_center))
        relevance[memory_id] = relevance.get(memory_id, 0.0) + weights.dense * scaled
    kept = {memory_id: value for memory_id, value in relevance.items() if value >= weights.floor and value > 0}
    if weights.fusion == "scores":
        return kept
    rrf = fuse([(weights.lexical, [i for i, _ in lexical]), (weights.dense, [i for i, _ in dense])], weights.rrf_k)
    return {memory_id: rrf[memory_id][0] for memory_id in kept}


def retrieve(
    store: MemoryStore, project: str, query: str, k: int = 8, *, repo_dir: str | Path | None = None,
    include_proposed: bool = False, kinds: Iterable[Kind | str] | None = None, candidates: int = 50,
    weights: Weights | None = None, now: float | None = None, exclude: Collection[int] = (),
) -> list[Recalled]:
    """The ``k`` memories of ``project`` that best answer ``query``, best first (see the module docstring).

    Only active memories are considered, and proposed ones too with
    ``include_proposed``. Reading is all it does: record what a task was given
    with :meth:`MemoryStore.record_use`.

    The query's dense vector is made from the stored vectors of its words
    (:mod:`errand.memory.words`, no model call) when the store holds vectors
    for at least half of them, and ``weights`` default to :data:`WORD_WEIGHTS`;
    otherwise (a query of words no memory uses, such as ``Jinja`` beside
    memories that say ``Jinja2``, or a task in a young store) the query is
    embedded by the model, with :data:`DEFAULT_WEIGHTS`: that is where the
    dense side finds what shares no word, and what it costs is paid only there.
    """
    query = without_lone_surrogates(query)
    if k <= 0 or not query.strip():
        return []
    statuses = [Status.ACTIVE.value] + ([Status.PROPOSED.value] if include_proposed else [])
    wanted = {Kind(kind).value for kind in kinds} if kinds is not None else None
    with store.engine.begin() as connection:
        generation = store.generation(connection, project)
        index = store.lexical_index(connection, project, generation)
        vector, weights = _query_vector(store, connection, query, index, weights)
        lexical = index.search(query, statuses, candidates) if weights.lexical > 0 else []
        dense = store.vectors().search(connection, project, generation, vector, statuses,
                                       candidates) if vector is not None else []
        scores = fuse_scores(lexical, dense, index.best_possible(query), weights)
        ranks = _ranks({"lexical": lexical, "dense": dense} if vector is not None else {"lexical": lexical})
        signals = _signal_rows(connection, list(scores))
        moment = time.time() if now is None else now
        order = sorted(
            ((score * _signals(signals[memory_id], weights, moment), memory_id) for memory_id, score in
             scores.items() if memory_id in signals and memory_id not in exclude
             and (wanted is None or signals[memory_id]["kind"] in wanted)),
            key=lambda pair: (-pair[0], pair[1]),
        )
        limit = k * 2 if repo_dir is not None else k
        # Whole rows are read only as de-duplication reaches them, a few more than it keeps at a time.
        scored = (Recalled(memory, score, ranks=ranks.get(memory.id, {}))
                  for score, memory in _memories(connection, order, limit + 4))
        picked = _distinct(scored, limit)
    if repo_dir is not None:
        picked = _flag_stale(picked, Path(repo_dir), weights)
    return picked[:k]


def _query_vector(store: MemoryStore, connection: sa.Connection, query: str, index: ProjectIndex,
                  weights: Weights | None) -> tuple[NDArray[np.float32] | None, Weights]:
    """The query's dense vector (None for BM25 alone) and the weights that go with how it was made."""
    if store.embedder is None or (weights is not None and weights.dense == 0):
        return None, weights or DEFAULT_WEIGHTS
    vector = store.words().query_vector(connection, query, index)
    if vector is not None:
        return vector, weights or WORD_WEIGHTS
    # Not beside the BM25 search: the encoder takes every idle core, and overlapping the two
    # made the whole slower (benchmarks/memory.py).
    return store.embedder.embed([query], query=True)[0], weights or DEFAULT_WEIGHTS


def _ranks(lists: dict[str, Sequence[tuple[int, float]]]) -> dict[int, dict[str, int]]:
    """id → {list name: 1-based rank in it}: why a memory came back, for the record."""
    found: dict[int, dict[str, int]] = {}
    for name, ranked in lists.items():
        for rank, (memory_id, _) in enumerate(ranked, start=1):
            found.setdefault(memory_id, {})[name] = rank
    return found


def _memories(connection: sa.Connection, order: list[tuple[float, int]], chunk: int) -> Iterator[tuple[float, Memory]]:
    for start in range(0, len(order), chunk):
        part = order[start:start + chunk]
        query = sa.select(memories).where(memories.c.id.in_([memory_id for _, memory_id in part]))
        rows = {int(row["id"]): row for row in connection.execute(query).mappings()}
        yield from ((score, memory_from_row(rows[memory_id])) for score, memory_id in part if memory_id in rows)


_SIGNAL_COLUMNS = (memories.c.id, memories.c.kind, memories.c.confidence, memories.c.use_count,
                   memories.c.evidence, memories.c.updated_at)


def _signal_rows(connection: sa.Connection, ids: list[int]) -> dict[int, sa.RowMapping]:
    found: dict[int, sa.RowMapping] = {}
    for start in range(0, len(ids), 500):  # stay under every database's bound-parameter limit
        query = sa.select(*_SIGNAL_COLUMNS).where(memories.c.id.in_(ids[start:start + 500]))
        found.update((int(row["id"]), row) for row in connection.execute(query).mappings())
    return found


def _signals(row: sa.RowMapping, weights: Weights, now: float) -> float:
    confidence = 1 - weights.confidence + weights.confidence * float(row["confidence"])
    usage = 1 + weights.usage * math.log1p(int(row["use_count"]) + int(row["evidence"]) - 1)
    age_days = max(0.0, now - float(row["updated_at"])) / _DAY
    recency = 1 - weights.recency * (1 - 0.5 ** (age_days / weights.half_life_days))
    return float(confidence * usage * recency)


def _distinct(ranked: Iterable[Recalled], limit: int) -> list[Recalled]:
    kept: list[tuple[Recalled, set[str]]] = []
    for candidate in ranked:
        if len(kept) >= limit:
            break
        words = set(terms(candidate.memory.text))
        if all(jaccard(words, other) < DUPLICATE_LIKENESS for _, other in kept):
            kept.append((candidate, words))
    return [candidate for candidate, _ in kept]


def _flag_stale(ranked: list[Recalled], repo_dir: Path, weights: Weights) -> list[Recalled]:
    tree = TreeIndex(repo_dir.resolve())
    flagged = []
    for item in ranked:
        reasons = check(item.memory.citations, tree)
        if reasons:
            item = Recalled(item.memory, item.score * weights.stale, True, reasons, item.ranks)
        flagged.append(item)
    flagged.sort(key=lambda item: (-item.score, item.memory.id))
    return flagged
