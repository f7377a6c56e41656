"""What the tests of the agent CLIs' adapters share: the model access a run is given and a stream
read line by line (pure: no sandbox, no CLI)."""

from __future__ import annotations

from typing import Any

from errand.agent.cli import CliAdapter, ModelAccess, Said

ACCESS = ModelAccess("http://127.0.0.1:3129", "errand-gw-token", "test-model")


def read(adapter: CliAdapter, lines: list[dict[str, Any]]) -> list[Said]:
    return [said for line in lines for said in adapter.translate(line)]
