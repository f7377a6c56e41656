from __future__ import annotations

from pathlib import Path

import pytest

from errand.memory import Kind, MemoryStore, Provenance, Status, Weights, retrieve
from errand.memory.citations import TreeIndex, check, extract
from errand.memory.retrieve import fuse

PROJECT = "/repo/example"

FACTS = [
    ("command", "The test command that works here: `pytest -q tests/`"),
    ("convention", "Public functions carry type annotations; mypy runs in strict mode."),
    ("pitfall", "The database migrations must be generated with Alembic, never written by hand."),
    ("preference", "Reviewers want one logical change per commit."),
    ("fact", "The web interface is rendered on the server with Jinja2 templates."),
    ("command", "Install the development dependencies with `pip install -e .[dev]`."),
]


def fill(store: MemoryStore, project: str = PROJECT) -> dict[str, int]:
    return {text: store.add(project, text, kind=kind, provenance=Provenance.person()).id for kind, text in FACTS}


def texts(found: list) -> list[str]:  # type: ignore[type-arg]
    return [item.memory.text for item in found]


def test_hybrid_retrieval_finds_the_relevant_memory(store: MemoryStore) -> None:
    fill(store)
    found = retrieve(store, PROJECT, "how do I run the tests?", k=3)
    assert found[0].memory.text == FACTS[0][1]
    assert set(found[0].ranks) == {"lexical", "dense"}
    assert [item.score for item in found] == sorted((item.score for item in found), reverse=True)


def test_dense_half_finds_what_shares_no_word(store: MemoryStore, lexical_store: MemoryStore) -> None:
    fill(store)
    query = "Jinja"  # BM25 sees no word in common with "Jinja2"
    assert FACTS[4][1] not in texts(retrieve(lexical_store, PROJECT, query, k=6))
    assert texts(retrieve(store, PROJECT, query, k=1)) == [FACTS[4][1]]


def test_bm25_alone_without_an_embedder(lexical_store: MemoryStore) -> None:
    fill(lexical_store)
    found = retrieve(lexical_store, PROJECT, "alembic migrations", k=5)
    assert texts(found) == [FACTS[2][1]]
    assert found[0].ranks == {"lexical": 1}


def test_python_bm25_stands_in_where_fts5_is_missing(lexical_store: MemoryStore) -> None:
    fill(lexical_store)
    with_fts = texts(retrieve(lexical_store, PROJECT, "commit reviewers change", k=3))
    lexical_store._fts5 = False  # as on PostgreSQL
    assert texts(retrieve(lexical_store, PROJECT, "commit reviewers change", k=3)) == with_fts
    lexical_store.add(PROJECT, "Every commit message starts with the component name.", kind="convention",
                      provenance=Provenance.person())
    assert "Every commit message starts with the component name." in \
        texts(retrieve(lexical_store, PROJECT, "commit message", k=3))


def test_only_active_memories_unless_proposed_are_asked_for(store: MemoryStore) -> None:
    ids = fill(store)
    store.archive(ids[FACTS[0][1]])
    proposed = store.add(PROJECT, "Run the slow tests with `pytest -m slow`.", kind="command",
                         provenance=Provenance.person(), status=Status.PROPOSED)
    plain = texts(retrieve(store, PROJECT, "run the tests", k=6))
    assert FACTS[0][1] not in plain and proposed.text not in plain
    assert proposed.text in texts(retrieve(store, PROJECT, "run the tests", k=6, include_proposed=True))


def test_scoped_to_the_project_and_filtered_by_kind(store: MemoryStore) -> None:
    fill(store)
    store.add("/other", "The test command that works here: `cargo test`", kind="command",
              provenance=Provenance.person())
    found = retrieve(store, PROJECT, "test command", k=10, kinds=[Kind.COMMAND])
    assert {item.memory.kind for item in found} == {Kind.COMMAND}
    assert all(item.memory.project == PROJECT for item in found)
    assert retrieve(store, PROJECT, "   ") == [] and retrieve(store, PROJECT, "tests", k=0) == []


def test_near_duplicates_are_returned_once(lexical_store: MemoryStore) -> None:
    for text in ("Run `make check` before pushing any branch.", "Before pushing any branch run `make check` now."):
        lexical_store.add(PROJECT, text, kind="command", provenance=Provenance.person(), merge=False)
    assert len(retrieve(lexical_store, PROJECT, "make check before pushing", k=5)) == 1


def test_use_breaks_ties(lexical_store: MemoryStore) -> None:
    first = lexical_store.add(PROJECT, "Lint with flake8.", kind="command", provenance=Provenance.person())
    second = lexical_store.add(PROJECT, "Lint with pylint.", kind="command", provenance=Provenance.person())
    lexical_store.record_use("t-1", [second.id, second.id], "used")
    lexical_store.record_use("t-2", [second.id], "recalled")
    found = retrieve(lexical_store, PROJECT, "lint with", k=2, weights=Weights(recency=0))
    assert [item.memory.id for item in found] == [second.id, first.id]


def test_stale_citations_are_flagged_against_the_tree(store: MemoryStore, tmp_path: Path) -> None:
    repo = tmp_path / "checkout"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "check.sh").write_text("#!/bin/sh\nruff check .\n")
    (repo / "app.py").write_text("def open_store(url):\n    return url\n")
    holds = store.add(PROJECT, "Run `scripts/check.sh` before committing; it wraps `open_store()` checks.",
                      kind="command", provenance=Provenance.person())
    gone = store.add(PROJECT, "Run `scripts/lint.sh` before committing.", kind="command",
                     provenance=Provenance.person())
    renamed = store.add(PROJECT, "Before committing, make sure `connect_store()` still works.", kind="fact",
                        provenance=Provenance.person())
    found = {item.memory.id: item for item in retrieve(store, PROJECT, "before committing", k=5, repo_dir=repo)}
    assert not found[holds.id].stale
    assert found[gone.id].stale and found[gone.id].stale_reasons == (
        "cites scripts/lint.sh, which is not in the tree",)
    assert found[renamed.id].stale_reasons == ("cites connect_store, which no code file in the tree mentions",)
    assert "STALE" in found[gone.id].render() and "STALE" not in found[holds.id].render()
    unchecked = {item.memory.id: item for item in retrieve(store, PROJECT, "before committing", k=5)}
    assert found[gone.id].score == pytest.approx(unchecked[gone.id].score * Weights().stale)  # demoted
    assert found[holds.id].score == pytest.approx(unchecked[holds.id].score)


def test_citation_extraction() -> None:
    assert extract("Edit `src/app/models.py` and README.md, see https://example.org/x.py") == (
        "file:src/app/models.py", "file:README.md")
    assert extract("Call `TaskStore.open()` or `make_engine`; run `pytest -q`, `ruff`, see the `Makefile`") == (
        "symbol:TaskStore.open", "symbol:make_engine", "file:Makefile")


def test_tree_index_answers_paths_names_and_symbols(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "core.py").write_text("class Engine:\n    def start(self): ...\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "hidden.py").write_text("def ghost(): ...\n")
    tree = TreeIndex(tmp_path)
    assert check(("file:pkg/core.py", "file:core.py", "symbol:Engine.start"), tree) == ()
    assert check(("file:../etc/passwd", "symbol:ghost", "file:pkg/gone.py"), tree) == (
        "cites ../etc/passwd, which is not in the tree", "cites ghost, which no code file in the tree mentions",
        "cites pkg/gone.py, which is not in the tree")


def test_fusion_is_reciprocal_rank() -> None:
    fused = fuse([(1.0, [10, 20]), (0.5, [20, 30])], rrf_k=60)
    assert fused[20][0] == pytest.approx(1 / 62 + 0.5 / 61)
    assert fused[10][1] == {0: 1} and fused[20][1] == {0: 2, 1: 1}
    with pytest.raises(ValueError):
        Weights(lexical=0, dense=0)


def test_a_query_with_a_lone_surrogate_is_searched_not_raised(store: MemoryStore) -> None:
    fill(store)
    assert texts(retrieve(store, PROJECT, "run the tests \udcff", k=1)) == [FACTS[0][1]]


def test_memories_in_other_scripts_are_searched_and_kept_apart(store: MemoryStore) -> None:
    texts_ru = ["Тесты запускаются одной командой из корня.", "Миграции базы данных создаются автоматически.",
                "Рецензенты просят один логический шаг на коммит."]
    ids = [store.add(PROJECT, text, kind="fact", provenance=Provenance.person()).id for text in texts_ru]
    assert len(set(ids)) == 3
    # Three memories come back, not one: their words are words, not empty sets that look like duplicates.
    assert sorted(texts(retrieve(store, PROJECT, "тесты, миграции и коммит", k=3))) == sorted(texts_ru)
    assert texts(retrieve(store, PROJECT, "как создаются миграции", k=1)) == [texts_ru[1]]


def test_another_projects_memories_do_not_move_this_ones_ranking(lexical_store: MemoryStore) -> None:
    short = lexical_store.add(PROJECT, "Use pytest.", kind="fact", provenance=Provenance.person()).id
    longer = lexical_store.add(PROJECT, "Deploy from the release branch only.", kind="fact",
                               provenance=Provenance.person()).id

    def ranking() -> list[int]:
        return [item.memory.id for item in retrieve(lexical_store, PROJECT, "pytest deploy", k=2, now=0.0)]

    assert ranking() == [short, longer]
    for number in range(40):  # a busy neighbour whose every memory mentions pytest
        lexical_store.add("/repo/other", f"Suite {number} runs under pytest in stage {number}.", kind="fact",
                          provenance=Provenance.person(), merge=False)
    assert ranking() == [short, longer]  # in this project pytest is as rare as it was


def test_a_memory_is_found_by_its_vector_the_moment_it_is_written(store: MemoryStore) -> None:
    """The project's vector matrix is held between searches; a write that changes what it holds drops it,
    so the long-lived store answers as a fresh one reading every vector again would."""
    dense_only = Weights(lexical=0.0, dense=1.0)
    fill(store)
    query = "Jinja"  # no word in common with the memories that answer it: found by their vectors alone

    def answers(of: MemoryStore) -> list[tuple[int, float]]:
        found = retrieve(of, PROJECT, query, k=6, weights=dense_only)
        return [(item.memory.id, round(item.score, 6)) for item in found]

    def fresh() -> list[tuple[int, float]]:
        return answers(MemoryStore(store.engine, embedder=store.embedder))

    assert answers(store)[0][0] == fill_ids(store)[FACTS[4][1]]  # and the matrix is now held
    added = store.add(PROJECT, "Email bodies are rendered from Jinja2 templates under mail/.", kind="fact",
                      provenance=Provenance.person())
    assert added.id in [memory_id for memory_id, _ in answers(store)[:2]] and answers(store) == fresh()
    store.edit(added.id, text="Deploys go out on Tuesdays after the release meeting.")
    assert answers(store) == fresh() and added.id not in [memory_id for memory_id, _ in answers(store)[:2]]
    store.archive(fill_ids(store)[FACTS[4][1]])
    assert answers(store) == fresh() and fill_ids(store)[FACTS[4][1]] not in dict(answers(store))
    store.remove(added.id)
    assert answers(store) == fresh() and added.id not in dict(answers(store))


def fill_ids(store: MemoryStore) -> dict[str, int]:
    return {memory.text: memory.id for memory in store.list_memories(PROJECT, limit=100)}


def test_an_unrelated_task_is_given_nothing_rather_than_the_least_unrelated(store: MemoryStore) -> None:
    fill(store)
    assert retrieve(store, PROJECT, "Plan the team offsite in Lisbon next spring", k=10) == []
    assert retrieve(store, PROJECT, "Translate the marketing brochure into French", k=10) == []
    assert texts(retrieve(store, PROJECT, "how do I run the tests?", k=10))[0] == FACTS[0][1]
