"""What the host shows about a sandbox, read independently of errand's own bookkeeping."""

from __future__ import annotations

import subprocess
from pathlib import Path

from errand import _settings


def cgroup_dir(sandbox_id: str, controller: str = "pids") -> Path:
    """The sandbox's cgroup directory: errand names it ``<runtime scope>-<id>``."""
    return Path("/sys/fs/cgroup") / controller / "errand" / f"{_settings.cgroup_scope()}-{sandbox_id}"


def memory_dir(sandbox_id: str) -> Path:
    """The sandbox's memory cgroup: the v1 memory hierarchy's where it is mounted, else cgroup2's
    (read from the mount table: /sys/fs/cgroup on a pure v2 host)."""
    v1 = cgroup_dir(sandbox_id, "memory")
    if v1.parent.parent.is_dir():
        return v1
    mounts = [line.split(" - ") for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    [v2] = [before.split()[4] for before, after in mounts if after.split()[0] == "cgroup2"][:1]
    return Path(v2) / "errand" / f"{_settings.cgroup_scope()}-{sandbox_id}"


def loop_devices() -> set[str]:
    """Loop devices bound to a file under this session's errand home, as ``losetup`` lists them."""
    listing = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                             capture_output=True, text=True, check=True).stdout
    home = str(_settings.home()) + "/"
    return {line.split()[0] for line in listing.splitlines() if home in line}
