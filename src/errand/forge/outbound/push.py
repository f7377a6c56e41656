"""Pushing a task's commit to the forge from the host, with the token for that one command.

The token reaches git through ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_0``/``VALUE_0``
in the environment of the one ``git push`` (readable only by this user, unlike a
``-c`` argument in ``/proc/PID/cmdline``), as an ``http.extraHeader``: nothing is
written to ``.git/config``, no remote is added, no credential helper stores it.
The push is never forced: when the forge's branch has commits errand does not
have, git refuses and errand says so.
"""

from __future__ import annotations

import base64
from pathlib import Path

from errand.forge.errors import ForgeError
from errand.repo.errors import RepoError
from errand.repo.git import run_git

__all__ = ["fetch_branch", "fetch_ref", "push", "remote_head"]

_NO_HOOKS = ["-c", "core.hooksPath=/dev/null"]


def _credentials(token: str) -> dict[str, str]:
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
            # No helper: nothing asks for, stores or echoes a password.
            "GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": ""}


def _git(repo: Path, args: list[str], token: str, what: str) -> str:
    try:
        return run_git([*_NO_HOOKS, *args], repo, env=_credentials(token))
    except RepoError as error:
        stderr = error.stderr.replace(token, "***")
        code = "push_rejected" if "rejected" in stderr or "non-fast-forward" in stderr else "push_failed"
        raise ForgeError(f"{what} failed: {stderr}", code=code) from None


def push(repo: Path, url: str, commit: str, branch: str, token: str) -> None:
    """Make ``branch`` on ``url`` point at ``commit`` — only as a fast-forward."""
    _git(repo, ["push", "--porcelain", url, f"{commit}:refs/heads/{branch}"], token, f"pushing {branch}")


def remote_head(repo: Path, url: str, branch: str, token: str) -> str | None:
    out = _git(repo, ["ls-remote", url, f"refs/heads/{branch}"], token, f"reading {branch}")
    return out.split()[0] if out.strip() else None


def fetch_branch(repo: Path, url: str, branch: str, token: str) -> str | None:
    """Fetch ``branch``'s commits into ``repo``'s object store (no local branch or remote is
    made or moved) and return its head, or None when the forge has no such branch."""
    head = remote_head(repo, url, branch, token)
    if head is not None:
        _git(repo, ["fetch", "--no-tags", "--no-write-fetch-head", url, f"refs/heads/{branch}"], token,
             f"fetching {branch}")
    return head


def fetch_ref(repo: Path, url: str, ref: str, token: str) -> str | None:
    """Fetch any ``ref`` of ``url`` (``refs/pull/7/head``) into ``repo``'s object store, as
    :func:`fetch_branch` does a branch; its head, or None when ``url`` has no such ref."""
    out = _git(repo, ["ls-remote", url, ref], token, f"reading {ref}")
    head = out.split()[0] if out.strip() else None
    if head is not None:
        _git(repo, ["fetch", "--no-tags", "--no-write-fetch-head", url, ref], token, f"fetching {ref}")
    return head
