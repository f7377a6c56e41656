"""Sandbox uid ranges for test sessions: each session (each pytest-xdist worker) holds one that no
other live session on this machine holds, so its leak checks count only its own sandboxes."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

# In-sandbox ids 0..65535 map onto host ids from a session's base: ranges above errand's default one.
UID_BASE, UID_SPAN, UID_RANGES = 0x70000000, 65536, 4096


def claim_uid_range(locks: Path) -> tuple[int, IO[str]]:
    """The first range of sandbox uids no live session holds, and the open lock file that holds it
    (the kernel lets go of it when this process ends, however it ends). Ranges keyed on the pid
    collided: two workers whose pids differ by 4096 counted each other's sandboxes as leaks."""
    locks.mkdir(exist_ok=True)
    for slot in range(UID_RANGES):
        handle = open(locks / str(slot), "a")  # noqa: SIM115 - held open for the whole session
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return UID_BASE + UID_SPAN * (1 + slot), handle
    raise RuntimeError(f"all {UID_RANGES} sandbox uid ranges are held by live test sessions ({locks})")
