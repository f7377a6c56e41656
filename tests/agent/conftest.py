"""A tiny Python project with a bug and a failing test, copied into a real sandbox."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from errand.sandbox import AsyncSandbox, Mount
from models.wire import WireServer

CALC = "def add(a, b):\n    return a - b\n\n\ndef double(x):\n    return x * 2\n"
# The base image has no pytest, so the test is a plain script that exits non-zero on failure.
TEST_CALC = "from calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\nprint('1 passed')\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "test_calc.py").write_text(TEST_CALC)
    return tmp_path


@pytest.fixture
async def sandbox(repo: Path) -> AsyncIterator[AsyncSandbox]:
    sb = await AsyncSandbox.create(mounts=[Mount.copy(repo, "/workspace")], workdir="/workspace", timeout=120)
    try:
        yield sb
    finally:
        await sb.terminate()


@pytest.fixture
def wire() -> Iterator[WireServer]:
    """A loopback provider for the real SDKs (see tests/models/wire.py)."""
    server = WireServer().start()
    yield server
    server.stop()
