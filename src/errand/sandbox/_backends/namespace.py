"""The namespace tier: bubblewrap over an overlay root, with cgroup limits.

The launcher (see ``launcher``) prepares the host side and then *becomes*
bwrap, as the unprivileged uid, inside the user namespace it made. bwrap adds
pid, ipc, uts and cgroup namespaces and the seccomp filter, and runs the
agent. Nothing of the host's ``/`` is bound: the sandbox sees its image, its
mounts, and nothing else.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from errand.errors import BackendUnavailable
from errand.sandbox._backends import seccomp
from errand.sandbox._backends.cgroups import KILL_TIMEOUT, LOOK_AGAIN, Cgroup, wait_until
from errand.sandbox._backends.launcher import (
    AGENT_PATH,
    BUILD_CAPABILITIES,
    MALLOC_TUNING,
    LaunchedBackend,
    Runtime,
    agent_arguments,
    staged,
)
from errand.sandbox._backends.registry import Record, pidfd_of
from errand.sandbox._backends.spec import SandboxSpec

__all__ = ["NamespaceBackend"]


class NamespaceBackend(LaunchedBackend):
    name = "namespace"

    def check(self) -> None:
        if not _have_bwrap():
            raise BackendUnavailable("the namespace tier needs bubblewrap: apt-get install bubblewrap")
        if os.geteuid() != 0:
            raise BackendUnavailable("errand's namespace tier runs as root on the host (it maps "
                                     "sandboxes onto unprivileged ids itself)")

    def kill(self, record: Record) -> None:
        """SIGKILL the sandbox from the inside out: the pid namespace's init (the agent) first
        (the kernel then kills every process in the namespace, and none can leave it or fork
        past it), then the bwrap outside it if it has not ended by itself; the cgroup's
        freeze-and-kill rounds (``LaunchedBackend.kill``) take whatever is left.

        Inside out, each parent lives to reap its child: the outer bwrap reaps the init and
        exits, and errand reaps the outer bwrap. Killed together, the outer bwrap could die
        first, and the init, orphaned, waited as a zombie on the host's pid 1, one per sandbox,
        for as long as that process left it there (a container's pid 1 may never reap). A
        sandbox still launching has no init yet: its launcher's children are killed as they
        appear, until it ends or the wait for it runs out."""
        outer = pidfd_of(record.pid, start=record.pid_start)
        if outer is None:
            super().kill(record)
            return
        exits = _Exits(outer)
        try:
            _inside_out(record.pid, exits, functools.partial(_thaw, record))
        finally:
            exits.close()
        if not exits.left and _emptied(record):
            return  # all gone with the namespace's init: the cgroup's rounds would find nothing
        super().kill(record)

    @contextlib.contextmanager
    def runtime(self, spec: SandboxSpec, directory: Path, listen_fd: int) -> Iterator[Runtime]:
        seccomp_fd = seccomp.filter_fd()
        try:
            yield Runtime([], self._bwrap_args(spec, directory, listen_fd, seccomp_fd), [seccomp_fd])
        finally:
            os.close(seccomp_fd)

    def _bwrap_args(self, spec: SandboxSpec, directory: Path, listen_fd: int, seccomp_fd: int) -> list[str]:
        # The network namespace is the launcher's, not bwrap's.
        # --as-pid-1: the agent is the pid namespace's init, as on gVisor; it reaps whatever is
        # orphaned inside. With bwrap's own init between them, the outer bwrap exited as soon as
        # that init reported the agent's exit, before reaping it, and the init was left a zombie
        # on the host's pid 1 whenever a sandbox ended by itself (its lifetime, its idle time).
        args = ["bwrap", "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup", "--new-session", "--hostname", "sandbox", "--unsetenv", MALLOC_TUNING[0],
                # The agent needs these to start commands as other in-sandbox users; it
                # clears every capability in each command it starts.
                "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
                "--bind", str(directory / "mnt" / "merged"), "/"]
        if not spec.detach:
            args.append("--die-with-parent")
        for source, target in spec.image.binds:
            args += ["--ro-bind", source, target]
        args += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", staged(directory, 0), AGENT_PATH]
        for n, mount in enumerate((m for m in spec.mounts if m.kind == "bind"), start=1):
            args += ["--ro-bind" if mount.read_only else "--bind", staged(directory, n), mount.target]
        if spec.build_capabilities:
            for name in BUILD_CAPABILITIES:
                args += ["--cap-add", name]
        args += ["--dir", spec.workdir, "--seccomp", str(seccomp_fd), "--chdir", "/", "--",
                 AGENT_PATH, "serve", "--fd", str(listen_fd), *agent_arguments(spec)]
        return args


_DIRECT_KILL_WAIT = 1.0  # seconds the direct kill is given before the cgroup's kill rounds
_OUTER_EXIT_WAIT = 0.25  # seconds the outer bwrap (or launcher) is given to reap its child and exit
_THAW_AFTER = 0.02  # seconds a killed child may take to die before its group is thawed (a paused sandbox)


class _Exits:
    """Which of some processes (by pidfd, the first the outermost) are still alive: a pidfd
    turns readable when its process has exited, so waiting needs no polling on a timer."""

    def __init__(self, outer: int) -> None:
        self.outer = outer
        self.left = {outer}
        self._poll = select.poll()
        self._poll.register(outer, select.POLLIN)
        self._opened = [outer]

    def add(self, pidfd: int) -> None:
        self._opened.append(pidfd)
        self.left.add(pidfd)
        self._poll.register(pidfd, select.POLLIN)

    def wait(self, until: float, *, outer_only: bool = False) -> None:
        """Until all have exited (or only the outermost, with ``outer_only``), or ``until``."""
        while (self.outer in self.left if outer_only else self.left) and (remaining := until - time.monotonic()) > 0:
            for pidfd, _ in self._poll.poll(remaining * 1000):
                self._poll.unregister(pidfd)
                self.left.discard(pidfd)

    def close(self) -> None:
        for pidfd in self._opened:
            os.close(pidfd)


def _inside_out(pid: int, exits: _Exits, thaw: Callable[[], None]) -> None:
    """SIGKILL the children of ``pid`` (the outermost process, ``exits.outer``) as they appear,
    until it has ended by itself or its time is up; then it, if it lives on.

    Its time starts again while a child it would reap is still dying, for up to as long as the
    cgroup's kill would wait: a namespace's init exits only once every process in the namespace
    has, and thousands, or one in uninterruptible sleep (a ``sync``), take a while. Nothing can
    fork past a dying init, so the wait gives the sandbox nothing. A child that does not die
    soon may be frozen (a paused sandbox): the group is thawed, once, for its SIGKILL to land."""
    started = time.monotonic()
    by_itself = started + _OUTER_EXIT_WAIT
    thaw_at: float | None = None
    signalled: set[int] = set()
    while exits.outer in exits.left and time.monotonic() < by_itself:
        for child, pidfd in _children(pid, signalled):
            signalled.add(child)
            exits.add(pidfd)
            _sigkill(pidfd)
            thaw_at = thaw_at or time.monotonic() + _THAW_AFTER
        if len(exits.left) > 1:  # a child is still dying
            by_itself = min(started + KILL_TIMEOUT, time.monotonic() + _OUTER_EXIT_WAIT)
            if thaw_at is not None and time.monotonic() >= thaw_at:
                thaw()
                thaw_at = float("inf")
        exits.wait(min(by_itself, time.monotonic() + LOOK_AGAIN), outer_only=True)
    if exits.outer in exits.left:
        _sigkill(exits.outer)
        exits.wait(time.monotonic() + _DIRECT_KILL_WAIT)


def _sigkill(pidfd: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)


@functools.cache
def _have_bwrap() -> bool:
    return shutil.which("bwrap") is not None


def _thaw(record: Record) -> None:
    with contextlib.suppress(Exception):  # the group may be gone: the kill rounds decide
        Cgroup.open(record.cgroup).thaw()


def _emptied(record: Record) -> bool:
    """Whether the sandbox's cgroup is empty, or turns so within the direct kill's wait."""
    try:
        group = Cgroup.open(record.cgroup)
        return wait_until(lambda: not group.pids(), time.monotonic() + _DIRECT_KILL_WAIT)
    except Exception:  # noqa: BLE001 - the group may be gone, or unreadable: the rounds decide
        return False


def _children(pid: int, known: set[int]) -> list[tuple[int, int]]:
    """The children of ``pid`` not in ``known``, with a descriptor of each."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            children = [int(child) for child in handle.read().split()]
    except OSError:
        return []
    found = []
    for child in children:
        if child not in known and (pidfd := pidfd_of(child, parent=pid)) is not None:
            found.append((child, pidfd))
    return found
