"""What the host shows about a sandbox, read independently of errand's own bookkeeping."""

from __future__ import annotations

import subprocess
from pathlib import Path

from errand import _settings


def cgroup_dir(sandbox_id: str, controller: str = "pids") -> Path:
    """The sandbox's cgroup directory: errand names it ``<runtime scope>-<id>``."""
    return Path("/sys/fs/cgroup") / controller / "errand" / f"{_settings.cgroup_scope()}-{sandbox_id}"


def loop_devices() -> set[str]:
    """Loop devices bound to a file under this session's errand home, as ``losetup`` lists them."""
    listing = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                             capture_output=True, text=True, check=True).stdout
    home = str(_settings.home()) + "/"
    return {line.split()[0] for line in listing.splitlines() if home in line}
