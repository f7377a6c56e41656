"""Clearing what a killed errand process left mounted below a test's directories."""

from __future__ import annotations

import subprocess
from pathlib import Path


def unmount_under(*roots: str | Path) -> None:
    """Lazily unmount whatever is mounted below any of ``roots``, deepest first (a working
    copy's overlay's lower layer is never written through, so nothing is lost)."""
    prefixes = tuple(str(Path(root).resolve()) + "/" for root in roots)
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefixes)]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
