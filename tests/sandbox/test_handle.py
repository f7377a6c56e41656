"""A command's output pipes, as the sandbox handle reads them: each descriptor has one owner
and is closed once, so a number the process hands to someone else afterwards stays theirs.

``errand serve`` runs on uvloop, whose pipe transport closed the read end twice (in libuv and
through the file object it was given). A round's conclusion failed with EBADF so: another
thread had been given the number between the two closes, and the second one took it away.
The test makes that reuse certain instead of likely: a preloaded ``close`` puts another file
at the number the moment it is first closed, as another thread would, then the test looks
whether that file is still there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Whenever the number named by $ERRAND_TEST_REUSE_FD is closed, something else is given it at
# once (/dev/null), as the lowest free number goes to the next thread that opens anything.
_REUSE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int close(int fd) {
    static int (*real_close)(int);
    if (!real_close) real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
    int result = real_close(fd);
    const char *watched = getenv("ERRAND_TEST_REUSE_FD");
    if (result == 0 && watched && atoi(watched) == fd) {
        int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (other >= 0 && other != fd) {
            dup2(other, fd);
            real_close(other);
        }
    }
    return result;
}
"""

# The command's output read to its end, the reader let go of and collected, as when a finished
# command's process object is dropped; then what the number that was the pipe's now names.
_SCENARIO = r"""
import asyncio, gc, os, sys
from errand.sandbox._handle import _reader

async def main():
    loop = asyncio.get_running_loop()
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    os.environ["ERRAND_TEST_REUSE_FD"] = str(read_end)
    reader = await _reader(loop, read_end)
    os.write(write_end, b"the command's output")
    os.close(write_end)
    assert await reader.read() == b"the command's output"
    del reader
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()
    for _ in range(3):
        await asyncio.sleep(0)
    try:
        print(os.readlink(f"/proc/self/fd/{read_end}"))
    except FileNotFoundError:
        print("closed")

if sys.argv[1] == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""


@pytest.fixture(scope="module")
def reuse_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("reuse")
    (directory / "reuse.c").write_text(_REUSE)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", "reuse.so", "reuse.c", "-ldl"], cwd=directory, check=True)
    return directory / "reuse.so"


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_an_output_pipe_is_closed_once_so_its_number_given_to_another_stays_theirs(
        reuse_shim: Path, loop: str) -> None:
    source = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "LD_PRELOAD": str(reuse_shim),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")]))}
    env.pop("ERRAND_TEST_REUSE_FD", None)
    done = subprocess.run([sys.executable, "-c", _SCENARIO, loop], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    # The file given the number after the pipe's one close is still open there: no second close
    # of the pipe's number (by whichever thread collects the reader) took it from its new owner.
    assert done.stdout.strip() == "/dev/null", done.stderr
