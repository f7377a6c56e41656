"""The change an agent made, computed on the host without trusting its ``.git``.

The agent owns its working copy, ``.git/`` included, so git must never be run
*in* it on the host: its config could name an fsmonitor, hooks, filters or diff
drivers that git would run outside the sandbox. :func:`diff_tree` instead reads
the working copy purely as a tree of files:

* a scratch ``GIT_DIR`` of our own (a temporary directory whose object store
  borrows, read-only, the host-owned objects that hold ``base_commit``) with
  ``GIT_WORK_TREE`` pointing at the working copy and a temporary
  ``GIT_INDEX_FILE``;
* ``$GIT_DIR/info/attributes`` that un-sets ``filter``/``diff``/``text``/``eol``/
  ``ident``/``working-tree-encoding`` for every path — it outranks every
  ``.gitattributes`` the agent may have written — so content goes into the index
  byte for byte and no driver is ever looked up;
* ``git add -A`` and ``git diff --cached --binary --no-ext-diff --no-textconv``
  with :func:`errand.repo.git.run_git`'s untrusted settings.

Git itself never descends into a directory entry named ``.git``; sub-directories
that contain a ``.git`` (an embedded repository — git would open it and read its
config) are excluded and reported in :attr:`Diff.skipped`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from errand.repo.git import run_git

__all__ = ["Diff", "DiffStats", "FileChange", "build_index", "diff_tree", "scratch_git_dir"]

Status = Literal["added", "modified", "deleted", "renamed", "type_changed"]

_NEUTRAL_ATTRIBUTES = "* !filter !diff !text !eol !ident !working-tree-encoding !merge !export-subst\n"
# Caches that running a project's tools leaves in the tree; never part of an agent's change.
# (A repository's own .gitignore is honoured as well.)
DEFAULT_EXCLUDES = ("__pycache__/", "*.py[cod]", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", ".hypothesis/",
                    ".tox/", ".nox/", ".coverage", ".cache/")
_STATUS = {"A": "added", "M": "modified", "D": "deleted", "R": "renamed", "T": "type_changed", "C": "added"}


@dataclass(frozen=True)
class FileChange:
    path: str
    status: Status
    additions: int = 0
    deletions: int = 0
    binary: bool = False
    old_path: str | None = None


@dataclass(frozen=True)
class DiffStats:
    files: int
    additions: int
    deletions: int


@dataclass(frozen=True)
class Diff:
    """A patch (``text``, applicable with ``git apply``) and what it touches."""

    base_commit: str
    text: str
    files: list[FileChange] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def stats(self) -> DiffStats:
        return DiffStats(
            files=len(self.files),
            additions=sum(f.additions for f in self.files),
            deletions=sum(f.deletions for f in self.files),
        )

    @property
    def empty(self) -> bool:
        return not self.text


@contextmanager
def scratch_git_dir(objects_from: Path) -> Iterator[Path]:
    """A throwaway GIT_DIR that reads ``objects_from``'s objects and writes its own."""
    source_objects = _objects_dir(objects_from)
    with tempfile.TemporaryDirectory(prefix="errand-scratch-") as tmp:
        git_dir = Path(tmp) / "git"
        for sub in ("objects/info", "refs/heads", "info"):
            (git_dir / sub).mkdir(parents=True)
        (git_dir / "HEAD").write_text("ref: refs/heads/scratch\n")
        (git_dir / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
        (git_dir / "objects/info/alternates").write_text(f"{source_objects}\n")
        (git_dir / "info/attributes").write_text(_NEUTRAL_ATTRIBUTES)
        (git_dir / "info/exclude").write_text("".join(f"{pattern}\n" for pattern in DEFAULT_EXCLUDES))
        yield git_dir


def _objects_dir(git_dir: Path) -> Path:
    git_dir = git_dir.resolve()
    for candidate in (git_dir / "objects", git_dir / ".git" / "objects"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"{git_dir} is not a git directory (no objects/)")


def _nested_repositories(workdir: Path) -> list[str]:
    """Sub-directories (relative, POSIX) holding a ``.git`` entry; not followed through symlinks."""
    found: list[str] = []
    for root, dirs, files in os.walk(workdir):
        rel = os.path.relpath(root, workdir)
        if rel == ".":
            if ".git" in dirs:
                dirs.remove(".git")
            continue
        if ".git" in dirs or ".git" in files:
            found.append(Path(rel).as_posix())
            dirs[:] = []
    return sorted(found)


def _git(args: list[str], workdir: Path, git_dir: Path, index: Path, *, check: bool = True) -> str:
    return run_git(args, workdir, untrusted=True, git_dir=git_dir, work_tree=workdir, index_file=index, check=check)


def _add_all(workdir: Path, git_dir: Path, index: Path, skipped: list[str]) -> None:
    pathspec = ["--", ".", *(f":(exclude,literal){p.rstrip('/')}" for p in skipped)]
    _git(["add", "-A", *pathspec], workdir, git_dir, index)


def build_index(workdir: Path, objects_from: Path, base_commit: str, index: Path) -> None:
    """Write an index of ``base_commit`` whose stat data matches ``workdir`` as it is now.

    Made by the host right after checkout, it lets later :func:`diff_tree` calls
    skip re-hashing unchanged files. It is safe against an agent that forges
    mtimes: git also compares ctime, inode and size, and nobody can set ctime.
    """
    with scratch_git_dir(objects_from) as git_dir:
        _git(["read-tree", base_commit], workdir, git_dir, index)
        _git(["update-index", "-q", "--refresh"], workdir, git_dir, index, check=False)


def diff_tree(
    workdir: Path, base_commit: str, *, objects_from: Path, index_seed: Path | None = None,
    excludes: Sequence[str] = (),
) -> Diff:
    """The change from ``base_commit`` to the files now in ``workdir`` (untracked files included).

    ``objects_from`` is a host-owned git directory that contains ``base_commit``
    (the user's repository or errand's bare copy of it) — never the working
    copy's own ``.git``. ``index_seed`` is an index from :func:`build_index`;
    without one every file is hashed. Files matched by the tree's
    ``.gitignore`` files are left out, as git would, and so are ``excludes``
    (paths relative to the tree; a directory leaves out everything under it).
    """
    workdir = workdir.resolve()
    skipped = _nested_repositories(workdir)
    with scratch_git_dir(objects_from) as git_dir:
        index = git_dir / "errand-index"
        if index_seed is not None and index_seed.is_file():
            shutil.copy2(index_seed, index)  # keep its mtime: git's racy-entry check depends on it
        else:
            _git(["read-tree", base_commit], workdir, git_dir, index)
        _add_all(workdir, git_dir, index, [*skipped, *excludes])
        common = ["diff", "--cached", "-M", "--no-ext-diff", "--no-textconv", "--no-color", "--ignore-submodules=none"]
        text = _git([*common, "--binary", "--full-index", "--src-prefix=a/", "--dst-prefix=b/", base_commit, "--"],
                    workdir, git_dir, index)
        name_status = _git([*common, "--name-status", "-z", base_commit, "--"], workdir, git_dir, index)
        numstat = _git([*common, "--numstat", "-z", base_commit, "--"], workdir, git_dir, index)
    return Diff(base_commit=base_commit, text=text, files=_parse(name_status, numstat), skipped=skipped)


def _parse(name_status: str, numstat: str) -> list[FileChange]:
    counts: dict[str, tuple[int, int, bool]] = {}
    fields = numstat.split("\0")
    i = 0
    while i < len(fields) and fields[i]:
        added, deleted, path = fields[i].split("\t", 2)
        if not path:  # a rename: "A\tD\t" then old NUL new
            path = fields[i + 2]
            i += 3
        else:
            i += 1
        binary = added == "-"
        counts[path] = (0 if binary else int(added), 0 if binary else int(deleted), binary)
    changes: list[FileChange] = []
    fields = name_status.split("\0")
    i = 0
    while i < len(fields) and fields[i]:
        letter = fields[i][0]
        old_path: str | None = None
        if letter in "RC":
            old_path, path = fields[i + 1], fields[i + 2]
            i += 3
        else:
            path = fields[i + 1]
            i += 2
        status = cast(Status, _STATUS.get(letter, "modified"))
        additions, deletions, binary = counts.get(path, (0, 0, False))
        changes.append(FileChange(path=path, status=status, additions=additions, deletions=deletions,
                                  binary=binary, old_path=old_path if letter == "R" else None))
    return changes
