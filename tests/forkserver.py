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

import errno
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
_STARTUP = ("PYTHON", "LC_", "LANG", "TZ",
            # and what errand's dependencies read when they are imported
            "TYPER_", "_TYPER_", "TERMINAL_WIDTH", "PYDANTIC_", "OTEL_", "PROMETHEUS_")
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
        if not os.path.isdir(cwd):  # as subprocess says it, before anything is started
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), cwd)
        request = json.dumps({"args": args, "env": environment, "cwd": cwd}).encode()
        if len(request) > _REQUEST_BYTES:  # it must fit the socket's buffer, sent before the server reads it
            raise ValueError(f"a request of {len(request)} bytes: the fork server takes up to {_REQUEST_BYTES}")
        given, kept, made = _streams(streams)  # checked and made before the server hears of the command
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # The request goes on the connection first: the server, once it has the connection,
            # finds all of it there (a client failing half-way cannot leave it waiting).
            socket.send_fds(ours, [len(request).to_bytes(4, "big") + request], given)
            with self.sending:
                socket.send_fds(self.parent, [b"c"], [theirs.fileno()])
            ours.settimeout(_FORK_SECONDS)
            message, fds, _, _ = socket.recv_fds(ours, 64, 1)
            ours.settimeout(None)
        except BaseException:
            ours.close()
            for fd in kept:
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            theirs.close()
            for fd in made:
                os.close(fd)
        if not fds:
            ours.close()
            raise ConnectionError(f"the errand fork server did not fork errand {' '.join(args)}: {message!r}")
        return Forked(["errand", *args], int(message), fds[0], ours, kept)


#: How long a fork may take the server before the client gives up on it.
_FORK_SECONDS = 120
#: The largest request (arguments, environment, directory): well inside a Unix socket's buffer.
_REQUEST_BYTES = 60_000


def _streams(streams: tuple[Stream, Stream, Stream]) -> tuple[list[int], list[int | None], list[int]]:
    """The descriptors the command gets as its three streams, this side's ends of the pipes made for
    it, and the descriptors made here for it (closed once sent). ``STDOUT`` as the error stream is
    the output's descriptor, as in ``subprocess``."""
    given: list[int] = []
    kept: list[int | None] = []
    made: list[int] = []
    try:
        for number, stream in enumerate(streams):
            if number == 2 and stream == subprocess.STDOUT:
                given.append(given[1])
                kept.append(None)
                continue
            if stream is None:
                fd, keep = number, None
            elif stream == subprocess.DEVNULL:
                fd, keep = os.open(os.devnull, os.O_RDWR), None
                made.append(fd)
            elif stream == subprocess.PIPE:
                read, write = os.pipe()
                fd, keep = (read, write) if number == 0 else (write, read)
                made.append(fd)
            elif isinstance(stream, int) and stream >= 0:
                fd, keep = stream, None
            elif isinstance(stream, int):
                raise ValueError(f"stream {number}: {stream} is not a descriptor this runs a command with")
            else:
                fd, keep = stream.fileno(), None
            os.fstat(fd)  # a closed descriptor is said here, as subprocess says it
            given.append(fd)
            kept.append(keep)
    except BaseException:
        for fd in [*made, *(fd for fd in kept if fd is not None)]:
            os.close(fd)
        raise
    return given, kept, made


class Forked:
    """A forked errand command, as much of ``subprocess.Popen`` as the tests use.

    Signals go through a pidfd the server sent, so one never reaches another process that got the
    command's pid after it ended; its status comes from the server, whose child it is."""

    def __init__(self, args: list[str], pid: int, pidfd: int, connection: socket.socket,
                 pipes: list[int | None]) -> None:
        self.args, self.pid, self.pidfd, self.connection = args, pid, pidfd, connection
        self.returncode: int | None = None
        self.stdin = None if pipes[0] is None else open(pipes[0], "w")  # noqa: SIM115 - lives as Popen's does
        self.stdout = None if pipes[1] is None else open(pipes[1])  # noqa: SIM115
        self.stderr = None if pipes[2] is None else open(pipes[2])  # noqa: SIM115
        self._waiting = threading.Lock()  # one reader of the status at a time, as Popen's waitpid lock
        self._signalling = threading.Lock()  # the pidfd is closed under it, never while it is used
        self._output: dict[str, str] = {}
        self._readers: list[threading.Thread] | None = None

    def poll(self) -> int | None:
        return self._wait(0)

    def wait(self, timeout: float | None = None) -> int:
        status = self._wait(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return status

    def _wait(self, timeout: float | None) -> int | None:
        with self._waiting:
            if self.returncode is not None:
                return self.returncode
            ready, _, _ = select.select([self.connection], [], [], timeout)
            if not ready:
                return None
            data = b""
            while not data.endswith(b"\n"):
                chunk = self.connection.recv(64)
                if not chunk:
                    raise ConnectionError(f"the errand fork server ended before {' '.join(self.args)} did")
                data += chunk
            self.returncode = os.waitstatus_to_exitcode(int(data))
            self.connection.close()
            with self._signalling:
                os.close(self.pidfd)
                self.pidfd = -1
            return self.returncode

    def send_signal(self, signum: int) -> None:
        try:
            self.poll()
        except ConnectionError:  # the server is gone: the command may not be, and the pidfd still reaches it
            pass
        with self._signalling:
            if self.pidfd >= 0:
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
        """Feed ``input``, read the output pipes to their end, and wait, as ``Popen.communicate`` does:
        after a timeout, calling it again goes on with what was read so far."""
        if self._readers is None:
            self._readers = [threading.Thread(target=self._read, args=(name, stream), daemon=True)
                             for name, stream in (("out", self.stdout), ("err", self.stderr)) if stream is not None]
            if self.stdin is not None:
                self._readers.append(threading.Thread(target=_feed, args=(self.stdin, input or ""), daemon=True))
            for thread in self._readers:
                thread.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._readers:
            thread.join(None if deadline is None else max(0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0, self._output.get("out"),
                                                self._output.get("err"))
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        return self._output.get("out"), self._output.get("err")

    def _read(self, name: str, stream: IO[str]) -> None:
        with stream:
            self._output[name] = stream.read()


def _feed(stream: IO[str], text: str) -> None:
    try:
        stream.write(text)
        stream.close()
    except BrokenPipeError:  # the command did not read it all
        pass


#: A started command: forked, or started anew where it could not be.
Process = subprocess.Popen[str] | Forked

__all__ = ["Forked", "Process", "run", "start"]
