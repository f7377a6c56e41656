"""Choose retrieval's fusion weights and score floor on the tuning split (never on the reporting split).

    .venv/bin/python benchmarks/memory_tune.py --keep /tmp/mem.db    # the database memory.py --keep made
    .venv/bin/python benchmarks/memory_tune.py --quick              # seconds, on a few projects of its own

For every query of the tuning split it takes the two candidate lists
``retrieve()`` fuses — the project's BM25 and the dense (e5) neighbours, with
their scores — once, then scores every weighting of a grid on them offline and
prints the best few by mean NDCG@10 over both datasets (each dataset weighs
the same, however many queries it has). The chosen values go into
``errand.memory.retrieve.Weights``' defaults; ``benchmarks/memory.py`` then
reports them on the other split.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import sys
import tempfile
from pathlib import Path

from errand import database
from errand.memory import MemoryStore, Status, Weights
from errand.memory.embedders import default_embedder
from errand.memory.retrieve import fuse_scores

sys.path.insert(0, str(Path(__file__).parent))

from memory_datasets import DATASETS
from memory_datasets import load as load_dataset
from memory_datasets import quick as quick_dataset

from memory import CachedQueries, Query, metrics, open_stores, store_datasets

Lists = tuple[list[tuple[int, float]], list[tuple[int, float]], float]


def candidate_lists(store: MemoryStore, queries: list[Query], candidates: int) -> list[Lists]:
    statuses = [Status.ACTIVE.value]
    found: list[Lists] = []
    assert store.embedder is not None
    for query in queries:
        vector = store.embedder.embed([query.text], query=True)[0]
        with store.engine.begin() as connection:
            index = store.lexical_index(connection, query.project)
            lexical = index.search(query.text, statuses, candidates)
            dense = store.vectors().search(connection, query.project, store.generation(connection, query.project),
                                           vector, statuses, candidates)
        found.append((lexical, dense, index.best_possible(query.text)))
    return found


def score(weights: Weights, lists: list[Lists], queries: list[Query]) -> dict[str, float]:
    by_dataset: dict[str, list[float]] = {}
    for (lexical, dense, best), query in zip(lists, queries, strict=True):
        fused = fuse_scores(lexical, dense, best, weights)
        ranked = [memory_id for memory_id, _ in sorted(fused.items(), key=lambda item: (-item[1], item[0]))]
        by_dataset.setdefault(query.dataset, []).append(metrics(ranked, query.relevant)["ndcg@10"])
    means = {name: statistics.fmean(values) for name, values in by_dataset.items()}
    means["mean"] = statistics.fmean(means.values())
    return means


def grid() -> list[Weights]:
    found = []
    for dense, rrf_k in itertools.product((0.25, 0.5, 0.75, 1.0, 1.5), (10.0, 30.0, 60.0)):
        found.append(Weights(fusion="rrf", lexical=1.0, dense=dense, rrf_k=rrf_k))
    for dense, center in itertools.product((0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0), (0.75, 0.78, 0.8, 0.82)):
        found.append(Weights(fusion="scores", lexical=1.0, dense=dense, dense_center=center))
    return found


def floors(best: Weights) -> list[Weights]:
    """The chosen weighting with rising score floors: the highest that costs (almost) nothing is the floor."""
    return [dataclasses.replace(best, floor=floor) for floor in (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, help="the database benchmarks/memory.py --keep made")
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--quick", action="store_true",
                        help="a run of seconds on a database of its own: 2 projects of the scenarios")
    args = parser.parse_args()
    if args.keep is None and not args.quick:
        parser.error("--keep (the database benchmarks/memory.py --keep made) or --quick")
    with tempfile.TemporaryDirectory() as scratch:
        tune(args.keep or Path(scratch) / "memory.db", args.quick, args.candidates)


def tune(path: Path, quick: bool, candidates: int) -> None:
    datasets = [quick_dataset(load_dataset("scenarios"))] if quick else [load_dataset(name) for name in DATASETS]
    url = f"sqlite:///{path}"
    database.migrate(database.connect(url))
    queries = store_datasets(MemoryStore(database.connect(url), embedder=None), datasets, "tune")
    if quick:  # the vectors memory.py --keep leaves in the database
        open_stores(url, lexical_only=False)
    embedder = default_embedder()
    assert embedder is not None, "tuning needs the embedder"
    store = MemoryStore(database.connect(url), embedder=CachedQueries(embedder))
    lists = candidate_lists(store, queries, candidates)
    results = sorted(((score(weights, lists, queries), weights) for weights in grid()),
                     key=lambda pair: -pair[0]["mean"])
    for means, weights in results[:12]:
        _print(means, weights)
    print("floors on the best weighting:")
    for weights in floors(results[0][1]):
        _print(score(weights, lists, queries), weights)


def _print(means: dict[str, float], weights: Weights) -> None:
    line = "  ".join(f"{name} {value:.4f}" for name, value in means.items())
    print(f"{line}   {weights.fusion} dense={weights.dense} rrf_k={weights.rrf_k} center={weights.dense_center} "
          f"floor={weights.floor}", flush=True)


if __name__ == "__main__":
    main()
