"""The files API: read, write, list and remove paths inside a sandbox.

Every path is opened *by the agent inside the sandbox*, so it resolves against
the sandbox's own root: ``..`` stops at that root, absolute symlinks point into
the sandbox, and a symlink swapped in mid-call can only lead elsewhere inside
it. The host then works only on the returned descriptor, or on one name
(never a path) relative to a returned directory descriptor.
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

__all__ = ["AsyncFiles", "FileInfo"]

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

    async def read(self, path: str) -> bytes:
        fd = await self._open(path, os.O_RDONLY)
        if stats.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise self._error(path, errnos.EISDIR, "is a directory")
        with open(fd, "rb", closefd=True) as handle:
            return await asyncio.to_thread(handle.read)

    async def read_text(self, path: str) -> str:
        return (await self.read(path)).decode()

    async def write(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Create or replace a file, making missing parent directories."""
        payload = data.encode() if isinstance(data, str) else data
        await self.mkdir(posixpath.dirname(self._absolute(path)))
        fd = await self._open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
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
        parent, name = posixpath.split(absolute)
        if not name:
            raise ConfigError("refusing to remove the sandbox's root directory", code="invalid_path")
        fd = await self._open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            await asyncio.to_thread(_remove, fd, name, recursive)
        except OSError as error:
            raise self._error(absolute, error.errno or 0, error.strerror or "remove failed") from None
        finally:
            os.close(fd)

    def _absolute(self, path: str) -> str:
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            raise ConfigError(f"files API paths must be absolute paths inside the sandbox, not {path!r}",
                              code="relative_path")
        return posixpath.normpath(path).replace("//", "/")

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


def _remove(parent_fd: int, name: str, recursive: bool) -> None:
    """Remove one name under a directory descriptor; never follows a symlink."""
    info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if not stats.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    if recursive:
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
        try:
            for entry in os.listdir(child):
                _remove(child, entry, True)
        finally:
            os.close(child)
    os.rmdir(name, dir_fd=parent_fd)
