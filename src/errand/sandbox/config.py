"""Value objects that declare a sandbox at construction: mounts and resources.

Each validates itself when made, so bad input fails before anything exists.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from errand.errors import ConfigError

__all__ = ["Mount", "Resources", "check_env", "parse_size", "sandbox_path"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
          "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}

DiskMedium = Literal["auto", "memory", "disk"]
_DISK_MEDIA = get_args(DiskMedium)

# Paths inside a sandbox that errand itself provides; mounting over them would
# break the sandbox (or, for /proc and /dev, hide what it relies on).
_RESERVED = ("/proc", "/dev")


def parse_size(value: int | str, *, what: str) -> int:
    """``"1GiB"``, ``"512MiB"``, ``"2G"`` or a byte count → bytes."""
    if isinstance(value, bool):
        raise ConfigError(f"{what} must be a size such as '1GiB', not {value!r}", code="invalid_size")
    if isinstance(value, int):
        number = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ConfigError(f"{what} must be a size such as '1GiB' or '512MiB', not {value!r}",
                              code="invalid_size")
        unit = (match.group(2) or "").lower().removesuffix("b")
        number = int(float(match.group(1)) * _UNITS[unit])
    if number <= 0:
        raise ConfigError(f"{what} must be positive, not {value!r}", code="invalid_size")
    return number


def sandbox_path(path: str, *, what: str) -> str:
    """Validate an absolute path inside the sandbox and normalise it."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{what} must be a non-empty path string", code="invalid_path")
    if "\0" in path:
        raise ConfigError(f"{what} contains a NUL byte", code="invalid_path")
    if not path.startswith("/"):
        raise ConfigError(f"{what} must be an absolute path inside the sandbox, not {path!r}",
                          code="relative_path")
    if ".." in path.split("/"):
        raise ConfigError(f"{what} must not contain '..': {path!r}", code="invalid_path")
    return posixpath.normpath(path).replace("//", "/")


def check_env(env: Mapping[str, str]) -> None:
    """Validate environment variables given to a sandbox or a command."""
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ConfigError(f"bad environment variable name {name!r}", code="invalid_env")
        if not isinstance(value, str) or "\0" in value:
            raise ConfigError(f"environment variable {name} must be a string without NUL bytes",
                              code="invalid_env")


@dataclass(frozen=True)
class Mount:
    """A host directory or file made visible inside the sandbox.

    ``Mount.copy`` gives the sandbox its own copy (changes stay inside and are
    part of snapshots); ``Mount.bind`` shares the host path itself.
    """

    kind: Literal["copy", "bind"]
    source: Path
    target: str
    read_only: bool = False

    @classmethod
    def copy(cls, source: str | os.PathLike[str], target: str) -> Mount:
        return cls("copy", _host_source(source), sandbox_path(target, what="mount target"))

    @classmethod
    def bind(cls, source: str | os.PathLike[str], target: str, *, read_only: bool = True) -> Mount:
        """Share a host path. Read-only unless asked: the sandbox runs untrusted code."""
        return cls("bind", _host_source(source), sandbox_path(target, what="mount target"), read_only)

    def __post_init__(self) -> None:
        if self.target == "/" or any(self.target == r or self.target.startswith(r + "/") for r in _RESERVED):
            raise ConfigError(f"cannot mount over {self.target}: errand provides it", code="reserved_path")


def _host_source(source: str | os.PathLike[str]) -> Path:
    path = Path(os.path.abspath(os.fspath(source)))
    if not path.exists():
        raise ConfigError(f"mount source does not exist: {path}", code="missing_mount_source")
    return path


@dataclass(frozen=True, init=False)
class Resources:
    """Limits enforced by the kernel: CPU share, memory, process count, disk.

    ``disk`` caps the sandbox's writable layer (what it writes, including files
    copied in by ``Mount.copy`` once modified): past it, writes fail with ENOSPC
    and the sandbox lives on. ``disk_medium`` says where that layer lives:

    * ``"memory"``: a tmpfs. Fastest, but what is written is held in memory and
      counts toward ``memory``: filling a disk larger than the memory limit is
      an OOM kill, not ENOSPC.
    * ``"disk"``: an ext4 filesystem of its own, in a sparse file under errand's
      home (host space is taken only as it is written, up to ``disk``), gone
      with the sandbox. Written data is charged to ``memory`` only as page
      cache, which the kernel writes back and reclaims at the limit instead of
      killing anything. Measured here (``benchmarks/disk_medium.py``, namespace
      tier, 2 cores, default limits): +2 to +5 ms from create to first result
      (p50 12.4 -> 17.7 ms under load), +5 to +8 ms to terminate, and
      terminating writes back what is still dirty: 100 MB written just before
      made it 280 ms instead of 131 (the host's flusher writes anything older
      than ~30 s earlier).
    * ``"auto"`` (the default): ``"memory"`` when ``disk`` fits within
      ``memory``, else ``"disk"`` — so a full disk is always ENOSPC, never an
      OOM kill. The defaults (4GiB of disk, 2GiB of memory) take ``"disk"``.
    """

    cpus: float | None
    memory: int
    pids: int
    disk: int
    disk_medium: DiskMedium

    def __init__(self, cpus: float | None = None, memory: int | str = "2GiB", pids: int = 1024,
                 disk: int | str = "4GiB", disk_medium: DiskMedium = "auto") -> None:
        if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0):
            raise ConfigError(f"cpus must be a positive number, not {cpus!r}", code="invalid_limit")
        if isinstance(pids, bool) or not isinstance(pids, int) or pids < 8:
            raise ConfigError(f"pids must be an integer of at least 8, not {pids!r}", code="invalid_limit")
        memory_bytes = parse_size(memory, what="memory")
        if memory_bytes < 16 * 1024**2:
            raise ConfigError(f"memory must be at least 16MiB, not {memory!r}", code="invalid_limit")
        disk_bytes = parse_size(disk, what="disk")
        if disk_bytes < 1024**2:
            raise ConfigError(f"disk must be at least 1MiB, not {disk!r}", code="invalid_limit")
        if disk_medium not in _DISK_MEDIA:
            raise ConfigError(f"disk_medium must be one of {', '.join(map(repr, _DISK_MEDIA))}, not "
                              f"{disk_medium!r}", code="invalid_limit")
        object.__setattr__(self, "cpus", None if cpus is None else float(cpus))
        object.__setattr__(self, "memory", memory_bytes)
        object.__setattr__(self, "pids", pids)
        object.__setattr__(self, "disk", disk_bytes)
        object.__setattr__(self, "disk_medium", disk_medium)
