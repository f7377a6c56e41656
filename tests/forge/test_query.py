"""A backlog query in GitHub's words, read for forges whose issue lists take filters instead."""

from __future__ import annotations

import pytest

from errand.forge.hosts.query import IssueQuery


def test_labels_state_and_words_are_told_apart() -> None:
    assert IssueQuery.parse('label:bug is:closed flaky label:"regression" test') == IssueQuery(
        "closed", ("bug", "regression"), "flaky test")


@pytest.mark.parametrize(("query", "state"), [("", "open"), ("is:open", "open"), ("is:closed", "closed"),
                                              ("is:all", "all"), ("is:issue", "open"), ("is:closed is:issue", "closed"),
                                              ("is:closed is:open", "open")])
def test_the_state_is_open_unless_the_query_says_otherwise(query: str, state: str) -> None:
    assert IssueQuery.parse(query).state == state


def test_what_is_no_filter_stays_a_word_to_match() -> None:
    # An unknown qualifier, an empty label and an unknown state are words, not silently dropped filters.
    assert IssueQuery.parse("author:me label: is:merged  crash") == IssueQuery(
        "open", (), "author:me label: is:merged crash")


def test_a_quoted_label_keeps_its_blanks() -> None:
    assert IssueQuery.parse('label:"good first issue" is:open crash "exact words"') == IssueQuery(
        "open", ("good first issue",), 'crash "exact words"')
    assert IssueQuery.parse('label:"unclosed quote') == IssueQuery("open", ("unclosed quote",), "")
