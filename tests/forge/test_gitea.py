"""The Gitea forge through the real httpx client against the loopback Gitea."""

from __future__ import annotations

import time

import pytest

from engine.harness import git
from errand.forge import ForgeError, IssueRef
from errand.forge.hosts.gitea import GiteaForge

from .conftest import GITEA_TOKEN, REPO, OnForge


def gitea_forge(on: OnForge, token: str = GITEA_TOKEN, **options: float) -> GiteaForge:
    return GiteaForge(token, base_url=on.fake.api_url, **options)


def branch_on(on: OnForge, branch: str) -> str:
    """A branch on the forge one commit ahead of main (someone pushed it)."""
    bare = on.fake.bare[on.repo]
    commit = git(bare, "-c", "user.name=Someone", "-c", "user.email=s@example.com", "commit-tree", "HEAD^{tree}",
                 "-p", "HEAD", "-m", branch).strip()
    git(bare, "branch", branch, commit)
    return commit


def test_an_issue_is_read_with_labels_and_its_whole_thread_across_pages(gitea: OnForge) -> None:
    issue = gitea.fake.add_issue(REPO, "add() subtracts", "add(2, 3) gives -1", labels=("bug", "errand"))
    for n in range(120):  # more than two pages of 50
        gitea.fake.add_comment(REPO, issue["number"], f"comment {n}", user=f"user{n % 3}")
    read = gitea_forge(gitea).issue(IssueRef.of(REPO, issue["number"]))
    assert read.title == "add() subtracts" and read.labels == ("bug", "errand") and not read.is_pull
    assert [c.body for c in read.comments] == [f"comment {n}" for n in range(120)]
    pages = [r for r in gitea.fake.requests if r.path.endswith(f"/issues/{issue['number']}/comments")]
    assert len(pages) == 3
    assert all(r.headers["authorization"] == f"token {GITEA_TOKEN}" for r in pages)


def test_a_backlog_query_in_githubs_words(gitea: OnForge) -> None:
    for n in range(4):
        gitea.fake.add_issue(REPO, f"bug {n}", "b", labels=("bug",) if n % 2 == 0 else ())
    gitea.fake.repos[REPO].issues[3]["state"] = "closed"
    found = gitea_forge(gitea).search_issues(REPO, "label:bug is:open", 10)
    assert [i.title for i in found] == ["bug 0"]


def test_a_wrong_token_is_a_clear_auth_error(gitea: OnForge) -> None:
    issue = gitea.fake.add_issue(REPO, "t", "b")
    with pytest.raises(ForgeError) as caught:
        gitea_forge(gitea, token="gta_wrong").issue(IssueRef.of(REPO, issue["number"]))
    assert caught.value.code == "forge_auth" and caught.value.status == 401
    assert "gta_wrong" not in caught.value.message and "errand forge connect gitea" in caught.value.message


def test_a_short_rate_limit_is_waited_out_even_for_a_post(gitea: OnForge) -> None:
    issue = gitea.fake.add_issue(REPO, "t", "b")
    gitea.fake.fail_next = [(429, {"Retry-After": "0"}), (429, {"X-RateLimit-Reset": str(int(time.time()))})]
    gitea_forge(gitea).comment(IssueRef.of(REPO, issue["number"]), "hello")
    assert not gitea.fake.fail_next
    assert [c["body"] for c in gitea.fake.repos[REPO].comments[issue["number"]]] == ["hello"]  # once, not thrice


def test_a_long_rate_limit_is_an_error_that_names_the_wait(gitea: OnForge) -> None:
    gitea.fake.fail_next = [(429, {"Retry-After": "3600"})]
    with pytest.raises(ForgeError) as caught:
        gitea_forge(gitea, max_wait=5).repository(REPO)
    assert caught.value.code == "forge_rate_limited" and "try again in 3600 s" in caught.value.message


def test_a_read_is_retried_after_a_server_error_and_a_post_is_not(gitea: OnForge) -> None:
    issue = gitea.fake.add_issue(REPO, "t", "b")
    gitea.fake.fail_next = [(502, {})]
    assert gitea_forge(gitea).issue(IssueRef.of(REPO, issue["number"])).title == "t"
    gitea.fake.fail_next = [(502, {})]
    with pytest.raises(ForgeError) as caught:
        gitea_forge(gitea).comment(IssueRef.of(REPO, issue["number"]), "hello")
    assert caught.value.status == 502 and gitea.fake.repos[REPO].comments[issue["number"]] == []


def test_an_unreachable_server_is_a_clear_error(gitea: OnForge) -> None:
    forge = gitea_forge(gitea)
    gitea.fake.stop()
    with pytest.raises(ForgeError) as caught:
        forge.repository(REPO)
    assert caught.value.code == "forge_unreachable" and gitea.fake.api_url in caught.value.message


def test_pull_requests_a_bad_head_and_a_second_one_are_refused(gitea: OnForge) -> None:
    forge = gitea_forge(gitea)
    with pytest.raises(ForgeError) as caught:
        forge.open_pull(REPO, branch="main", base="main", title="t", body="b", draft=True)
    assert caught.value.code == "forge_refused" and caught.value.status == 422
    branch_on(gitea, "errand/x")
    opened = forge.open_pull(REPO, branch="errand/x", base="main", title="t", body="b", draft=True)
    assert opened.draft and gitea.fake.repos[REPO].pulls[opened.number]["title"] == "WIP: t"
    with pytest.raises(ForgeError) as again:
        forge.open_pull(REPO, branch="errand/x", base="main", title="t", body="b", draft=True)
    assert again.value.code == "forge_refused" and again.value.status == 409
    assert forge.find_pull(REPO, "errand/x") == opened and len(gitea.fake.repos[REPO].pulls) == 1


def test_line_comments_group_into_threads_and_a_reply_joins_its_line(gitea: OnForge) -> None:
    forge = gitea_forge(gitea)
    branch_on(gitea, "errand/y")
    pull = forge.open_pull(REPO, branch="errand/y", base="main", title="t", body="b", draft=False)
    gitea.fake.add_review(REPO, pull.number, "", comments=(("calc.py", 2, "why?"), ("calc.py", 2, "me too")))
    first, second = forge.review_comments(REPO, pull.number)
    assert (first.path, first.line, first.in_reply_to) == ("calc.py", 2, None)
    assert second.in_reply_to == first.id
    forge.reply_review(REPO, pull.number, first.id, "done in abc")
    replies = [c for c in gitea.fake.repos[REPO].line_comments(pull.number) if c["user"]["login"] == "errand-bot"]
    assert [(c["path"], c["position"], c["body"]) for c in replies] == [("calc.py", 2, "done in abc")]


def test_statuses_are_the_checks(gitea: OnForge) -> None:
    gitea.fake.repos[REPO].statuses["abc"] = [
        {"context": "ci/tests", "status": "failure", "target_url": "http://ci/1", "description": "1 failed"},
        {"context": "lint", "status": "warning", "target_url": "", "description": ""}]
    found = gitea_forge(gitea).checks(REPO, "abc")
    assert [(c.name, c.state, c.url, c.detail) for c in found] == [("ci/tests", "failure", "http://ci/1", "1 failed"),
                                                                   ("lint", "neutral", None, "")]


def test_owner_permission_counts_as_admin(gitea: OnForge) -> None:
    assert gitea_forge(gitea).permission(REPO, "acme") == "admin"
    assert gitea_forge(gitea).permission(REPO, "stranger") == "read"
