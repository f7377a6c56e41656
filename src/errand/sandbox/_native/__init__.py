"""The native agent: compiled once per source version, on first use, and cached."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from functools import lru_cache
from importlib import resources
from pathlib import Path

from errand import _settings
from errand.errors import BackendUnavailable

__all__ = ["agent_binary"]

SOURCE = "errand-agent.c"


@lru_cache(maxsize=1)
def agent_binary() -> Path:
    """Path of the static ``errand-agent`` binary, building it if needed."""
    source = resources.files(__package__).joinpath(SOURCE).read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = _settings.cache_dir() / "bin" / f"errand-agent-{digest}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build even when many processes start at once
        if not target.exists():
            _compile(source, target)
    return target


def _compile(source: bytes, target: Path) -> None:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise BackendUnavailable(
            "errand needs a C compiler to build its sandbox agent once; install gcc and libc6-dev"
        )
    src = target.with_suffix(".c")
    src.write_bytes(source)
    partial = target.with_suffix(".partial")
    result = subprocess.run(
        [compiler, "-O2", "-static", "-o", str(partial), str(src)],
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise BackendUnavailable(
            f"building errand's sandbox agent failed (is libc6-dev installed?):\n{result.stderr}"
        )
    os.replace(partial, target)
