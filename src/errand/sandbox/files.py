"""The files API: read, write, list and remove paths inside a sandbox.

Every path is opened *by the agent inside the sandbox*, so it resolves against
the sandbox's own root: ``..`` stops at that root, absolute symlinks point into
the sandbox, and a symlink swapped in mid-call can only lead elsewhere inside
it. Removal is done by the agent too, with the sandbox's own credentials.
The host never holds a descriptor of the sandbox's files: contents travel
through a pipe the host sends with each request (the same on every tier;
gVisor could not send descriptors the other way). Only regular files are read
or written, within a size bound: FIFOs and devices are refused, so a sandbox
cannot hang or exhaust the host.
"""

from __future__ import annotations

import asyncio
import builtins
import errno as errnos
import os
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from errand.errors import ConfigError, FilesError, SandboxError
from errand.sandbox._backends.channel import AgentChannel, AgentReply
from errand.sandbox.process import AsyncWriter

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
        absolute = self._absolute(path)
        data = await self._stream(["read", absolute, str(max_bytes)], absolute, limit=max_bytes)
        if len(data) > max_bytes:
            raise self._error(path, errnos.EFBIG, f"larger than max_bytes ({max_bytes})")
        return data

    async def read_text(self, path: str, *, max_bytes: int = MAX_READ) -> str:
        return (await self.read(path, max_bytes=max_bytes)).decode()

    async def write(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Create or replace a file, making missing parent directories."""
        absolute = self._absolute(path)
        payload = data.encode() if isinstance(data, str) else data
        fields = ["write", absolute, str(os.O_WRONLY | os.O_CREAT | os.O_TRUNC), format(mode, "o")]
        try:
            await self._stream(fields, absolute, payload=payload)
        except FilesError as error:
            if error.code != "not_found":
                raise
            # Parents are made only when missing: the common write costs one round trip.
            await self.mkdir(posixpath.dirname(absolute))
            await self._stream(fields, absolute, payload=payload)

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
        listing = await self._stream(["list", absolute], absolute, limit=MAX_READ)
        if len(listing) > MAX_READ:
            raise self._error(absolute, errnos.EFBIG, f"its listing is larger than {MAX_READ} bytes")
        fields = listing.decode("utf-8", "surrogateescape").split("\0")
        entries = [_info(fields[n + 1:n + 5], fields[n], posixpath.join(absolute, fields[n]))
                   for n in range(0, len(fields) - 5, 5)]
        return sorted(entries, key=lambda entry: entry.name)

    async def stat(self, path: str) -> FileInfo:
        absolute = self._absolute(path)
        reply = await self._request(["stat", absolute])
        if reply.kind == "error":
            raise self._error(absolute, int(reply.fields[1]), reply.fields[2])
        return _info(reply.fields[1:5], posixpath.basename(absolute) or "/", absolute)

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

    async def _stream(self, fields: builtins.list[str], path: str, *, payload: bytes | None = None,
                      limit: int = 0) -> bytes:
        """One streamed operation: the agent answers "ok", the content moves through a pipe
        (``payload`` into the sandbox, or at most ``limit`` + 1 bytes out), then "done"."""
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        theirs, ours = (read_end, write_end) if payload is not None else (write_end, read_end)
        channel = None
        try:
            try:
                channel = await self._connect()
                await channel.send(fields, (theirs,))
            finally:
                os.close(theirs)
            self._check(await channel.receive(), path)
            # The content moves on the loop, not on a thread: a thread still writing or reading
            # when the call is cancelled would go on at the number after it was closed here, and
            # the number may be another file's by then.
            data = b""
            if payload is not None:
                os.set_blocking(ours, False)
                stdin, ours = AsyncWriter(ours), -1
                # Its end is the content's end; an agent that stopped reading (a full disk, say)
                # gives its verdict below.
                await stdin.write_all_and_close(payload)
            else:
                data = await _read_all(ours, limit + 1)
                # What is past the limit is not read: let the agent's writes fail at once rather
                # than wait for room for ever (and its verdict with them).
                os.close(ours)
                ours = -1
            verdict = await channel.receive()
            if len(data) > limit and payload is None:
                return data  # cut off: the caller says so; the agent's verdict is on a pipe closed under it
            self._check(verdict, path)
            return data
        finally:
            if ours >= 0:
                os.close(ours)
            if channel is not None:
                channel.close()

    async def _request(self, fields: builtins.list[str]) -> AgentReply:
        channel = await self._connect()
        try:
            await channel.send(fields)
            return await channel.receive()
        finally:
            channel.close()

    def _check(self, reply: AgentReply, path: str) -> None:
        if reply.kind == "error":
            raise self._error(path, int(reply.fields[1]), reply.fields[2])
        if reply.kind not in ("ok", "done"):
            raise SandboxError(f"the sandbox agent answered {reply.kind!r}", sandbox_id=self._sandbox_id)

    def _error(self, path: str, errno: int, reason: str) -> FilesError:
        return FilesError(f"{path}: {reason}", sandbox_id=self._sandbox_id, path=path, errno=errno,
                          code=_CODES.get(errno, "files_error"))


_KINDS: dict[str, Literal["file", "directory", "symlink", "other"]] = {
    "f": "file", "d": "directory", "l": "symlink", "o": "other"}


def _info(fields: builtins.list[str], name: str, path: str) -> FileInfo:
    """A FileInfo from the agent's ``type size mode mtime`` fields."""
    kind, size, mode, mtime = fields
    return FileInfo(name, path, _KINDS.get(kind, "other"), int(size), int(mode, 8), float(mtime))


async def _read_all(fd: int, limit: int) -> bytes:
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    data = bytearray()
    while len(data) < limit:
        try:
            chunk = os.read(fd, min(1 << 20, limit - len(data)))
        except BlockingIOError:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, readable.set_result, None)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
            continue
        if not chunk:
            break
        data += chunk
    return bytes(data)
