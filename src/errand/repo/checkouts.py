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
import fcntl
import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from errand import _settings

__all__ = ["UNUSED_FOR", "mount_overlay", "pristine", "prune", "unmount"]

_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)  # libc, already loaded: no ldconfig run at import


#: A pristine checkout that no task has used for this long, and that no working copy has
#: mounted, is removed by :func:`prune` (the worker runs it as it starts; ``errand gc`` on demand).
UNUSED_FOR = 14 * 86_400.0


def pristine(source: str, commit: str, owner: int | None, build: Callable[[Path, Path], None]) -> Path:
    """The cached pristine entry for ``source`` at ``commit``, built the first time by
    ``build(partial, final)``, which must leave ``partial/host.git`` and ``partial/tree``
    (``partial`` is renamed to ``final`` when it returns, so paths recorded inside must
    name ``final``). Safe against concurrent callers (one builds, the others wait) and
    against :func:`prune`: every use marks the entry as used, under the entry's lock."""
    key = hashlib.sha256(f"{source}\0{commit}\0{owner}".encode()).hexdigest()[:32]
    root = _settings.home() / "checkouts"
    entry = root / key
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        if _mark_used(entry):
            return entry
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _mark_used(entry):
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


def _mark_used(entry: Path) -> bool:
    try:
        os.utime(entry / "ready")
    except FileNotFoundError:
        return False
    return True


def prune(unused_for: float = UNUSED_FOR, *, now: float | None = None) -> list[str]:
    """Remove the pristine checkouts unused for ``unused_for`` seconds that no working copy has
    mounted, and what crashed builds and removals left; return the removed entries' names."""
    root = _settings.home() / "checkouts"
    if not root.is_dir():
        return []
    moment = time.time() if now is None else now
    mounted = _mounted_text()
    removed = []
    for path in sorted(root.iterdir()):
        name = path.name
        if name.endswith(".lock") or not path.is_dir():
            continue
        if name.startswith("."):  # ".KEY.PID" being built, or ".trash-…" left by a crash
            pid = name.rsplit(".", 1)[-1]
            if name.startswith(".trash-") or (pid.isdigit() and not os.path.exists(f"/proc/{pid}")):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(name)
            continue
        with open(root / f"{name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being built or used right now
            try:
                used = (path / "ready").stat().st_mtime
            except FileNotFoundError:
                used = 0.0  # never finished: nothing can be using it
            if moment - used < unused_for or f"{path}/" in mounted:
                continue
            trash = root / f".trash-{name}-{os.getpid()}"
            os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(name)
    return removed


def _mounted_text() -> str:
    """Every mount's options and paths, unescaped (an overlay names its lower tree in its options)."""
    with open("/proc/self/mountinfo") as handle:
        text = handle.read()
    return re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal.group(1), 8)), text)


def mount_overlay(lower: Path | Sequence[Path], upper: Path, work: Path, merged: Path) -> None:
    """Mount an overlay of ``lower`` (read-only; several: the top first) and ``upper`` (this
    run's writes) at ``merged``."""
    for directory in (upper, work, merged):
        directory.mkdir(parents=True, exist_ok=True)
    lowers = [lower] if isinstance(lower, Path) else list(lower)
    options = f"lowerdir={':'.join(str(path) for path in lowers)},upperdir={upper},workdir={work}".encode()
    if _libc.mount(b"overlay", str(merged).encode(), b"overlay", 0, options) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mounting the working copy's overlay at {merged}: {os.strerror(error)}")


def unmount(merged: Path) -> None:
    """Detach the overlay at ``merged`` if one is mounted there (lazily: open files keep it alive)."""
    if _libc.umount2(str(merged).encode(), _MNT_DETACH) != 0:
        error = ctypes.get_errno()
        if error not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
            raise OSError(error, f"unmounting {merged}: {os.strerror(error)}")
