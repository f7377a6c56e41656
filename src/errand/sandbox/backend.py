"""The interface every isolation backend implements: namespaces (bubblewrap) and gVisor (runsc).

A backend starts a sandbox from a :class:`SandboxSpec` and hands back a
:class:`Record`; everything after start — exec, files, snapshots — speaks the
agent protocol over the record's control socket, the same for every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from errand.sandbox._backends.registry import Record
from errand.sandbox._backends.spec import SandboxSpec

__all__ = ["Backend", "SandboxUsage", "get_backend"]


@dataclass(frozen=True)
class SandboxUsage:
    """What a sandbox's processes use, from its cgroup: CPU seconds so far (None where the
    machine's cgroups do not count them), memory charged now and at its peak, in bytes."""

    cpu_seconds: float | None
    memory_bytes: int
    memory_peak_bytes: int | None


class Backend(Protocol):
    name: str

    def check(self) -> None:
        """Raise BackendUnavailable if this backend cannot run on this machine."""

    def start(self, spec: SandboxSpec, copy_layers: list[Path]) -> Record:
        """Start the sandbox over its image's layers plus ``copy_layers`` (its Mount.copy trees).

        Returns at once: the agent's socket already accepts connections, and
        requests wait in its backlog until the agent is up."""

    def kill(self, record: Record) -> None:
        """End every process of the sandbox (idempotent)."""

    def cleanup(self, record: Record) -> None:
        """Remove what the sandbox left on the host once its processes are gone."""

    def upper_dir(self, record: Record) -> Path:
        """The sandbox's writable layer as the host sees it (for snapshots)."""

    def freeze(self, record: Record) -> None: ...

    def thaw(self, record: Record) -> None: ...

    def memory_usage(self, record: Record) -> int: ...

    def usage(self, record: Record) -> SandboxUsage: ...


def get_backend(name: str) -> Backend:
    from errand.errors import ConfigError

    if name in ("namespace", "bwrap"):
        from errand.sandbox._backends.namespace import NamespaceBackend

        return NamespaceBackend()
    if name == "gvisor":
        from errand.sandbox._backends.gvisor import GVisorBackend

        return GVisorBackend()
    raise ConfigError(f"unknown isolation {name!r}; choose 'namespace' or 'gvisor'", code="unknown_backend")
