"""The retrieval benchmark's datasets, made at benchmark time, each split into a tuning and a reporting part.

Two datasets of different kinds:

- ``docs``: documentation installed on this machine (Debian's and the Rust
  toolchain's), paragraphs as memories and section headings as queries
  (``benchmarks/data/memory/build.py``). Nothing of it is committed.
- ``scenarios``: project-memory scenarios this project wrote — commands,
  conventions, pitfalls, review feedback of made-up repositories — asked with
  questions and task descriptions (``benchmarks/data/memory/scenarios.py``).

**Splits are by project**, so a choice tuned on one part meets other projects'
text, vocabulary and sizes in the other: ``docs`` reports on the Node.js
contributor guides, the Rust book and the rustc book and tunes on Cargo's book,
the Rust style guide and pip's development docs (three projects each, different
subjects on each side); ``scenarios`` tunes on its even-numbered projects and
reports on the odd ones.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "data" / "memory"))

import build as docs_builder
import scenarios

__all__ = ["DATASETS", "Dataset", "DatasetMemory", "DatasetQuery", "load", "quick"]

DATASETS = ("docs", "scenarios")
DOCS_REPORTING = frozenset({"nodejs", "rust-book", "rustc"})
SPLITS = ("tune", "report")


@dataclass(frozen=True)
class DatasetMemory:
    key: str
    project: str  # as stored: "<dataset>/<project>"
    text: str
    kind: str
    source: str


@dataclass(frozen=True)
class DatasetQuery:
    key: str
    project: str
    text: str
    relevant: frozenset[str]  # memory keys
    split: str
    form: str  # "heading", "question" or "task"


@dataclass(frozen=True)
class Dataset:
    name: str
    memories: tuple[DatasetMemory, ...]
    queries: tuple[DatasetQuery, ...]

    def split(self, name: str) -> list[DatasetQuery]:
        return [query for query in self.queries if query.split == name]


def load(name: str) -> Dataset:
    if name == "docs":
        memory_rows, query_rows = docs_builder.build()
        if docs_builder.missing():
            print(f"docs: not installed here, left out: {', '.join(docs_builder.missing())}", file=sys.stderr)
    elif name == "scenarios":
        memory_rows, query_rows = scenarios.build()
    else:
        raise ValueError(f"no dataset {name!r}; there are {', '.join(DATASETS)}")
    memories = tuple(DatasetMemory(str(row["id"]), f"{name}/{row['project']}", str(row["text"]),
                                   str(row.get("kind", "fact")), str(row["source"])) for row in memory_rows)
    queries = tuple(DatasetQuery(str(row["id"]), f"{name}/{row['project']}", str(row["query"]),
                                 frozenset(str(key) for key in row["relevant"]),  # type: ignore[attr-defined]
                                 _split(name, str(row["project"])), str(row.get("form", "heading")))
                    for row in query_rows)
    return Dataset(name, memories, queries)


def quick(dataset: Dataset, projects: int = 1) -> Dataset:
    """The first ``projects`` projects of each split, their memories and queries: a ``--quick`` run's data."""
    kept: set[str] = set()
    for split in SPLITS:
        kept.update(list(dict.fromkeys(query.project for query in dataset.split(split)))[:projects])
    return Dataset(dataset.name, tuple(memory for memory in dataset.memories if memory.project in kept),
                   tuple(query for query in dataset.queries if query.project in kept))


def _split(dataset: str, project: str) -> str:
    if dataset == "docs":
        return "report" if project in DOCS_REPORTING else "tune"
    return "report" if int(project.rsplit("-", 1)[1]) % 2 else "tune"
