"""Loopback ports for the servers tests start (Temporal, errand serve).

A port picked free is free only when picked: another test process's server can bind it before
this one's does. That server then answers a client on the port while this one exits for want of
it, so a server counts as up only once its own process holds the port.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (empty once it has exited)."""
    try:
        held = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        table = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:  # it exited meanwhile
        return set()
    ports = set()
    for row in table:
        fields = row.split()  # sl, local address, remote address, state, ..., inode (the tenth)
        if fields[3] == "0A" and f"socket:[{fields[9]}]" in held:  # 0A: LISTEN
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
