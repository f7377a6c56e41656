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
from collections.abc import Iterator
from pathlib import Path

from errand.errors import BackendUnavailable
from errand.sandbox._backends import seccomp
from errand.sandbox._backends.cgroups import Cgroup, wait_until
from errand.sandbox._backends.launcher import (
    AGENT_PATH,
    BUILD_CAPABILITIES,
    MALLOC_TUNING,
    LaunchedBackend,
    Runtime,
    agent_arguments,
    staged,
)
from errand.sandbox._backends.registry import Record, process_start, process_stat
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
        """SIGKILL the sandbox's pid namespace through its init (the kernel then kills every
        process in it, and none can leave it or fork past it) and the bwrap outside it; the
        cgroup's freeze-and-kill rounds (``LaunchedBackend.kill``) take whatever is left."""
        targets = _pidfds(record)
        left = set(targets)
        try:
            for pidfd in targets:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            # A pidfd turns readable when its process has exited: no polling on a timer.
            waiting = select.poll()
            for pidfd in targets:
                waiting.register(pidfd, select.POLLIN)
            deadline = time.monotonic() + _DIRECT_KILL_WAIT
            while left and (remaining := deadline - time.monotonic()) > 0:
                for pidfd, _ in waiting.poll(remaining * 1000):
                    waiting.unregister(pidfd)
                    left.discard(pidfd)
        finally:
            for pidfd in targets:
                os.close(pidfd)
        if targets and not left and _emptied(record):
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
        args = ["bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
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


@functools.cache
def _have_bwrap() -> bool:
    return shutil.which("bwrap") is not None


def _emptied(record: Record) -> bool:
    """Whether the sandbox's cgroup is empty, or turns so within the direct kill's wait."""
    try:
        group = Cgroup.open(record.cgroup)
        return wait_until(lambda: not group.pids(), time.monotonic() + _DIRECT_KILL_WAIT)
    except Exception:  # noqa: BLE001 - the group may be gone, or unreadable: the rounds decide
        return False


def _pidfds(record: Record) -> list[int]:
    """Descriptors of the sandbox's outermost process and of its children (bwrap's pid
    namespace init), each checked to be the process the record names after it was opened,
    so a reused pid is never signalled."""
    try:
        outer = os.pidfd_open(record.pid)
    except ProcessLookupError:
        return []
    if process_start(record.pid) != record.pid_start:
        os.close(outer)
        return []
    found = [outer]
    try:
        with open(f"/proc/{record.pid}/task/{record.pid}/children", encoding="ascii") as handle:
            children = [int(pid) for pid in handle.read().split()]
    except OSError:
        children = []
    for child in children:
        try:
            pidfd = os.pidfd_open(child)
        except ProcessLookupError:
            continue
        stat = process_stat(child)
        if stat is not None and int(stat[1]) == record.pid:
            found.append(pidfd)
        else:
            os.close(pidfd)
    return found

