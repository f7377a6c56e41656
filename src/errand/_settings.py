"""Where errand keeps things, read from the environment when asked (never at import)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

# In-sandbox ids 0..65535 map onto host ids starting here: far above ordinary
# users and the usual subordinate-id ranges, so a process that escaped every
# namespace would still hold no host user's files.
DEFAULT_SANDBOX_UID = 0x70000000


def home() -> Path:
    """errand's data directory: images, layers, the task store (``ERRAND_HOME``)."""
    explicit = os.environ.get("ERRAND_HOME")
    if explicit:
        return Path(explicit)
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data) / "errand"


def config_path() -> Path:
    """errand's settings file (named models and the default model): ``config.toml`` in its home."""
    return home() / "config.toml"


def runtime_dir() -> Path:
    """Live sandboxes' control sockets and records (``ERRAND_RUNTIME_DIR``).

    Kept short because Unix socket paths are limited to 107 bytes.
    """
    return Path(os.environ.get("ERRAND_RUNTIME_DIR") or "/run/errand")


def cache_dir() -> Path:
    explicit = os.environ.get("ERRAND_CACHE_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "errand"


def cgroup_scope() -> str:
    """A short tag for this runtime directory, prefixed to its sandboxes' cgroup names.

    cgroups are machine-wide; runtime directories are not. gc reaps only the
    groups of its own runtime directory, so two errand installations (or two
    test sessions) on one machine never reap each other's sandboxes.
    """
    return hashlib.sha256(str(runtime_dir().resolve()).encode()).hexdigest()[:8]


def sandbox_uid() -> int:
    return int(os.environ.get("ERRAND_SANDBOX_UID") or DEFAULT_SANDBOX_UID)
