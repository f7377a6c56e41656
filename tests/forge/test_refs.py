"""Naming an issue or pull request: ``owner/name#42``, GitLab's nested groups and ``!7``, and the
web addresses of each forge; anything else is a clear ``bad_issue_ref``."""

from __future__ import annotations

import pytest

from errand.forge import ForgeError, IssueRef, looks_like_issue_ref


@pytest.mark.parametrize(("text", "expected"), [
    ("acme/calc#42", IssueRef("acme", "calc", 42)),
    ("https://github.com/acme/calc/issues/42", IssueRef("acme", "calc", 42)),
    ("https://ghe.corp/acme/calc/pull/7/", IssueRef("acme", "calc", 7)),
])
def test_issue_refs(text: str, expected: IssueRef) -> None:
    assert IssueRef.parse(text) == expected


@pytest.mark.parametrize("text", ["calc#42", "acme/calc", "acme/calc#x", "../x/y#1", "https://h/acme/calc/tree/1"])
def test_bad_issue_refs(text: str) -> None:
    with pytest.raises(ForgeError) as caught:
        IssueRef.parse(text)
    assert caught.value.code == "bad_issue_ref"


@pytest.mark.parametrize(("text", "expected"), [
    ("acme/tools/calc#42", IssueRef("acme/tools", "calc", 42)),
    ("acme/tools/calc!7", IssueRef("acme/tools", "calc", 7, pull=True)),
    ("https://git.acme.test/acme/calc/pulls/3", IssueRef("acme", "calc", 3)),  # Gitea's pull request page
    ("https://gl.acme.test/a/b/c/d/-/merge_requests/5/", IssueRef("a/b/c", "d", 5, pull=True)),
])
def test_gitlab_and_gitea_refs(text: str, expected: IssueRef) -> None:
    assert IssueRef.parse(text) == expected
    assert IssueRef.of(expected.repo, expected.number, pull=expected.pull) == expected


@pytest.mark.parametrize("text", ["a/../b#1", "https://gl/a/b/-/tree/1", "a/b/-/issues#1"])
def test_bad_nested_refs(text: str) -> None:
    with pytest.raises(ForgeError):
        IssueRef.parse(text)


def test_a_reference_names_its_repository_and_prints_as_it_is_written() -> None:
    ref = IssueRef.parse("  acme/tools/calc#42\n")
    assert (ref.owner, ref.name, ref.repo, str(ref)) == ("acme/tools", "calc", "acme/tools/calc", "acme/tools/calc#42")
    assert IssueRef.parse("https://git.test/acme/calc.git/issues/3").name == "calc"


@pytest.mark.parametrize("text", ["acme/calc#1234567890", "acme/calc#", "-acme/calc#1", "acme/ca lc#1",
                                  "ftp://h/acme/calc/issues/1", ""])
def test_numbers_past_nine_digits_odd_names_and_other_schemes_are_no_reference(text: str) -> None:
    with pytest.raises(ForgeError) as caught:
        IssueRef.parse(text)
    assert caught.value.code == "bad_issue_ref" and repr(text) in str(caught.value)


def test_issue_or_markdown_file() -> None:
    assert looks_like_issue_ref("acme/calc#42")
    assert looks_like_issue_ref("https://github.com/acme/calc/issues/42")
    assert not looks_like_issue_ref("docs/issue.md")
    assert not looks_like_issue_ref("issue#42.md")
