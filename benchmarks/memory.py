"""Project-memory retrieval benchmark: errand's retrievers beside an untuned plain FTS5 baseline. Judge-free.

    .venv/bin/python benchmarks/memory.py                      # the reporting split of both datasets
    .venv/bin/python benchmarks/memory.py --keep /tmp/mem.db   # keep the database (and its vectors) for reruns
    .venv/bin/python benchmarks/memory.py --split tune         # the tuning split (for benchmarks/memory_tune.py)
    .venv/bin/python benchmarks/memory.py --quick              # seconds: a few projects (what CI runs)

The datasets (``benchmarks/memory_datasets.py``) are made when the benchmark
runs: one from the documentation installed on this machine, one from
project-memory scenarios this project wrote. Each is split by project into a
tuning part and a reporting part; every choice in errand's retrieval was made
on the tuning part, and the README's figures come from the reporting part.

Every memory is stored through the real :class:`~errand.memory.MemoryStore`
(SQLite, FTS5, vectors), one project each, and every query goes through the
real :func:`~errand.memory.retrieve`, scoped to its project. Beside them runs
``fts5``, plain SQLite FTS5 ``bm25()`` that nobody tuned
(``benchmarks/memory_baseline.py``).

Reported per dataset: recall@10, NDCG@10 and MRR (within the top 10) of each
retriever with bootstrap SEs, the default retriever's paired NDCG@10
difference against ``fts5`` and against errand's BM25 with paired-bootstrap
SEs, and p50/p95 latency of one ``retrieve()`` call (the query's vector made
from stored word vectors, or embedded by e5 when they cover too little of it)
in a project of 10,000 memories in a store of 20,000 or more.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from errand import database
from errand.memory import Embedder, MemoryStore, Provenance, Weights, retrieve
from errand.memory.embedders import E5Embedder, default_embedder

sys.path.insert(0, str(Path(__file__).parent))

from memory_baseline import PlainFts5
from memory_datasets import DATASETS, Dataset
from memory_datasets import load as load_dataset
from memory_datasets import quick as quick_dataset

K = 10
LATENCY_MEMORIES = 10_000
LATENCY_PROJECT = "latency/10k"
MIN_STORE = 20_000

Search = Callable[[str, str], list[int]]


@dataclass(frozen=True)
class Query:
    dataset: str
    project: str
    text: str
    relevant: frozenset[int]  # memory ids in the store
    form: str


class CachedQueries:
    """An embedder that remembers query vectors: tuning runs the same queries under many weightings."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self._queries: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        if not query:
            return self.inner.embed(texts)
        missing = [text for text in texts if text not in self._queries]
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing, query=True), strict=True):
                self._queries[text] = vector
        return np.stack([self._queries[text] for text in texts])


def store_datasets(store: MemoryStore, datasets: list[Dataset], split: str) -> list[Query]:
    """Store every memory (unless a kept database has it already); the split's queries with store ids."""
    stored = {(memory.project, memory.text): memory.id for memory in store.list_memories(limit=10**7)}
    queries: list[Query] = []
    started = time.perf_counter()
    for dataset in datasets:
        ids: dict[str, int] = {}
        for memory in dataset.memories:
            known = stored.get((memory.project, memory.text))
            ids[memory.key] = known if known is not None else store.add(
                memory.project, memory.text, kind=memory.kind, merge=False,
                provenance=Provenance.file(memory.source, "sha256:dataset")).id
        queries += [Query(dataset.name, query.project, query.text, frozenset(ids[key] for key in query.relevant),
                          query.form) for query in dataset.split(split)]
    print(f"memories stored in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return queries


def fill_latency_project(store: MemoryStore, datasets: list[Dataset], count: int = LATENCY_MEMORIES) -> int:
    """One project of ``count`` memories (the datasets' texts again); the store's size after."""
    if not store.list_memories(LATENCY_PROJECT, limit=1):
        texts = [memory.text for dataset in datasets for memory in dataset.memories][:count]
        for text in texts:
            store.add(LATENCY_PROJECT, text, kind="fact", merge=False, provenance=Provenance.person())
    return len(store.list_memories(limit=10**7))


def baseline(store: MemoryStore) -> PlainFts5:
    plain = PlainFts5()
    by_project: dict[str, list[tuple[int, str]]] = {}
    for memory in store.list_memories(limit=10**7):
        by_project.setdefault(memory.project, []).append((memory.id, memory.text))
    for project, rows in by_project.items():
        plain.add(project, rows)
    return plain


def metrics(ranked: list[int], relevant: frozenset[int]) -> dict[str, float]:
    hits = [memory_id in relevant for memory_id in ranked[:K]]
    dcg = sum(1 / math.log2(rank + 2) for rank, hit in enumerate(hits) if hit)
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(relevant), K)))
    first = next((rank for rank, hit in enumerate(hits, start=1) if hit), None)
    return {"recall@10": sum(hits) / len(relevant), "ndcg@10": dcg / ideal, "mrr": 1 / first if first else 0.0}


def evaluate(search: Search, queries: list[Query]) -> list[dict[str, float]]:
    return [metrics(search(query.project, query.text), query.relevant) for query in queries]


def errand_search(store: MemoryStore, weights: Weights | None = None) -> Search:
    def search(project: str, text: str) -> list[int]:
        found = retrieve(store, project, text, k=K, **({"weights": weights} if weights else {}))
        return [item.memory.id for item in found]
    return search


def bootstrap_se(values: list[float], seed: int, rounds: int = 2000) -> float:
    rng = random.Random(seed)
    means = [statistics.fmean(rng.choices(values, k=len(values))) for _ in range(rounds)]
    return statistics.stdev(means)


def latency(search: Search, queries: list[Query], count: int) -> tuple[float, float, float]:
    """p50 and p95 milliseconds of one search in the LATENCY_PROJECT, and the p50 of the CPU time the
    process spent on it (every thread's: on a shared machine the wall time says more about the neighbours)."""
    for query in queries[:5]:  # warm the caches (vector matrix, SQLite pages) as a running engine has them
        search(LATENCY_PROJECT, query.text)
    times, cpu = [], []
    for query in queries[:count]:
        started, cpu_started = time.perf_counter(), time.process_time()
        search(LATENCY_PROJECT, query.text)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.95))], statistics.median(cpu)


def open_stores(url: str, lexical_only: bool) -> dict[str, MemoryStore]:
    """errand's retrievers: BM25 alone, and the default (what ``MemoryStore.open`` gives: hybrid with e5)."""
    stores = {"errand-bm25": MemoryStore(database.connect(url), embedder=None)}
    embedder = None if lexical_only else default_embedder()
    if embedder is None:
        if not lexical_only:
            print("no embedder installed: the default retriever is BM25 alone", file=sys.stderr)
        return stores
    store = MemoryStore(database.connect(url), embedder=CachedQueries(embedder))
    started = time.perf_counter()
    for project in store.projects():
        store.backfill_vectors(project, progress=lambda done, total, project=project: print(
            f"\r  {project}: {done:,} of {total:,} new words embedded", end="\n" if done == total else "",
            file=sys.stderr, flush=True))
    print(f"embedded what had no vector (memories and words) in {time.perf_counter() - started:.1f} s",
          file=sys.stderr)
    stores["errand-default"] = store
    return stores


class Anew:
    """An embedder that has every text embedded anew, as a process meeting it for the first time does:
    e5 otherwise keeps the vectors of the texts it has seen (the evaluation's queries among them)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        if isinstance(self.inner, E5Embedder):
            self.inner.forget()
        return self.inner.embed(texts, query=query)


def uncached(store: MemoryStore) -> MemoryStore:
    """The same database and model, without remembering query vectors."""
    embedder = store.embedder.inner if isinstance(store.embedder, CachedQueries) else store.embedder
    return MemoryStore(store.engine, embedder=Anew(embedder) if embedder is not None else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--split", default="report", choices=("tune", "report"))
    parser.add_argument("--queries", type=int, default=None, help="a random sample of this many queries a dataset")
    parser.add_argument("--latency-queries", type=int, default=300, help="0 skips the latency measurement")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--lexical-only", action="store_true", help="leave the embedder out (no vectors made)")
    parser.add_argument("--keep", type=Path, help="keep the database (and its vectors) here, for quicker reruns")
    parser.add_argument("--quick", action="store_true",
                        help="a run of seconds: 2 projects of the scenarios, 20 timed queries in a project of 50")
    args = parser.parse_args()
    latency_memories = LATENCY_MEMORIES
    if args.quick:
        args.datasets, args.latency_queries, latency_memories = ["scenarios"], 20, 50

    datasets = [quick_dataset(load_dataset(name)) if args.quick else load_dataset(name) for name in args.datasets]
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{args.keep or Path(scratch) / 'memory.db'}"
        database.migrate(database.connect(url))
        loader = MemoryStore(database.connect(url), embedder=None)
        every = store_datasets(loader, datasets, args.split)
        queries = sample(every, args.queries, args.seed)
        size = fill_latency_project(loader, datasets, latency_memories) if args.latency_queries else 0
        plain = baseline(loader)
        searches: dict[str, Search] = {"fts5": lambda project, text: plain.search(project, text, K)}
        stores = open_stores(url, args.lexical_only)
        searches.update((name, errand_search(store)) for name, store in stores.items())
        results = {name: evaluate(search, queries) for name, search in searches.items()}
        # Timed on stores without the query cache (every query embedded as a running engine would),
        # on queries in an order that mixes the datasets.
        timed = [uncached(store) for store in stores.values()]
        mixed = random.Random(args.seed).sample(every, min(len(every), args.latency_queries + 5))
        timings = {name: latency(errand_search(store), mixed, args.latency_queries)
                   for name, store in zip(stores, timed, strict=True)} if args.latency_queries else {}
    show(results, queries, args.split, args.seed)
    if timings:
        print(f"\nlatency of one search, {latency_memories:,} memories in one project, {size:,} in the store, "
              f"{args.latency_queries} queries (load average {os.getloadavg()[0]:.1f} on "
              f"{len(os.sched_getaffinity(0))} cores when done):")
        for name, (p50, p95, cpu) in timings.items():
            print(f"  {name:16} p50 {p50:6.2f} ms   p95 {p95:6.2f} ms   (CPU time p50 {cpu:6.2f} ms)")


def sample(queries: list[Query], limit: int | None, seed: int) -> list[Query]:
    if limit is None:
        return queries
    rng = random.Random(seed)
    kept: list[Query] = []
    for name in dict.fromkeys(query.dataset for query in queries):
        mine = [query for query in queries if query.dataset == name]
        kept += rng.sample(mine, min(limit, len(mine)))
    return kept


def show(results: dict[str, list[dict[str, float]]], queries: list[Query], split: str, seed: int) -> None:
    default = "errand-default" if "errand-default" in results else "errand-bm25"
    for dataset in dict.fromkeys(query.dataset for query in queries):
        rows = [index for index, query in enumerate(queries) if query.dataset == dataset]
        projects = len({queries[index].project for index in rows})
        print(f"\n{dataset} ({split} split): {len(rows)} queries over {projects} projects; k = {K}")
        print(f"  {'retriever':16} {'recall@10':>9} {'NDCG@10':>8} {'± SE':>6} {'MRR':>6}")
        for name, values in results.items():
            mine = [values[index] for index in rows]
            mean = {key: statistics.fmean(row[key] for row in mine) for key in mine[0]}
            se = bootstrap_se([row["ndcg@10"] for row in mine], seed)
            print(f"  {name:16} {mean['recall@10']:9.3f} {mean['ndcg@10']:8.3f} {se:6.3f} {mean['mrr']:6.3f}")
        for other in ("fts5", "errand-bm25"):
            if other == default:
                continue
            gain = [results[default][index]["ndcg@10"] - results[other][index]["ndcg@10"] for index in rows]
            mean, se = statistics.fmean(gain), bootstrap_se(gain, seed)
            ratio = mean / se if se else 0.0
            print(f"  {default} − {other}: NDCG@10 {mean:+.4f} ± {se:.4f} (paired bootstrap SE, {ratio:+.1f} SE); "
                  f"better on {sum(g > 0 for g in gain)}, worse on {sum(g < 0 for g in gain)}")
        forms = sorted({queries[index].form for index in rows})
        if len(forms) > 1:
            for form in forms:
                mine = [index for index in rows if queries[index].form == form]
                line = "  ".join(f"{name} {statistics.fmean(results[name][i]['ndcg@10'] for i in mine):.3f}"
                                 for name in results)
                print(f"  NDCG@10 on {form} queries ({len(mine)}): {line}")


if __name__ == "__main__":
    main()
