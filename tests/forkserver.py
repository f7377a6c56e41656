"""``errand`` commands for tests, each a process of its own, forked from one that has imported errand.

A test that runs errand as a person does runs a real ``errand`` process per command. Most of such a
process's CPU was its start: Python importing errand's command line (~0.3 s of a 2-core machine's CPU,
the whole of a quick command's), several hundred times a suite. Here each test session keeps one
server process that has imported it (as ``python -m errand`` does, ``errand._startup``), and each
command is a child forked from it: a process of its own, with the test's arguments, environment,
working directory and standard streams, that runs ``errand.__main__.main`` and exits as the command
would, its atexit hooks and exit status included. :func:`run` is ``subprocess.run`` for such a
command; :func:`start` is ``subprocess.Popen`` for one that serves (``errand serve``, ``errand worker``):
the server has imported what those import too.

What a fork cannot give it falls back to a new interpreter, the way the command was run before:
an environment whose interpreter settings (``PYTHON*``, the locale) differ from the server's, since
Python reads those only when it starts. errand's modules read nothing of the environment when they
are imported (``tests/test_forkserver.py`` holds them to it), so the rest of the environment is the
test's own in the child.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

#: What the interpreter reads from the environment when it starts, and not after: a command whose
#: environment differs from the server's in one of these starts an interpreter of its own.
_STARTUP = ("PYTHON", "LC_", "LANG")
_SERVER = Path(__file__).with_name("forkserver_main.py")
_lock = threading.Lock()
_server: _Server | None = None
#: A stream the command is given: a descriptor or file of the test's, DEVNULL, or (run's) PIPE.
Stream = int | IO[Any] | None


def run(args: list[str], *, env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
        input: str | None = None, timeout: float | None = None,  # noqa: A002 - subprocess.run's name
        check: bool = False) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([errand, *args], capture_output=True, text=True, ...)``, forked where it can be.

    ``input=None`` gives the command the test's own standard input as ``subprocess.run`` does; a
    string gives it a pipe with that text, at end of file after it."""
    process = start(args, env=env, cwd=cwd, stdin=None if input is None else subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = process.communicate(input, timeout)
    except subprocess.TimeoutExpired:
        process.kill()  # as subprocess.run does on a timeout
        process.wait()
        raise
    ran = subprocess.CompletedProcess(["errand", *args], process.wait(), out, err)
    if check:
        ran.check_returncode()
    return ran


def start(args: list[str], *, env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
          stdin: Stream = None, stdout: Stream = None, stderr: Stream = None) -> Process:
    """``subprocess.Popen([errand, *args], ...)`` (text mode where it makes pipes), forked where it can be."""
    environment = dict(os.environ if env is None else env)
    server = _started(environment)
    if server is None:
        return subprocess.Popen([sys.executable, "-m", "errand", *args], env=environment, cwd=cwd, stdin=stdin,
                                stdout=stdout, stderr=stderr, text=True)
    return server.fork(args, environment, str(cwd or os.getcwd()), (stdin, stdout, stderr))


def _started(environment: Mapping[str, str]) -> _Server | None:
    global _server
    with _lock:
        if _server is None or not _server.alive():
            _server = _Server()
        return _server if _server.serves(environment) else None


def _startup_settings(environment: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in environment.items() if key.startswith(_STARTUP)}


class _Server:
    def __init__(self) -> None:
        self.environment = _startup_settings(os.environ)
        self.parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Its standard input is the pipe it ends on: at end of file (this process gone), it ends.
        self.process = subprocess.Popen([sys.executable, str(_SERVER), str(child.fileno())], pass_fds=[child.fileno()],
                                        stdin=subprocess.PIPE, cwd="/")
        child.close()
        self.sending = threading.Lock()

    def alive(self) -> bool:
        return self.process.poll() is None

    def serves(self, environment: Mapping[str, str]) -> bool:
        return _startup_settings(environment) == self.environment

    def fork(self, args: list[str], environment: dict[str, str], cwd: str, streams: tuple[Stream, Stream, Stream]
             ) -> Forked:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        given: list[int] = []  # the command's streams
        kept: list[int | None] = []  # this side's ends of the pipes made for it
        for number, stream in enumerate(streams):
            fd, keep = _stream(number, stream)
            given.append(fd)
            kept.append(keep)
        made = [fd for fd, stream in zip(given, streams, strict=True)  # closed here once sent
                if stream in (subprocess.PIPE, subprocess.DEVNULL)]
        request = json.dumps({"args": args, "env": environment, "cwd": cwd}).encode()
        try:
            with self.sending:  # the connection and its request go out together
                socket.send_fds(self.parent, [b"c"], [theirs.fileno()])
            socket.send_fds(ours, [len(request).to_bytes(4, "big") + request], given)
        finally:
            theirs.close()
            for fd in made:
                os.close(fd)
        message, fds, _, _ = socket.recv_fds(ours, 64, 1)
        if not fds:
            raise ConnectionError(f"the errand fork server did not fork: {message!r}")
        return Forked(int(message), fds[0], ours, kept)


def _stream(number: int, stream: Stream) -> tuple[int, int | None]:
    """The descriptor the command gets as its stream ``number``, and this side's end of a pipe made for it."""
    if stream is None:
        return number, None
    if stream == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR), None
    if stream == subprocess.PIPE:
        read, write = os.pipe()
        return (read, write) if number == 0 else (write, read)
    if isinstance(stream, int):
        return stream, None
    return stream.fileno(), None


class Forked:
    """A forked errand command, as much of ``subprocess.Popen`` as the tests use.

    Signals go through a pidfd the server sent, so one never reaches another process that got the
    command's pid after it ended; its status comes from the server, whose child it is."""

    def __init__(self, pid: int, pidfd: int, connection: socket.socket, pipes: list[int | None]) -> None:
        self.pid, self.pidfd, self.connection = pid, pidfd, connection
        self.args = ["errand"]
        self.returncode: int | None = None
        self.stdin = None if pipes[0] is None else open(pipes[0], "w")  # noqa: SIM115 - lives as Popen's does
        self.stdout = None if pipes[1] is None else open(pipes[1])  # noqa: SIM115
        self.stderr = None if pipes[2] is None else open(pipes[2])  # noqa: SIM115

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self.connection], [], [], 0)
            if ready:
                self._status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self.connection], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._status()
        assert self.returncode is not None
        return self.returncode

    def _status(self) -> None:
        data = b""
        while not data.endswith(b"\n"):
            chunk = self.connection.recv(64)
            if not chunk:
                raise ConnectionError("the errand fork server ended before the command did")
            data += chunk
        self.returncode = os.waitstatus_to_exitcode(int(data))
        self.connection.close()
        os.close(self.pidfd)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                signal.pidfd_send_signal(self.pidfd, signum)
            except ProcessLookupError:  # it ended just now
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: str | None = None,  # noqa: A002 - Popen's name
                    timeout: float | None = None) -> tuple[str | None, str | None]:
        """Feed ``input``, read the output pipes to their end, and wait, as ``Popen.communicate`` does."""
        results: dict[str, str] = {}
        threads = [threading.Thread(target=lambda name=name, stream=stream: results.__setitem__(name, stream.read()),
                                    daemon=True) for name, stream in (("out", self.stdout), ("err", self.stderr))
                   if stream is not None]
        if self.stdin is not None:
            threads.append(threading.Thread(target=_feed, args=(self.stdin, input or ""), daemon=True))
        for thread in threads:
            thread.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if deadline is None else max(0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return results.get("out"), results.get("err")

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *_: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def _feed(stream: IO[str], text: str) -> None:
    try:
        stream.write(text)
        stream.close()
    except BrokenPipeError:  # the command did not read it all
        pass


#: A started command: forked, or started anew where it could not be.
Process = subprocess.Popen[str] | Forked

__all__ = ["Forked", "Process", "run", "start"]
