from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from errand.gateway import Gateway
from models.wire import WireServer

#: The real key the upstream expects; the sandbox side must never see it.
REAL_KEY = "sk-real-upstream-key-5f2b9c1e7d"


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with Gateway(tmp_path / "transcripts") as started:
        yield started


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
