"""Reaping orphans: sandboxes whose owner or whose own processes are gone.

Runs on ``errand sandbox gc`` and, once per process, before the first sandbox
is created, so a crashed program's sandboxes never pile up.

It reaps only this errand home's: another home's sandboxes in a shared runtime
directory, orphaned or not, are left to that home's gc.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from errand import _settings
from errand.errors import SandboxError
from errand.sandbox._backends.cgroups import Cgroup
from errand.sandbox._backends.registry import ORPHAN_GRACE, all_records, process_start, prune_ended
from errand.sandbox._backends.writable import detach_orphans, loop_devices
from errand.sandbox._images.layers import LayerStore
from errand.sandbox.backend import get_backend

__all__ = ["GcReport", "collect", "collect_once"]

# A runtime directory without a record is a sandbox being created right now;
# only after this long is it considered abandoned.
_CREATION_GRACE = 60.0
_once = threading.Lock()
_done = False


@dataclass
class GcReport:
    sandboxes: list[str]
    cgroups: list[str]
    scratch: list[str]
    loop_devices: list[str] = field(default_factory=list)


def collect_once() -> None:
    global _done
    with _once:
        if not _done:
            _done = True
            collect()


def collect() -> GcReport:
    # What might be orphaned is listed *before* what is alive. A sandbox makes its
    # runtime directory before its cgroup, so a cgroup seen here has a directory
    # by the time the directories are listed below; the other order would take a
    # sandbox starting in another process between the two listings for an orphan.
    scopes = (_settings.cgroup_scope() + "-", _settings.legacy_cgroup_scope() + "-")
    cgroups = [(name, scope) for name in Cgroup.list_names() for scope in scopes if name.startswith(scope)]
    scratch = _scratch_entries()
    devices = loop_devices()  # bound after the runtime directory is made, so the same holds
    report = GcReport([], [], [])
    every = all_records()
    known = {record.id for record in every}  # another home's cgroups are not orphans either
    for record in every:
        if not record.of_this_home():
            continue
        expired = record.deadline is not None and time.time() > record.deadline + ORPHAN_GRACE
        if record.processes_alive() and record.owner_alive() and not expired:
            continue
        backend = get_backend(record.backend)
        backend.kill(record)
        backend.cleanup(record)
        report.sandboxes.append(record.id)
    runtime = _settings.runtime_dir()
    # Only sandbox-named entries: a shared runtime directory may hold anything else.
    in_creation = {p.name for p in runtime.iterdir() if p.name.startswith("sb-")} if runtime.is_dir() else set()
    for entry in sorted(in_creation - known):
        path = runtime / entry
        if _age(path) > _CREATION_GRACE:
            shutil.rmtree(path, ignore_errors=True)
            report.sandboxes.append(entry)
    for name, scope in cgroups:
        sandbox_id = name.removeprefix(scope)
        if sandbox_id not in known and sandbox_id not in in_creation:
            try:
                Cgroup.open(name).remove()
            except SandboxError:
                continue  # another process's gc got there first
            report.cgroups.append(name)
    live = known | in_creation
    for copy in scratch:
        # Copy layers and disk images are written before the sandbox's runtime directory
        # exists, so a young one may belong to a sandbox still being created.
        if _owner_of(copy.name) not in live and _age(copy) > _CREATION_GRACE:
            _remove(copy)
            report.scratch.append(copy.name)
    report.loop_devices = detach_orphans(devices, live - set(report.sandboxes))
    LayerStore().remove_partials(lambda pid: process_start(pid) is not None)
    prune_ended(time.time())
    return report


def _scratch_entries() -> list[Path]:
    scratch = _settings.home() / "scratch"
    return sorted(scratch.iterdir()) if scratch.is_dir() else []


def _owner_of(name: str) -> str:
    """The sandbox a scratch entry is of: ``sb-<id>-<n>`` (a copy layer), ``sb-<id>-disk``,
    ``sb-<id>-disk-held`` (its disk image's two names)."""
    return "-".join(name.split("-", 2)[:2])


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0  # removed meanwhile by its owner: nothing to do
