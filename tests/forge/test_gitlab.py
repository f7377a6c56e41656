"""The GitLab forge through the real httpx client against the loopback GitLab."""

from __future__ import annotations

import time

import pytest

from errand.forge import ForgeError, IssueRef
from errand.forge.hosts.gitlab import GitLabForge

from .conftest import GITLAB_REPO, GITLAB_TOKEN, OnForge
from .test_gitea import branch_on

REPO = GITLAB_REPO


def gitlab_forge(on: OnForge, token: str = GITLAB_TOKEN, **options: float) -> GitLabForge:
    return GitLabForge(token, base_url=on.fake.api_url, **options)


@pytest.mark.parametrize("links", [True, False])
def test_an_issue_is_read_with_labels_and_its_notes_across_pages(gitlab: OnForge, links: bool) -> None:
    gitlab.fake.send_links = links  # without Link headers, X-Next-Page leads
    issue = gitlab.fake.add_issue(REPO, "add() subtracts", "add(2, 3) gives -1", labels=("bug", "errand"))
    for n in range(230):
        gitlab.fake.add_note(REPO, "issues", issue["iid"], f"note {n}", user=f"user{n % 3}")
    read = gitlab_forge(gitlab).issue(IssueRef.of(REPO, issue["iid"]))
    assert read.title == "add() subtracts" and read.body == "add(2, 3) gives -1" and read.labels == ("bug", "errand")
    assert [c.body for c in read.comments] == [f"note {n}" for n in range(230)]  # oldest first
    pages = [r for r in gitlab.fake.requests if r.path.endswith(f"/issues/{issue['iid']}/notes")]
    assert len(pages) == 3 and all("acme%2Ftools%2Fcalc" in r.path for r in pages)
    assert all(r.headers["private-token"] == GITLAB_TOKEN for r in pages)


def test_issues_and_merge_requests_are_numbered_apart(gitlab: OnForge) -> None:
    forge = gitlab_forge(gitlab)
    issue = gitlab.fake.add_issue(REPO, "the issue", "i")
    branch_on(gitlab, "errand/a")
    mr = forge.open_pull(REPO, branch="errand/a", base="main", title="the mr", body="m", draft=False)
    assert issue["iid"] == mr.number == 1
    forge.comment(IssueRef.of(REPO, 1, pull=True), "on the merge request")
    forge.comment(IssueRef.of(REPO, 1), "on the issue")
    project = gitlab.fake.projects[REPO]
    assert [n["body"] for n in project.notes("merge_requests", 1)] == ["on the merge request"]
    assert [n["body"] for n in project.notes("issues", 1)] == ["on the issue"]
    forge.react(IssueRef.of(REPO, 1, pull=True), "eyes")
    forge.react(IssueRef.of(REPO, 1, pull=True), "eyes")  # again: already there, not an error
    assert [(a["name"], a["awardable"]) for a in project.awards] == [("eyes", "merge_requests:1")]
    assert forge.issue(IssueRef.of(REPO, 1, pull=True)).title == "the mr"


def test_a_backlog_query_in_githubs_words(gitlab: OnForge) -> None:
    for n in range(4):
        gitlab.fake.add_issue(REPO, f"bug {n}", "b", labels=("bug",) if n % 2 == 0 else ())
    gitlab.fake.projects[REPO].issues[3]["state"] = "closed"
    assert [i.title for i in gitlab_forge(gitlab).search_issues(REPO, "label:bug is:open", 10)] == ["bug 0"]


def test_a_wrong_token_is_a_clear_auth_error(gitlab: OnForge) -> None:
    with pytest.raises(ForgeError) as caught:
        gitlab_forge(gitlab, token="glpat-wrong").repository(REPO)
    assert caught.value.code == "forge_auth" and caught.value.status == 401
    assert "glpat-wrong" not in caught.value.message and "errand forge connect gitlab" in caught.value.message


def test_rate_limits_wait_for_ratelimit_reset(gitlab: OnForge) -> None:
    issue = gitlab.fake.add_issue(REPO, "t", "b")
    gitlab.fake.fail_next = [(429, {"RateLimit-Reset": str(int(time.time())), "RateLimit-Remaining": "0"}),
                             (403, {"RateLimit-Remaining": "0", "RateLimit-Reset": str(int(time.time()))})]
    gitlab_forge(gitlab).comment(IssueRef.of(REPO, issue["iid"]), "hello")
    assert not gitlab.fake.fail_next and len(gitlab.fake.projects[REPO].notes("issues", issue["iid"])) == 1
    gitlab.fake.fail_next = [(429, {"RateLimit-Reset": str(int(time.time()) + 3600)})]
    with pytest.raises(ForgeError) as caught:
        gitlab_forge(gitlab, max_wait=5).repository(REPO)
    assert caught.value.code == "forge_rate_limited" and "try again in" in caught.value.message


def test_a_merge_request_from_a_missing_branch_and_a_second_one_are_refused(gitlab: OnForge) -> None:
    forge = gitlab_forge(gitlab)
    with pytest.raises(ForgeError) as caught:
        forge.open_pull(REPO, branch="errand/nope", base="main", title="t", body="b", draft=True)
    assert caught.value.code == "forge_refused" and caught.value.status == 422
    assert "does not exist" in caught.value.message and not gitlab.fake.projects[REPO].merge_requests
    branch_on(gitlab, "errand/x")
    opened = forge.open_pull(REPO, branch="errand/x", base="main", title="t", body="b", draft=True)
    assert opened.draft and gitlab.fake.projects[REPO].merge_requests[opened.number]["title"] == "Draft: t"
    with pytest.raises(ForgeError) as again:
        forge.open_pull(REPO, branch="errand/x", base="main", title="t", body="b", draft=True)
    assert again.value.code == "forge_refused" and again.value.status == 409
    assert forge.find_pull(REPO, "errand/x") == opened


def test_discussions_are_threads_and_resolved_ones_are_left_out(gitlab: OnForge) -> None:
    forge = gitlab_forge(gitlab)
    branch_on(gitlab, "errand/y")
    mr = forge.open_pull(REPO, branch="errand/y", base="main", title="t", body="b", draft=False)
    first = gitlab.fake.line_note(REPO, mr.number, "why?", file="calc.py", line=2)
    gitlab.fake.add_note(REPO, "merge_requests", mr.number, "me too", discussion=first["discussion_id"])
    done = gitlab.fake.line_note(REPO, mr.number, "fixed already", file="calc.py", line=9)
    gitlab.fake.projects[REPO].discussions[("merge_requests", mr.number)][1]["notes"][0]["resolved"] = True
    gitlab.fake.add_note(REPO, "merge_requests", mr.number, "a plain comment")
    found = forge.review_comments(REPO, mr.number)
    assert [(c.body, c.path, c.line, c.in_reply_to) for c in found] == [
        ("why?", "calc.py", 2, None), ("me too", "calc.py", 2, first["id"])]
    assert done["id"] not in [c.id for c in found]
    forge.reply_review(REPO, mr.number, first["id"], "done in abc")
    [thread] = [d for d in gitlab.fake.projects[REPO].discussions[("merge_requests", mr.number)]
                if d["id"] == first["discussion_id"]]
    assert [n["body"] for n in thread["notes"]] == ["why?", "me too", "done in abc"]


def test_statuses_are_the_checks_with_a_failed_jobs_log(gitlab: OnForge) -> None:
    project = gitlab.fake.projects[REPO]
    project.statuses["abc"] = [
        {"name": "test", "status": "failed", "target_url": f"{gitlab.fake.url}/{REPO}/-/jobs/41", "description": ""},
        {"name": "lint", "status": "running", "target_url": None, "description": ""}]
    project.traces[41] = "collecting...\nFAILED test_calc.py::test_add - assert -1 == 5\n"
    found = gitlab_forge(gitlab).checks(REPO, "abc")
    assert [(c.name, c.state) for c in found] == [("test", "failure"), ("lint", "pending")]
    assert "FAILED test_calc.py::test_add" in found[0].detail


def test_permission_follows_access_levels(gitlab: OnForge) -> None:
    forge = gitlab_forge(gitlab)
    gitlab.fake.projects[REPO].members.update(dev=30, rep=20)
    for name in ("dev", "rep", "stranger"):
        gitlab.fake.user_id(name)
    assert [forge.permission(REPO, n) for n in ("acme", "dev", "rep", "stranger", "nobody")] == [
        "admin", "write", "triage", "none", "none"]
