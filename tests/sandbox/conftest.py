"""Fixtures for the sandbox conformance suite: every test runs once per isolation backend.

A backend joins the suite by being added to ``BACKENDS``; the conformance and
containment tests are written against the public API only, so they hold every
backend to the same contract.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from errand import AsyncSandbox, Sandbox

BACKENDS = ["namespace", "gvisor"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sandbox(backend: str) -> Iterator[Sandbox]:
    """A fresh blocking-API sandbox on the base image, terminated afterwards."""
    sb = Sandbox.create(isolation=backend, timeout=120)
    try:
        yield sb
    finally:
        sb.terminate()


@pytest.fixture
async def async_sandbox(backend: str) -> AsyncIterator[AsyncSandbox]:
    """A fresh async-API sandbox on the base image, terminated afterwards."""
    sb = await AsyncSandbox.create(isolation=backend, timeout=120)
    try:
        yield sb
    finally:
        await sb.terminate()


@pytest.fixture
def pip_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A pip configuration file of the test's own, read instead of the host's (and forgotten after)."""
    from errand.sandbox._images.pipconfig import host_pip_settings

    path = tmp_path / "pip.conf"
    for key in [key for key in os.environ if key.startswith("PIP_")]:  # the host's variables win over any file
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(path))
    host_pip_settings.cache_clear()
    yield path
    host_pip_settings.cache_clear()
