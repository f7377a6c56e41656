"""Tests for the cgroup driver, against the machine's real cgroups (needs root)."""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator

import pytest

from errand.errors import BackendUnavailable, ConfigError, SandboxNotFound
from errand.sandbox._backends import cgroups
from errand.sandbox._backends.cgroups import Cgroup, Limits

MiB = 1 << 20
UNIFIED = "/sys/fs/cgroup/unified"  # the cgroup2 part of a hybrid layout

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creating cgroups needs root")


# --- helpers --------------------------------------------------------------------------

@pytest.fixture
def name() -> Iterator[str]:
    """A fresh group name; whatever the test left under it is removed afterwards."""
    n = "test-" + uuid.uuid4().hex[:16]
    yield n
    try:
        Cgroup.open(n).remove()
    except SandboxNotFound:
        pass


def spawn(group: Cgroup, argv: list[str], *, stdin: int | None = None,
          stdout: int | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` already inside ``group``: the child joins it between fork and exec."""
    files = group.procs_files()

    def join() -> None:
        for path in files:
            with open(path, "w") as f:
                f.write(str(os.getpid()))

    # preexec_fn is unsafe only with threads, and these tests start none; it is the one
    # way to be in the group before the program's first instruction.
    return subprocess.Popen(argv, preexec_fn=join, stdin=stdin, stdout=stdout)


def wait_for(done: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def dir_with(group: Cgroup, file: str) -> str:
    """The group's directory that has ``file`` (which hierarchy depends on the machine)."""
    for procs in group.procs_files():
        if os.path.exists(os.path.join(os.path.dirname(procs), file)):
            return os.path.dirname(procs)
    raise AssertionError(f"no directory of {group.name} has {file}")


def read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its parent counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def comm(pid: int) -> str:
    try:
        return read(f"/proc/{pid}/comm")
    except FileNotFoundError:
        return ""


def is_v1(group: Cgroup, controller: str) -> bool:
    return controller in group.v1_dirs


# --- Limits and names -----------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"memory_bytes": 0}, {"memory_bytes": -1}, {"memory_bytes": 1.5}, {"memory_bytes": True},
    {"memory_bytes": 2**63}, {"pids": 0}, {"pids": 10**9}, {"pids": "16"}, {"cpus": 0},
    {"cpus": 0.001}, {"cpus": float("nan")}, {"cpus": float("inf")}, {"cpus": True}, {"cpus": "1"},
])
def test_bad_limits_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_cpu_quota_is_over_a_100ms_period() -> None:
    assert Limits(cpus=0.5).cpu_quota_us == 50_000
    assert Limits(cpus=2).cpu_quota_us == 200_000
    assert Limits().cpu_quota_us is None


@pytest.mark.parametrize("bad", ["", "A", "Sb-1", "a_b", "a.b", "a/b", "..", "a b", "a\n", "x" * 65, "é"])
def test_bad_names_raise_config_error_and_create_nothing(bad: str, name: str) -> None:
    probe = Cgroup.create(name, Limits())  # to learn where the parents are
    parents = [os.path.dirname(os.path.dirname(p)) for p in probe.procs_files()]
    with pytest.raises(ConfigError):
        Cgroup.create(bad, Limits(pids=8))
    with pytest.raises(ConfigError):
        Cgroup.open(bad)
    # Other sandboxes may come and go meanwhile: look only for what the bad name could have made.
    if bad not in ("", ".."):
        assert not any(os.path.lexists(os.path.join(parent, bad)) for parent in parents)


def test_name_of_64_chars_is_fine() -> None:
    n = "t" + uuid.uuid4().hex + "-" * 31
    assert len(n) == 64
    group = Cgroup.create(n, Limits())
    try:
        assert Cgroup.open(n).procs_files() == group.procs_files()
    finally:
        group.remove()


def test_duplicate_name_is_refused_and_leaves_the_first_intact(name: str) -> None:
    first = Cgroup.create(name, Limits(pids=8))
    with pytest.raises(ConfigError) as info:
        Cgroup.create(name, Limits(pids=9))
    assert info.value.code == "cgroup_exists"
    assert all(os.path.exists(p) for p in first.procs_files())
    assert read(os.path.join(dir_with(first, "pids.max"), "pids.max")) == "8"


# --- layout ---------------------------------------------------------------------------

HYBRID = """\
25 1 0:23 / /sys rw,nosuid - sysfs sysfs rw
31 25 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
50 41 0:32 / /mnt/mem\\040copy rw,relatime - cgroup cgroup rw,memory
"""
PURE_V2 = """\
25 1 0:23 / /sys rw,nosuid - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
"""


def test_mountinfo_hybrid() -> None:
    v1, v2 = cgroups._parse_mountinfo(HYBRID)
    assert v1 == {"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids",
                  "cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
                  "freezer": "/sys/fs/cgroup/freezer"}  # co-mounted cpu,cpuacct: one directory, both
    assert list(v1) == ["memory", "pids", "cpu", "cpuacct", "freezer"]
    assert v2 == "/sys/fs/cgroup/unified"


def test_mountinfo_pure_v2_and_escapes() -> None:
    assert cgroups._parse_mountinfo(PURE_V2) == ({}, "/sys/fs/cgroup")
    line = "50 41 0:32 / /mnt/a\\040b rw - cgroup cgroup rw,pids\n"
    assert cgroups._parse_mountinfo(line) == ({"pids": "/mnt/a b"}, None)


def test_v2_limit_files() -> None:
    writes = cgroups._v2_writes(Limits(memory_bytes=64 * MiB, pids=16, cpus=1.5))
    assert [(w.file, w.value) for w in writes] == [
        ("memory.max", str(64 * MiB)), ("memory.swap.max", "0"), ("pids.max", "16"),
        ("cpu.max", "150000 100000")]
    assert cgroups._v2_writes(Limits()) == []


def test_v1_limit_files_write_the_memory_limit_before_memsw() -> None:
    files = [w.file for w in cgroups._v1_writes(Limits(memory_bytes=MiB, pids=1, cpus=1))]
    assert files == ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "pids.max",
                     "cpu.cfs_period_us", "cpu.cfs_quota_us"]


def test_procs_files_one_per_hierarchy(name: str) -> None:
    group = Cgroup.create(name, Limits())
    files = group.procs_files()
    assert files and all(os.path.isabs(f) and f.endswith("/cgroup.procs") for f in files)
    assert all(os.path.isfile(f) for f in files)
    assert len(set(map(os.path.realpath, files))) == len(files)
    if group.v1_dirs:  # hybrid or v1: memory, pids, cpu, cpuacct, freezer (+ unified when mounted)
        assert set(group.v1_dirs) == {"memory", "pids", "cpu", "cpuacct", "freezer"} & set(group.v1_dirs)
        assert len(files) == len(set(group.v1_dirs.values())) + (group.v2_dir is not None)
    else:
        assert files == [os.path.join(str(group.v2_dir), "cgroup.procs")]


# --- limits and membership ------------------------------------------------------------

def test_create_writes_the_limits(name: str) -> None:
    group = Cgroup.create(name, Limits(memory_bytes=64 * MiB, pids=16, cpus=0.5))
    if is_v1(group, "memory"):
        mem = dir_with(group, "memory.limit_in_bytes")
        assert read(f"{mem}/memory.limit_in_bytes") == str(64 * MiB)
        if os.path.exists(f"{mem}/memory.memsw.limit_in_bytes"):
            assert read(f"{mem}/memory.memsw.limit_in_bytes") == str(64 * MiB)
    else:
        mem = dir_with(group, "memory.max")
        assert read(f"{mem}/memory.max") == str(64 * MiB)
        if os.path.exists(f"{mem}/memory.swap.max"):
            assert read(f"{mem}/memory.swap.max") == "0"
    assert read(os.path.join(dir_with(group, "pids.max"), "pids.max")) == "16"
    if is_v1(group, "cpu"):
        cpu = dir_with(group, "cpu.cfs_quota_us")
        assert (read(f"{cpu}/cpu.cfs_quota_us"), read(f"{cpu}/cpu.cfs_period_us")) == ("50000", "100000")
    else:
        assert read(os.path.join(dir_with(group, "cpu.max"), "cpu.max")) == "50000 100000"
    assert group.pids() == [] and group.oom_kills() == 0


def test_no_limits_leaves_everything_unlimited(name: str) -> None:
    group = Cgroup.create(name, Limits())
    assert read(os.path.join(dir_with(group, "pids.max"), "pids.max")) == "max"


def test_child_shows_up_in_pids_and_is_charged(name: str) -> None:
    group = Cgroup.create(name, Limits(memory_bytes=256 * MiB))
    script = "import sys; b = b'x' * (32 << 20); print('ready', flush=True); sys.stdin.read()"
    proc = spawn(group, [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        assert group.pids() == [proc.pid]
        assert group.memory_usage() >= 32 * MiB
        peak = group.memory_peak()
        assert peak is None or peak >= group.memory_usage() - MiB
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_memory_limit_oom_kills_inside_the_group_only(name: str) -> None:
    group = Cgroup.create(name, Limits(memory_bytes=64 * MiB))
    # b"x" * n writes every byte, so all 256 MiB must really be charged.
    proc = spawn(group, [sys.executable, "-c", "b = b'x' * (256 << 20); print('survived')"],
                 stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and out == b""
    assert group.oom_kills() >= 1
    peak = group.memory_peak()
    assert peak is None or peak <= 64 * MiB + MiB


def test_pids_limit_stops_fork_inside_the_group(name: str) -> None:
    group = Cgroup.create(name, Limits(pids=16))
    script = textwrap.dedent("""\
        import os, time
        n, err = 0, 0
        while n < 200:  # a bound, in case the limit does not hold
            try:
                pid = os.fork()
            except OSError as e:
                err = e.errno
                break
            if pid == 0:
                os.close(1)  # so the test sees EOF once the forker is done
                time.sleep(60)
                os._exit(0)
            n += 1
        print(n, err, flush=True)
    """)
    proc = spawn(group, [sys.executable, "-c", script], stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=30)
    forked, err = map(int, out.split())
    assert err == errno.EAGAIN
    assert forked == 15  # 16 tasks: the forker itself and 15 children
    assert len(group.pids()) == 15
    group.kill()
    assert group.pids() == []


# --- freeze, kill, remove -------------------------------------------------------------

def test_freeze_stops_and_thaw_resumes(name: str) -> None:
    group = Cgroup.create(name, Limits())
    ticker = "import os, time\nwhile True:\n    os.write(1, b'.')\n    time.sleep(0.002)"
    proc = spawn(group, [sys.executable, "-c", ticker], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    try:
        assert select.select([fd], [], [], 10)[0], "the ticker never ticked"
        group.freeze()
        if is_v1(group, "freezer"):
            assert read(os.path.join(group.v1_dirs["freezer"], "freezer.state")) == "FROZEN"
        else:
            assert "frozen 1" in read(os.path.join(str(group.v2_dir), "cgroup.events")).splitlines()
        os.set_blocking(fd, False)
        while select.select([fd], [], [], 0)[0] and os.read(fd, 65536):
            pass  # drain what was written before the freeze
        assert not select.select([fd], [], [], 0.2)[0], "a frozen process wrote output"
        group.thaw()
        assert select.select([fd], [], [], 10)[0], "no output after thaw"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(params=["detected", "v1-only", "v2-only"])
def kill_layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a kill test on the machine's layout, and on each of its halves alone.

    On a hybrid machine the detected layout kills with cgroup.kill; "v1-only" drops the
    unified hierarchy so the freeze/SIGKILL/thaw loop is exercised for real.
    """
    real = cgroups._layout()
    if request.param == "v1-only":
        if not real.v1:
            pytest.skip("no v1 hierarchies here")
        layout = cgroups._Layout(real.v1, None, frozenset())
    elif request.param == "v2-only":
        if real.v2 is None or (real.v1 and real.v2 != UNIFIED):
            pytest.skip("no separate cgroup2 hierarchy here")
        layout = cgroups._Layout((), real.v2, real.v2_controllers)
    else:
        layout = real
    monkeypatch.setattr(cgroups, "_layout", lambda: layout)
    return str(request.param)


def test_kill_ends_a_tree_with_a_double_forked_daemon(kill_layout: str, name: str) -> None:
    group = Cgroup.create(name, Limits())
    proc = spawn(group, ["sh", "-c", "(sleep 1000 &) ; sleep 1000"])
    try:
        # The subshell exits once it has started the daemon, so two sleeps remain in the end.
        assert wait_for(lambda: [comm(p) for p in group.pids()].count("sleep") == 2)
        sleeps = [p for p in group.pids() if comm(p) == "sleep"]
        members = group.pids()
        group.kill()
        assert group.pids() == []
        assert proc.wait(timeout=5) == -signal.SIGKILL
        # The daemon's new parent (init) reaps it whenever it likes; exiting is enough.
        assert wait_for(lambda: all(gone(p) for p in members + sleeps))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_kill_catches_a_process_that_keeps_forking(kill_layout: str, name: str) -> None:
    group = Cgroup.create(name, Limits())
    # Each generation forks the next and exits at once, so its pid changes all the time;
    # a kill that signals a pid list read earlier would always be a step behind.
    hopper = "import os, time\nend = time.time() + 60\nwhile time.time() < end:\n    if os.fork():\n        os._exit(0)"
    proc = spawn(group, [sys.executable, "-c", hopper])
    proc.wait(timeout=10)  # the first generation is gone; its descendants keep hopping
    assert wait_for(lambda: group.pids() != [])
    group.kill()
    assert group.pids() == []
    group.remove()
    assert not any(os.path.exists(f) for f in group.procs_files())


def test_kill_a_frozen_group(kill_layout: str, name: str) -> None:
    group = Cgroup.create(name, Limits())
    proc = spawn(group, ["sleep", "1000"])
    group.freeze()
    group.kill()
    assert group.pids() == []
    assert proc.wait(timeout=5) == -signal.SIGKILL


def test_a_kill_round_spares_the_pid_it_is_told_to(kill_layout: str, name: str) -> None:
    group = Cgroup.create(name, Limits())
    spared = spawn(group, ["sleep", "1000"])
    killed = spawn(group, ["sleep", "1000"])
    try:
        group.kill_round(time.monotonic() + 5, spare=spared.pid)
        assert killed.wait(timeout=5) == -signal.SIGKILL
        assert spared.poll() is None and group.pids() == [spared.pid]
    finally:
        group.kill()


def test_a_group_removed_while_it_is_read_is_a_group_gone(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cgroup file read while another process removes its group fails with ENODEV: a gVisor sandbox
    terminated from two handles at once had its kill logged as failed, with a traceback."""
    group = Cgroup.create(name, Limits())
    opened = os.open

    def removed_once_open(path: str, flags: int, *args: int) -> int:
        fd = opened(path, flags, *args)
        if path.startswith(tuple(group.v1_dirs.values())) or (group.v2_dir and path.startswith(group.v2_dir)):
            group.remove()  # by "another process", between the open and the read
        return fd

    monkeypatch.setattr(cgroups.os, "open", removed_once_open)
    assert group.pids() == []
    group.kill_round(time.monotonic() + 1, spare=1)  # nothing left to kill, and nothing raised


def test_a_kill_round_whose_freeze_fails_still_kills_and_says_so(
        name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    group = Cgroup.create(name, Limits())
    proc = spawn(group, ["sleep", "1000"])
    monkeypatch.setattr(Cgroup, "_freeze_until", lambda self, deadline: False)  # as at its timeout
    with caplog.at_level("WARNING", logger=cgroups.__name__):
        group.kill_round(time.monotonic() + 5)
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert [f"cgroup {name} did not freeze in time; killing its processes unfrozen"] == \
        [record.getMessage() for record in caplog.records]


def test_remove_kills_what_is_still_running(kill_layout: str, name: str) -> None:
    group = Cgroup.create(name, Limits())
    proc = spawn(group, ["sh", "-c", "(sleep 1000 &) ; sleep 1000"])
    assert wait_for(lambda: len(group.pids()) >= 2)
    group.remove()
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert not any(os.path.exists(f) for f in group.procs_files())


def test_kill_an_empty_group_is_quick(name: str) -> None:
    group = Cgroup.create(name, Limits())
    start = time.monotonic()
    group.kill()
    assert time.monotonic() - start < 1


def test_remove_leaves_nothing_and_is_idempotent(name: str) -> None:
    group = Cgroup.create(name, Limits(memory_bytes=64 * MiB, pids=16, cpus=1))
    dirs = [os.path.dirname(f) for f in group.procs_files()]
    assert all(os.path.isdir(d) for d in dirs)
    group.remove()
    assert not any(os.path.exists(d) for d in dirs)
    group.remove()
    with pytest.raises(SandboxNotFound):
        Cgroup.open(name)
    with pytest.raises(SandboxNotFound):
        group.memory_usage()


def test_open_finds_a_partly_removed_group_and_remove_finishes_it(name: str) -> None:
    group = Cgroup.create(name, Limits())
    dirs = [os.path.dirname(f) for f in group.procs_files()]
    os.rmdir(dirs[0])
    again = Cgroup.open(name)
    assert again.procs_files() == group.procs_files()
    again.remove()
    assert not any(os.path.exists(d) for d in dirs)


def test_list_names(name: str) -> None:
    other = "test-" + uuid.uuid4().hex[:16]
    group = Cgroup.create(name, Limits())
    removed = Cgroup.create(other, Limits())
    removed.remove()
    names = Cgroup.list_names()
    assert name in names and other not in names
    group.remove()
    assert name not in Cgroup.list_names()


def test_open_missing_raises_not_found() -> None:
    with pytest.raises(SandboxNotFound):
        Cgroup.open("test-" + uuid.uuid4().hex[:16])


def test_a_failed_limit_write_leaves_nothing(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Cgroup.create(name, Limits())  # to learn where the parents are
    probe.remove()
    parents = [os.path.dirname(os.path.dirname(p)) for p in probe.procs_files()]

    def refuse(path: str, value: str) -> None:
        raise OSError(errno.EINVAL, "refused", path)

    monkeypatch.setattr(cgroups, "_write", refuse)
    with pytest.raises(BackendUnavailable):
        Cgroup.create(name, Limits(pids=4))
    assert not any(os.path.exists(os.path.join(parent, name)) for parent in parents)


# --- the v2 code path, on the hybrid's controller-less unified hierarchy -------------

needs_unified = pytest.mark.skipif(
    not os.path.isfile(os.path.join(UNIFIED, "cgroup.procs")),
    reason="no hybrid unified hierarchy (on a pure v2 machine the tests above cover v2)")


@pytest.fixture
def v2_only(monkeypatch: pytest.MonkeyPatch) -> cgroups._Layout:
    """Pretend the machine is pure v2, with the unified hierarchy as its only one."""
    controllers = frozenset(read(os.path.join(UNIFIED, "cgroup.controllers")).split())
    layout = cgroups._Layout(v1=(), v2=UNIFIED, v2_controllers=controllers)
    monkeypatch.setattr(cgroups, "_layout", lambda: layout)
    return layout


@needs_unified
def test_v2_group_lifecycle(v2_only: cgroups._Layout, name: str) -> None:
    group = Cgroup.create(name, Limits())
    try:
        assert group.procs_files() == [f"{UNIFIED}/errand/{name}/cgroup.procs"]
        assert Cgroup.list_names().count(name) == 1
        proc = spawn(group, ["sh", "-c", "(sleep 1000 &) ; sleep 1000"])
        assert wait_for(lambda: [comm(p) for p in group.pids()].count("sleep") == 2)
        group.freeze()
        assert "frozen 1" in read(f"{UNIFIED}/errand/{name}/cgroup.events").splitlines()
        group.thaw()
        assert "frozen 0" in read(f"{UNIFIED}/errand/{name}/cgroup.events").splitlines()
        members = group.pids()
        group.kill()  # by cgroup.kill
        assert group.pids() == [] and proc.wait(timeout=5) == -signal.SIGKILL
        assert wait_for(lambda: all(gone(p) for p in members))
    finally:
        group.remove()
    assert not os.path.exists(f"{UNIFIED}/errand/{name}")
    group.remove()


@needs_unified
def test_v2_missing_controller_is_backend_unavailable(v2_only: cgroups._Layout, name: str) -> None:
    assert "memory" not in v2_only.v2_controllers  # true on a hybrid machine
    with pytest.raises(BackendUnavailable):
        Cgroup.create(name, Limits(memory_bytes=64 * MiB))
    assert not os.path.exists(f"{UNIFIED}/errand/{name}")
    with pytest.raises(BackendUnavailable):
        Cgroup.create(name, Limits()).memory_usage()


@needs_unified
def test_hybrid_kill_uses_cgroup_kill_for_v2_members(name: str) -> None:
    group = Cgroup.create(name, Limits())
    if group.v2_dir is None or not group.v1_dirs:
        pytest.skip("not a hybrid layout")
    # A process placed in the unified group only: cgroup.kill must still get it.
    proc = subprocess.Popen(["sleep", "1000"])
    try:
        with open(os.path.join(group.v2_dir, "cgroup.procs"), "w") as f:
            f.write(str(proc.pid))
        assert group.pids() == [proc.pid]
        group.kill()
        assert proc.wait(timeout=5) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
