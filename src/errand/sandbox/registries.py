"""The host's package-registry settings, for commands that install packages in a sandbox.

A sandbox's only way out is the egress proxy, and its installs should find
packages where the host's own tools do: the same index or mirror, extra
indexes, local wheel directories, CA bundle and constraints. ``host_registries``
reads them from the host's pip, npm and apt configuration (asking each tool,
never hard-coding a registry) and returns what a sandbox needs for them:
environment variables, host paths to bind read-only, and the domains the
egress policy must allow.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from errand.errors import ConfigError
from errand.sandbox._images import host_tools, pipconfig
from errand.sandbox.network import entry_for_url

__all__ = ["REGISTRY_KINDS", "RegistryAccess", "host_registries"]

REGISTRY_KINDS = ("pip", "npm", "apt")


@dataclass(frozen=True)
class RegistryAccess:
    """What a sandbox needs to install from the host's registries."""

    env: tuple[tuple[str, str], ...] = ()
    paths: tuple[str, ...] = ()  # host paths to bind read-only at the same place
    domains: tuple[str, ...] = ()  # for the egress allowlist

    def fingerprint(self) -> list[object]:
        """Everything that can change what an install finds (for cache keys)."""
        return [list(self.env), list(self.paths), list(self.domains)]


def host_registries(kinds: Iterable[str] = REGISTRY_KINDS) -> RegistryAccess:
    """The host's settings for each registry kind named (``pip``, ``npm``, ``apt``)."""
    env: dict[str, str] = {}
    paths: set[str] = set()
    domains: set[str] = set()
    for kind in kinds:
        if kind not in REGISTRY_KINDS:
            raise ConfigError(f"unknown registry {kind!r} (known: {', '.join(REGISTRY_KINDS)})",
                              code="unknown_registry")
        part = _READERS[kind]()
        env.update(part.env)
        paths.update(part.paths)
        domains.update(part.domains)
    return RegistryAccess(tuple(sorted(env.items())), tuple(sorted(paths)), tuple(sorted(domains)))


def _pip() -> RegistryAccess:
    settings = pipconfig.host_pip_settings()
    return RegistryAccess(tuple(sorted(settings.env.items())), settings.paths, settings.hosts)


@lru_cache(maxsize=1)
def _npm() -> RegistryAccess:
    npm = shutil.which("npm")
    if npm is None:
        return RegistryAccess()
    env: dict[str, str] = {}
    for key in ("registry", "cafile"):
        result = host_tools.ask([npm, "config", "get", key], "npm")
        value = result.stdout.strip()
        if result.returncode == 0 and value and value not in ("undefined", "null"):
            env[f"npm_config_{key}"] = value
    registry = env.get("npm_config_registry", "")
    entry = entry_for_url(registry) if registry.startswith(("http://", "https://")) else None
    return RegistryAccess(tuple(sorted(env.items())), (), (entry,) if entry else ())


@lru_cache(maxsize=1)
def _apt() -> RegistryAccess:
    from errand.sandbox._images import debian

    hosts = {urlsplit(uri).hostname or "" for source in debian.apt_sources() for uri in source.uris} - {""}
    return RegistryAccess(domains=tuple(sorted(hosts)))


_READERS: dict[str, Callable[[], RegistryAccess]] = {"pip": _pip, "npm": _npm, "apt": _apt}
