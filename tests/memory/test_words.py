"""The static query encoder: word vectors written with memories, a query's vector made from them."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
import sqlalchemy as sa
from numpy.typing import NDArray

from errand.memory import E5Embedder, MemoryStore, Provenance, retrieve
from errand.memory.retrieve import DEFAULT_WEIGHTS, WORD_WEIGHTS, Weights
from errand.memory.schema import memory_words
from errand.memory.selection import select
from errand.memory.text import search_terms
from errand.memory.words import COMMON_SHARE

PROJECT = "/repo/example"
FACTS = [
    "The test command that works here: `pytest -q tests/`",
    "Public functions carry type annotations; mypy runs in strict mode.",
    "The database migrations must be generated with Alembic, never written by hand.",
    "The web interface is rendered on the server with Jinja2 templates.",
]


class Counting:
    """The model, with a log of the texts it embedded as queries."""

    def __init__(self, inner: E5Embedder) -> None:
        self.inner, self.name, self.queries = inner, inner.name, list[str]()

    def embed(self, texts: Sequence[str], *, query: bool = False) -> NDArray[np.float32]:
        if query:
            self.queries += texts
        return self.inner.embed(texts, query=query)


@pytest.fixture
def counting(embedder: E5Embedder) -> Counting:
    return Counting(embedder)


@pytest.fixture
def store(url: str, counting: Counting) -> Iterator[MemoryStore]:
    with MemoryStore.open(url, embedder=counting) as opened:  # type: ignore[arg-type]
        yield opened


def add(store: MemoryStore, text: str, project: str = PROJECT) -> int:
    return store.add(project, text, kind="fact", provenance=Provenance.person()).id


def stored_words(store: MemoryStore) -> set[str]:
    with store.engine.connect() as connection:
        return set(connection.execute(sa.select(memory_words.c.word)).scalars())


def test_a_memorys_words_get_vectors_when_it_is_added_and_edited(store: MemoryStore) -> None:
    long = "x" * 65  # no index holds a word of any length; this one gets no vector
    memory_id = add(store, f"Releases are cut from the main branch, tagged {long}.")
    assert stored_words(store) == {"releases", "are", "cut", "from", "the", "main", "branch", "tagged"}
    store.edit(memory_id, text="Releases are cut from the release/2.x branches.")
    assert {"release", "2.x", "branches"} <= stored_words(store)
    with store.engine.connect() as connection:  # one row a word, however many memories hold it
        rows = connection.execute(sa.select(sa.func.count()).select_from(memory_words)).scalar_one()
    assert rows == len(stored_words(store))


def test_the_query_vector_is_the_idf_weighted_mean_less_the_common_direction(
        store: MemoryStore, embedder: E5Embedder) -> None:
    for text in FACTS:
        add(store, text)
    query = "How should the migrations be generated?"  # "how", "should", "the", "be" are framing words
    with store.engine.connect() as connection:
        vector = store.words().query_vector(connection, query, store.lexical_index(connection, PROJECT))
    vocabulary = sorted(stored_words(store))
    table = dict(zip(vocabulary, embedder.embed(vocabulary, query=True), strict=True))
    common = np.mean(np.stack(list(table.values())), axis=0)
    words = ["migrations", "generated"]

    def idf(word: str) -> float:  # Okapi's, over the project's memories, by the word's stem
        having = sum(search_terms(word)[0] in search_terms(text) for text in FACTS) if search_terms(word) else 0
        return math.log(1 + (len(FACTS) - having + 0.5) / (having + 0.5))

    expected = np.average([table[word] - COMMON_SHARE * common for word in words], axis=0,
                          weights=[idf(word) + 1e-9 for word in words])
    assert vector is not None
    np.testing.assert_allclose(vector, expected / np.linalg.norm(expected), atol=1e-5)


def test_a_query_of_known_words_costs_no_embedding(store: MemoryStore, counting: Counting) -> None:
    for text in FACTS:
        add(store, text)
    counting.queries.clear()
    found = retrieve(store, PROJECT, "Which command runs the tests?", k=3)
    assert found[0].memory.text == FACTS[0] and set(found[0].ranks) == {"lexical", "dense"}
    given = select(store, PROJECT, "Regenerate the database migrations", k=4)  # its two retrieve() calls
    assert FACTS[2] in [item.memory.text for item in given]
    assert counting.queries == []


def test_a_new_word_is_found_at_once_by_a_store_that_holds_the_table(url: str, counting: Counting,
                                                                     store: MemoryStore) -> None:
    for text in FACTS:
        add(store, text)
    dense_only = Weights(lexical=0.0, dense=WORD_WEIGHTS.dense, dense_center=WORD_WEIGHTS.dense_center)
    query = "Where do the fixtures live?"
    retrieve(store, PROJECT, query, k=3)  # the table is now held in this process
    with MemoryStore.open(url, embedder=counting) as other:  # type: ignore[arg-type]  # another process
        added = add(other, "Test fixtures live in tests/fixtures, one directory per suite.")
    counting.queries.clear()
    found = retrieve(store, PROJECT, query, k=3, weights=dense_only)
    assert found[0].memory.id == added and counting.queries == []  # by the new words' vectors, no model call


def test_a_query_of_no_known_word_is_embedded_by_the_model(store: MemoryStore, counting: Counting) -> None:
    for text in FACTS:
        add(store, text)
    counting.queries.clear()
    query = "Jinja"  # the memories say "Jinja2": no word of the query has a vector
    with store.engine.connect() as connection:
        assert store.words().query_vector(connection, query, store.lexical_index(connection, PROJECT)) is None
    found = retrieve(store, PROJECT, query, k=1)
    assert [item.memory.text for item in found] == [FACTS[3]] and counting.queries == [query]
    # ... with the weights tuned for the model's query vectors
    same = retrieve(store, PROJECT, query, k=1, weights=DEFAULT_WEIGHTS)
    assert [(item.memory.id, round(item.score, 4)) for item in same] == [(item.memory.id, round(item.score, 4))
                                                                          for item in found]


def test_backfill_fills_the_words_of_memories_stored_without_an_embedder(url: str, counting: Counting) -> None:
    with MemoryStore.open(url, embedder=None) as plain:
        for text in FACTS:
            add(plain, text)
    told: list[tuple[int, int]] = []
    with MemoryStore.open(url, embedder=counting) as dense:  # type: ignore[arg-type]
        assert stored_words(dense) == set()
        assert dense.backfill_vectors(PROJECT, progress=lambda done, total: told.append((done, total))) == 4
        words = stored_words(dense)
        assert {"pytest", "jinja2", "alembic", "annotations"} <= words and told[-1] == (len(words), len(words))
        counting.queries.clear()
        assert retrieve(dense, PROJECT, "alembic migrations", k=1)[0].memory.text == FACTS[2]
        assert counting.queries == []
        told.clear()
        dense.backfill_vectors(PROJECT, progress=lambda done, total: told.append((done, total)))
        assert told == []  # nothing left to embed


def test_a_query_of_mostly_unknown_words_is_embedded_by_the_model(store: MemoryStore, counting: Counting) -> None:
    for text in FACTS:
        add(store, text)
    counting.queries.clear()
    query = "Fix the flaky checkout tests"  # of "fix", "flaky", "checkout", "tests", memories hold one
    retrieve(store, PROJECT, query, k=3)
    assert counting.queries == [query]
    counting.queries.clear()
    retrieve(store, PROJECT, "Fix the flaky database migrations", k=3)  # two of four words known: enough
    assert counting.queries == []


@pytest.mark.slow
def test_on_postgresql_a_word_committed_out_of_id_order_is_found(postgres_url: str, counting: Counting) -> None:
    with MemoryStore.open(postgres_url, embedder=counting) as store:  # type: ignore[arg-type]
        add(store, "Deploys run on Fridays.")
        with store.engine.connect() as connection:
            assert store.words().query_vector(connection, "fridays", store.lexical_index(connection, PROJECT)) \
                is not None  # the table is held now, read up to its newest id
            lowest = connection.execute(sa.select(sa.func.min(memory_words.c.id))).scalar_one()
        with store.engine.begin() as connection:  # as a writer whose transaction took an id early and committed late
            vector = connection.execute(sa.select(memory_words.c.vector).where(memory_words.c.word == "fridays")
                                        ).scalar_one()
            connection.execute(memory_words.insert().values(id=lowest - 1, model=counting.name, word="saturdays",
                                                            vector=vector))
        with store.engine.connect() as connection:
            index = store.lexical_index(connection, PROJECT)
            assert store.words().query_vector(connection, "saturdays", index) is not None
