"""A command's stdin: closing it while a write waits for room lets go of the descriptor
cleanly — the loop stops watching it before its number can go to another file."""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket

import pytest

from errand.sandbox.process import AsyncWriter


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is full, so the next write has to wait for the reader."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    try:
        while True:
            os.write(write_end, b"x" * 4096)
    except BlockingIOError:
        pass
    return read_end, write_end


async def test_closing_stdin_under_a_waiting_write_ends_it_and_frees_the_number_for_others() -> None:
    loop = asyncio.get_running_loop()
    read_end, write_end = _full_pipe()
    stdin = AsyncWriter(write_end)
    writing = asyncio.ensure_future(stdin.write(b"more than the pipe holds"))
    await asyncio.sleep(0)  # the write runs until it waits for room
    assert not writing.done()

    await stdin.close()  # as wait() does when the command ends
    # The waiting write ends at once, saying stdin is closed (it waited for ever before).
    with pytest.raises(BrokenPipeError):
        await asyncio.wait_for(writing, 60)

    # Another file is given the number (as another thread opening anything would be), and the
    # loop watches it as that file's: before, the closed descriptor's registration was still held.
    left, right = socket.socketpair()
    given = write_end not in (left.fileno(), right.fileno())
    if given:
        os.dup2(left.fileno(), write_end, inheritable=False)
    try:
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_writer(write_end, lambda: ready.done() or ready.set_result(None))
        await asyncio.wait_for(ready, 60)
        loop.remove_writer(write_end)
    finally:
        if given:
            os.close(write_end)
        left.close()
        right.close()
        os.close(read_end)
