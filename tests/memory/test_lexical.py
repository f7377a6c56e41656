"""BM25 over one project's memories, with that project's own statistics."""

from __future__ import annotations

import pytest

from errand.memory import Kind, MemoryStore, Provenance, Status
from errand.memory.lexical import ProjectIndex, fts5_available, fts5_search

PROJECT = "/repo/example"
OTHER = "/repo/other"
ALL = ("proposed", "active", "archived")


def add(store: MemoryStore, text: str, project: str = PROJECT, status: Status = Status.ACTIVE) -> int:
    return store.add(project, text, kind=Kind.FACT, provenance=Provenance.person(), status=status).id


def build(store: MemoryStore, project: str = PROJECT, previous: ProjectIndex | None = None) -> ProjectIndex:
    with store.engine.connect() as connection:
        return ProjectIndex.build(connection, project, store.generation(connection, project), previous)


def test_the_memory_that_holds_the_query_s_words_ranks_first(lexical_store: MemoryStore) -> None:
    tests = add(lexical_store, "Run the tests with pytest -q from the repository root.")
    add(lexical_store, "Releases are cut from the main branch on Fridays.")
    add(lexical_store, "The web app is built with vite.")
    found = build(lexical_store).search("how do I run the tests?", ("active",), 10)
    assert found[0][0] == tests and found[0][1] > 0
    assert [memory_id for memory_id, _ in found] == [tests]  # the others share no word with the question


def test_no_known_word_and_no_memory_find_nothing(lexical_store: MemoryStore) -> None:
    assert build(lexical_store).search("tests", ALL, 10) == []  # an empty project
    add(lexical_store, "The web app is built with vite.")
    index = build(lexical_store)
    assert index.search("kubernetes helm", ALL, 10) == []
    assert index.idf("kubernetes") == 0.0 and index.best_possible("kubernetes") == 1.0


def test_another_project_s_memories_never_move_this_one_s_scores(lexical_store: MemoryStore) -> None:
    add(lexical_store, "Run the tests with pytest.")
    add(lexical_store, "Lint with ruff before pushing.")
    before = build(lexical_store).search("tests ruff", ALL, 10)
    for n in range(20):
        add(lexical_store, f"Ruff rule {n} is switched off in tests of module {n}.", project=OTHER)
    assert build(lexical_store).search("tests ruff", ALL, 10) == before
    assert len(build(lexical_store, OTHER).search("ruff", ALL, 50)) == 20


def test_a_rarer_word_weighs_more_and_the_limit_and_statuses_hold(lexical_store: MemoryStore) -> None:
    add(lexical_store, "Tests need docker running.")
    for text in ("Tests are in tests/unit.", "Tests use pytest-xdist.", "Tests must not touch the network."):
        add(lexical_store, text)
    proposed = add(lexical_store, "Docker compose starts the database.", status=Status.PROPOSED)
    index = build(lexical_store)
    assert index.idf("docker") > index.idf("test") > 0
    assert len(index.search("tests", ALL, 2)) == 2
    assert proposed not in [memory_id for memory_id, _ in index.search("docker", ("active",), 10)]
    assert proposed in [memory_id for memory_id, _ in index.search("docker", ("proposed",), 10)]


def test_a_rebuild_after_a_status_moved_keeps_the_postings_and_sees_the_status(lexical_store: MemoryStore) -> None:
    memory = add(lexical_store, "Docker compose starts the database.", status=Status.PROPOSED)
    first = build(lexical_store)
    assert first.search("docker", ("active",), 10) == []
    lexical_store.approve(memory)
    second = build(lexical_store, previous=first)
    assert second.generation != first.generation and second.spans == first.spans
    assert [memory_id for memory_id, _ in second.search("docker", ("active",), 10)] == [memory]


def test_fts5_gives_candidates_of_the_project_and_statuses_asked(lexical_store: MemoryStore) -> None:
    mine = add(lexical_store, "Run the tests with pytest.")
    add(lexical_store, "Run the tests with tox.", project=OTHER)
    archived = add(lexical_store, "Tests ran with nose once.")
    lexical_store.archive(archived)
    with lexical_store.engine.connect() as connection:
        assert fts5_available(connection)
        assert [memory_id for memory_id, _ in fts5_search(connection, PROJECT, "tests", ("active",), 10)] == [mine]
        assert fts5_search(connection, PROJECT, "   ", ("active",), 10) == []
        quoted = fts5_search(connection, PROJECT, 'tests" OR "x', ("active",), 10)  # quotes are no syntax
        assert [memory_id for memory_id, _ in quoted] == [mine]


@pytest.mark.parametrize(("query", "finds"), [("NEAR(tests", True), ("tests AND", True), ("pytest*", True),
                                           ("-tests", True), ("a:b", False), ("\"", False)])
def test_fts5_syntax_in_a_query_is_read_as_words(lexical_store: MemoryStore, query: str, finds: bool) -> None:
    mine = add(lexical_store, "Run the tests with pytest.")
    with lexical_store.engine.connect() as connection:  # no sqlite3.OperationalError for any of them
        found = [memory_id for memory_id, _ in fts5_search(connection, PROJECT, query, ALL, 10)]
    assert found == ([mine] if finds else [])
