"""Working copies as overlays on a cached, pristine checkout of the base commit.

Checking out a large repository is the slow part of starting a task (10,000 loose
objects: seconds). So each ``(source, commit, owner)`` is checked out once, into a
*pristine* tree that nothing ever writes again, and every run gets an overlayfs
mount on top of it: the run's writes go to its own upper directory, the pristine
tree stays as it was, and a new working copy costs one mount.

A pristine entry holds ``host.git`` — a bare clone of the source (hard-linked,
so free on one filesystem) that only the host writes and that diffs trust — and
``tree``, the checkout, whose ``.git`` borrows ``host.git``'s objects through
git's alternates (so nothing is copied). A sandbox that runs git in its working
copy needs those objects at the same path: :attr:`WorkingCopy.object_mounts`
names them, for a read-only bind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from errand import _settings

__all__ = ["mount_overlay", "pristine", "unmount"]

_MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def pristine(source: str, commit: str, owner: int | None, build: Callable[[Path, Path], None]) -> Path:
    """The cached pristine entry for ``source`` at ``commit``, built the first time by
    ``build(partial, final)``, which must leave ``partial/host.git`` and ``partial/tree``
    (``partial`` is renamed to ``final`` when it returns, so paths recorded inside must
    name ``final``). Safe against concurrent callers: one builds, the others wait."""
    key = hashlib.sha256(f"{source}\0{commit}\0{owner}".encode()).hexdigest()[:32]
    root = _settings.home() / "checkouts"
    entry = root / key
    if (entry / "ready").exists():
        return entry
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (entry / "ready").exists():
            return entry
        partial = root / f".{key}.{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(mode=0o711)
        try:
            build(partial, entry)
            (partial / "ready").write_text(commit)
            shutil.rmtree(entry, ignore_errors=True)
            os.rename(partial, entry)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    return entry


def mount_overlay(lower: Path, upper: Path, work: Path, merged: Path) -> None:
    """Mount an overlay of ``lower`` (read-only) and ``upper`` (this run's writes) at ``merged``."""
    for directory in (upper, work, merged):
        directory.mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={lower},upperdir={upper},workdir={work}".encode()
    if _libc.mount(b"overlay", str(merged).encode(), b"overlay", 0, options) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mounting the working copy's overlay at {merged}: {os.strerror(error)}")


def unmount(merged: Path) -> None:
    """Detach the overlay at ``merged`` if one is mounted there (lazily: open files keep it alive)."""
    if _libc.umount2(str(merged).encode(), _MNT_DETACH) != 0:
        error = ctypes.get_errno()
        if error not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
            raise OSError(error, f"unmounting {merged}: {os.strerror(error)}")
