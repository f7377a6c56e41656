"""The files API: read, write, list and remove paths inside a sandbox.

Every path is opened *by the agent inside the sandbox*, so it resolves against
the sandbox's own root: ``..`` stops at that root, absolute symlinks point into
the sandbox, and a symlink swapped in mid-call can only lead elsewhere inside
it. Removal is done by the agent too, with the sandbox's own credentials.
The host only reads metadata relative to returned directory descriptors, and
reads or writes regular files through returned descriptors, within a size
bound: FIFOs and devices are refused, so a sandbox cannot hang or exhaust it.
"""

from __future__ import annotations

import asyncio
import builtins
import errno as errnos
import os
import posixpath
import stat as stats
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from errand.errors import ConfigError, FilesError, SandboxError
from errand.sandbox._channel import AgentChannel, AgentReply

__all__ = ["MAX_READ", "AsyncFiles", "FileInfo"]

MAX_READ = 256 * 1024 * 1024  # bytes files.read() returns unless asked for more

_CODES = {errnos.ENOENT: "not_found", errnos.EEXIST: "exists", errnos.EACCES: "permission_denied",
          errnos.EPERM: "permission_denied", errnos.EROFS: "read_only", errnos.ENOSPC: "no_space",
          errnos.EISDIR: "is_a_directory", errnos.ENOTDIR: "not_a_directory", errnos.ENOTEMPTY: "not_empty"}


@dataclass(frozen=True)
class FileInfo:
    name: str
    path: str
    type: Literal["file", "directory", "symlink", "other"]
    size: int
    mode: int
    mtime: float


class AsyncFiles:
    def __init__(self, sandbox_id: str, connect: Callable[[], Awaitable[AgentChannel]]) -> None:
        self._sandbox_id = sandbox_id
        self._connect = connect

    async def read(self, path: str, *, max_bytes: int = MAX_READ) -> bytes:
        """A regular file's content. FIFOs, devices and files over ``max_bytes`` are refused:
        the sandbox chooses what sits at a path, and must not hang or exhaust the host."""
        fd = await self._open_regular(path, os.O_RDONLY)
        with open(fd, "rb", closefd=True) as handle:
            if os.fstat(fd).st_size > max_bytes:
                raise self._error(path, errnos.EFBIG, f"larger than max_bytes ({max_bytes})")
            data = await asyncio.to_thread(handle.read, max_bytes + 1)
        if len(data) > max_bytes:
            raise self._error(path, errnos.EFBIG, f"larger than max_bytes ({max_bytes})")
        return data

    async def read_text(self, path: str, *, max_bytes: int = MAX_READ) -> str:
        return (await self.read(path, max_bytes=max_bytes)).decode()

    async def write(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Create or replace a file, making missing parent directories."""
        payload = data.encode() if isinstance(data, str) else data
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            fd = await self._open_regular(path, flags, mode)
        except FilesError as error:
            if error.code != "not_found":
                raise
            # Parents are made only when missing: the common write costs one round trip.
            await self.mkdir(posixpath.dirname(self._absolute(path)))
            fd = await self._open_regular(path, flags, mode)
        with open(fd, "wb", closefd=True) as handle:
            try:
                await asyncio.to_thread(handle.write, payload)
                handle.flush()
            except OSError as error:
                raise self._error(path, error.errno or 0, error.strerror or "write failed") from None

    async def mkdir(self, path: str, *, mode: int = 0o755) -> None:
        """Make a directory and its missing parents (no error if it exists)."""
        absolute = self._absolute(path)
        parts = [p for p in absolute.split("/") if p]
        for depth in range(1, len(parts) + 1):
            current = "/" + "/".join(parts[:depth])
            reply = await self._request(["mkdir", current, format(mode, "o")])
            if reply.kind == "error" and int(reply.fields[1]) != errnos.EEXIST:
                raise self._error(current, int(reply.fields[1]), reply.fields[2])

    async def list(self, path: str) -> list[FileInfo]:
        absolute = self._absolute(path)
        fd = await self._open(absolute, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return await asyncio.to_thread(_list_dir, fd, absolute)
        finally:
            os.close(fd)

    async def stat(self, path: str) -> FileInfo:
        absolute = self._absolute(path)
        parent, name = posixpath.split(absolute)
        if not name:
            return FileInfo("/", "/", "directory", 0, 0o755, 0.0)
        fd = await self._open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return _info(os.stat(name, dir_fd=fd, follow_symlinks=False), name, absolute)
        except OSError as error:
            raise self._error(absolute, error.errno or 0, error.strerror or "stat failed") from None
        finally:
            os.close(fd)

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except FilesError as error:
            if error.code == "not_found":
                return False
            raise
        return True

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        absolute = self._absolute(path)
        if absolute == "/":
            raise ConfigError("refusing to remove the sandbox's root directory", code="invalid_path")
        await self._remove(absolute, recursive)

    async def _remove(self, path: str, recursive: bool) -> None:
        # The agent removes, with the sandbox's own credentials: the host never unlinks
        # anything itself, so a symlink swapped in cannot make it delete a host file.
        info = await self.stat(path)
        if info.type == "directory" and recursive:
            for entry in await self.list(path):
                await self._remove(entry.path, True)
        reply = await self._request(["unlink", path, "1" if info.type == "directory" else "0"])
        if reply.kind == "error":
            raise self._error(path, int(reply.fields[1]), reply.fields[2])

    def _absolute(self, path: str) -> str:
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            raise ConfigError(f"files API paths must be absolute paths inside the sandbox, not {path!r}",
                              code="relative_path")
        return posixpath.normpath(path).replace("//", "/")

    async def _open_regular(self, path: str, flags: int, mode: int = 0o644) -> int:
        # Non-blocking, so a FIFO cannot wedge the agent; no controlling terminal.
        fd = await self._open(path, flags | os.O_NONBLOCK | os.O_NOCTTY, mode)
        kind = os.fstat(fd).st_mode
        if not stats.S_ISREG(kind):
            os.close(fd)
            if stats.S_ISDIR(kind):
                raise self._error(path, errnos.EISDIR, "is a directory")
            raise self._error(path, errnos.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
        return fd

    async def _open(self, path: str, flags: int, mode: int = 0o644) -> int:
        reply = await self._request(["open", self._absolute(path), str(flags), format(mode, "o")])
        if reply.kind == "error":
            raise self._error(path, int(reply.fields[1]), reply.fields[2])
        if not reply.fds:
            raise SandboxError("the sandbox agent sent no file descriptor", sandbox_id=self._sandbox_id)
        for extra in reply.fds[1:]:
            os.close(extra)
        return reply.fds[0]

    async def _request(self, fields: builtins.list[str]) -> AgentReply:
        channel = await self._connect()
        try:
            await channel.send(fields)
            return await channel.receive()
        finally:
            channel.close()

    def _error(self, path: str, errno: int, reason: str) -> FilesError:
        return FilesError(f"{path}: {reason}", sandbox_id=self._sandbox_id, path=path, errno=errno,
                          code=_CODES.get(errno, "files_error"))


def _info(info: os.stat_result, name: str, path: str) -> FileInfo:
    mode = info.st_mode
    kind: Literal["file", "directory", "symlink", "other"] = (
        "directory" if stats.S_ISDIR(mode) else "symlink" if stats.S_ISLNK(mode)
        else "file" if stats.S_ISREG(mode) else "other")
    return FileInfo(name, path, kind, info.st_size, stats.S_IMODE(mode), info.st_mtime)


def _list_dir(fd: int, path: str) -> list[FileInfo]:
    entries = []
    for name in sorted(os.listdir(fd)):
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed while listing
        entries.append(_info(info, name, posixpath.join(path, name)))
    return entries
