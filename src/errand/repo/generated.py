"""What setup generated in a working copy, kept as a layer for every later copy of the commit.

Setup commands run over a working copy, and build tools write into the tree:
``_version.py`` from setuptools-scm or hatch-vcs, ``*.egg-info``, compiled
extensions, ``node_modules``, a ``.venv``. Those files must reach the agent's
working copy — an editable install cannot import without them — but they are
not the agent's change. :func:`harvest` moves, out of a finished setup copy's
overlay upper directory, exactly the new files setup created; a later working
copy stacks that directory between its own writes and the pristine checkout
(:meth:`WorkingCopy.overlaid`'s ``layers``). Its diff leaves them out: those git
ignores (by the tree's ``.gitignore`` files and errand's own excludes) as git
would, the others (an ``*.egg-info`` a repository does not ignore) by name.
What setup changed or deleted in tracked files, or wrote under ``.git``, is
left behind and reported: it would otherwise override a newer commit's files,
or steer git.

Call it only once every process of the setup sandbox has ended: it reads a tree
that, while any of them runs, could be changed under it.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from errand.repo.diff import scratch_git_dir
from errand.repo.git import run_git
from errand.repo.workcopy import WorkingCopy

__all__ = ["Harvest", "harvest"]

_OPAQUE = "trusted.overlay.opaque"


@dataclass(frozen=True)
class Harvest:
    """What :func:`harvest` kept (paths relative to the tree; directories end in ``/``) and left."""

    ignored: list[str] = field(default_factory=list)  # kept: new files git ignores
    untracked: list[str] = field(default_factory=list)  # kept: new files git does not ignore
    changed_tracked: list[str] = field(default_factory=list)  # left: tracked files setup changed or deleted

    @property
    def kept(self) -> list[str]:
        return [*self.ignored, *self.untracked]


def harvest(copy: WorkingCopy, into: Path) -> Harvest:
    """Move the new files that setup created in ``copy`` (an overlay working copy whose
    sandbox has ended) into the empty directory ``into``, keeping owners and modes. Those git
    does not ignore are listed in :attr:`Harvest.untracked`: a working copy over the layer
    leaves them out of its diff (``WorkingCopy.overlaid(..., diff_excludes=...)``)."""
    if not copy.overlay:
        raise ValueError("harvest needs an overlay working copy (WorkingCopy.overlaid)")
    upper = copy.path.with_name(copy.path.name + ".upper")
    ignored, untracked, changed = _listings(copy)
    ignored, untracked = _outermost(ignored, untracked), _outermost(untracked, ignored)
    kept = {relative: _move(upper, into, relative.rstrip("/")) for relative in [*ignored, *untracked]}
    _strip_setid(into)
    return Harvest(ignored=[p for p in ignored if kept[p]], untracked=[p for p in untracked if kept[p]],
                   changed_tracked=changed)


def _outermost(paths: list[str], others: list[str]) -> list[str]:
    """``paths`` less those inside a directory listed in either list (a new ``.venv/`` that git
    does not ignore holds ``__pycache__/`` directories that it does): moving the directory moves them."""
    directories = [path for path in [*paths, *others] if path.endswith("/")]
    return [path for path in paths
            if not any(path != directory and path.startswith(directory) for directory in directories)]


def _listings(copy: WorkingCopy) -> tuple[list[str], list[str], list[str]]:
    with scratch_git_dir(copy.host_git) as git_dir:
        index = git_dir / "errand-index"

        def git(*args: str) -> list[str]:
            out = run_git(list(args), copy.path, untrusted=True, git_dir=git_dir, work_tree=copy.path,
                          index_file=index)
            return [item for item in out.split("\0") if item]

        git("read-tree", copy.base_commit)
        run_git(["update-index", "-q", "--refresh"], copy.path, untrusted=True, git_dir=git_dir,
                work_tree=copy.path, index_file=index, check=False)  # stat data, so unchanged files are not listed
        ignored = git("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
        untracked = git("ls-files", "-z", "--others", "--exclude-standard", "--directory")
        changed = git("diff-files", "-z", "--name-only")
    return ignored, untracked, changed


def _move(upper: Path, into: Path, relative: str) -> bool:
    """Rename ``upper/relative`` to ``into/relative``, making its parents with their owners and
    modes. Only real directories are walked: a symlink on the way is never followed."""
    parts = relative.split("/")
    source, target = upper, into
    for name in parts[:-1]:
        source, target = source / name, target / name
        try:
            info = os.lstat(source)
        except FileNotFoundError:
            return False
        if not stat.S_ISDIR(info.st_mode):
            return False
        if not os.path.lexists(target):
            os.mkdir(target, stat.S_IMODE(info.st_mode))
            os.lchown(target, info.st_uid, info.st_gid)
    source, target = source / parts[-1], target / parts[-1]
    try:
        info = os.lstat(source)
    except FileNotFoundError:  # in a lower layer, not written by setup
        return False
    if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:  # a whiteout: setup deleted something
        return False
    os.rename(source, target)
    if stat.S_ISDIR(info.st_mode):
        try:  # an opaque directory would hide the pristine tree's files beneath it
            os.removexattr(target, _OPAQUE, follow_symlinks=False)
        except OSError:
            pass
    return True


def _strip_setid(root: Path) -> None:
    # A setuid file in a layer would run as a sandbox id on the host; inside it grants nothing.
    subprocess.run(["find", str(root), "-type", "f", "-perm", "/6000", "-exec", "chmod", "ug-s", "{}", "+"],
                   check=True, capture_output=True)
