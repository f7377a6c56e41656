"""A detached sandbox (what `errand sandbox create` makes) keeps its egress policy after the
process that created it exits: a supervisor serves its proxy and takes policy changes from
any process, and it ends with the sandbox."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from errand import Network, Sandbox

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from nethosts import ALLOWED, EgressHosts, TestCA

CREATE = """
import sys
from errand import Network, Sandbox
sandbox = Sandbox.create(isolation=sys.argv[1], network=Network.allow(sys.argv[2]), detach=True, timeout=120)
print(sandbox.id)
"""


def _curl(sandbox: Sandbox, url: str) -> list[str]:
    result = sandbox.run("curl", "-sS", "--max-time", "20", "--cacert", "/tmp/ca.pem", "-o", "/dev/null",
                         "-w", "%{http_connect} %{http_code}", url)
    return result.stdout.split()


def _supervisors(sandbox_id: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"errand.sandbox._egress.supervisor" in cmdline and sandbox_id.encode() in cmdline:
            found.append(int(entry))
    return found


def test_detached_sandbox_keeps_its_policy_and_it_can_change_from_anywhere(
        backend: str, egress_hosts: EgressHosts, test_ca: TestCA) -> None:
    created = subprocess.run([sys.executable, "-c", CREATE, backend, ALLOWED], capture_output=True, text=True,
                             check=True, timeout=60)
    sandbox = Sandbox.from_id(created.stdout.strip())  # its creator has exited
    try:
        sandbox.files.write("/tmp/ca.pem", test_ca.pem)
        assert _curl(sandbox, f"https://{ALLOWED}/") == ["200", "200"]  # CONNECT answered, then GET
        assert _curl(sandbox, "https://other.errand.test/")[0] == "403"
        sandbox.set_network(Network.none())  # from a process that is not the creator
        assert _curl(sandbox, f"https://{ALLOWED}/")[0] == "403"
        verdicts = [event.verdict for event in sandbox.egress_log()]
        assert verdicts.count("allowed") == 1 and verdicts.count("denied") == 2, verdicts
        assert _supervisors(sandbox.id)
    finally:
        sandbox.terminate()
    deadline = time.monotonic() + 10
    while _supervisors(sandbox.id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _supervisors(sandbox.id)


def test_detached_sandbox_without_network_has_no_supervisor(backend: str) -> None:
    created = subprocess.run([sys.executable, "-c",
                              "from errand import Sandbox; print(Sandbox.create(detach=True, timeout=60).id)"],
                             capture_output=True, text=True, check=True, timeout=60)
    sandbox = Sandbox.from_id(created.stdout.strip())
    try:
        assert not _supervisors(sandbox.id)
        with pytest.raises(Exception) as caught:
            sandbox.set_network(Network.open())
        assert getattr(caught.value, "code", "") == "no_proxy"
    finally:
        sandbox.terminate()
