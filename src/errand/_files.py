"""Reading a file of a repository without following it out of the repository."""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

__all__ = ["read_inside"]


def read_inside(repo: Path, name: str, limit: int | None) -> tuple[bytes, bool] | None:
    """Up to ``limit`` bytes of ``repo/name`` and whether it was cut; None if it is missing,
    not a regular file (a FIFO, a device: never opened for long), named with ``..`` or as
    an absolute path, or resolves (through symlinks) outside the repository."""
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts:
        return None
    try:
        resolved = (repo / name).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not resolved.is_relative_to(repo.resolve()):
        return None
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if limit is None:
        return data, False
    return data[:limit], len(data) > limit
