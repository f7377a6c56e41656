"""Dense vectors of memories: written beside each memory, searched nearest first, backfilled for an
embedder that came later."""

from __future__ import annotations

from errand.memory import E5Embedder, Kind, MemoryStore, Provenance, Status

PROJECT = "/repo/example"


def test_vectors_are_backfilled_for_a_new_embedder(url: str, embedder: object) -> None:
    with MemoryStore.open(url, embedder=None) as plain:
        plain.add(PROJECT, "Releases are cut from the main branch.", kind="fact", provenance=Provenance.person())
    with MemoryStore.open(url, embedder=embedder) as dense:  # type: ignore[arg-type]
        assert dense.backfill_vectors(PROJECT) == 1
        assert dense.backfill_vectors(PROJECT) == 0


def test_the_nearest_memory_of_the_statuses_asked_comes_first(store: MemoryStore, embedder: E5Embedder) -> None:
    def add(text: str, status: Status = Status.ACTIVE) -> int:
        return store.add(PROJECT, text, kind=Kind.FACT, provenance=Provenance.person(), status=status).id

    tests = add("Run the unit tests with pytest before pushing.")
    add("The web app's colours are set in theme.css.")
    proposed = add("Run the tests in a container with docker compose.", status=Status.PROPOSED)
    index = store.vectors()
    query = embedder.embed(["how do I run the tests?"], query=True)[0]
    with store.engine.connect() as connection:
        generation = store.generation(connection, PROJECT)
        found = index.search(connection, PROJECT, generation, query, ("active",), 10)
        assert found[0][0] == tests and len(found) == 2
        assert found[0][1] > found[1][1]
        assert proposed not in [memory_id for memory_id, _ in found]
        assert [memory_id for memory_id, _ in index.search(connection, PROJECT, generation, query,
                                                           ("proposed",), 10)] == [proposed]
        assert index.search(connection, "/repo/none", 0, query, ("active",), 10) == []
        assert index.missing(connection, PROJECT) == []
