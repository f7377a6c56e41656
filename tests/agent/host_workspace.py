"""A workspace that is a directory on the host: the agent's tools with no sandbox under them.

It has only what :class:`errand.agent.Workspace` asks for — ``exec``, ``run`` and
``files`` (read, write, stat) — so a test that runs the agent over it shows the
loop and its tools need nothing else of a sandbox. Paths outside the directory
are refused as a sandbox's files API refuses what it cannot open. For tests
only: nothing here isolates anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
from collections.abc import AsyncIterator
from pathlib import Path

from errand.errors import ExecTimeout, FilesError
from errand.sandbox import ExecResult, FileInfo


class HostStream:
    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def chunks(self, size: int = 65536) -> AsyncIterator[bytes]:
        while chunk := await self._reader.read(size):
            yield chunk


class HostProcess:
    def __init__(self, process: asyncio.subprocess.Process, timeout: float | None) -> None:
        self._process = process
        self._timeout = timeout
        assert process.stdout is not None
        self._stdout = HostStream(process.stdout)

    @property
    def stdout(self) -> HostStream:
        return self._stdout

    async def wait(self) -> int:
        try:
            return await asyncio.wait_for(self._process.wait(), self._timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            await self._process.wait()
            raise ExecTimeout(f"killed after {self._timeout}s", timeout=self._timeout or 0.0) from None


class HostFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _inside(self, path: str) -> Path:
        resolved = Path(path).resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise FilesError(f"{path} is outside the workspace", path=path, code="not_found")
        return resolved

    async def read(self, path: str, *, max_bytes: int = 1 << 20) -> bytes:
        try:
            data = self._inside(path).read_bytes()
        except OSError as error:
            raise FilesError(error.strerror or str(error), path=path, errno=error.errno) from None
        if len(data) > max_bytes:
            raise FilesError(f"larger than max_bytes ({max_bytes})", path=path)
        return data

    async def write(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        target = self._inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        target.chmod(mode)

    async def stat(self, path: str) -> FileInfo:
        target = self._inside(path)
        try:
            info = target.stat()
        except OSError as error:
            raise FilesError(error.strerror or str(error), path=path, errno=error.errno) from None
        return FileInfo(target.name, str(target), "directory" if stat.S_ISDIR(info.st_mode) else "file",
                        info.st_size, stat.S_IMODE(info.st_mode), info.st_mtime)


class HostDirectory:
    """``root`` as a workspace: commands run on the host in it, its files read and written directly."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._files = HostFiles(self.root)
        self.commands: list[tuple[str, ...]] = []

    @property
    def files(self) -> HostFiles:
        return self._files

    async def exec(self, *args: str, cwd: str | None = None, timeout: float | None = None) -> HostProcess:
        self.commands.append(args)
        process = await asyncio.create_subprocess_exec(
            *args, cwd=cwd or self.root, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
        return HostProcess(process, timeout)

    async def run(self, *args: str, cwd: str | None = None, timeout: float | None = None,
                  max_output: int = 1 << 20) -> ExecResult:
        process = await self.exec(*args, cwd=cwd, timeout=timeout)
        inner = process._process
        assert inner.stdout is not None and inner.stderr is not None
        stdout, stderr = await asyncio.gather(inner.stdout.read(), inner.stderr.read())
        exit_code = await process.wait()
        return ExecResult(exit_code, stdout[:max_output].decode(errors="replace"),
                          stderr[:max_output].decode(errors="replace"),
                          truncated=len(stdout) > max_output or len(stderr) > max_output)
