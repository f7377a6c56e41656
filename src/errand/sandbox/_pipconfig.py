"""The host's pip settings, read from pip itself at build time, for pip_install steps.

pip_install runs inside a sandbox; it should find packages where the host's
pip does (index, extra indexes, local wheel directories, CA bundle,
constraints), so those settings are passed in as ``PIP_*`` variables and any
local paths they name are bound read-only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import lru_cache

__all__ = ["host_pip_settings"]

_LINE = re.compile(r"^(?:[\w:.-]*\.)?([a-z][a-z0-9-]*)='(.*)'$")
_PATHLIKE = ("find-links", "extra-index-url", "index-url", "cert", "constraint", "client-cert")


@lru_cache(maxsize=1)
def host_pip_settings() -> tuple[dict[str, str], tuple[str, ...]]:
    result = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    env: dict[str, str] = {}
    paths: set[str] = set()
    for line in result.stdout.splitlines():
        match = _LINE.match(line.strip())
        if not match:
            continue
        key, value = match.groups()
        env["PIP_" + key.upper().replace("-", "_")] = value
        if key in _PATHLIKE:
            for item in value.split():
                path = item.removeprefix("file://")
                if not path.startswith("/") or not os.path.exists(path) or path.startswith("/usr/"):
                    continue
                if os.path.isfile(path):
                    path = os.path.dirname(path)
                elif key.endswith("index-url"):
                    # A local index's pages link to files beside it (../files/...).
                    path = os.path.dirname(path.rstrip("/"))
                paths.add(path)
    return env, tuple(sorted(paths))
