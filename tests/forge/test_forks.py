"""``@errand`` on a pull request from a fork, on a real ``errand serve``: the fork's head is read
from the base repository (``refs/pull/N/head``); errand pushes to the fork's branch only where its
author lets maintainers edit it, and otherwise opens its own pull request in the base repository,
saying so on the fork's. The token never goes to a fork it may not push to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.harness import git
from server.conftest import Served

from .conftest import REPO, TOKEN, Forged, eventually, files_holding, state
from .fakegithub import FakeGitHub

pytestmark = pytest.mark.slow


def fork_with_branch(fake: FakeGitHub, tmp_path: Path, fork: str, branch: str) -> str:
    """``fork`` of the repository with a person's commit on ``branch`` (pushed on the fork's disk)."""
    fake.add_fork(fork, REPO)
    clone = tmp_path / fork.replace("/", "-")
    git(tmp_path, "clone", "-q", str(fake.repos[fork].bare), str(clone))
    git(clone, "switch", "-q", "-c", branch)
    (clone / "NOTES.md").write_text(f"notes from {fork}\n")
    git(clone, "add", "NOTES.md")
    git(clone, "-c", "user.name=Forker", "-c", "user.email=f@example.com", "commit", "-qm", "notes")
    git(clone, "push", "-q", "origin", branch)
    return git(clone, "rev-parse", "HEAD").strip()


def ask(forged: Forged, served: Served, pull: dict[str, Any], body: str) -> httpx.Response:
    fake = forged.fake
    said = fake.add_comment(REPO, pull["number"], body, user="acme")
    return fake.deliver(f"{served.url}/api/forge/github/webhook", "issue_comment",
                        fake.issue_payload(REPO, pull["number"], "created", comment=said, sender="acme"))


def git_requests_to(fake: FakeGitHub, repo: str) -> list[str]:
    return [r.path for r in fake.requests if r.path.startswith(f"/{repo}.git/")]


def test_a_fork_that_forbids_edits_gets_errands_own_pull_request_and_no_token(forged: Forged, served: Served,
                                                                              tmp_path: Path) -> None:
    fake = forged.fake
    fork_head = fork_with_branch(fake, tmp_path, "someone/calc", "fix-add")
    theirs = fake.open_fork_pull(REPO, "someone/calc", "fix-add", "Fix add", user="someone",
                                 maintainer_can_modify=False)
    asked = ask(forged, served, theirs, "@errand make add() add")
    assert asked.status_code == 202, asked.text
    task_id = asked.json()["task_id"]
    detail = httpx.get(f"{served.url}/api/tasks/{task_id}").json()
    assert detail["base_commit"] == fork_head and "someone/calc:fix-add" in detail["instruction"]

    ours = eventually("errand opens its own pull request", lambda: next(
        (p for p in fake.repos[REPO].pulls.values() if p["number"] != theirs["number"]), None), seconds=180)
    assert state(served, task_id) == "accepted"  # asked for on the forge: its pull request is its review
    head = fake.branch_head(REPO, ours["head"]["ref"])
    assert ours["head"]["ref"].startswith(f"errand/{task_id}") and head is not None
    assert git(fake.repos[REPO].bare, "rev-parse", f"{head}^").strip() == fork_head  # on top of the fork's work
    assert f"Follows up #{theirs['number']}" in ours["body"] and "Fixes #" not in ours["body"]
    said = eventually("errand says so on the fork's pull request", lambda: [
        c["body"] for c in fake.repos[REPO].comments[theirs["number"]] if "may not push" in c["body"]])
    assert ours["html_url"] in said[0] and "someone/calc:fix-add" in said[0]
    # The fork was never pushed to, and the token never went near it: not even to read it.
    assert fake.branch_head("someone/calc", "fix-add") == fork_head
    assert git_requests_to(fake, "someone/calc") == []

    # A second ask on the fork's pull request goes onto errand's pull request, not a third one.
    again = ask(forged, served, theirs, "@errand also note it in CHANGES.md")
    assert again.status_code == 202, again.text
    eventually("the second round lands on errand's branch", lambda: fake.branch_head(REPO, ours["head"]["ref"])
               != head, seconds=180)
    assert len(fake.repos[REPO].pulls) == 2 and git_requests_to(fake, "someone/calc") == []
    assert files_holding(forged.home, TOKEN) == [] and files_holding(fake.repos["someone/calc"].bare, TOKEN) == []


def test_a_fork_that_allows_edits_gets_the_round_on_its_own_branch(forged: Forged, served: Served,
                                                                    tmp_path: Path) -> None:
    fake = forged.fake
    fork_head = fork_with_branch(fake, tmp_path, "friend/calc", "feature")
    theirs = fake.open_fork_pull(REPO, "friend/calc", "feature", "A feature", user="friend",
                                 maintainer_can_modify=True)
    asked = ask(forged, served, theirs, "@errand make add() add")
    assert asked.status_code == 202, asked.text

    pushed = eventually("the round is pushed to the fork's branch", lambda: (
        fake.branch_head("friend/calc", "feature") != fork_head) or None, seconds=180)
    assert pushed
    head = str(fake.branch_head("friend/calc", "feature"))
    assert git(fake.repos["friend/calc"].bare, "rev-parse", f"{head}^").strip() == fork_head  # a fast-forward
    assert "return a + b" in git(fake.repos["friend/calc"].bare, "show", f"{head}:calc.py")
    assert len(fake.repos[REPO].pulls) == 1 and fake.branch_head(REPO, "feature") is None
    eventually("errand says what it pushed", lambda: any(
        f"errand pushed {head[:12]}" in c["body"] for c in fake.repos[REPO].comments[theirs["number"]]))


def test_a_round_for_a_fork_asks_on_the_forks_pull_request_and_the_reply_resumes_it(
        forged: Forged, served_asking: Served, tmp_path: Path) -> None:
    fake, served = forged.fake, served_asking
    fork_with_branch(fake, tmp_path, "someone/calc", "fix-add")
    theirs = fake.open_fork_pull(REPO, "someone/calc", "fix-add", "Fix add", user="someone",
                                 maintainer_can_modify=False)
    task_id = ask(forged, served, theirs, "@errand make add() add").json()["task_id"]
    posted = eventually("the question is posted on the fork's pull request", lambda: next(
        (c for c in fake.repos[REPO].comments[theirs["number"]] if "has a question" in c["body"]), None))
    assert posted["body"].startswith("@acme ") and state(served, task_id) == "needs_input"
    answered = ask(forged, served, theirs, "Integers only.")
    assert answered.json()["action"] == "answered", answered.text
    eventually("errand's own pull request opens", lambda: len(fake.repos[REPO].pulls) == 2, seconds=180)
