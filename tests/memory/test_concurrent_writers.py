"""Several workers share one database: their first memories of a new project, written at the
same moment, must all land (the project's row is made by one upsert, not update-then-insert)."""

from __future__ import annotations

import threading

import pytest

from errand.memory import MemoryStore, Provenance

WRITERS = 6
WORDS = ["unit", "lint", "docs", "fuzz", "bench", "smoke"]


@pytest.mark.slow
def test_writers_that_start_a_project_at_once_all_succeed(postgres_url: str) -> None:
    stores = [MemoryStore.open(postgres_url, embedder=None) for _ in range(WRITERS)]
    start = threading.Barrier(WRITERS)
    failures: list[BaseException] = []

    def write(store: MemoryStore, project: str, n: int) -> None:
        start.wait()
        try:
            store.add(project, f"Lesson {n}: the {WORDS[n]} suite runs with make {WORDS[n]}", kind="command",
                      provenance=Provenance.person("a test"))
        except BaseException as error:  # noqa: BLE001 - collected for the assertion below
            failures.append(error)

    for round_ in range(5):  # a new project each round: the race is on its first row
        threads = [threading.Thread(target=write, args=(store, f"/srv/repos/shared-{round_}", n))
                   for n, store in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            break
        start.reset()
    try:
        assert failures == []
        for round_ in range(5):
            assert len(stores[0].list_memories(f"/srv/repos/shared-{round_}", limit=100)) == WRITERS
    finally:
        for store in stores:
            store.close()
