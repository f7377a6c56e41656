"""Shared fixtures: every test session gets its own errand home and runtime directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def errand_dirs() -> Iterator[None]:
    # Layers and the agent binary are cached across tests in one session-wide
    # home; the runtime directory is short because socket paths are limited.
    home = tempfile.mkdtemp(prefix="errand-test-home-")
    runtime = tempfile.mkdtemp(prefix="ert-", dir="/run" if os.access("/run", os.W_OK) else None)
    saved = {k: os.environ.get(k) for k in ("ERRAND_HOME", "ERRAND_RUNTIME_DIR", "ERRAND_SANDBOX_UID")}
    os.environ["ERRAND_HOME"] = home
    os.environ["ERRAND_RUNTIME_DIR"] = runtime
    # A host id range of this session's own, so leak checks count only our sandboxes.
    os.environ["ERRAND_SANDBOX_UID"] = str(0x70000000 + 65536 * (1 + os.getpid() % 4096))
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    # The session leaves nothing behind: a working copy a failed test left mounted is unmounted
    # first (its overlay's lower layer is never written through), then both directories go.
    with open("/proc/self/mounts") as mounts:
        mounted = [line.split()[1] for line in mounts if line.split()[1].startswith((home + "/", runtime + "/"))]
    for point in sorted(mounted, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    shutil.rmtree(runtime, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)


from postgres import postgres_cluster, postgres_url  # noqa: E402, F401 - fixtures for every test directory
from temporal import temporal_queue, temporal_server  # noqa: E402, F401

# The escape battery, wherever its tests sit beside what they test: `pytest -m security`.
SECURITY = ("security/", "server/test_security.py", "cli/test_escapes.py", "engine/test_host_trust.py",
            "sandbox/test_seccomp.py", "forge/test_webhook.py", "forge/test_receivers.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        where = os.path.relpath(str(item.path), root)
        if where.startswith(SECURITY[0]) or where in SECURITY[1:]:
            item.add_marker(pytest.mark.security)
