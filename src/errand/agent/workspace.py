"""Where the agent's tools act: the few operations they need of a place with files and a shell.

errand's own loop runs on the host and its tools act on a :class:`Workspace`:
they start commands in it (``shell``), run one to completion (``search``), and
read, stat and write its files (the file tools). :class:`~errand.sandbox.AsyncSandbox`
is one as it stands — its ``exec``, ``run`` and ``files`` have these shapes — so
the loop knows nothing of sandboxes; anything else with these operations (a
remote machine, a directory in a test) serves the same tools::

    agent = Agent(model, sandbox, AgentConfig(workdir="/workspace"))

What a workspace raises is what the tools answer: a
:class:`~errand.errors.FilesError` for a path that cannot be read or written, an
:class:`~errand.errors.ExecTimeout` from :meth:`WorkspaceProcess.wait` when a
command outlives its ``timeout`` (it is killed), and
:class:`~errand.errors.SandboxTerminated` or :class:`~errand.errors.SandboxNotFound`
once the workspace is gone, which end the run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from errand.sandbox import ExecResult, FileInfo

__all__ = ["Workspace", "WorkspaceFiles", "WorkspaceProcess", "WorkspaceStream"]


class WorkspaceStream(Protocol):
    """A running command's output."""

    def chunks(self, size: int = ...) -> AsyncIterator[bytes]:
        """Raw output as it arrives, until the stream ends."""
        ...


class WorkspaceProcess(Protocol):
    """A command started by :meth:`Workspace.exec`."""

    @property
    def stdout(self) -> WorkspaceStream: ...

    async def wait(self) -> int:
        """Its exit code once it ends; :class:`~errand.errors.ExecTimeout` if its timeout killed it."""
        ...


class WorkspaceFiles(Protocol):
    """A workspace's files, by absolute path."""

    async def read(self, path: str, *, max_bytes: int = ...) -> bytes:
        """A regular file's content; a file over ``max_bytes`` is refused (:class:`~errand.errors.FilesError`)."""
        ...

    async def write(self, path: str, data: bytes | str, *, mode: int = ...) -> None:
        """Create or replace a file, making missing parent directories."""
        ...

    async def stat(self, path: str) -> FileInfo: ...


class Workspace(Protocol):
    """What the agent's tools need of the place they act in (an :class:`~errand.sandbox.AsyncSandbox` is one)."""

    @property
    def files(self) -> WorkspaceFiles: ...

    async def exec(self, *args: str, cwd: str | None = None, timeout: float | None = None) -> WorkspaceProcess:
        """Start ``args`` in ``cwd``; returns at once, the output streaming."""
        ...

    async def run(self, *args: str, cwd: str | None = None, timeout: float | None = None,
                  max_output: int = ...) -> ExecResult:
        """Run ``args`` to completion, keeping at most ``max_output`` bytes of each stream."""
        ...
