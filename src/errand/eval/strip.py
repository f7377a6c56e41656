"""A copy of a repository that holds nothing later than an instance's base commit.

Agents have been seen reading the fix from ``git log --all`` (or from the object
store directly). So every sandbox of an instance — the agent's and the grader's —
is cloned from a bare repository holding only ``main`` at the base commit and the
tags on its history (a build backend such as hatch-vcs needs them), with every
other ref dropped and their objects pruned. It is made once per (source, base)
and cached; ``errand gc`` removes the copies no evaluation has used for a while (:func:`prune`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
import uuid
from pathlib import Path

from errand import _settings
from errand.eval.errors import EvalError
from errand.repo.errors import RepoError
from errand.repo.git import run_git

__all__ = ["prune", "stripped_source"]

_STAGING = "refs/eval-source"
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _root() -> Path:
    return _settings.cache_dir() / "eval-sources"


def stripped_source(source: str, base: str) -> Path:
    """The cached bare repository of ``source`` cut at ``base`` (made on first use)."""
    digest = hashlib.sha256(f"{source}\0{base}".encode()).hexdigest()[:24]
    final = _root() / digest
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(digest, threading.Lock())
    with lock:  # the attempts of one instance start together; one of them strips
        if (final / "errand-stripped").is_file():
            os.utime(final / "errand-stripped")  # its last use, which prune goes by
            return final
        return _made(source, base, final)


def prune(unused_for: float, *, now: float | None = None) -> list[str]:
    """Remove the stripped copies no evaluation has used for ``unused_for`` seconds, and what a
    strip that died left; the names removed. (A copy is only read while an attempt clones it.)"""
    root = _root()
    if not root.is_dir():
        return []
    moment = time.time() if now is None else now
    removed = []
    for path in sorted(root.iterdir()):
        if path.name.endswith(".partial"):
            pid = path.name.split(".")[1]
            if pid.isdigit() and os.path.exists(f"/proc/{pid}"):
                continue  # being made right now
        else:
            try:
                used = (path / "errand-stripped").stat().st_mtime
            except FileNotFoundError:
                used = 0.0
            if moment - used < unused_for:
                continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path.name)
    return removed


def _made(source: str, base: str, final: Path) -> Path:
    # Another process may be making the same copy: each writes its own and renames it in.
    partial = final.with_name(f"{final.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
    partial.mkdir(parents=True)
    try:
        _strip(source, base, partial)
        if (final / "errand-stripped").is_file():
            shutil.rmtree(partial, ignore_errors=True)
            return final
        shutil.rmtree(final, ignore_errors=True)
        os.replace(partial, final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return final


def _strip(source: str, base: str, dest: Path) -> None:
    git = ("-c", "protocol.file.allow=always")
    run_git(["init", "--bare", "--quiet", "--template=", str(dest)], dest.parent)
    try:
        run_git([*git, "fetch", "--quiet", "--no-tags", "--", source, f"+refs/heads/*:{_STAGING}/heads/*",
                 f"+refs/tags/*:{_STAGING}/tags/*"], dest, git_dir=dest)
        run_git(["rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"], dest, git_dir=dest)
    except RepoError as error:
        raise EvalError(f"cannot read commit {base} of {source}: {error.stderr or error.message}",
                        code="eval_no_commit") from None
    run_git(["update-ref", "refs/heads/main", base], dest, git_dir=dest)
    run_git(["symbolic-ref", "HEAD", "refs/heads/main"], dest, git_dir=dest)
    tags = run_git(["for-each-ref", "--merged", base, "--format=%(refname) %(objectname)", f"{_STAGING}/tags"],
                   dest, git_dir=dest)
    for line in tags.splitlines():
        name, sha = line.split(" ", 1)
        run_git(["update-ref", "refs/tags/" + name.removeprefix(f"{_STAGING}/tags/"), sha], dest, git_dir=dest)
    staged = run_git(["for-each-ref", "--format=%(refname)", _STAGING], dest, git_dir=dest).split()
    run_git(["update-ref", "--stdin"], dest, git_dir=dest, input="".join(f"delete {ref}\n" for ref in staged))
    run_git(["reflog", "expire", "--expire=now", "--all"], dest, git_dir=dest)
    run_git(["gc", "--quiet", "--prune=now"], dest, git_dir=dest)
    (dest / "errand-stripped").write_text(f"{source}\n{base}\n")
