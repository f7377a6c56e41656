"""The native pieces: compiled once per source version, on first use, and cached."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

from errand import _settings
from errand.errors import BackendUnavailable

__all__ = ["agent_binary", "statx_shim"]

# errand-agent.c holds main; agent.h is what its files share.
AGENT_SOURCES = ("agent.h", "errand-agent.c", "disk.c", "files.c", "relay.c")
SHIM_SOURCES = ("gvisor-statx.c",)


@lru_cache(maxsize=1)
def agent_binary() -> Path:
    """Path of the static ``errand-agent`` binary, building it if needed."""
    return _built("errand-agent", AGENT_SOURCES, ["-static"])


@lru_cache(maxsize=1)
def statx_shim() -> Path:
    """Path of ``gvisor-statx.so`` (see its source), building it if needed."""
    return _built("gvisor-statx", SHIM_SOURCES, ["-shared", "-fPIC"], suffix=".so")


def _built(name: str, names: tuple[str, ...], flags: list[str], suffix: str = "") -> Path:
    package = resources.files(__package__)
    sources = {source: package.joinpath(source).read_bytes() for source in names}
    digest = hashlib.sha256(b"".join(source.encode() + b"\0" + text for source, text in sources.items()))
    target = _settings.user_cache_dir() / "bin" / f"{name}-{digest.hexdigest()[:16]}{suffix}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build even when many processes start at once
        if not target.exists():
            _compile(sources, flags, target)
    return target


def _compile(sources: dict[str, bytes], flags: list[str], target: Path) -> None:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise BackendUnavailable(
            "errand needs a C compiler to build its sandbox agent once; install gcc and libc6-dev"
        )
    partial = target.with_name(target.name + ".partial")
    with tempfile.TemporaryDirectory(dir=target.parent) as build:
        for name, text in sources.items():
            Path(build, name).write_bytes(text)
        units = [os.path.join(build, name) for name in sources if name.endswith(".c")]
        result = subprocess.run([compiler, "-O2", *flags, "-o", str(partial), *units],
                                capture_output=True, text=True)
    if result.returncode != 0:
        raise BackendUnavailable(
            f"building errand's sandbox agent failed (is libc6-dev installed?):\n{result.stderr}"
        )
    os.replace(partial, target)
