"""The server of ``tests/forkserver.py``: imports errand's command line once, then forks a child per
command, which runs it as ``python -m errand`` would and exits with its status.

Started with a socket it receives each command's connection on, and with its standard input a pipe
from the test session: when that reaches end of file, the session is gone, and so is the server.
"""

from __future__ import annotations

import functools
import io
import json
import os
import selectors
import socket
import sys
from pathlib import Path

from errand import _startup

# What the errand command imports before it parses its arguments, what typer imports when it parses
# them (its pydantic adapters: half of a forked `errand ls`'s CPU when each child imported them), and
# what `errand serve` and `errand worker` import then. Importing them starts no thread: the fork copies
# a process of one.
with _startup.imports():
    import typer._adapters
    import typer.main

    import errand.cli
    import errand.server.serve
    import errand.tasks.engines.local
    import errand.tasks.engines.temporal
from errand.__main__ import main

# typer builds the click command from every command's signature on each call of the app (a third of
# a forked `errand ls`'s CPU). Built here once, each child gets a copy of the tree it would have built:
# the tree reads nothing from the environment (a default that does reads it when the command runs).
typer.main.get_command = functools.cache(typer.main.get_command)
typer.main.get_command(errand.cli.app)


def serve(control: socket.socket) -> None:
    """Fork each command asked for; returns only in the child, ready to run it."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, "command")
    selector.register(0, selectors.EVENT_READ, "session")
    while True:
        for key, _ in selector.select():
            if key.data == "session":
                if not os.read(0, 4096):
                    os._exit(0)
            elif key.data == "command":
                message, fds, _, _ = socket.recv_fds(control, 1, 1)
                if not message:
                    os._exit(0)
                connection = socket.socket(fileno=fds[0])
                try:
                    request, streams = _request(connection)
                except (OSError, ValueError) as error:  # a client that failed half-way: it, not the server
                    print(f"forkserver: a request dropped: {error!r}", file=sys.stderr)
                    connection.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    for other in list(selector.get_map().values()):
                        if isinstance(other.data, tuple):
                            other.data[1].close()
                            os.close(other.fd)
                    selector.close()
                    control.close()
                    connection.close()
                    _become(request, streams)
                    return
                for fd in streams:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                try:
                    socket.send_fds(connection, [str(pid).encode()], [pidfd])
                except OSError:  # the client is gone; its command runs on, and is reaped here
                    pass
                selector.register(pidfd, selectors.EVENT_READ, (pid, connection))
            else:
                pid, connection = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                try:
                    connection.sendall(f"{status}\n".encode())
                except OSError:  # the test stopped waiting
                    pass
                connection.close()


def _request(connection: socket.socket) -> tuple[dict[str, object], list[int]]:
    """The command asked for and its three streams: all on the connection already, or a ValueError."""
    connection.setblocking(False)
    try:
        data, fds, _, _ = socket.recv_fds(connection, 65536, 3)
    except BlockingIOError:
        raise ValueError("no request on the connection") from None
    finally:
        connection.setblocking(True)
    if len(fds) != 3 or len(data) < 4:
        for fd in fds:
            os.close(fd)
        raise ValueError(f"a request of {len(data)} bytes and {len(fds)} streams")
    try:
        size = int.from_bytes(data[:4], "big")
        data = data[4:]
        while len(data) < size:  # there already: the client sent it all before the connection
            chunk = connection.recv(size - len(data))
            if not chunk:
                raise ConnectionError("the request ended early")
            data += chunk
        return json.loads(data), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _become(request: dict[str, object], streams: list[int]) -> None:
    """Make this child the command's process: its streams, environment, directory and arguments."""
    for target, fd in enumerate(streams):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    # New stream objects over the new descriptors, as Python makes them when it starts.
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)), encoding,
                                                 sys.stdin.errors)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "wb", closefd=False)), encoding,
                                                   errors, line_buffering=os.isatty(1))
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "wb", closefd=False)), encoding,
                                                   "backslashreplace", line_buffering=True)
    environment = request["env"]
    assert isinstance(environment, dict)
    os.environ.clear()
    os.environ.update(environment)
    os.chdir(str(request["cwd"]))
    args = request["args"]
    assert isinstance(args, list)
    sys.argv = [str(Path(sys.executable).with_name("errand")), *args]  # as the console script is run


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
    main()
