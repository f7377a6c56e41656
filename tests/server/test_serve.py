"""What ``errand serve`` tells the person who started it: the truth about its engine, and one clear
line for a port that is taken."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import forkserver

from .conftest import Served


def test_a_taken_port_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = forkserver.run(["serve", "--port", str(port)], timeout=60, env={**os.environ, "ERRAND_DATABASE_URL":
                                                          f"sqlite:///{tmp_path / 'errand.db'}"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: port {port} on 127.0.0.1 is taken (another errand serve?); choose another with --port, or stop "
        "what listens there"]
    assert not (tmp_path / "errand.db").exists()  # nothing was started or created


def test_it_says_what_its_engine_does_once_it_does_it(serve: Callable[..., Served], tmp_path: Path) -> None:
    served = serve()
    with served.client() as client:
        assert client.get("/readyz").status_code in (200, 503)
        for _ in range(600):
            if client.get("/readyz").status_code == 200:
                break
    output = served.output()
    banner = next(line for line in output.splitlines() if line.startswith("errand serve:"))
    assert "the local engine is starting" in banner and "at a time" not in banner
    assert "the local engine runs tasks 2 at a time" in output
