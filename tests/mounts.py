"""What errand left mounted below a test's directories: finding it, and clearing what a killed
errand process left."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def mounted_under(root: str | Path) -> list[str]:
    """The mount points at or below ``root`` in this process's mount table."""
    prefix = str(Path(root).resolve())
    with open("/proc/self/mountinfo") as handle:
        points = [re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal.group(1), 8)), line.split()[4])
                  for line in handle]
    return [point for point in points if point == prefix or point.startswith(prefix + "/")]


def unmount_under(*roots: str | Path) -> None:
    """Lazily unmount whatever is mounted below any of ``roots``, deepest first (a working
    copy's overlay's lower layer is never written through, so nothing is lost)."""
    prefixes = tuple(str(Path(root).resolve()) + "/" for root in roots)
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefixes)]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
