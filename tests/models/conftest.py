from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from models.wire import WireServer

_PROVIDER_VARIABLES = [
    f"{prefix}{provider}_{setting}"
    for prefix in ("", "ERRAND_")
    for provider in ("OPENAI", "ANTHROPIC")
    for setting in ("BASE_URL", "API_KEY")
] + ["ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "OPENAI_ADMIN_KEY"]


@pytest.fixture(autouse=True)
def clean_provider_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own keys and base URLs must not leak into (or out to) these tests."""
    for variable in _PROVIDER_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def wire_servers() -> Iterator[Callable[[], WireServer]]:
    started: list[WireServer] = []

    def start() -> WireServer:
        started.append(WireServer().start())
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def wire(wire_servers: Callable[[], WireServer]) -> WireServer:
    return wire_servers()


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL nothing listens on, for connection-failure tests."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
