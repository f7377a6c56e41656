"""The gVisor tier: the same sandbox, with runsc's user-space kernel between its code and the host's.

Everything but the last step is the namespace tier's (see ``launcher``): the
same cgroups, network namespace and egress proxy listener, user namespace,
overlay root of the same layers, staged binds. Then the launcher starts
``runsc run`` as root of the sandbox's user namespace — so files the sandbox
writes belong to the same unprivileged host ids, and images, snapshots and
forks move freely between tiers — and stays on as a relay (``relay.c``).

runsc, as Debian packages it for this kind of machine (``docs/gvisor-tier.md``):

- ``--platform=ptrace``: KVM here is software-nested and runsc's kvm platform
  hangs; this runsc predates systrap.
- ``--network=host``, started inside the launcher's network namespace: the
  sandbox's sockets are host sockets *in that namespace*, which holds only
  loopback and the proxy's listener, so the proxy is the only way out and
  nothing else has a route. runsc's own network stack wants iptables and a
  veth, and ``--network=none`` would hide the proxy.
- ``--ignore-cgroups``: the launcher already placed runsc, its sentry and its
  gofer in the sandbox's cgroups (this host's hierarchy is hybrid v1/v2, which
  runsc's cgroup code does not manage well).
- ``--overlay2=none``: writes go through the gofer to the overlay's upper
  directory on the host, where snapshots commit them as for the other tier.
- ``run --detach``: runsc's own process exits once the sandbox is up; the
  relay, a subreaper, keeps the sandbox's processes.

The agent is the container's init and serves on a socket the relay feeds, so
exec is one round trip to an agent already inside gVisor, never a
``runsc exec``. gVisor cannot hand descriptors out, so the files API streams
through pipes (``files.py``); the seccomp filter of the namespace tier is
loaded by the agent itself, inside gVisor. Beneath every image lies one more
layer, preloading a shim for this runsc's ``statx`` flaw (``gvisor-statx.c``).
Ending a sandbox is a kill of everything but the relay (which reaps it and
exits), a cgroup kill of whatever is left, and removing its directory (runsc's
state lives there): no ``runsc delete``, which takes over a second here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import select
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from errand import _settings
from errand.errors import BackendUnavailable, SandboxNotFound
from errand.sandbox._backends import seccomp
from errand.sandbox._backends.cgroups import LOOK_AGAIN, Cgroup, Limits
from errand.sandbox._backends.launcher import (
    AGENT_PATH,
    BUILD_CAPABILITIES,
    LaunchedBackend,
    Runtime,
    agent_arguments,
    staged,
)
from errand.sandbox._backends.native import statx_shim
from errand.sandbox._backends.registry import Record, pidfd_of
from errand.sandbox._backends.spec import SandboxSpec
from errand.sandbox._images.layers import LayerStore

__all__ = ["RUNSC_FLAGS", "GVisorBackend"]

_log = logging.getLogger(__name__)

RUNSC_FLAGS = ("--platform=ptrace", "--network=host", "--ignore-cgroups", "--overlay2=none")
# The agent starts commands as other in-sandbox users; it clears every capability in each.
_AGENT_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")
_NAMESPACES = ("pid", "ipc", "uts", "mount")  # no "network": the launcher's is the sandbox's
_SHIM_PATH = "opt/errand/lib/gvisor-statx.so"
_HOST_TASKS_PER_PROCESS, _HOST_TASKS_BASE, _HOST_TASKS_MAX = 32, 256, 16384


class GVisorBackend(LaunchedBackend):
    name = "gvisor"

    def check(self) -> None:
        if shutil.which("runsc", path="/usr/bin:/bin") is None:
            raise BackendUnavailable("the gvisor tier needs runsc: apt-get install runsc")
        if os.geteuid() != 0:
            raise BackendUnavailable("errand's gvisor tier runs as root on the host (it maps "
                                     "sandboxes onto unprivileged ids itself)")

    def kill(self, record: Record) -> None:
        """Everything in the sandbox's cgroup but the relay first: the relay, a subreaper, reaps
        what runsc left it and exits once all of that is gone. Killed together with them, it
        could die first, and runsc's processes (six a sandbox) were left zombies on the host's
        pid 1. The cgroup's kill (``LaunchedBackend.kill``) then takes whatever is left."""
        relay = pidfd_of(record.pid, start=record.pid_start)
        if relay is not None:
            try:
                _kill_all_but_the_relay(record, relay)
            except SandboxNotFound:
                pass  # the group is gone, and all it held
            except OSError:
                _log.warning("sandbox %s: killing all but its relay failed; its cgroup is killed whole, which "
                             "can leave runsc's processes zombies on the host's pid 1", record.id, exc_info=True)
            finally:
                os.close(relay)
        super().kill(record)

    def limits(self, spec: SandboxSpec) -> Limits:
        # Each process inside costs the host a ptrace stub with a thread per sentry thread
        # that ran it, and the sentry dies if the host refuses it a thread: so the host's
        # pids limit is a generous backstop, and the agent holds commands to the limit
        # inside (RLIMIT_NPROC, which gVisor enforces).
        pids = min(spec.resources.pids * _HOST_TASKS_PER_PROCESS + _HOST_TASKS_BASE, _HOST_TASKS_MAX)
        return replace(super().limits(spec), pids=pids)

    def base_layers(self) -> list[Path]:
        return [compat_layer(self.store)]

    def _has_tmp(self, spec: SandboxSpec) -> bool:
        return any((self.store.path(layer) / "tmp").is_dir() for layer in spec.image.layers)

    @contextlib.contextmanager
    def runtime(self, spec: SandboxSpec, directory: Path, listen_fd: int) -> Iterator[Runtime]:
        uid = _settings.sandbox_uid()
        bundle = directory / "bundle"
        bundle.mkdir(mode=0o755)
        (bundle / "config.json").write_text(json.dumps(oci_config(spec, directory, tmp=self._has_tmp(spec))))
        state = directory / "runsc"  # runsc's own records, written as the sandbox's root
        state.mkdir(mode=0o700)
        os.chown(state, uid, uid)
        command = ["runsc", f"--root={state}", *RUNSC_FLAGS, "run", "--detach", f"--bundle={bundle}", spec.id]
        yield Runtime(["--relay", str(listen_fd), "--die-with-parent", "0" if spec.detach else "1"], command)


def oci_config(spec: SandboxSpec, directory: Path, *, tmp: bool) -> dict[str, Any]:
    """The OCI runtime config runsc starts the sandbox from (``tmp``: the image has a /tmp)."""
    capabilities = list(_AGENT_CAPABILITIES)
    if spec.build_capabilities:
        capabilities += [name for name in BUILD_CAPABILITIES if name not in capabilities]
    serve = [AGENT_PATH, "serve", "--relay", "1", "--workdir", spec.workdir,
             "--seccomp", seccomp.build_filter().hex(), "--nproc", str(spec.resources.pids),
             *agent_arguments(spec)]
    return {
        "ociVersion": "1.0.0",
        "process": {
            "user": {"uid": 0, "gid": 0}, "args": serve, "cwd": "/", "noNewPrivileges": True,
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
            "capabilities": {kind: capabilities for kind in ("bounding", "effective", "permitted")},
        },
        "root": {"path": str(directory / "mnt" / "merged"), "readonly": False},
        "hostname": "sandbox",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                   # runsc adds a writable /sys unless one is named.
                   {"destination": "/sys", "type": "sysfs", "source": "sysfs",
                    "options": ["ro", "nosuid", "nodev", "noexec"]},
                   *_mounts(spec, directory, tmp)],
        "linux": {"namespaces": [{"type": kind} for kind in _NAMESPACES]},
    }


def _mounts(spec: SandboxSpec, directory: Path, tmp: bool) -> list[dict[str, Any]]:
    mounts = [_bind(source, target, read_only=True) for source, target in spec.image.binds]
    if tmp:
        # runsc mounts a tmpfs in memory over an empty /tmp unless one is named: /tmp would
        # escape the disk quota and be missing from snapshots. Name the overlay's own.
        mounts.append(_bind(str(directory / "mnt" / "merged" / "tmp"), "/tmp", read_only=False))
    mounts.append(_bind(staged(directory, 0), AGENT_PATH, read_only=True))
    for n, mount in enumerate((m for m in spec.mounts if m.kind == "bind"), start=1):
        mounts.append(_bind(staged(directory, n), mount.target, read_only=mount.read_only))
    return mounts


def _bind(source: str, target: str, *, read_only: bool) -> dict[str, Any]:
    return {"destination": target, "type": "bind", "source": source,
            "options": ["rbind", "ro" if read_only else "rw"]}


def compat_layer(store: LayerStore) -> Path:
    """A layer beneath every image: ``/etc/ld.so.preload`` naming the statx shim.

    The lowest layer, so an image's own ``/etc/ld.so.preload`` wins, and a
    lower one, so snapshots (the upper layer) never carry it to the other tier."""
    shim = statx_shim()
    layer_id = "gvisor-compat-" + hashlib.sha256(shim.read_bytes()).hexdigest()[:24]
    if not store.has(layer_id):
        partial = store.partial()
        (partial / "etc").mkdir()
        (partial / _SHIM_PATH).parent.mkdir(parents=True)
        shutil.copyfile(shim, partial / _SHIM_PATH)
        (partial / "etc/ld.so.preload").write_text(f"/{_SHIM_PATH}\n")
        uid = _settings.sandbox_uid()
        for path in [partial, *partial.rglob("*")]:
            os.chown(path, uid, uid)
            os.chmod(path, 0o755 if path.is_dir() or path.suffix == ".so" else 0o644)
        store.commit(partial, layer_id)
    return store.path(layer_id)


_RELAY_EXIT_WAIT = 1.0  # seconds the relay is given to reap runsc's processes and exit


def _kill_all_but_the_relay(record: Record, relay: int) -> None:
    group = Cgroup.open(record.cgroup)
    exited = select.poll()
    exited.register(relay, select.POLLIN)  # readable once the relay has exited
    deadline = time.monotonic() + _RELAY_EXIT_WAIT
    # Rounds while the relay lives: a sandbox still launching starts runsc's processes meanwhile.
    while time.monotonic() < deadline:
        group.kill_round(deadline, spare=record.pid)
        if exited.poll(LOOK_AGAIN * 1000):
            return
