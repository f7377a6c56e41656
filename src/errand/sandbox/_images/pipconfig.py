"""The host's pip settings, read from pip itself at build time, for pip_install steps.

pip_install runs inside a sandbox whose only way out is the egress proxy, and
it should find packages where the host's pip does: the index, extra indexes,
local wheel directories, CA bundle and constraints are passed in as ``PIP_*``
variables, local paths they name are bound read-only, and the proxy allows
exactly the index hosts (pip's configured ones, or pip's own default).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache

from errand.sandbox._images import host_tools
from errand.sandbox.network import entry_for_url

__all__ = ["PipSettings", "host_pip_settings"]

_LINE = re.compile(r"^(?:[\w:.-]*\.)?([a-z][a-z0-9-]*)='(.*)'$")
_PATHLIKE = ("find-links", "extra-index-url", "index-url", "cert", "constraint", "client-cert")
# pip's built-in default index and file host (asked of pip rather than written here), then the
# settings ``pip install`` takes, in the order its own parser applies them (``[global]``, then
# ``[install]``, then the PIP_* variables, whatever file each came from; the last of a name wins):
# one short process, where ``pip config list`` and a second for the default took ~40 % more CPU. A
# configuration pip cannot read ends the script after the first line: no settings, the default index.
_READ = ("from pip._internal.models.index import PyPI\n"
         "print(PyPI.netloc, PyPI.file_storage_domain, flush=True)\n"
         "from pip._internal.commands import create_command\n"
         "parser = create_command('install').parser\n"
         "parser.config.load()\n"
         "for key, value in parser._get_ordered_configuration_items():\n"
         "    print(f'{key}={value!r}')\n")


@dataclass(frozen=True)
class PipSettings:
    env: dict[str, str]
    paths: tuple[str, ...]
    hosts: tuple[str, ...]


@lru_cache(maxsize=1)
def host_pip_settings() -> PipSettings:
    result = host_tools.ask([sys.executable, "-c", _READ], "pip")
    default, *lines = result.stdout.splitlines() or [""]
    if result.returncode != 0:
        lines = []
    settings: dict[str, str] = {}
    for line in lines:
        match = _LINE.match(line.strip())
        if match and match[2]:  # pip ignores an empty value
            key, value = match.groups()
            settings[key] = " ".join(map(os.path.expanduser, value.split())) if key in _PATHLIKE else value
    env = {"PIP_" + key.upper().replace("-", "_"): value for key, value in settings.items()}
    paths: set[str] = set()
    hosts: set[str] = set()
    for key, value in settings.items():
        for item in value.split() if key in _PATHLIKE else ():
            if item.startswith(("http://", "https://")):
                hosts.add(entry_for_url(item) or "")
            elif (path := _local_path(key, item)) is not None:
                paths.add(path)
    if "PIP_INDEX_URL" not in env:
        hosts.update(default.split())
    return PipSettings(env, tuple(sorted(paths)), tuple(sorted(hosts - {""})))


def _local_path(key: str, item: str) -> str | None:
    path = item.removeprefix("file://")
    if not path.startswith("/") or not os.path.exists(path) or path.startswith("/usr/"):
        return None
    if os.path.isfile(path):
        return os.path.dirname(path)
    if key.endswith("index-url"):
        # A local index's pages link to files beside it (../files/...).
        return os.path.dirname(path.rstrip("/"))
    return path
