"""When two similar texts say different things: the reason each kind of difference is named, and
texts that say the same thing in other words found to have none."""

from __future__ import annotations

import pytest

from errand.memory.conflicts import conflict


@pytest.mark.parametrize(("first", "second", "reason"), [
    ("Tests must run with `--no-network` on CI.", "Tests must not run with `--no-network` on CI.",
     "one says not, the other does not"),
    ("Never push to main directly.", "Push to main directly.", "one says not, the other does not"),
    ("The linter can’t be skipped.", "The linter can be skipped.", "one says not, the other does not"),
    ("The project needs Node 18 to build.", "The project needs Node 20 to build.", "their numbers differ"),
    ("Timeouts are 1.5 seconds.", "Timeouts are 15 seconds.", "their numbers differ"),
    ("The API listens on 8080 and the web app on 3000.", "The API listens on 3000 and the web app on 8080.",
     "they name the same values in a different order"),
    ("Use `ruff` for lint and `black` for format.", "Use `black` for lint and `ruff` for format.",
     "they name the same values in a different order"),
    ("Run the migrations, then seed the database.", "Seed the database, then run the migrations.",
     "they name the same steps in a different order"),
    ("Build the image before starting redis.", "Start redis before building the image.",
     "they name the same steps in a different order"),
])
def test_each_difference_is_named(first: str, second: str, reason: str) -> None:
    assert conflict(first, second) == reason
    assert conflict(second, first) == reason


@pytest.mark.parametrize(("first", "second"), [
    ("Run the tests with `pytest -q` before pushing.", "Run tests with `pytest -q` before pushing"),
    ("The API listens on 8080.", "the api LISTENS on 8080"),
    ("Use tabs, not spaces.", "Use tabs and not spaces."),  # one negation each
    ("Releases are cut from main.", "Releases are cut from the main branch."),
])
def test_the_same_statement_in_other_words_has_no_conflict(first: str, second: str) -> None:
    assert conflict(first, second) is None


def test_a_text_never_conflicts_with_itself() -> None:
    for text in ("Run the migrations, then seed the database.", "Node 18; npm 9.", "Don't use `sudo`.", ""):
        assert conflict(text, text) is None
