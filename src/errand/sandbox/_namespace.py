"""The namespace tier: bubblewrap over an overlay root, with cgroup limits.

Start-up, in one short-lived launcher that then *becomes* bwrap (see
``_native/errand-agent.c``): join the sandbox's cgroups, make a user namespace
mapping in-sandbox ids onto an unprivileged host range, mount the root overlay
in a private mount namespace (so no mount outlives the sandbox), drop to the
unprivileged uid, exec bwrap. bwrap adds pid, network, ipc, uts and cgroup
namespaces and the seccomp filter, and runs the agent. Nothing of the host's
``/`` is bound: the sandbox sees its image, its mounts, and nothing else.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from errand import _settings
from errand.errors import BackendUnavailable, ConfigError
from errand.sandbox import _seccomp
from errand.sandbox._cgroups import Cgroup, Limits
from errand.sandbox._egress import PROXY_PORT
from errand.sandbox._native import agent_binary
from errand.sandbox._registry import Record, process_start
from errand.sandbox._spec import SandboxSpec
from errand.sandbox.layers import LayerStore

__all__ = ["NamespaceBackend"]

AGENT_PATH = "/dev/.errand-agent"
# What a package install needs as root (a subset of a container runtime's default
# set); all of it is confined to ids the sandbox's user namespace maps.
_BUILD_CAPABILITIES = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4, "CAP_KILL": 5,
                       "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_NET_BIND_SERVICE": 10}
_MOUNT_DATA_LIMIT = 4000  # the kernel takes one page of mount options


class NamespaceBackend:
    name = "namespace"

    def __init__(self, store: LayerStore | None = None) -> None:
        self.store = store or LayerStore()

    def check(self) -> None:
        if shutil.which("bwrap") is None:
            raise BackendUnavailable("the namespace tier needs bubblewrap: apt-get install bubblewrap")
        if os.geteuid() != 0:
            raise BackendUnavailable("errand's namespace tier runs as root on the host (it maps "
                                     "sandboxes onto unprivileged ids itself)")

    def start(self, spec: SandboxSpec, copy_layers: list[Path]) -> Record:
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
            limits = Limits(memory_bytes=spec.resources.memory, pids=spec.resources.pids,
                            cpus=spec.resources.cpus)
            cgroup = Cgroup.create(f"{_settings.cgroup_scope()}-{spec.id}", limits)
            return self._spawn(spec, directory, listener, cgroup, copy_layers)
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        finally:
            if listener is not None:
                listener.close()

    def _spawn(self, spec: SandboxSpec, directory: Path, listener: socket.socket, cgroup: Cgroup,
               copy_layers: list[Path]) -> Record:
        uid = _settings.sandbox_uid()
        seccomp = _seccomp.filter_fd()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            # Host paths are staged by the launcher (as root) at <run>/b/<n>, in order.
            staged = [str(agent_binary())] + [str(m.source) for m in spec.mounts if m.kind == "bind"]
            binds = ["--ro-bind", str(directory / "mnt" / "b" / "0"), AGENT_PATH]
            for n, mount in enumerate((m for m in spec.mounts if m.kind == "bind"), start=1):
                binds += ["--ro-bind" if mount.read_only else "--bind", str(directory / "mnt" / "b" / str(n)),
                          mount.target]
            lower = self._lowerdirs(spec, copy_layers)
            bwrap = self._bwrap_args(spec, directory, listener.fileno(), seccomp, binds)
            launch = [str(agent_binary()), "launch",
                      *[arg for path in cgroup.join_files() for arg in ("--cgroup", path)],
                      *[arg for path in staged for arg in ("--bind", path)],
                      *self._network_args(spec, theirs.fileno()),
                      "--run", str(directory / "mnt"), "--lower", lower,
                      "--tmpfs", f"size={spec.resources.disk},mode=0711", "--uid", str(uid), "--", *bwrap]
            with open(directory / "log", "ab") as log:
                process = subprocess.Popen(
                    launch, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env={"PATH": "/usr/bin:/bin"},
                    pass_fds=(listener.fileno(), seccomp, theirs.fileno()), start_new_session=spec.detach)
        except BaseException:
            ours.close()
            raise
        finally:
            os.close(seccomp)
            theirs.close()
        channel = ours if _wants_proxy(spec) else None
        if channel is None:
            ours.close()
        record = self._record(spec, process, cgroup, copy_layers, proxied=channel is not None)
        record.proxy_channel = channel  # type: ignore[attr-defined]
        return record

    def _record(self, spec: SandboxSpec, process: subprocess.Popen[bytes], cgroup: Cgroup,
                copy_layers: list[Path], *, proxied: bool) -> Record:
        now = time.time()
        record = Record(
            id=spec.id, backend=self.name, pid=process.pid, pid_start=process_start(process.pid) or 0,
            owner_pid=None if spec.detach else os.getpid(),
            owner_start=None if spec.detach else process_start(os.getpid()),
            created_at=now, deadline=now + spec.timeout if spec.timeout else None,
            image=spec.image.to_fields(), workdir=spec.workdir, env=dict(spec.env),
            copy_layers=[str(p) for p in copy_layers], cgroup=cgroup.name, proxied=proxied)
        record.save()
        record.process = process  # type: ignore[attr-defined]
        return record

    def _network_args(self, spec: SandboxSpec, channel: int) -> list[str]:
        args = ["--netns", "new"]
        if _wants_proxy(spec):
            args += ["--proxy-channel", str(channel), "--proxy-port", str(PROXY_PORT)]
        return args

    def _lowerdirs(self, spec: SandboxSpec, copy_layers: list[Path]) -> str:
        paths = [str(self.store.path(layer)) for layer in spec.image.layers] + [str(p) for p in copy_layers]
        lower = ":".join(reversed(paths))  # overlayfs lists the top layer first
        if len(lower) > _MOUNT_DATA_LIMIT:
            raise ConfigError(f"the image has too many layers ({len(paths)}) for one overlay mount; "
                              "squash it by snapshotting a sandbox made from it", code="too_many_layers")
        return lower

    def _bwrap_args(self, spec: SandboxSpec, directory: Path, listen_fd: int, seccomp_fd: int,
                    binds: list[str]) -> list[str]:
        # The network namespace is the launcher's (see _network_args), not bwrap's.
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
        args += ["--proc", "/proc", "--dev", "/dev", *binds]
        keep = 0
        if spec.build_capabilities:
            for name, number in _BUILD_CAPABILITIES.items():
                args += ["--cap-add", name]
                keep |= 1 << number
        args += ["--dir", spec.workdir, "--seccomp", str(seccomp_fd), "--chdir", "/", "--",
                 AGENT_PATH, "serve", "--fd", str(listen_fd), "--keep-caps", format(keep, "x"),
                 "--lifetime", str(spec.timeout or 0), "--idle", str(spec.idle_timeout or 0)]
        return args

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

    def upper_dir(self, record: Record) -> Path:
        # The overlay lives in the sandbox's private mount namespace; the host
        # reaches it through the launcher-turned-bwrap process's view of "/".
        return Path(f"/proc/{record.pid}/root") / str(record.directory / "mnt" / "upper").lstrip("/")

    def freeze(self, record: Record) -> None:
        Cgroup.open(record.cgroup).freeze()

    def thaw(self, record: Record) -> None:
        Cgroup.open(record.cgroup).thaw()

    def memory_usage(self, record: Record) -> int:
        return Cgroup.open(record.cgroup).memory_usage()


def _wants_proxy(spec: SandboxSpec) -> bool:
    # A detached sandbox's proxy needs a supervisor process of its own: only worth it
    # when the policy lets anything out.
    return not spec.detach or spec.network.mode != "none"
