"""Resource limits for sandboxes: one cgroup per sandbox, on cgroup v1, v2 or both.

Layouts handled (detected lazily from /proc/self/mountinfo, then cached):

* pure v2: one cgroup2 hierarchy (usually /sys/fs/cgroup) holding memory, pids and cpu;
* hybrid: v1 hierarchies per controller (/sys/fs/cgroup/memory, ...) plus a cgroup2
  hierarchy with few or no controllers (/sys/fs/cgroup/unified). The group is made in
  both: v1 for the limits, v2 for ``cgroup.kill`` and exact membership;
* pure v1: the same without the cgroup2 part.

Each limit is written where its controller lives: in v1 if the controller is mounted
as v1, else in v2. Every group lives under a parent named ``errand`` at the top of
each hierarchy. Placing processes is left to the caller: it writes a pid into each of
:meth:`Cgroup.procs_files`. Everything uses plain ``os`` calls, as creating and
removing a group is on the hot path of starting a sandbox.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import math
import os
import re
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from errand.errors import BackendUnavailable, ConfigError, SandboxError, SandboxNotFound

__all__ = ["KILL_TIMEOUT", "LOOK_AGAIN", "Cgroup", "Limits", "SandboxUsage", "wait_until"]

_log = logging.getLogger(__name__)

PARENT = "errand"
CPU_PERIOD_US = 100_000
# The v1 controllers we use; the order is the order of procs_files().
_V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")
# v2 has no freezer controller: cgroup.freeze and cgroup.kill are core files.
_V2_CONTROLLERS = ("memory", "pids", "cpu")
_NAME_RE = re.compile(r"[a-z0-9-]{1,64}")
_MAX_MEMORY = 2**62  # larger values overflow the kernel's page counters
_MAX_PIDS = 4_194_304  # PID_MAX_LIMIT: pids.max rejects anything above it
_MAX_CPUS = 4096.0
KILL_TIMEOUT = 5.0  # seconds a kill waits for the group's processes to die
LOOK_AGAIN = 0.005  # seconds between the rounds of a kill that waits on something besides the group
_FREEZE_TIMEOUT = 2.0
_RMDIR_TIMEOUT = 2.0


@dataclass(frozen=True)
class Limits:
    """What a sandbox may use; ``None`` leaves that resource unlimited."""

    memory_bytes: int | None = None
    pids: int | None = None
    cpus: float | None = None  # e.g. 0.5, 1, 2 -> CFS quota over a 100 ms period

    def __post_init__(self) -> None:
        # bool is an int subclass, but True as a byte or pid count is always a caller bug.
        for field, value, top in (("memory_bytes", self.memory_bytes, _MAX_MEMORY),
                                  ("pids", self.pids, _MAX_PIDS)):
            if value is not None and (type(value) is not int or not 1 <= value <= top):
                raise ConfigError(f"Limits.{field} must be an int in 1..{top}, got {value!r}")
        cpus = self.cpus
        if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int | float)
                                 or not math.isfinite(cpus) or not 0.01 <= cpus <= _MAX_CPUS):
            # 0.01 CPU is a 1 ms quota per 100 ms period, the kernel's minimum quota.
            raise ConfigError(f"Limits.cpus must be a number in 0.01..{_MAX_CPUS:g}, got {cpus!r}")

    @property
    def cpu_quota_us(self) -> int | None:
        return None if self.cpus is None else round(self.cpus * CPU_PERIOD_US)


class _Write(NamedTuple):
    controller: str
    file: str
    value: str
    optional: bool = False  # the file may be missing (no swap accounting): skip it then


def _v1_writes(limits: Limits) -> list[_Write]:
    """The v1 control files for ``limits``, in the order they must be written."""
    out: list[_Write] = []
    if limits.memory_bytes is not None:
        mem = str(limits.memory_bytes)
        # memsw (memory+swap) must be >= limit_in_bytes, so the plain limit goes first;
        # setting both equal leaves no room to escape the limit into swap.
        out += [_Write("memory", "memory.limit_in_bytes", mem),
                _Write("memory", "memory.memsw.limit_in_bytes", mem, optional=True)]
    if limits.pids is not None:
        out.append(_Write("pids", "pids.max", str(limits.pids)))
    if limits.cpu_quota_us is not None:
        out += [_Write("cpu", "cpu.cfs_period_us", str(CPU_PERIOD_US)),
                _Write("cpu", "cpu.cfs_quota_us", str(limits.cpu_quota_us))]
    return out


def _v2_writes(limits: Limits) -> list[_Write]:
    """The v2 control files for ``limits``."""
    out: list[_Write] = []
    if limits.memory_bytes is not None:
        out += [_Write("memory", "memory.max", str(limits.memory_bytes)),
                _Write("memory", "memory.swap.max", "0", optional=True)]
    if limits.pids is not None:
        out.append(_Write("pids", "pids.max", str(limits.pids)))
    if limits.cpu_quota_us is not None:
        out.append(_Write("cpu", "cpu.max", f"{limits.cpu_quota_us} {CPU_PERIOD_US}"))
    return out


# --- the machine's layout -------------------------------------------------------------

@dataclass(frozen=True)
class _Layout:
    v1: tuple[tuple[str, str], ...]  # (controller, mount point); a tuple so it can be a cache key
    v2: str | None                   # the cgroup2 mount point, if any
    v2_controllers: frozenset[str]   # what that hierarchy's root offers


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in paths as \ooo octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _parse_mountinfo(text: str) -> tuple[dict[str, str], str | None]:
    """(v1 controller -> mount point, cgroup2 mount point) from /proc/self/mountinfo."""
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        mount_point, fstype, options = _unescape(fields[4]), tail[0], tail[2].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = mount_point
        elif fstype == "cgroup":
            for controller in _V1_CONTROLLERS:
                if controller in options:
                    v1.setdefault(controller, mount_point)  # the first mount wins over bind mounts
    return {c: v1[c] for c in _V1_CONTROLLERS if c in v1}, v2


@functools.cache
def _layout() -> _Layout:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        v1, v2 = _parse_mountinfo(f.read())
    if not v1 and v2 is None:
        raise BackendUnavailable("no cgroup hierarchy is mounted (looked in /proc/self/mountinfo)")
    controllers = frozenset(_read(os.path.join(v2, "cgroup.controllers")).split()) if v2 else frozenset()
    return _Layout(tuple(v1.items()), v2, controllers)


@functools.cache
def _ensure_parents(layout: _Layout) -> frozenset[str]:
    """Make the ``errand`` parent in each hierarchy; return the v2 controllers its children get."""
    try:
        for controller, mount in layout.v1:
            parent = os.path.join(mount, PARENT)
            _mkdir_exist_ok(parent)
            if controller == "memory":
                # Old kernels default to flat accounting; children then escape the parent's
                # totals. Newer ones force 1 and the write fails once children exist: ignore.
                _try_write(os.path.join(parent, "memory.use_hierarchy"), "1", ignore=OSError)
        if layout.v2 is None:
            return frozenset()
        parent = os.path.join(layout.v2, PARENT)
        _mkdir_exist_ok(parent)
        for controller in _V2_CONTROLLERS:
            if controller in layout.v2_controllers:
                # A controller reaches a group only if every ancestor enables it for its children.
                for group in (layout.v2, parent):
                    _try_write(os.path.join(group, "cgroup.subtree_control"), "+" + controller,
                               ignore=OSError)
        return frozenset(_read(os.path.join(parent, "cgroup.subtree_control")).split())
    except OSError as exc:
        raise BackendUnavailable(f"cannot set up the {PARENT!r} parent cgroup: {exc}") from exc


# --- the group ------------------------------------------------------------------------

@dataclass(frozen=True)
class SandboxUsage:
    """What a sandbox's processes use, from its cgroup: CPU seconds so far (None where the
    machine's cgroups do not count them), memory charged now and at its peak, in bytes."""

    cpu_seconds: float | None
    memory_bytes: int
    memory_peak_bytes: int | None


@dataclass(frozen=True, eq=False)
class Cgroup:
    """One sandbox's group, present in every hierarchy of the layout."""

    name: str
    v1_dirs: Mapping[str, str]  # v1 controller -> this group's directory in its hierarchy
    v2_dir: str | None          # this group's directory in the cgroup2 hierarchy, if any

    @classmethod
    def _at(cls, name: str, layout: _Layout) -> Cgroup:
        _check_name(name)
        v1 = {c: os.path.join(mount, PARENT, name) for c, mount in layout.v1}
        return cls(name, v1, os.path.join(layout.v2, PARENT, name) if layout.v2 else None)

    @classmethod
    def create(cls, name: str, limits: Limits) -> Cgroup:
        """Make the group with these limits; nothing is left behind if this raises."""
        _check_name(name)
        layout = _layout()
        enabled = _ensure_parents(layout)
        group = cls._at(name, layout)
        writes = group._limit_writes(limits, enabled)  # may refuse before anything exists
        created = _mkdirs(group._dirs(), layout)
        try:
            _apply(writes, name)
        except BaseException:
            _rmdirs(created)
            raise
        return group

    def set_limits(self, limits: Limits) -> None:
        """Hold the group to new limits (a pooled sandbox takes its own when claimed). Lowering
        the memory limit below what the group uses fails with BackendUnavailable."""
        writes = self._limit_writes(limits, _ensure_parents(_layout()))
        if "memory" in self.v1_dirs and limits.memory_bytes is not None and limits.memory_bytes > int(
                _read(os.path.join(self.v1_dirs["memory"], "memory.limit_in_bytes"))):
            # v1 keeps memory+swap at or above memory: raising both, memsw goes first.
            writes.sort(key=lambda write: not write[0].endswith("memory.memsw.limit_in_bytes"))
        _apply(writes, self.name)

    @classmethod
    def open(cls, name: str) -> Cgroup:
        """An existing group (even one only partly there, so gc can remove it)."""
        group = cls._at(name, _layout())
        if not any(os.path.isdir(d) for d in group._dirs()):
            raise SandboxNotFound(f"no cgroup named {name!r}", sandbox_id=name)
        return group

    @classmethod
    def list_names(cls) -> list[str]:
        """Names of errand's groups that exist in any hierarchy."""
        layout = _layout()
        mounts = [m for _, m in layout.v1] + ([layout.v2] if layout.v2 else [])
        names: set[str] = set()
        for mount in mounts:
            with contextlib.suppress(FileNotFoundError), os.scandir(os.path.join(mount, PARENT)) as it:
                names.update(e.name for e in it if e.is_dir() and _NAME_RE.fullmatch(e.name))
        return sorted(names)

    def _dirs(self) -> list[str]:
        # Co-mounted v1 controllers (say cpu,cpuacct) share a directory: list each once.
        dirs = list(dict.fromkeys(self.v1_dirs.values()))
        return [*dirs, self.v2_dir] if self.v2_dir else dirs

    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self._dirs()]

    def join_files(self) -> list[str]:
        """The files a *single-threaded* process writes "0" to, to join this group.

        Writing to a ``cgroup.procs`` file waits for an RCU grace period (~10 ms
        here); a v1 ``tasks`` file moves the one thread without it. On hybrid
        hosts the v2 group carries no controller, so it is not joined: kill()
        then works through the v1 freezer, which it does anyway when v2 is absent.
        """
        v1 = [os.path.join(d, "tasks") for d in dict.fromkeys(self.v1_dirs.values())]
        if v1:
            return v1
        return [os.path.join(self.v2_dir, "cgroup.procs")] if self.v2_dir else []

    def pids(self) -> list[int]:
        """Every pid in the group in any hierarchy (a half-placed process counts too)."""
        found: set[int] = set()
        for path in self.procs_files():
            with contextlib.suppress(FileNotFoundError):
                found.update(int(p) for p in _read(path).split())
        return sorted(found)

    # --- accounting ---

    def _read_stat(self, controller: str, v1_file: str, v2_file: str) -> str:
        directory, file = ((self.v1_dirs[controller], v1_file) if controller in self.v1_dirs
                           else (self.v2_dir, v2_file))
        if directory is None:
            raise BackendUnavailable(f"no {controller} controller on this machine")
        try:
            return _read(os.path.join(directory, file))
        except FileNotFoundError:
            if not os.path.isdir(directory):
                raise SandboxNotFound(f"cgroup {self.name!r} is gone", sandbox_id=self.name) from None
            raise BackendUnavailable(f"{file} is not available for cgroup {self.name!r}") from None

    def memory_usage(self) -> int:
        return int(self._read_stat("memory", "memory.usage_in_bytes", "memory.current"))

    def memory_peak(self) -> int | None:
        try:
            return int(self._read_stat("memory", "memory.max_usage_in_bytes", "memory.peak"))
        except BackendUnavailable:
            return None  # memory.peak is new in Linux 5.19

    def cpu_seconds(self) -> float | None:
        """CPU time the group's processes have used, living and ended; None where no hierarchy
        counts it. On a hybrid host the v2 group is not joined (see join_files): v1's cpuacct counts."""
        if "cpuacct" in self.v1_dirs:
            try:
                return int(_read(os.path.join(self.v1_dirs["cpuacct"], "cpuacct.usage"))) / 1e9
            except (FileNotFoundError, ValueError):
                return None
        if self.v2_dir is None:
            return None
        try:
            text = _read(os.path.join(self.v2_dir, "cpu.stat"))
        except FileNotFoundError:
            return None
        fields = dict(line.split(None, 1) for line in text.splitlines() if " " in line)
        usage = fields.get("usage_usec", "").strip()
        return int(usage) / 1e6 if usage.isdigit() else None

    def usage(self) -> SandboxUsage:
        return SandboxUsage(self.cpu_seconds(), self.memory_usage(), self.memory_peak())

    def oom_kills(self) -> int:
        text = self._read_stat("memory", "memory.oom_control", "memory.events")
        counts = {key: value for key, value in (line.split() for line in text.splitlines())}
        return int(counts.get("oom_kill", 0))  # v1 has counted it only since Linux 4.13

    # --- freezing and killing ---

    def _set_frozen(self, frozen: bool) -> None:
        # The v1 freezer where there is one (it is what a v1 kill loop needs), else v2's core one.
        if "freezer" in self.v1_dirs:
            _write(os.path.join(self.v1_dirs["freezer"], "freezer.state"), "FROZEN" if frozen else "THAWED")
        elif self.v2_dir is not None:
            _write(os.path.join(self.v2_dir, "cgroup.freeze"), "1" if frozen else "0")
        else:
            raise BackendUnavailable("no cgroup freezer on this machine")

    def _is_frozen(self) -> bool:
        if "freezer" in self.v1_dirs:
            return _read(os.path.join(self.v1_dirs["freezer"], "freezer.state")).strip() == "FROZEN"
        assert self.v2_dir is not None
        return "frozen 1" in _read(os.path.join(self.v2_dir, "cgroup.events")).splitlines()

    def _freeze_until(self, deadline: float) -> bool:
        while True:
            self._set_frozen(True)  # v1 stays FREEZING if a task resisted; each write retries it
            if self._is_frozen():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)

    def freeze(self) -> None:
        """Stop every process in the group; returns once all are stopped."""
        if not self._freeze_until(time.monotonic() + _FREEZE_TIMEOUT):
            self._set_frozen(False)  # a half-frozen group is worse than a running one
            raise SandboxError(f"cgroup {self.name!r} did not freeze within {_FREEZE_TIMEOUT:g} s",
                               sandbox_id=self.name, code="freeze_timeout")

    def thaw(self) -> None:
        self._set_frozen(False)

    def kill(self) -> None:
        """SIGKILL every process in the group, including ones forking meanwhile."""
        deadline = time.monotonic() + KILL_TIMEOUT
        if self.v2_dir is not None and _try_write(os.path.join(self.v2_dir, "cgroup.kill"), "1",
                                                  ignore=FileNotFoundError):
            # cgroup.kill (Linux 5.14) walks the group in the kernel, so no fork escapes it.
            # A task frozen by the v1 freezer dies only once thawed.
            with contextlib.suppress(FileNotFoundError, BackendUnavailable):
                self._set_frozen(False)
            wait_until(lambda: not self._v2_populated(), deadline)
        # Leftovers: no cgroup.kill, or processes placed in the v1 groups only.
        while self.pids():
            if time.monotonic() >= deadline:
                raise SandboxError(f"processes in cgroup {self.name!r} survived SIGKILL for "
                                   f"{KILL_TIMEOUT:g} s: {self.pids()}", sandbox_id=self.name,
                                   code="kill_timeout")
            self._kill_round(deadline)

    def _kill_round(self, deadline: float) -> None:
        self.kill_round(deadline)
        wait_until(lambda: not self.pids(), min(deadline, time.monotonic() + 0.1))

    def kill_round(self, deadline: float, *, spare: int | None = None) -> None:
        """SIGKILL every process in the group once, all but ``spare`` (a subreaper left to reap
        the others). Frozen tasks cannot fork, so the pid list read while frozen is complete and
        no pid in it can be reused before our signal lands; without a freezer, or one that does
        not freeze in time, the caller's next round takes what forked meanwhile."""
        try:
            if not self._freeze_until(min(deadline, time.monotonic() + 0.5)):
                _log.warning("cgroup %s did not freeze in time; killing its processes unfrozen", self.name)
        except (FileNotFoundError, BackendUnavailable):
            pass
        for pid in self.pids():
            if pid != spare:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError, BackendUnavailable):
            self._set_frozen(False)  # on v1 a frozen task only dies once thawed

    def _v2_populated(self) -> bool:
        assert self.v2_dir is not None
        try:
            return "populated 1" in _read(os.path.join(self.v2_dir, "cgroup.events")).splitlines()
        except FileNotFoundError:
            return False

    def remove(self) -> None:
        """Kill what is left and delete the group everywhere; fine if already (partly) gone."""
        # An empty group goes at the first rmdir: its members are read (a file per hierarchy)
        # only when one refuses.
        pending = [d for d in self._dirs() if not _rmdir(d)]
        if pending and self.pids():
            self.kill()
        deadline = time.monotonic() + _RMDIR_TIMEOUT
        while pending := [d for d in pending if not _rmdir(d)]:
            # Killed tasks stay attached for a moment while they finish exiting.
            if time.monotonic() >= deadline:
                raise SandboxError(f"cgroup {self.name!r} still busy after {_RMDIR_TIMEOUT:g} s: "
                                   f"{pending}", sandbox_id=self.name, code="cgroup_busy")
            time.sleep(0.002)

    def _limit_writes(self, limits: Limits, v2_enabled: frozenset[str]) -> list[tuple[str, str, bool]]:
        """(path, value, optional) for each limit, in the hierarchy that has its controller."""
        out = [(os.path.join(self.v1_dirs[w.controller], w.file), w.value, w.optional)
               for w in _v1_writes(limits) if w.controller in self.v1_dirs]
        for w in _v2_writes(limits):
            if w.controller in self.v1_dirs:
                continue  # a controller lives in one hierarchy only; v1 has this one
            if self.v2_dir is None or w.controller not in v2_enabled:
                raise BackendUnavailable(f"the {w.controller} cgroup controller is not available "
                                         f"(not mounted as v1, not enabled in the v2 {PARENT!r} group)")
            out.append((os.path.join(self.v2_dir, w.file), w.value, w.optional))
        return out


# --- small helpers --------------------------------------------------------------------

def _apply(writes: list[tuple[str, str, bool]], name: str) -> None:
    try:
        for path, value, optional in writes:
            if optional:
                _try_write(path, value, ignore=FileNotFoundError)
            else:
                _write(path, value)
    except OSError as exc:
        raise BackendUnavailable(f"cannot set limits on cgroup {name!r}: {exc}") from exc


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ConfigError(f"bad cgroup name {name!r}: use 1 to 64 of [a-z0-9-]")


def _read(path: str) -> str:
    """A cgroup file's content. One whose group is removed under the read (by another process
    ending the same sandbox) fails with ENODEV: raised as the FileNotFoundError of a group gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(fd)
    except OSError as error:
        if error.errno == errno.ENODEV:
            raise FileNotFoundError(errno.ENOENT, "its cgroup was removed while it was read", path) from error
        raise
    return b"".join(chunks).decode()


def _write(path: str, value: str) -> None:
    # One write(2) per value: cgroup files parse each write as a whole.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _try_write(path: str, value: str, *, ignore: type[OSError]) -> bool:
    try:
        _write(path, value)
    except ignore:
        return False
    return True


def _mkdir_exist_ok(path: str) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)


def _mkdirs(dirs: list[str], layout: _Layout) -> list[str]:
    """Make every directory or none, as errand errors."""
    for attempt in (1, 2):
        created: list[str] = []
        try:
            for d in dirs:
                os.mkdir(d)
                created.append(d)
            return created
        except BaseException as exc:
            _rmdirs(created)
            if isinstance(exc, FileNotFoundError) and attempt == 1:
                # The parent went away after we cached it (an admin's cleanup): remake it once.
                _ensure_parents.cache_clear()
                _ensure_parents(layout)
                continue
            if isinstance(exc, FileExistsError):
                raise ConfigError(f"cgroup {os.path.basename(d)!r} already exists at {d}",
                                  code="cgroup_exists") from exc
            if isinstance(exc, OSError):
                raise BackendUnavailable(f"cannot create cgroup {d}: {exc.strerror}") from exc
            raise
    raise AssertionError("unreachable")


def _rmdir(path: str) -> bool:
    """True once ``path`` is gone; False while the kernel still says it is busy."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
        return False
    return True


def _rmdirs(dirs: list[str]) -> None:
    for d in reversed(dirs):
        with contextlib.suppress(OSError):  # freshly made and empty; best effort on the error path
            os.rmdir(d)


def wait_until(done: Callable[[], bool], deadline: float) -> bool:
    # Polled often at first: a sandbox's last exit unmounts its disk (1-3 ms), and a
    # doubling delay would see it end only several milliseconds later.
    start = time.monotonic()
    delay = 0.0005
    while not done():
        now = time.monotonic()
        if now >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.002 if now - start < 0.05 else 0.02)
    return True
