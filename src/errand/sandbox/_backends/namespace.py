"""The namespace tier: bubblewrap over an overlay root, with cgroup limits.

The launcher (see ``launcher``) prepares the host side and then *becomes*
bwrap, as the unprivileged uid, inside the user namespace it made. bwrap adds
pid, ipc, uts and cgroup namespaces and the seccomp filter, and runs the
agent. Nothing of the host's ``/`` is bound: the sandbox sees its image, its
mounts, and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from errand.errors import BackendUnavailable
from errand.sandbox._backends import seccomp
from errand.sandbox._backends.launcher import (
    AGENT_PATH,
    BUILD_CAPABILITIES,
    LaunchedBackend,
    Runtime,
    agent_arguments,
    staged,
)
from errand.sandbox._backends.spec import SandboxSpec

__all__ = ["NamespaceBackend"]


class NamespaceBackend(LaunchedBackend):
    name = "namespace"

    def check(self) -> None:
        if shutil.which("bwrap") is None:
            raise BackendUnavailable("the namespace tier needs bubblewrap: apt-get install bubblewrap")
        if os.geteuid() != 0:
            raise BackendUnavailable("errand's namespace tier runs as root on the host (it maps "
                                     "sandboxes onto unprivileged ids itself)")

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
                "--unshare-cgroup", "--new-session", "--hostname", "sandbox",
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
