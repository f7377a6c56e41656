"""The files API's content pipe: a cancelled call leaves nothing reading or writing at the
pipe's number, which, once closed, may be another file's."""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import os
import termios
import time
from collections.abc import Sequence

import pytest

from errand.sandbox._backends.channel import AgentChannel, AgentReply
from errand.sandbox.files import AsyncFiles


class _StalledAgent:
    """The agent's side of one files request: it takes the content pipe and says "ok", then
    never says "done" (a sandbox frozen mid-transfer, say)."""

    def __init__(self) -> None:
        self.pipe = -1  # the agent's end of the content pipe
        self.closed = False
        self._answered = False

    async def send(self, fields: Sequence[str], fds: Sequence[int] = ()) -> None:
        self.pipe = os.dup(fds[0])

    async def receive(self) -> AgentReply:
        if not self._answered:
            self._answered = True
            return AgentReply(["ok"], [])
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.closed = True


def _pipe_inode(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _host_end(agent_end: int) -> int:
    """The host's end of the content pipe: the other descriptor of this process on that pipe."""
    pipe = _pipe_inode(agent_end)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd != agent_end:
            try:
                if _pipe_inode(fd) == pipe:
                    return fd
            except FileNotFoundError:
                continue
    raise AssertionError(f"no other end of {pipe}")


def _queued(fd: int) -> int:
    """Bytes waiting in the pipe ``fd`` is an end of."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


async def test_a_cancelled_read_reads_nothing_at_the_number_of_its_pipe_once_closed() -> None:
    agent = _StalledAgent()

    async def connect() -> AgentChannel:
        return agent  # type: ignore[return-value]

    files = AsyncFiles("sb-stalled0000", connect)
    reading = asyncio.ensure_future(files.read("/work/notes.txt"))
    deadline = time.monotonic() + 60
    while agent.pipe < 0:
        assert time.monotonic() < deadline, "the host never sent the content pipe"
        await asyncio.sleep(0.01)
    os.write(agent.pipe, b"the first part of the file")
    while _queued(agent.pipe):  # the host is reading the content
        assert time.monotonic() < deadline, "the host never read the content"
        await asyncio.sleep(0.01)
    host_end = _host_end(agent.pipe)
    # Made beforehand, so the pipe's number is free for it alone once the call lets go.
    other_read, other_write = os.pipe2(os.O_CLOEXEC)

    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert agent.closed
    # Another file is given the number, as another thread opening anything would be, and what
    # is written to it is its owner's.
    os.dup2(other_read, host_end, inheritable=False)
    os.close(other_read)
    try:
        with contextlib.suppress(BrokenPipeError):  # no reader left: the pipe's one end is closed
            os.write(agent.pipe, b" and the rest")  # a read still under way at the pipe gets this, and goes on
        os.write(other_write, b"another file's content")
        os.close(other_write)
        # Every thread of the loop's executor has finished: whatever was still reading has stopped.
        await asyncio.get_running_loop().shutdown_default_executor()
        assert os.read(host_end, 100) == b"another file's content"
    finally:
        for fd in (host_end, agent.pipe):
            os.close(fd)
