"""schemathesis generates requests from the published OpenAPI schema; none may make the
server fail (a 5xx). Bad input is the client's problem, and the answer must say so."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Served

pytestmark = pytest.mark.slow


def test_no_generated_request_is_a_server_error(serve: Callable[..., Served], repo: Path, tmp_path: Path) -> None:
    served = serve("--no-engine")
    with served.client() as client:  # a task, so paths with its id lead somewhere too
        client.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "openai:m"})
    schemathesis = Path(__import__("sys").executable).parent / "schemathesis"
    ran = subprocess.run(
        [str(schemathesis), "run", f"{served.url}/openapi.json", "--checks", "not_a_server_error",
         "--max-examples", "40", "--seed", "5", "--request-timeout", "10",
         "--exclude-path-regex", "/events/stream$",  # never ends by design; test_api streams it
         "--generation-allow-x00", "true"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    summary = ran.stdout[-3000:]
    assert ran.returncode == 0, summary + ran.stderr[-2000:] + served.output()[-3000:]
    assert "passed" in summary.lower()
    print(summary)
