"""What an idle sandbox's own processes hold while many mounts exist elsewhere on the host."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from errand import Sandbox
from hostfacts import memory_dir

KiB = 1024

# Run by a process of the test's own: a private mount namespace holding COUNT bind mounts of one
# tmpfs, stacked on one directory, until its stdin closes. Mount ids are the host's, whatever the
# namespace, as a thousand sandboxes' mounts are.
_HOLDER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, MS_BIND, MS_REC, MS_PRIVATE = 0x20000, 4096, 0x4000, 1 << 18
place, count = sys.argv[1].encode(), int(sys.argv[2])
assert libc.unshare(CLONE_NEWNS) == 0, os.strerror(ctypes.get_errno())
assert libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0, os.strerror(ctypes.get_errno())
assert libc.mount(b"tmpfs", place, b"tmpfs", 0, b"size=4k") == 0, os.strerror(ctypes.get_errno())
for _ in range(count):
    assert libc.mount(place, place, None, MS_BIND, None) == 0, os.strerror(ctypes.get_errno())
print("held", flush=True)
sys.stdin.read()
"""


@contextmanager
def mounts_elsewhere(place: Path, count: int) -> Iterator[None]:
    place.mkdir()
    # Leaving the Popen block closes both pipes and reaps the holder; were this process to end
    # without that, the holder ends too, on its stdin's end of file.
    with subprocess.Popen([sys.executable, "-c", _HOLDER, str(place), str(count)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            yield
        finally:
            holder.kill()


def _heap(pid: str) -> int:
    """Bytes of the process's heap it has written to (its own, not shared)."""
    held, in_heap = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0]:
            in_heap = line.endswith("[heap]")
        elif in_heap and line.startswith("Private_Dirty:"):
            held += int(line.split()[1]) * KiB
    return held


def test_bwrap_holds_no_heap_for_the_mounts_of_the_rest_of_the_host(tmp_path: Path) -> None:
    # bwrap indexes the mounts it reads by mount id, in an array as long as the highest id on the
    # host: with 12,000 mounts elsewhere its child held 200 KiB of heap for the sandbox's life.
    with mounts_elsewhere(tmp_path / "held", 12_000), Sandbox.create(timeout=60) as sb:
        assert sb.run("true").exit_code == 0
        pids = (memory_dir(sb.id) / "cgroup.procs").read_text().split()
        heaps = {pid: _heap(pid) for pid in pids if Path(f"/proc/{pid}/comm").read_text().strip() == "bwrap"}
    # bwrap outside the sandbox alone: its child, whose heap this was, is the agent (--as-pid-1).
    assert len(heaps) == 1, heaps
    assert max(heaps.values()) <= 64 * KiB, {pid: f"{heap // KiB} KiB" for pid, heap in heaps.items()}


def test_the_agent_and_its_commands_start_without_the_launchers_malloc_settings() -> None:
    # The launcher passes glibc's malloc settings to bwrap; bwrap drops them before it execs the agent,
    # whose commands take their environment from the request alone.
    with Sandbox.create(timeout=60) as sb:
        assert "GLIBC_TUNABLES" not in sb.run("env").stdout
        pids = (memory_dir(sb.id) / "cgroup.procs").read_text().split()
        environs = {pid: Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") for pid in pids
                    if Path(f"/proc/{pid}/comm").read_text().strip() == ".errand-agent"}
    [environ] = environs.values()  # the one agent, bwrap's child's child
    assert not [entry for entry in environ if entry.startswith(b"GLIBC_TUNABLES=")], environ
