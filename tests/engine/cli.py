"""Running errand as a person does: a real ``errand`` process per command, in a home of the test's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import forkserver


def errand(home: Path, *args: str, cwd: Path | None = None, timeout: float = 600,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "ERRAND_HOME": str(home), "COLUMNS": "200", **(env or {})}
    environment.pop("ERRAND_DATABASE_URL", None)
    return forkserver.run([*args], timeout=timeout, env=environment, cwd=cwd)


def errand_json(home: Path, *args: str) -> Any:
    ran = errand(home, *args, "--json")
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def script(path: Path, turns: list[list[tuple[str, dict[str, Any]]]]) -> str:
    """A scripted model's file (``scripted:PATH``): one model reply of tool calls per turn."""
    path.write_text(json.dumps([{"tool_calls": [{"name": name, "arguments": arguments}
                                                for name, arguments in turn]} for turn in turns]))
    return f"scripted:{path}"


def stop_worker(home: Path) -> None:
    """SIGTERM the background worker of ``home`` (by the pid its lock records) and wait for it."""
    lock = home / "worker.lock"
    pid = int(lock.read_text() or 0) if lock.exists() else 0
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the worker {pid} did not stop on SIGTERM")
