"""The interface every isolation backend implements: namespaces (bubblewrap) and gVisor (runsc).

A backend starts a sandbox from a :class:`SandboxSpec` and hands back what it
:class:`Started`; everything after start — exec, files, snapshots — speaks the
agent protocol over the record's control socket, and pausing and accounting
work on the sandbox's cgroup, the same for every backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from errand.errors import ConfigError
from errand.sandbox._backends.cgroups import SandboxUsage
from errand.sandbox._backends.gvisor import GVisorBackend
from errand.sandbox._backends.namespace import NamespaceBackend
from errand.sandbox._backends.registry import Record
from errand.sandbox._backends.spec import SandboxSpec, Started
from errand.sandbox._images.layers import LayerStore

__all__ = ["Backend", "SandboxUsage", "get_backend"]


class Backend(Protocol):
    name: str

    def check(self) -> None:
        """Raise BackendUnavailable if this backend cannot run on this machine."""

    def start(self, spec: SandboxSpec, copy_layers: list[Path]) -> Started:
        """Start the sandbox over its image's layers plus ``copy_layers`` (its Mount.copy trees).

        Returns at once: the agent's socket already accepts connections, and
        requests wait in its backlog until the agent is up."""

    def kill(self, record: Record) -> None:
        """End every process of the sandbox (idempotent)."""

    def cleanup(self, record: Record) -> None:
        """Remove what the sandbox left on the host once its processes are gone."""

    def upper_dir(self, record: Record) -> Path:
        """The sandbox's writable layer as the host sees it (for snapshots)."""


def get_backend(name: str, store: LayerStore | None = None) -> Backend:
    """The tier called ``name``, over the layers of ``store`` (default: errand's home)."""
    if name in ("namespace", "bwrap"):
        return NamespaceBackend(store)
    if name == "gvisor":
        return GVisorBackend(store)
    raise ConfigError(f"unknown isolation {name!r}; choose 'namespace' or 'gvisor'", code="unknown_backend")
