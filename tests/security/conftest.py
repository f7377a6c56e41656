"""Containment tests run once per isolation backend, like the conformance suite.

The backend list and the sandbox fixtures live in ``tests/sandbox/conftest.py``;
they are loaded from there (that directory is not a package) so a backend added
to the conformance suite is held to the containment tests too.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "_errand_sandbox_fixtures", Path(__file__).parent.parent / "sandbox" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)

BACKENDS = _shared.BACKENDS
backend = _shared.backend
sandbox = _shared.sandbox
async_sandbox = _shared.async_sandbox

sys.path.insert(0, str(Path(__file__).parent.parent))
import nethosts  # noqa: E402 - tests/nethosts.py, reachable once tests/ is on the path

# ------------------------------------------------------------------ egress test hosts
#
# Test hosts (``tests/nethosts.py``): network namespaces on veth pairs this
# session creates, with servers that record what reaches them. Names resolve
# only through ERRAND_EGRESS_HOSTS, and an EgressGuard makes sure no name is
# looked up and nothing but loopback and these hosts is ever connected to.


def _can_make_test_hosts() -> str | None:
    if os.geteuid() != 0:
        return "test hosts need root (ip netns)"
    for tool in ("ip", "openssl"):
        if shutil.which(tool) is None:
            return f"test hosts need {tool}"
    return None


@pytest.fixture(scope="session")
def test_ca() -> Iterator[nethosts.TestCA]:
    """A throwaway CA for this session; ``test_ca.pem`` goes into sandboxes for ``curl --cacert``."""
    if (why := _can_make_test_hosts()) is not None:
        pytest.skip(why)
    ca = nethosts.TestCA()
    yield ca
    ca.remove()


@pytest.fixture(scope="session")
def public_host(test_ca: nethosts.TestCA) -> Iterator[nethosts.TestHost]:
    """A test host at 203.0.113.x (documentation range) and 2001:db8:ee:n::2."""
    with nethosts.TestHost(test_ca, label="public") as host:
        yield host


@pytest.fixture(scope="session")
def private_host(test_ca: nethosts.TestCA) -> Iterator[nethosts.TestHost]:
    """A test host at 10.203.113.x: private, so refused unless a CIDR allows it."""
    with nethosts.TestHost(test_ca, label="private", ipv4_range="10.203.113.0/24", ipv6=False) as host:
        yield host


@pytest.fixture(scope="session")
def lenient_host(test_ca: nethosts.TestCA) -> Iterator[nethosts.TestHost]:
    """A public-looking test host whose port 80 answers every request it reads on a connection."""
    with nethosts.TestHost(test_ca, label="lenient", ipv6=False, lenient_http=True) as host:
        yield host


@pytest.fixture
def egress_guard() -> Iterator[nethosts.EgressGuard]:
    """No DNS lookups and no connections but to loopback and test hosts, for the test's duration."""
    with nethosts.EgressGuard() as guard:
        yield guard
    assert guard.violations == [], f"the proxy tried to reach non-test addresses: {guard.violations}"


@pytest.fixture
def egress_hosts(monkeypatch: pytest.MonkeyPatch, public_host: nethosts.TestHost, private_host: nethosts.TestHost,
                 egress_guard: nethosts.EgressGuard) -> nethosts.EgressHosts:
    """ERRAND_EGRESS_HOSTS set for this test (test names only), with the egress guard on."""
    return nethosts.EgressHosts(monkeypatch.setenv, public_host, private_host, egress_guard)
