"""Reading a file of a repository without following it out of the repository."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath

__all__ = ["feed_inside", "read_inside"]

_CHUNK = 1 << 20


def read_inside(repo: Path, name: str, limit: int | None) -> tuple[bytes, bool] | None:
    """Up to ``limit`` bytes of ``repo/name`` and whether it was cut; None if it is missing,
    not a regular file (a FIFO, a device: never opened for long), named with ``..`` or as
    an absolute path, or resolves (through symlinks) outside the repository."""
    chunks: list[bytes] = []
    size = feed_inside(repo, name, chunks.append, limit=None if limit is None else limit + 1)
    if size is None:
        return None
    data = b"".join(chunks)
    if limit is None:
        return data, False
    return data[:limit], len(data) > limit


def feed_inside(repo: Path, name: str, feed: Callable[[bytes], object], *, limit: int | None = None,
                header: Callable[[int], object] | None = None) -> int | None:
    """Pass ``repo/name``'s bytes (up to ``limit``) to ``feed`` a mebibyte at a time, after its size
    to ``header``; its size, or None where :func:`read_inside` would find nothing. A file of
    gigabytes is hashed so without holding it in memory."""
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
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return None
        if header is not None:
            header(status.st_size)
        left = limit
        with os.fdopen(fd, "rb", closefd=False) as handle:
            while left is None or left > 0:
                chunk = handle.read(_CHUNK if left is None else min(_CHUNK, left))
                if not chunk:
                    break
                feed(chunk)
                left = None if left is None else left - len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return status.st_size
