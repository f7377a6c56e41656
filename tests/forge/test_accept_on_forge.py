"""``pr = "draft-when-ready"`` on a real ``errand serve``: a ready task opens a draft pull request
whose commit credits who asked and is signed by the host's key; ``@errand accept`` by a writer
accepts it in errand, and nothing is approved or merged by errand."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.harness import git
from server.conftest import Served

from .conftest import REPO, WORK, Forged, eventually, serve, state

pytestmark = pytest.mark.slow


@pytest.fixture
def signing_key(tmp_path: Path) -> Path:
    key = tmp_path / "keys" / "errand_signing"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "errand host", "-f", str(key)], check=True)
    return key


@pytest.fixture
def served_drafting(forged: Forged, tmp_path: Path, signing_key: Path) -> Iterator[Served]:
    server = serve(forged, tmp_path, WORK, github='pr = "draft-when-ready"',
                   env={"ERRAND_SIGNING_KEY": str(signing_key)})
    try:
        yield server
    finally:
        server.stop()


def comment_on(forged: Forged, served: Served, number: int, body: str, user: str) -> httpx.Response:
    fake = forged.fake
    said = fake.add_comment(REPO, number, body, user=user)
    return fake.deliver(f"{served.url}/api/forge/github/webhook", "issue_comment",
                        fake.issue_payload(REPO, number, "created", comment=said, sender=user))


def test_a_ready_task_opens_a_signed_credited_draft_and_at_errand_accept_accepts_it(
        forged: Forged, served_drafting: Served, signing_key: Path, tmp_path: Path) -> None:
    fake, served = forged.fake, served_drafting
    issue = fake.add_issue(REPO, "add() subtracts", "add(2, 3) gives -1", user="reporter")
    started = fake.deliver(f"{served.url}/api/forge/github/webhook", "issues",
                           fake.issue_payload(REPO, issue["number"], "labeled", label={"name": "errand"},
                                              sender="acme"))
    task_id = started.json()["task_id"]
    pull = eventually("a draft opens while the task is ready", lambda: next(iter(fake.repos[REPO].pulls.values()),
                                                                             None), seconds=180)
    assert pull["draft"] is True and state(served, task_id) == "ready_for_review"
    head = pull["head"]["sha"]
    bare = fake.repos[REPO].bare
    acme = fake.user("acme")
    # The commit credits who asked (the labeller), at the forge's no-reply address for its own host.
    trailers = git(bare, "log", "-1", "--format=%(trailers:key=Co-authored-by,valueonly)", head).strip()
    assert trailers == f"acme <{acme['id']}+acme@users.noreply.127.0.0.1>"
    allowed = tmp_path / "allowed_signers"
    allowed.write_text('errand@localhost namespaces="git" ' + signing_key.with_suffix(".pub").read_text())
    shown = subprocess.run(["git", "-c", f"gpg.ssh.allowedSignersFile={allowed}", "log", "-1", "--show-signature",
                            head], cwd=bare, capture_output=True, text=True)
    assert 'Good "git" signature for errand@localhost' in shown.stdout + shown.stderr, shown

    refused = comment_on(forged, served, pull["number"], "@errand accept", "stranger")
    assert refused.json()["action"] == "ignored" and state(served, task_id) == "ready_for_review"
    accepted = comment_on(forged, served, pull["number"], "@errand accept", "acme")
    assert accepted.json()["action"] == "accepted", accepted.text
    assert state(served, task_id) == "accepted"
    # The commit accepted in errand is the one the draft shows: nothing to push again, no second pull request.
    branch = httpx.get(f"{served.url}/api/tasks/{task_id}").json()["branch"]
    assert git(forged.project, "rev-parse", branch).strip() == head == fake.branch_head(REPO, pull["head"]["ref"])
    said = [c["body"] for c in fake.repos[REPO].comments[pull["number"]]]
    assert any("Accepted in errand by @acme" in text and "errand merges nothing" in text for text in said)
    assert len(fake.repos[REPO].pulls) == 1 and pull["draft"] is True and pull["state"] == "open"
    # errand never approves (nor reviews) its own pull request.
    assert fake.repos[REPO].reviews == {}
    assert not [r for r in fake.requests if r.path.endswith("/reviews") and r.method == "POST"]
