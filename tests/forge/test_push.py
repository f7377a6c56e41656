"""Pushing a task's commit to the forge with the token for that one command: only as a
fast-forward, nothing written to the clone's config, and the token never in an error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from errand.forge import ForgeError
from errand.forge.outbound.push import fetch_branch, fetch_ref, push, remote_head

TOKEN = "ghp_pushTokenThatMustNeverLeak"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, name: str) -> str:
    (repo / name).write_text(name + "\n")
    git(repo, "add", name)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def clones(tmp_path: Path) -> tuple[Path, str]:
    """A clone with one commit, and a bare repository standing in for the forge's."""
    remote = tmp_path / "forge.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    clone = tmp_path / "clone"
    git(tmp_path, "init", "-q", "-b", "main", str(clone))
    commit(clone, "a.txt")
    return clone, str(remote)


def test_a_commit_is_pushed_to_a_branch_and_read_back(clones: tuple[Path, str]) -> None:
    clone, url = clones
    head = git(clone, "rev-parse", "HEAD")
    assert remote_head(clone, url, "errand/1", TOKEN) is None
    push(clone, url, head, "errand/1", TOKEN)
    assert remote_head(clone, url, "errand/1", TOKEN) == head
    assert git(Path(url), "rev-parse", "refs/heads/errand/1") == head
    assert TOKEN not in (clone / ".git" / "config").read_text()
    assert git(clone, "remote") == ""  # no remote was added


def test_a_push_that_is_no_fast_forward_is_rejected(clones: tuple[Path, str], tmp_path: Path) -> None:
    clone, url = clones
    first = git(clone, "rev-parse", "HEAD")
    push(clone, url, first, "errand/1", TOKEN)
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", url, str(other))
    git(other, "checkout", "-q", "errand/1")
    theirs = commit(other, "theirs.txt")
    git(other, "push", "-q", "origin", "errand/1")
    ours = commit(clone, "ours.txt")
    with pytest.raises(ForgeError) as caught:
        push(clone, url, ours, "errand/1", TOKEN)
    assert caught.value.code == "push_rejected" and TOKEN not in str(caught.value)
    assert remote_head(clone, url, "errand/1", TOKEN) == theirs


def test_a_branch_and_a_ref_are_fetched_into_the_object_store_only(clones: tuple[Path, str], tmp_path: Path) -> None:
    clone, url = clones
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", "-b", "main", str(other))
    theirs = commit(other, "theirs.txt")
    git(other, "push", "-q", url, "HEAD:refs/heads/feature", "HEAD:refs/pull/7/head")
    branches = git(clone, "for-each-ref")
    assert fetch_branch(clone, url, "feature", TOKEN) == theirs
    assert git(clone, "cat-file", "-t", theirs) == "commit"
    assert git(clone, "for-each-ref") == branches  # no branch or remote-tracking ref made
    assert fetch_ref(clone, url, "refs/pull/7/head", TOKEN) == theirs
    assert fetch_branch(clone, url, "missing", TOKEN) is None
    assert fetch_ref(clone, url, "refs/pull/8/head", TOKEN) is None


def test_an_unreachable_forge_is_a_push_failure(clones: tuple[Path, str], tmp_path: Path) -> None:
    clone, _ = clones
    with pytest.raises(ForgeError) as caught:
        push(clone, str(tmp_path / "nowhere.git"), git(clone, "rev-parse", "HEAD"), "errand/1", TOKEN)
    assert caught.value.code == "push_failed" and "pushing errand/1" in str(caught.value)
