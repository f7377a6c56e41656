"""Machines for tests of several workers: each an errand home and runtime directory of its own,
sharing one store, and its ``errand`` process while it runs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import forkserver
from errand.repo import checkouts
from polling import until

WORKER = ("worker", "--concurrency", "1")


class Machine:
    """One worker's errand home and runtime directory, and its process while it runs."""

    def __init__(self, root: Path, name: str, database: str, env: dict[str, str], lease: str = "3") -> None:
        self.home = root / name
        self.runtime = Path(tempfile.mkdtemp(prefix=f"ert-{name}-", dir="/run" if os.access("/run", os.W_OK)
                                             else None))
        self.log = root / f"{name}.log"
        self.env = {**os.environ, "ERRAND_WORKER_LEASE": lease, **env, "ERRAND_HOME": str(self.home),
                    "ERRAND_RUNTIME_DIR": str(self.runtime), "ERRAND_DATABASE_URL": database}
        self.process: forkserver.Process | None = None

    def errand(self, *args: str) -> subprocess.CompletedProcess[str]:
        return forkserver.run([*args], env=self.env, timeout=300)

    def start(self, *command: str) -> None:
        """Start ``errand COMMAND`` (by default a worker taking one task at a time) in the background."""
        with open(self.log, "ab") as output:
            self.process = forkserver.start([*(command or WORKER)], env=self.env, stdout=output, stderr=output)

    def stop(self) -> None:
        """SIGTERM, and a clean exit (uvicorn's, for ``errand serve``, re-raises the signal)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            assert self.process.wait(60) in (0, -signal.SIGTERM), self.log.read_text()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def end(self) -> None:
        """After a test: its process killed (woken first, if stopped), the sandboxes it left ended,
        the working copies a failed test left mounted unmounted, and its runtime directory removed."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
        self.kill()
        self.errand("sandbox", "gc")  # a killed worker's sandboxes, which no other machine can end
        for copy in (self.home / "work").glob("*/*"):
            checkouts.unmount(copy)
        with open("/proc/self/mounts") as mounts:
            left = [line.split()[1] for line in mounts if line.split()[1].startswith(f"{self.runtime}/")]
        for point in sorted(left, reverse=True):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)
        shutil.rmtree(self.runtime, ignore_errors=True)

    def sandboxes(self) -> set[str]:
        return {info["id"] for info in json.loads(self.errand("sandbox", "ls", "--json").stdout)}


def wait_until(condition: Callable[[], object], what: str, seconds: float = 180) -> None:
    until(condition, what, seconds)
