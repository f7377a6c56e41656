"""Shared fixtures: every test session (each pytest-xdist worker is one) gets its own errand home,
runtime directory and range of sandbox uids; PostgreSQL clusters and Temporal dev servers are
started per session too, and only when a test asks for one."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import components
import grouping
from mounts import unmount_under
from uids import claim_uid_range


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection imported (errand, FastAPI, SQLAlchemy, every test module) lives as long as the
    # worker: frozen, the collector's full passes stop walking it again (measured on tests/tasks and
    # tests/memory: 3.8 s of a worker's ~30 s CPU in collection, 2.4 s frozen).
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def errand_dirs() -> Iterator[None]:
    # Layers and the agent binary are cached across tests in one session-wide
    # home; the runtime directory is short because socket paths are limited.
    shared = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    home = tempfile.mkdtemp(prefix="errand-test-home-")
    runtime = tempfile.mkdtemp(prefix="ert-", dir=shared)
    uid, uid_lock = claim_uid_range(Path(shared) / "errand-test-uids")
    saved = {k: os.environ.get(k) for k in ("ERRAND_HOME", "ERRAND_RUNTIME_DIR", "ERRAND_SANDBOX_UID")}
    os.environ["ERRAND_HOME"] = home
    os.environ["ERRAND_RUNTIME_DIR"] = runtime
    # A host id range of this session's own, so leak checks count only our sandboxes.
    os.environ["ERRAND_SANDBOX_UID"] = str(uid)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    # The session leaves nothing behind: a working copy a failed test left mounted is unmounted
    # first, then both directories go.
    unmount_under(home, runtime)
    shutil.rmtree(runtime, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    uid_lock.close()


from postgres import postgres_cluster, postgres_url  # noqa: E402, F401 - fixtures for every test directory
from temporal import temporal_queue, temporal_server  # noqa: E402, F401

# The escape battery, wherever its tests sit beside what they test: `pytest -m security`.
SECURITY = ("security/", "server/test_security.py", "cli/test_escapes.py", "engine/test_host_trust.py",
            "sandbox/test_seccomp.py", "forge/test_webhook.py", "forge/test_receivers.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        where = os.path.relpath(str(item.path), root)
        if where.startswith(SECURITY[0]) or where in SECURITY[1:]:
            item.add_marker(pytest.mark.security)
    grouping.group_and_order(config, items, root)


def pytest_runtest_setup(item: pytest.Item) -> None:
    components.check(item)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI a missing component fails the run even where a test skipped on its own terms
    (a ``skipif`` of its own rather than the ``needs`` mark): a broken install never passes green."""
    if not components.under_ci() or hasattr(session.config, "workerinput"):  # once, in the controller
        return
    broken = components.broken()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for name, why in broken.items():
        if reporter is not None:
            reporter.write_line(f"CI: {name} is missing: {why}", red=True)
    if broken:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
