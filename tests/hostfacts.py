"""What the host shows about a sandbox, read independently of errand's own bookkeeping."""

from __future__ import annotations

from pathlib import Path

from errand import _settings


def cgroup_dir(sandbox_id: str, controller: str = "pids") -> Path:
    """The sandbox's cgroup directory: errand names it ``<runtime scope>-<id>``."""
    return Path("/sys/fs/cgroup") / controller / "errand" / f"{_settings.cgroup_scope()}-{sandbox_id}"
