"""The host's side of the agent protocol: framed messages over a Unix socket.

Each message is a little-endian u32 length and NUL-separated fields; file
descriptors travel with a message as SCM_RIGHTS. See ``native/errand-agent.c``.
"""

from __future__ import annotations

import array
import asyncio
import collections
import os
import socket
import struct
from collections.abc import Callable

from errand.errors import SandboxError, SandboxTerminated

__all__ = ["AgentChannel", "AgentReply", "Ended"]

_MAX_FDS = 4
_MAX_MESSAGE = 1 << 20  # the agent never sends more than a few hundred bytes


class AgentReply:
    """One message from the agent: its fields and any file descriptors it carried."""

    __slots__ = ("fds", "fields")

    def __init__(self, fields: list[str], fds: list[int]) -> None:
        self.fields = fields
        self.fds = fds

    @property
    def kind(self) -> str:
        return self.fields[0] if self.fields else ""

    def raise_for_error(self, sandbox_id: str, what: str) -> None:
        if self.kind == "error":
            errno = int(self.fields[1])
            raise SandboxError(f"{what}: {self.fields[2]}", sandbox_id=sandbox_id, code=f"errno_{errno}")


class Ended(asyncio.Event):
    """Set when a sandbox has ended; it also completes the futures handed to :meth:`wake`, so a
    channel waits for its reply and for the end on one future, with no task of its own to watch
    the end (a task and ``asyncio.wait`` per reply were a fifth of a command's CPU on the host)."""

    def __init__(self) -> None:
        super().__init__()
        self._woken: set[asyncio.Future[None]] = set()

    def set(self) -> None:
        super().set()
        woken, self._woken = self._woken, set()
        for future in woken:
            if not future.done():
                future.set_result(None)

    def wake(self, future: asyncio.Future[None]) -> None:
        """Complete ``future`` when this is set (at once if it is), unless it is done by then."""
        if self.is_set():
            future.set_result(None)
        else:
            self._woken.add(future)

    def forget(self, future: asyncio.Future[None]) -> None:
        self._woken.discard(future)


class AgentChannel:
    """One connection to a sandbox's agent. Use one per command or file operation."""

    def __init__(self, sock: socket.socket, sandbox_id: str, dead: Ended | None,
                 why: Callable[[], str] | None = None, by: Callable[[], str | None] | None = None) -> None:
        self._sock = sock
        self._sandbox_id = sandbox_id
        self._dead = dead
        self._why = why
        self._by = by
        self._buffer = bytearray()
        self._fds: list[int] = []
        self._replies: collections.deque[AgentReply] = collections.deque()
        self._eof = False
        self._wakeup: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._on_readable)

    @classmethod
    async def connect(cls, path: str, sandbox_id: str, dead: Ended | None = None,
                      why: Callable[[], str] | None = None, by: Callable[[], str | None] | None = None
                      ) -> AgentChannel:
        """``why`` says, when the connection closes without an answer, what the sandbox left
        behind (its exit and the last lines of its log), so the error names a cause; ``by``, who
        ended it from outside its owner, if someone did."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, path)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            raise SandboxTerminated(f"sandbox {sandbox_id} is not running", sandbox_id=sandbox_id,
                                    terminated_by=by() if by is not None else None) from None
        return cls(sock, sandbox_id, dead, why, by)

    async def send(self, fields: list[str], fds: list[int] | tuple[int, ...] = ()) -> None:
        payload = b"\0".join(f.encode("utf-8", "surrogateescape") for f in fields)
        frame = struct.pack("<I", len(payload)) + payload
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        try:
            sent = self._sock.sendmsg([frame], ancillary)
            if sent < len(frame):
                await self._loop.sock_sendall(self._sock, frame[sent:])
        except BlockingIOError:
            # Only a huge first message can fill a fresh socket buffer; fds must go first.
            await self._wait_writable()
            await self.send(fields, fds)
        except OSError as error:
            cause = self._why() if self._why is not None else ""
            raise self._ended(f"sandbox {self._sandbox_id} is gone ({cause or error.strerror})") from None

    async def receive(self) -> AgentReply:
        """The next message; raises SandboxTerminated if the sandbox ends first.

        Messages wait in a queue that only this method takes from, so a receive
        that is cancelled (a timeout, say) loses nothing: the next one gets it.
        """
        while not self._replies:
            if self._eof:
                cause = self._why() if self._why is not None else ""
                raise self._ended(f"sandbox {self._sandbox_id} closed the connection"
                                  + (f" ({cause})" if cause else ""))
            if self._dead is not None and self._dead.is_set():
                cause = self._why() if self._why is not None else ""
                raise self._ended(f"sandbox {self._sandbox_id} has ended" + (f" ({cause})" if cause else ""))
            self._wakeup = wakeup = self._loop.create_future()  # woken by a reply, the stream ending or the sandbox
            if self._dead is not None:
                self._dead.wake(wakeup)
            try:
                await wakeup
            finally:
                if self._dead is not None:
                    self._dead.forget(wakeup)
                self._wakeup = None
        return self._replies.popleft()

    def _ended(self, message: str) -> SandboxTerminated:
        return SandboxTerminated(message, sandbox_id=self._sandbox_id,
                                 terminated_by=self._by() if self._by is not None else None)

    def close(self) -> None:
        if self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def _on_readable(self) -> None:
        try:
            data, ancillary, _flags, _addr = self._sock.recvmsg(
                65536, socket.CMSG_SPACE(_MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC)
        except BlockingIOError:
            return
        except OSError:
            data, ancillary = b"", []
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(raw) - len(raw) % 4
                self._fds.extend(array.array("i", raw[:usable]))
        if not data:
            self._loop.remove_reader(self._sock.fileno())
            self._eof = True
            self._wake()
            return
        self._buffer += data
        self._parse()

    def _parse(self) -> None:
        while len(self._buffer) >= 4:
            (length,) = struct.unpack_from("<I", self._buffer)
            if length > _MAX_MESSAGE:
                # Only a compromised sandbox sends this; it gets no more of our memory.
                self._loop.remove_reader(self._sock.fileno())
                self._buffer.clear()
                self._eof = True
                self._wake()
                return
            if len(self._buffer) < 4 + length:
                return
            payload = bytes(self._buffer[4:4 + length])
            del self._buffer[:4 + length]
            fields = payload.decode("utf-8", "surrogateescape").split("\0")
            fds, self._fds = self._fds, []
            self._replies.append(AgentReply(fields, fds))
            self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _wait_writable(self) -> None:
        ready = self._loop.create_future()
        self._loop.add_writer(self._sock.fileno(), ready.set_result, None)
        try:
            await ready
        finally:
            self._loop.remove_writer(self._sock.fileno())
