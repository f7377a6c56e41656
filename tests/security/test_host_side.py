"""Attacks on the *host side* of the API: what a sandbox can make errand's host process do.

The sandbox decides what sits at every path the files API touches, can stop its
own agent, and writes the files snapshots copy. None of that may make the host
(which runs as root) delete, hang, exhaust memory, skip a deadline, or grant a
sandbox's id anything on the host. Each test fails if the attack works.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from errand import FilesError, Mount, Network, Sandbox
from errand.sandbox._backends import gc
from errand.sandbox._images.layers import LayerStore

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the namespace backend runs as root")


def test_remove_through_a_planted_symlink_cannot_delete_host_files(backend: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "protected").mkdir(parents=True)
    (data / "keep.txt").write_text("host")
    (data / "protected" / "a").write_text("host")
    os.chmod(data, 0o777)  # the sandbox may write here, but not delete root's files in 0755 dirs
    with Sandbox.create(isolation=backend, mounts=[Mount.bind(data, "/data", read_only=False)]) as sandbox:
        assert sandbox.run("rm", "-f", "/data/protected/a").exit_code != 0  # its own limits
        sandbox.run("sh", "-c", "mkdir -p /workspace && rm -rf /workspace && ln -s /data /workspace")
        os.chmod(data, 0o755)
        with pytest.raises(FilesError):
            sandbox.files.remove("/workspace/keep.txt")
        with pytest.raises(FilesError):
            sandbox.files.remove("/workspace/protected", recursive=True)
    assert (data / "keep.txt").read_text() == "host"
    assert (data / "protected" / "a").read_text() == "host"


@pytest.mark.parametrize("setup", [
    "ln -s /dev/zero /w/target",
    "mkfifo /w/target",
    "truncate -s 100G /w/target",
])
def test_reading_devices_fifos_and_huge_files_is_refused_quickly(backend: str, setup: str) -> None:
    with Sandbox.create(isolation=backend) as sandbox:
        assert sandbox.run("sh", "-c", f"mkdir -p /w && {setup}").exit_code == 0
        started = time.monotonic()
        with pytest.raises(FilesError):
            sandbox.files.read("/w/target")
        assert time.monotonic() - started < 10
        # The agent is not wedged: the sandbox still answers.
        assert sandbox.run("true").exit_code == 0
        # Writing is refused for what is not a regular file, too (a FIFO would block the agent).
        if "mkfifo" in setup:
            with pytest.raises(FilesError) as caught:
                sandbox.files.write("/w/target", "x")
            assert caught.value.errno in (errno.EINVAL, errno.ENXIO)  # no reader: ENXIO at open


# The agent's pid inside: on both tiers it is the pid namespace's init, which no command may signal.
AGENT_PID = {"namespace": "1", "gvisor": "1"}


def test_a_stopped_agent_does_not_outlive_the_lifetime(backend: str) -> None:
    sandbox = Sandbox.create(isolation=backend, timeout=2)
    try:
        agent = AGENT_PID[backend]
        assert sandbox.run("cat", f"/proc/{agent}/cmdline").stdout.startswith("/dev/.errand-agent")
        # No command may signal the agent (seccomp); frozen with the rest of the sandbox from the host,
        # it can no longer answer, nor end the sandbox.
        assert sandbox.run("kill", "-STOP", agent).exit_code != 0
        sandbox.pause()
        deadline = time.monotonic() + 30
        while sandbox.alive and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not sandbox.alive
    finally:
        sandbox.terminate()


def test_gc_ends_a_detached_sandbox_past_its_lifetime(backend: str) -> None:
    # Created by a process that then exits, as `errand sandbox create` does: no owner is left.
    script = (f"from errand import Sandbox; print(Sandbox.create(isolation={backend!r}, timeout=1, "
              "detach=True).id)")
    created = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    sandbox = Sandbox.from_id(created.stdout.strip())
    try:
        if backend == "namespace":  # the agent, init inside, ignores SIGSTOP from there: stopped from the host
            record = sandbox._record
            with open(f"/proc/{record.pid}/task/{record.pid}/children", encoding="ascii") as children:
                [agent] = children.read().split()
            os.kill(int(agent), signal.SIGSTOP)
        else:  # nor may any command signal it there: the whole sandbox is frozen from the host
            sandbox.pause()
        time.sleep(1 + gc.ORPHAN_GRACE + 0.5)
        assert sandbox.id in gc.collect().sandboxes
        assert sandbox.id not in {info.id for info in Sandbox.list()}
    finally:
        sandbox.terminate()


def test_snapshots_strip_setuid_and_layers_are_private(backend: str) -> None:
    with Sandbox.create(isolation=backend) as sandbox:
        sandbox.run("sh", "-c", "cp /usr/bin/id /suid && chmod 6755 /suid")
        image = sandbox.snapshot()
    assert image.config is not None
    top = LayerStore().path(image.config.layers[-1])
    mode = (top / "suid").stat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID)
    assert stat.S_IMODE(LayerStore().layers.stat().st_mode) == 0o700


@pytest.fixture
def host_public_address() -> Iterator[str]:
    """A public-looking (documentation-range) address this test adds to the host's loopback
    interface and removes: the kind of address a service bound to 0.0.0.0 answers on."""
    for _ in range(100):  # another test process may hold the one drawn (both backends run at once)
        address = f"198.51.100.{secrets.randbelow(200) + 20}"
        added = subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], capture_output=True, text=True)
        if added.returncode == 0:
            break
        assert "already assigned" in added.stderr or "File exists" in added.stderr, added.stderr
    else:
        raise AssertionError("no documentation-range address was free on lo in 100 draws")
    try:
        yield address
    finally:
        subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], check=False)


def test_open_network_cannot_reach_the_hosts_own_addresses(backend: str, host_public_address: str) -> None:
    import socket
    import threading

    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen(8)
    port = server.getsockname()[1]
    seen: list[object] = []
    threading.Thread(target=lambda: seen.append(server.accept()), daemon=True).start()
    try:
        with Sandbox.create(isolation=backend, network=Network.open()) as sandbox:
            result = sandbox.run("curl", "-sS", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}",
                                 f"http://{host_public_address}:{port}/")
            assert result.stdout == "403", result
            log = sandbox.egress_log()
        assert [event.reason for event in log] == [f"resolves to an address of this host ({host_public_address})"]
        assert seen == []
        # The same address is reachable when a CIDR names it explicitly (the test of the test).
        allowed = Network.allow(cidrs=[f"{host_public_address}/32:{port}"])
        with Sandbox.create(isolation=backend, network=allowed) as sandbox:
            result = sandbox.run("curl", "-sS", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}",
                                 f"http://{host_public_address}:{port}/")
            assert result.stdout != "403", result
    finally:
        server.close()


def test_endless_output_is_bounded_on_the_host(backend: str) -> None:
    with Sandbox.create(isolation=backend) as sandbox:
        result = sandbox.run("sh", "-c", "head -c 50000000 /dev/zero; echo done >&2", max_output=1_000_000)
        assert result.exit_code == 0
        assert len(result.stdout) == 1_000_000
        assert result.truncated
        assert result.stderr == "done\n"
        assert not sandbox.run("true").truncated
