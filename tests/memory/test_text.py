"""The text helpers the store, ingestion and retrieval share: what two copies of one memory have in
common, the terms the lexical index holds and a question is searched by, likeness, broken Unicode."""

from __future__ import annotations

from errand.memory.text import (
    fingerprint,
    has_lone_surrogate,
    likeness,
    normalize,
    query_terms,
    query_words,
    search_terms,
    terms,
    without_lone_surrogates,
    words,
)


def test_questions_and_tasks_lose_their_framing_words() -> None:
    assert query_terms("Why should I run the tests?") == ["run", "test"]
    assert query_terms("Please make sure the migrations are reversible") == ["migration", "reversibl"]
    assert query_terms("how?") == ["how"]  # nothing else left: the framing is the query


def test_copies_of_one_memory_that_differ_in_case_width_and_spacing_share_a_fingerprint() -> None:
    assert normalize("  Run\tthe  TESTS\n with ＰＹＴＥＳＴ ") == "run the tests with pytest"
    assert fingerprint("Run the tests") == fingerprint("run  the\ntests ") != fingerprint("Run the test")
    assert len(fingerprint("x")) == 64


def test_the_index_holds_compound_words_whole_and_in_parts_each_lightly_stemmed() -> None:
    assert search_terms("Configure pytest.ini for x86-64") == ["configur", "pytest.ini", "pytest", "ini",
                                                               "x86-64", "x86", "64"]
    assert search_terms("tests testing tested") == ["test", "test", "test"]
    assert search_terms("running stopped passing falls buzzing") == ["run", "stop", "pass", "fall", "buzz"]
    assert search_terms("the status of this analysis") == ["status", "analysis"]  # stop words out, -us and -is kept
    assert search_terms("Größe der Тесты") == ["grösse", "der", "тесты"]  # case-folded; other scripts stay whole


def test_content_words_drop_stop_words_and_plurals_only() -> None:
    assert terms("The libraries and the tests pass") == ["library", "test", "pass"]
    assert words("Run run pytest.ini, then RUN") == ["run", "pytest.ini", "then"]
    assert query_words("How do I run pytest?") == ["run", "pytest"]
    assert query_words("why?") == ["why"]


def test_likeness_is_the_overlap_of_content_words_and_texts_of_none_are_alike_only_when_equal() -> None:
    assert likeness("Run the tests with pytest", "run tests with PYTEST") == 1.0
    assert likeness("Run the tests with pytest", "Run the linter with ruff") == 0.2  # {run} of 5 words
    assert likeness("the", "THE") == 1.0 and likeness("the", "a") == 0.0


def test_a_lone_surrogate_is_found_and_replaced_for_searching() -> None:
    broken = "cache \ud83d here"
    assert has_lone_surrogate(broken) and not has_lone_surrogate("cache 🙂 here")
    assert without_lone_surrogates(broken) == "cache \ufffd here"
    without_lone_surrogates(broken).encode()  # now UTF-8 holds it
