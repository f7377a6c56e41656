"""Fixtures for errand.repo tests: small real git repositories in tmp dirs."""

from __future__ import annotations

from pathlib import Path

import pytest
from repohelpers import BINARY, git


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    """A user's repository on branch ``main`` with a clean tree plus an uncommitted edit and a staged file."""
    repo = tmp_path / "user"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test User")
    git(repo, "config", "user.email", "user@example.com")
    (repo / "src").mkdir()
    (repo / "src/app.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "README.md").write_text("# demo\n")
    (repo / "old.txt").write_text("to be deleted\n")
    (repo / "logo.bin").write_bytes(BINARY)
    (repo / ".gitignore").write_text("*.pyc\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    git(repo, "tag", "v1")
    (repo / "README.md").write_text("# demo\nsecond commit\n")
    git(repo, "commit", "-q", "-am", "second")
    # The user is in the middle of their own work: an unstaged edit, a staged file, an untracked file.
    (repo / "src/app.py").write_text("def add(a, b):\n    return a - b  # user's wip\n")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "scratch.txt").write_text("untracked\n")
    return repo
