"""A model that answers over the OpenAI wire protocol from a loopback server, for ``errand eval run``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from models.wire import WireServer


@pytest.fixture(scope="module")
def wire() -> Iterator[WireServer]:
    """The server, with the OpenAI SDK's environment pointed at it (for the module's tests)."""
    server = WireServer().start()
    with pytest.MonkeyPatch.context() as patch:
        for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ERRAND_OPENAI_BASE_URL", "ERRAND_OPENAI_API_KEY"):
            patch.delenv(name, raising=False)
        patch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        patch.setenv("OPENAI_API_KEY", "sk-wire")
        yield server
    server.stop()
