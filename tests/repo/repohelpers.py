"""Helpers for errand.repo tests (real git in tmp dirs)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

BINARY = bytes(range(256)) * 4


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    out = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
    return out.stdout.decode()


def tree_hashes(root: Path, *, skip_git: bool = False) -> dict[str, str]:
    """sha256 of every file (and symlink target) under ``root``."""
    result: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(root):
        if skip_git and ".git" in dirs:
            dirs.remove(".git")
        for name in files:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            result[rel] = "link:" + os.readlink(p) if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
    return result


def user_state(repo: Path) -> dict[str, Any]:
    """Everything accept must not change: HEAD, the branch, the index, every worktree byte, other refs."""
    return {
        "HEAD": (repo / ".git/HEAD").read_text(),
        "head_commit": git(repo, "rev-parse", "HEAD"),
        "index": hashlib.sha256((repo / ".git/index").read_bytes()).hexdigest(),
        "worktree": tree_hashes(repo, skip_git=True),
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "status": git(repo, "status", "--porcelain=v1", "--ignored"),
    }
