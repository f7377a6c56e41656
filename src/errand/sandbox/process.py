"""Commands running in a sandbox: streamed output, writable stdin, faithful exit status."""

from __future__ import annotations

import asyncio
import errno
import os
import signal as signals
from collections.abc import AsyncIterator
from dataclasses import dataclass

from errand.errors import ExecTimeout
from errand.sandbox._backends.channel import AgentChannel

__all__ = ["MAX_OUTPUT", "AsyncProcess", "AsyncStream", "ExecResult", "read_pipe"]

MAX_OUTPUT = 64 * 1024 * 1024  # bytes per stream result() keeps unless asked for more


@dataclass(frozen=True)
class ExecResult:
    """A finished command. ``exit_code`` is negative (``-signal``) when a signal ended it."""

    exit_code: int
    stdout: str
    stderr: str
    signal: int | None = None
    truncated: bool = False  # output past max_output was drained and dropped

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class AsyncStream:
    """One output stream: iterate for lines, or ``read()`` everything."""

    def __init__(self, reader: asyncio.StreamReader, text: bool) -> None:
        self._reader = reader
        self._text = text

    def __aiter__(self) -> AsyncIterator[str | bytes]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str | bytes]:
        while line := await self._reader.readline():
            yield line.decode(errors="replace") if self._text else line

    async def read(self, size: int = -1) -> str | bytes:
        """Everything until the stream ends, or with ``size``, at most that many bytes as they come."""
        data = await self._reader.read(size)
        return data.decode(errors="replace") if self._text else data

    async def chunks(self, size: int = 65536) -> AsyncIterator[bytes]:
        """Raw output as it arrives, however long its lines."""
        while chunk := await self._reader.read(size):
            yield chunk


def read_pipe(loop: asyncio.AbstractEventLoop, fd: int, limit: int) -> asyncio.StreamReader:
    """A stream of what arrives on ``fd``, the read end of a command's output pipe, which it
    takes over: the descriptor is closed once, on the loop's thread, when the output ends."""
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    _OutputPipe(loop, fd, reader)
    return reader


class _OutputPipe:
    """The one owner of an output pipe's read end, feeding a StreamReader (and paused by it
    when its buffer fills).

    Not ``loop.connect_read_pipe``: on uvloop (what ``errand serve`` runs on) the transport
    hands the number to libuv and keeps the file object it was given, and both close it
    (uvloop#763); and a transport left half-open at the end of the output, as uvloop leaves
    one, is closed by whichever thread's garbage collection finds it. Between the two closes
    another thread can be given that number, and the second close takes it from that thread:
    a round's conclusion failed with EBADF so."""

    _CHUNK = 256 * 1024  # bytes read at most per wakeup, as asyncio's pipe transport does

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, reader: asyncio.StreamReader) -> None:
        self._loop = loop
        self._fd = fd
        self._reader = reader
        self._paused = False
        os.set_blocking(fd, False)
        reader.set_transport(self)  # type: ignore[arg-type]  # it calls only pause_reading and resume_reading
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, self._CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # what arrived stands; the command's status says the rest
        if data:
            self._reader.feed_data(data)
            return
        self._close()
        self._reader.feed_eof()

    def pause_reading(self) -> None:
        if not self._paused and self._fd >= 0:
            self._paused = True
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if self._paused and self._fd >= 0:
            self._paused = False
            self._loop.add_reader(self._fd, self._readable)

    def _close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __del__(self) -> None:
        # Only a paused pipe nobody reads any more is garbage (the loop holds one it watches),
        # so nothing watches this descriptor: closing it here is its one close.
        if self._fd >= 0:
            os.close(self._fd)


class AsyncWriter:
    """A command's stdin."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._waiting: asyncio.Future[None] | None = None  # a write waiting for room in the pipe

    async def write(self, data: str | bytes) -> None:
        """Write it all; BrokenPipeError once stdin is closed (by :meth:`close`, or by
        ``wait()`` when the command ends), also for a write waiting for room meanwhile."""
        payload = data.encode() if isinstance(data, str) else data
        loop = asyncio.get_running_loop()
        view = memoryview(payload)
        while view:
            if self._fd < 0:
                raise BrokenPipeError(errno.EPIPE, "the command's stdin is closed")
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                fd = self._fd
                self._waiting = ready = loop.create_future()
                loop.add_writer(fd, ready.set_result, None)
                try:
                    await ready
                finally:
                    self._waiting = None
                    if self._fd == fd:  # else close() has let go of the number, which may be another's now
                        loop.remove_writer(fd)
                continue
            view = view[written:]

    async def write_all_and_close(self, data: str | bytes) -> None:
        """Write it all, then close: a reader that stops reading first (it ended, or closed its
        end) is no error, as in ``subprocess.run``; what it made of the input is its own to say."""
        try:
            await self.write(data)
        except BrokenPipeError:
            pass
        finally:
            await self.close()

    async def close(self) -> None:
        """Close stdin (the command reads its end). The loop stops watching the descriptor
        first: closed while watched, its number, given to another file, would stay watched."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            asyncio.get_running_loop().remove_writer(fd)
            if self._waiting is not None and not self._waiting.done():
                self._waiting.set_result(None)  # it wakes to find stdin closed
            os.close(fd)


class AsyncProcess:
    """A command started by ``AsyncSandbox.exec``."""

    def __init__(self, channel: AgentChannel, pid: int, stdin_fd: int, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader, *, text: bool, timeout: float | None, sandbox_id: str) -> None:
        self._channel = channel
        self.pid = pid  # the command's pid inside the sandbox
        self.stdin = AsyncWriter(stdin_fd)
        self.stdout = AsyncStream(stdout, text)
        self.stderr = AsyncStream(stderr, text)
        self.returncode: int | None = None
        self.signal: int | None = None
        self._sandbox_id = sandbox_id
        self._timeout = timeout
        self._timed_out = False
        self._timer = (asyncio.get_running_loop().call_later(timeout, self._expire)
                       if timeout is not None else None)

    def _expire(self) -> None:
        self._timed_out = True
        self._killer = asyncio.ensure_future(self.kill())

    async def kill(self, signal: int = signals.SIGKILL) -> None:
        """Signal the command's whole process group."""
        if self.returncode is None:
            await self._channel.send(["signal", str(int(signal))])

    async def close(self) -> None:
        """Let go of the command: stdin closes and, if it still runs, the agent ends its
        process group once the connection is gone. Output already sent can still be read."""
        if self._timer is not None:
            self._timer.cancel()
        await self.stdin.close()
        self._channel.close()

    async def wait(self) -> int:
        """Wait for the command to end; its exit code, or ``-signal``."""
        if self.returncode is None:
            try:
                reply = await self._channel.receive()
            finally:
                if self._timer is not None:
                    self._timer.cancel()
                await self.stdin.close()
            code, sig = int(reply.fields[1]), int(reply.fields[2])
            self.signal = sig or None
            self.returncode = -sig if sig else code
            self._channel.close()
        if self._timed_out:
            raise ExecTimeout(f"command ran past its {self._timeout}s timeout and was killed",
                              sandbox_id=self._sandbox_id, timeout=self._timeout or 0)
        return self.returncode

    async def result(self, max_output: int = MAX_OUTPUT, *, input: str | bytes | None = None) -> ExecResult:  # noqa: A002
        """Wait, collecting output (up to ``max_output`` bytes per stream; the rest is
        drained and dropped, so a command that prints for ever cannot exhaust the host).

        A daemon the command left behind may hold the output pipes open; once the
        command itself has ended, output is collected until the pipes close or
        stay quiet for ``_DRAIN`` seconds, so such a daemon cannot hang the call.

        ``input`` is written to stdin meanwhile, which is then closed. As in
        ``subprocess.run``, a command that ends or closes its stdin without reading it
        all is no error; and a process it left holding stdin unread cannot hold the
        call past the command's own end.
        """
        buffers = (bytearray(), bytearray())
        dropped = [0]
        readers = [asyncio.ensure_future(_collect(stream._reader, buffer, max_output, dropped))
                   for stream, buffer in zip((self.stdout, self.stderr), buffers, strict=True)]
        feeding = [asyncio.ensure_future(self.stdin.write_all_and_close(input))] if input is not None else []
        try:
            code = await self.wait()  # which closes stdin: a write still waiting for room wakes to find it so
            await asyncio.wait(readers, timeout=_DRAIN)
            for feed in feeding:
                await feed  # done by now; raises what the write did, but a broken pipe
        finally:
            for task in readers + feeding:
                task.cancel()
        stdout, stderr = (bytes(buffer).decode(errors="replace") for buffer in buffers)
        return ExecResult(code, stdout, stderr, self.signal, truncated=dropped[0] > 0)


_DRAIN = 0.5


async def _collect(reader: asyncio.StreamReader, buffer: bytearray, limit: int, dropped: list[int]) -> None:
    while chunk := await reader.read(65536):
        room = limit - len(buffer)
        buffer += chunk[:max(room, 0)]
        dropped[0] += max(len(chunk) - max(room, 0), 0)
