"""What every tier shares: ``errand-agent launch`` prepares a sandbox's host side.

A tier is this plus the command the launcher ends in (``namespace`` execs
bwrap; ``gvisor`` starts runsc and stays on as its relay). The launcher, in
C (see ``native/errand-agent.c``): joins the sandbox's cgroups, makes its
network namespace (loopback and the egress proxy's listener, sent back over a
socket pair), makes a user namespace mapping in-sandbox ids onto an
unprivileged host range, mounts the root overlay — the image's layers, then
one private layer per ``Mount.copy``, under the writable layer (a size-capped
tmpfs or a loop-mounted disk image of the quota's size: see ``writable``) — in
a private mount namespace, and stages host paths to bind
at ``<run>/b/<n>`` (the agent binary first). Nothing of this outlives the
sandbox's processes; ``kill`` and ``cleanup`` are the same for every tier.
"""

from __future__ import annotations

import abc
import os
import shutil
import socket
import subprocess
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from errand import _settings
from errand.errors import ConfigError
from errand.sandbox._backends.cgroups import Cgroup, Limits
from errand.sandbox._backends.native import agent_binary
from errand.sandbox._backends.registry import Record, process_start
from errand.sandbox._backends.spec import GATEWAY_PORT, PROXY_PORT, SandboxSpec, Started
from errand.sandbox._backends.writable import discard, launch_arguments
from errand.sandbox._images.layers import LayerStore

__all__ = ["AGENT_PATH", "MALLOC_TUNING", "LaunchedBackend", "Runtime"]

AGENT_PATH = "/dev/.errand-agent"  # where every tier puts the agent inside the sandbox
_MOUNT_DATA_LIMIT = 4000  # the kernel takes one page of mount options
#: glibc's malloc settings for the launcher and what it execs (bwrap). bwrap's child indexes the mounts
#: it reads by mount id, in an array as long as the host's highest id (8 bytes an id: ids are global,
#: so with 1,000 sandboxes of ~36 mounts alive, ~0.3 MiB), and glibc kept that heap for the sandbox's
#: life. Mapped on its own (16 KiB and up) and given back when freed, it is not held: the child's heap
#: with 400 sandboxes alive went from 152 to 12 KiB. The agent starts without it (namespace.py).
MALLOC_TUNING = ("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=16384:glibc.malloc.trim_threshold=0:"
                                   "glibc.malloc.top_pad=0")
_LAUNCH_ENVIRONMENT = {"PATH": "/usr/bin:/bin", MALLOC_TUNING[0]: MALLOC_TUNING[1]}
# What a package install needs as root (a subset of a container runtime's default
# set); all of it is confined to ids the sandbox's user namespace maps.
BUILD_CAPABILITIES = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4, "CAP_KILL": 5,
                      "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_NET_BIND_SERVICE": 10}


@dataclass
class Runtime:
    """How the launcher ends, for one sandbox: its own options, the command after ``--``,
    and the descriptors that command inherits."""

    options: list[str]
    command: list[str]
    fds: list[int] = field(default_factory=list)


def staged(directory: Path, n: int) -> str:
    """Where the launcher stages the n-th host path to bind (0 is the agent binary)."""
    return str(directory / "mnt" / "b" / str(n))


def keep_capabilities(spec: SandboxSpec) -> int:
    """The capability mask the agent lets commands run as root keep (build steps only)."""
    keep = 0
    if spec.build_capabilities:
        for number in BUILD_CAPABILITIES.values():
            keep |= 1 << number
    return keep


def agent_arguments(spec: SandboxSpec) -> list[str]:
    return ["--keep-caps", format(keep_capabilities(spec), "x"),
            "--lifetime", str(spec.timeout or 0), "--idle", str(spec.idle_timeout or 0)]


class LaunchedBackend(abc.ABC):
    name: str

    def __init__(self, store: LayerStore | None = None) -> None:
        self.store = store or LayerStore()

    @abc.abstractmethod
    def check(self) -> None:
        """Raise BackendUnavailable if this tier cannot run on this machine."""

    def limits(self, spec: SandboxSpec) -> Limits:
        """The host cgroup limits that hold the sandbox to its Resources."""
        return Limits(memory_bytes=spec.resources.memory, pids=spec.resources.pids, cpus=spec.resources.cpus)

    def base_layers(self) -> list[Path]:
        """Layers this tier puts beneath every image's (the lowest first)."""
        return []

    @abc.abstractmethod
    def runtime(self, spec: SandboxSpec, directory: Path, listen_fd: int) -> AbstractContextManager[Runtime]:
        """The tier's end of the launch; its descriptors stay open until the launcher has started."""

    def start(self, spec: SandboxSpec, copy_layers: list[Path]) -> Started:
        directory = _settings.runtime_dir() / spec.id
        directory.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(directory.parent, 0o711)
        directory.mkdir(mode=0o711)
        listener = None
        cgroup = None
        try:
            (directory / "mnt").mkdir(mode=0o711)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            listener.bind(str(directory / "ctl"))
            listener.listen(128)
            cgroup = Cgroup.create(f"{_settings.cgroup_scope()}-{spec.id}", self.limits(spec))
            return self._spawn(spec, directory, listener, cgroup, copy_layers)
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            shutil.rmtree(directory, ignore_errors=True)
            discard(spec.id)
            raise
        finally:
            if listener is not None:
                listener.close()

    def _spawn(self, spec: SandboxSpec, directory: Path, listener: socket.socket, cgroup: Cgroup,
               copy_layers: list[Path]) -> Started:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            staged_paths = [str(agent_binary())] + [str(m.source) for m in spec.mounts if m.kind == "bind"]
            lower = self._lowerdirs(spec, copy_layers)
            with self.runtime(spec, directory, listener.fileno()) as runtime, \
                    open(directory / "log", "ab") as log:
                launch = [str(agent_binary()), "launch",
                          *[arg for path in cgroup.join_files() for arg in ("--cgroup", path)],
                          *[arg for path in staged_paths for arg in ("--bind", path)],
                          *self._network_args(spec, theirs.fileno()),
                          "--run", str(directory / "mnt"), "--lower", lower,
                          *launch_arguments(spec.id, spec.resources),
                          "--uid", str(_settings.sandbox_uid()), *runtime.options, "--", *runtime.command]
                process = subprocess.Popen(
                    launch, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=_LAUNCH_ENVIRONMENT,
                    pass_fds=(listener.fileno(), theirs.fileno(), *runtime.fds), start_new_session=spec.detach)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        channel = ours if _wants_proxy(spec) else None
        if channel is None:
            ours.close()
        return Started(self._record(spec, process, cgroup, copy_layers, proxied=channel is not None), process, channel)

    def _record(self, spec: SandboxSpec, process: subprocess.Popen[bytes], cgroup: Cgroup,
                copy_layers: list[Path], *, proxied: bool) -> Record:
        now = time.time()
        record = Record(
            id=spec.id, backend=self.name, pid=process.pid, pid_start=process_start(process.pid) or 0,
            owner_pid=None if spec.detach else os.getpid(),
            owner_start=None if spec.detach else process_start(os.getpid()),
            created_at=now, deadline=now + spec.timeout if spec.timeout else None,
            image=spec.image.to_fields(), workdir=spec.workdir, env=dict(spec.env),
            copy_layers=[str(p) for p in copy_layers], cgroup=cgroup.name, proxied=proxied, labels=dict(spec.labels))
        record.save()
        return record

    def _network_args(self, spec: SandboxSpec, channel: int) -> list[str]:
        args = ["--netns", "new"]
        if _wants_proxy(spec):
            args += ["--proxy-channel", str(channel), "--proxy-port", str(PROXY_PORT)]
            if spec.gateway is not None:
                args += ["--gateway-port", str(GATEWAY_PORT)]
        return args

    def _lowerdirs(self, spec: SandboxSpec, copy_layers: list[Path]) -> str:
        paths = [str(p) for p in self.base_layers()] + [str(self.store.path(layer)) for layer in spec.image.layers]
        paths += [str(p) for p in copy_layers]
        lower = ":".join(reversed(paths))  # overlayfs lists the top layer first
        if len(lower) > _MOUNT_DATA_LIMIT:
            raise ConfigError(f"the image has too many layers ({len(paths)}) for one overlay mount; "
                              "squash it by snapshotting a sandbox made from it", code="too_many_layers")
        return lower

    def kill(self, record: Record) -> None:
        try:
            Cgroup.open(record.cgroup).kill()
        except Exception:  # noqa: BLE001 - the group may already be gone; the pid check below decides
            pass
        if record.processes_alive():
            try:
                os.kill(record.pid, 9)
            except ProcessLookupError:
                pass

    def cleanup(self, record: Record) -> None:
        try:
            Cgroup.open(record.cgroup).remove()
        except Exception:  # noqa: BLE001 - already removed
            pass
        record.remove_files()
        discard(record.id)

    def upper_dir(self, record: Record) -> Path:
        # The overlay lives in the sandbox's private mount namespace; the host
        # reaches it through the launcher's (or what it became) view of "/".
        return Path(f"/proc/{record.pid}/root") / str(record.directory / "mnt" / "upper").lstrip("/")


def _wants_proxy(spec: SandboxSpec) -> bool:
    # A detached sandbox's proxy needs a supervisor process of its own: only worth it
    # when the policy lets anything out, or the proxy's message carries the gateway's listener.
    return not spec.detach or spec.network.mode != "none" or spec.gateway is not None
