"""The sandbox contract, checked through the public API against every isolation backend.

Every test takes the ``backend`` fixture (see ``conftest.py``), so a new backend
is held to exactly the same behaviour as the namespace tier. Waits are bounded:
a hang fails the test instead of stalling the run.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import errand
from bounded import within
from errand import (
    AsyncSandbox,
    ConfigError,
    ErrandError,
    ExecResult,
    ExecTimeout,
    FilesError,
    Image,
    Mount,
    Network,
    Resources,
    Sandbox,
    SandboxNotFound,
    SandboxTerminated,
    _settings,
)
from errand.sandbox import AsyncFiles, AsyncProcess, AsyncStream, AsyncWriter, Files, Process, Stream, Writer
from errand.sandbox import files as files_module
from errand.sandbox.image import Step
from hostfacts import cgroup_dir, loop_devices

CGROUP_PIDS = Path("/sys/fs/cgroup/pids/errand")
BOUND = 20.0  # seconds: the most any single wait in this file may take before it counts as a hang

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the namespace backend runs as root")


# --------------------------------------------------------------------------- helpers


def eventually(condition: Callable[[], bool], seconds: float = BOUND) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _host_state() -> dict[str, set[str]]:
    """What a sandbox leaves on the host: runtime entries, cgroups and scratch copies."""
    runtime = Path(os.environ["ERRAND_RUNTIME_DIR"])
    scratch = Path(os.environ["ERRAND_HOME"]) / "scratch"
    scope = _settings.cgroup_scope() + "-"
    return {
        "runtime": set(os.listdir(runtime)) if runtime.is_dir() else set(),
        # Only this session's: errand names a sandbox's group after its runtime directory, and other
        # sessions (pytest-xdist workers, the cgroup tests' own groups) make and remove theirs meanwhile.
        "cgroups": {p.name for p in CGROUP_PIDS.iterdir() if p.is_dir() and p.name.startswith(scope)}
        if CGROUP_PIDS.is_dir() else set(),
        "scratch": set(os.listdir(scratch)) if scratch.is_dir() else set(),
    }


def _ours(cgroup: str) -> bool:
    """Whether a new cgroup could be one of this process's (other test runs may share the machine)."""
    try:
        pids = [int(p) for p in (CGROUP_PIDS / cgroup / "cgroup.procs").read_text().split()]
    except OSError:
        return False
    if not pids:
        return True
    for pid in pids:
        while pid > 1:
            if pid == os.getpid():
                return True
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                break
            pid = int(next(line for line in status.splitlines() if line.startswith("PPid:")).split()[1])
    return False


def assert_nothing_created(before: dict[str, set[str]]) -> None:
    after = _host_state()
    assert after["runtime"] - before["runtime"] == set(), "a runtime directory was left behind"
    assert after["scratch"] - before["scratch"] == set(), "a scratch copy was left behind"
    leaked = {name for name in after["cgroups"] - before["cgroups"] if _ours(name)}
    assert leaked == set(), "a cgroup was left behind"


# ------------------------------------------------------------------------- creation


def test_create_with_every_option(backend: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('hi')\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("shared data\n")
    with Sandbox.create(
        image=Image.base(),
        mounts=[Mount.copy(project, "/workspace"), Mount.bind(shared, "/shared", read_only=True)],
        network=Network.none(),
        resources=Resources(cpus=1, memory="1GiB", pids=256, disk="2GiB"),
        timeout=60,
        idle_timeout=30,
        workdir="/workspace",
        env={"CI": "1"},
        isolation=backend,
    ) as sb:
        assert isinstance(sb, Sandbox)
        assert sb.id.startswith("sb-")
        assert sb.alive
        result = sb.run("sh", "-c", 'pwd; echo "CI=$CI"; cat main.py /shared/data.txt')
        assert result == ExecResult(0, "/workspace\nCI=1\nprint('hi')\nshared data\n", "")
        assert sb.run("python3", "main.py").stdout == "hi\n"
        # The copy is the sandbox's own: writing it leaves the host's tree as it was.
        assert sb.run("sh", "-c", "echo changed > main.py && cat main.py").stdout == "changed\n"
        assert (project / "main.py").read_text() == "print('hi')\n"
        # The read-only bind cannot be written.
        denied = sb.run("sh", "-c", "echo x > /shared/new")
        assert denied.exit_code != 0
        assert not (shared / "new").exists()
        if backend == "gvisor":
            # Processes inside gVisor are held to the limit there; the host's pids cgroup is a backstop.
            limit = "import resource; print(resource.getrlimit(resource.RLIMIT_NPROC)[0])"
            assert sb.run("python3", "-c", limit).stdout == "256\n"
        elif CGROUP_PIDS.is_dir():
            assert (cgroup_dir(sb.id) / "pids.max").read_text().strip() == "256"
    assert not sb.alive


def test_workdir_is_created_and_used(backend: str) -> None:
    with Sandbox.create(workdir="/srv/app", isolation=backend) as sb:
        assert sb.run("pwd").stdout == "/srv/app\n"
        assert sb.files.stat("/srv/app").type == "directory"


def test_environment_is_declared_at_creation(backend: str) -> None:
    with Sandbox.create(env={"CI": "1", "GREETING": "hello world"}, isolation=backend) as sb:
        assert sb.run("sh", "-c", 'echo "$CI $GREETING"').stdout == "1 hello world\n"
        # The image's own environment is still there underneath.
        assert "/usr/bin" in sb.run("sh", "-c", "echo $PATH").stdout


# -------------------------------------------------------------------------- commands


def test_run_returns_exit_code_stdout_and_stderr(sandbox: Sandbox) -> None:
    result = sandbox.run("sh", "-c", "echo out; echo err >&2; exit 0")
    assert isinstance(result, ExecResult)
    assert (result.exit_code, result.stdout, result.stderr, result.signal) == (0, "out\n", "err\n", None)
    assert result.ok


def test_run_feeds_input(sandbox: Sandbox) -> None:
    assert sandbox.run("cat", input="fed in\n").stdout == "fed in\n"
    assert sandbox.run("wc", "-c", input=b"\x00\x01\x02").stdout.strip() == "3"
    assert sandbox.run("wc", "-c", input=bytearray(b"1234")).stdout.strip() == "4"
    for wrong in (123, ["a"], {"k": 1}):  # refused before anything runs, not taken for no input
        with pytest.raises(ConfigError, match="input must be str or bytes"):
            sandbox.run("touch", "/tmp/ran", input=wrong)  # type: ignore[arg-type]
    assert not sandbox.files.exists("/tmp/ran")


def test_exec_streams_stdout_lines_and_stderr_separately(sandbox: Sandbox) -> None:
    process = sandbox.exec("sh", "-c", "for i in 1 2 3; do echo line$i; echo warn$i >&2; done")
    assert isinstance(process, Process)
    lines = within(BOUND, lambda: list(process.stdout))
    assert lines == ["line1\n", "line2\n", "line3\n"]
    assert within(BOUND, process.stderr.read) == "warn1\nwarn2\nwarn3\n"
    assert within(BOUND, process.wait) == 0
    assert process.returncode == 0


def test_exec_stdin_is_writable_and_output_streams_back(sandbox: Sandbox) -> None:
    process = sandbox.exec("cat")
    assert isinstance(process.stdin, Writer)
    lines = iter(process.stdout)
    # Each line comes back while the command is still running: output is streamed, not buffered.
    process.stdin.write("first\n")
    assert within(BOUND, next, lines) == "first\n"
    process.stdin.write(b"second\n")
    assert within(BOUND, next, lines) == "second\n"
    assert process.returncode is None
    process.stdin.close()
    assert within(BOUND, list, lines) == []
    assert within(BOUND, process.wait) == 0


def test_exec_binary_output_when_text_is_false(sandbox: Sandbox) -> None:
    process = sandbox.exec("printf", "\\001\\002\\377", text=False)
    assert within(BOUND, process.stdout.read) == b"\x01\x02\xff"
    assert within(BOUND, process.wait) == 0


@pytest.mark.parametrize("code", [0, 3, 127])
def test_wait_returns_the_exit_code(sandbox: Sandbox, code: int) -> None:
    process = sandbox.exec("sh", "-c", f"exit {code}")
    assert within(BOUND, process.wait) == code
    assert process.signal is None


def test_a_command_killed_by_a_signal_has_a_negative_code(sandbox: Sandbox) -> None:
    process = sandbox.exec("sh", "-c", "kill -TERM $$; sleep 30")
    assert within(BOUND, process.wait) == -signal.SIGTERM
    assert process.signal == signal.SIGTERM
    result = sandbox.run("sh", "-c", "kill -KILL $$")
    assert (result.exit_code, result.signal) == (-signal.SIGKILL, signal.SIGKILL)


def test_kill_ends_a_running_command(sandbox: Sandbox) -> None:
    process = sandbox.exec("sh", "-c", "echo started; exec sleep 60")
    assert within(BOUND, next, iter(process.stdout)) == "started\n"
    process.kill()
    assert within(BOUND, process.wait) == -signal.SIGKILL
    assert process.signal == signal.SIGKILL


def test_kill_sends_the_signal_asked_for(sandbox: Sandbox) -> None:
    process = sandbox.exec("sh", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done")
    assert within(BOUND, next, iter(process.stdout)) == "ready\n"
    process.kill(signal.SIGTERM)
    assert within(BOUND, process.wait) == 7
    assert within(BOUND, process.stdout.read) == "got-term\n"


def test_kill_reaches_the_commands_children(sandbox: Sandbox) -> None:
    process = sandbox.exec("sh", "-c", "sleep 60 & sleep 60 & wait")
    assert within(BOUND, lambda: eventually(lambda: "sleep 60" in sandbox.run("ps", "-eo", "args").stdout))
    process.kill()
    assert within(BOUND, process.wait) == -signal.SIGKILL
    assert eventually(lambda: "sleep 60" not in sandbox.run("ps", "-eo", "args").stdout)


def test_missing_command_exits_127_with_a_message(sandbox: Sandbox) -> None:
    result = sandbox.run("no-such-command-xyz", "arg")
    assert result.exit_code == 127
    assert "no-such-command-xyz" in result.stderr
    assert result.stdout == ""


def test_per_exec_cwd(sandbox: Sandbox) -> None:
    assert sandbox.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sandbox.run("pwd").stdout == "/\n"


def test_per_exec_cwd_that_does_not_exist_fails_the_command(sandbox: Sandbox) -> None:
    result = sandbox.run("pwd", cwd="/no/such/dir")
    assert result.exit_code != 0
    assert "/no/such/dir" in result.stderr


def test_per_exec_env_overrides_and_adds(backend: str) -> None:
    with Sandbox.create(env={"CI": "1", "KEEP": "k"}, isolation=backend) as sb:
        result = sb.run("sh", "-c", 'echo "$CI $KEEP $EXTRA"', env={"CI": "2", "EXTRA": "e"})
        assert result.stdout == "2 k e\n"
        assert sb.run("sh", "-c", 'echo "$CI"').stdout == "1\n"


@pytest.mark.parametrize(("user", "uid"), [(None, "0"), ("root", "0"), ("nobody", "65534"), (1000, "1000")])
def test_per_exec_user(sandbox: Sandbox, user: str | int | None, uid: str) -> None:
    assert sandbox.run("id", "-u", user=user).stdout == f"{uid}\n"


def test_files_written_by_another_user_belong_to_them(sandbox: Sandbox) -> None:
    assert sandbox.run("sh", "-c", "touch /tmp/mine && stat -c %u /tmp/mine", user=1000).stdout == "1000\n"
    assert sandbox.run("touch", "/root/nope", user="nobody").exit_code != 0


def test_per_exec_timeout_raises_exec_timeout(sandbox: Sandbox) -> None:
    started = time.monotonic()
    with pytest.raises(ExecTimeout) as caught:
        within(BOUND, sandbox.run, "sleep", "60", timeout=0.5)
    assert time.monotonic() - started < BOUND
    assert caught.value.code == "exec_timeout"
    assert caught.value.sandbox_id == sandbox.id
    assert caught.value.timeout == 0.5
    # The sandbox is fine afterwards, and a quick command within its timeout is not affected.
    assert sandbox.run("echo", "still here", timeout=10).stdout == "still here\n"


def test_exec_timeout_on_wait(sandbox: Sandbox) -> None:
    process = sandbox.exec("sleep", "60", timeout=0.3)
    with pytest.raises(ExecTimeout):
        within(BOUND, process.wait)


def test_many_commands_at_once(sandbox: Sandbox) -> None:
    processes = [sandbox.exec("sh", "-c", f"sleep 0.2; echo {n}") for n in range(20)]
    outputs = [within(BOUND, p.stdout.read) for p in processes]
    assert outputs == [f"{n}\n" for n in range(20)]
    assert [within(BOUND, p.wait) for p in processes] == [0] * 20


# ----------------------------------------------------------------------------- files


def test_files_write_read_and_parents(sandbox: Sandbox) -> None:
    sandbox.files.write("/data/deep/nested/note.txt", "hello\n")
    assert sandbox.files.read("/data/deep/nested/note.txt") == b"hello\n"
    assert sandbox.files.read_text("/data/deep/nested/note.txt") == "hello\n"
    assert sandbox.run("cat", "/data/deep/nested/note.txt").stdout == "hello\n"
    sandbox.files.write("/data/deep/nested/note.txt", b"\x00bytes\xff")
    assert sandbox.files.read("/data/deep/nested/note.txt") == b"\x00bytes\xff"


def test_files_read_what_a_command_wrote(sandbox: Sandbox) -> None:
    sandbox.run("sh", "-c", "mkdir -p /out && seq 1 1000 > /out/numbers")
    assert sandbox.files.read("/out/numbers").decode().split() == [str(n) for n in range(1, 1001)]


def test_files_write_mode(sandbox: Sandbox) -> None:
    sandbox.files.write("/bin-local/tool.sh", "#!/bin/sh\necho tool\n", mode=0o755)
    assert sandbox.files.stat("/bin-local/tool.sh").mode == 0o755
    assert sandbox.run("/bin-local/tool.sh").stdout == "tool\n"


def test_files_large_round_trip(sandbox: Sandbox) -> None:
    payload = os.urandom(3 * 1024 * 1024)
    sandbox.files.write("/tmp/big.bin", payload)
    assert sandbox.files.read("/tmp/big.bin") == payload
    assert sandbox.run("stat", "-c", "%s", "/tmp/big.bin").stdout.strip() == str(len(payload))


def test_files_mkdir_list_stat_exists(sandbox: Sandbox) -> None:
    sandbox.files.mkdir("/project/src/pkg")
    sandbox.files.mkdir("/project/src/pkg")  # exists already: no error
    sandbox.files.write("/project/src/a.py", "a = 1\n")
    sandbox.run("ln", "-s", "a.py", "/project/src/link")
    entries = {info.name: info for info in sandbox.files.list("/project/src")}
    assert set(entries) == {"a.py", "link", "pkg"}
    assert entries["a.py"].type == "file"
    assert entries["a.py"].size == 6
    assert entries["a.py"].path == "/project/src/a.py"
    assert entries["pkg"].type == "directory"
    assert entries["link"].type == "symlink"
    info = sandbox.files.stat("/project/src/a.py")
    assert isinstance(info, errand.FileInfo)
    assert (info.name, info.path, info.type, info.size) == ("a.py", "/project/src/a.py", "file", 6)
    assert info.mtime > 0
    assert sandbox.files.stat("/project").type == "directory"
    assert sandbox.files.exists("/project/src/a.py")
    assert sandbox.files.exists("/project/src/pkg")
    assert not sandbox.files.exists("/project/src/missing.py")
    assert not sandbox.files.exists("/nowhere/at/all")


def test_files_remove(sandbox: Sandbox) -> None:
    sandbox.files.write("/tree/a/b/c.txt", "c")
    sandbox.files.write("/tree/top.txt", "t")
    sandbox.files.remove("/tree/top.txt")
    assert not sandbox.files.exists("/tree/top.txt")
    with pytest.raises(FilesError) as caught:
        sandbox.files.remove("/tree")
    assert caught.value.code == "not_empty"
    assert sandbox.files.exists("/tree/a/b/c.txt")
    sandbox.files.remove("/tree", recursive=True)
    assert not sandbox.files.exists("/tree")
    assert sandbox.run("test", "-e", "/tree").exit_code == 1


def test_files_remove_of_a_symlink_removes_only_the_link(sandbox: Sandbox) -> None:
    sandbox.files.write("/keep/important.txt", "keep")
    sandbox.run("ln", "-s", "/keep", "/tmp/link-to-keep")
    sandbox.files.remove("/tmp/link-to-keep", recursive=True)
    assert sandbox.files.read("/keep/important.txt") == b"keep"


def test_files_errors_carry_path_and_code(sandbox: Sandbox) -> None:
    with pytest.raises(FilesError) as caught:
        sandbox.files.read("/no/such/file")
    assert caught.value.code == "not_found"
    assert caught.value.path == "/no/such/file"
    assert caught.value.sandbox_id == sandbox.id
    sandbox.files.mkdir("/adir")
    with pytest.raises(FilesError) as caught:
        sandbox.files.read("/adir")
    assert caught.value.code == "is_a_directory"
    with pytest.raises(FilesError) as caught:
        sandbox.files.list("/no/such/dir")
    assert caught.value.code == "not_found"
    with pytest.raises(FilesError) as caught:
        sandbox.files.remove("/no/such/file")
    assert caught.value.code == "not_found"


# ------------------------------------------------------------------------- snapshots


def test_snapshot_forks_the_filesystem(backend: str, tmp_path: Path) -> None:
    (tmp_path / "seed.txt").write_text("seed\n")
    with Sandbox.create(mounts=[Mount.copy(tmp_path, "/work")], isolation=backend) as original:
        original.files.write("/data/state.txt", "v1")
        original.run("sh", "-c", "echo edited >> /work/seed.txt && rm -f /etc/hostname")
        image = original.snapshot()
        assert isinstance(image, Image)
        with Sandbox.create(image=image, isolation=backend) as fork:
            assert fork.id != original.id
            assert fork.files.read("/data/state.txt") == b"v1"
            assert fork.files.read("/work/seed.txt") == b"seed\nedited\n"
            assert not fork.files.exists("/etc/hostname")  # deletions are part of the snapshot
            # Changes in the fork stay in the fork...
            fork.files.write("/data/state.txt", "fork")
            fork.run("touch", "/data/fork-only")
            assert original.files.read("/data/state.txt") == b"v1"
            assert not original.files.exists("/data/fork-only")
            # ...and the original's later changes stay in the original.
            original.files.write("/data/after.txt", "later")
            assert not fork.files.exists("/data/after.txt")
            assert original.alive
        # The snapshot is an image: it can be used again, unchanged by the first fork.
        with Sandbox.create(image=image, isolation=backend) as second:
            assert second.files.read("/data/state.txt") == b"v1"
            assert not second.files.exists("/data/fork-only")
    assert (tmp_path / "seed.txt").read_text() == "seed\n"


def test_snapshot_keeps_environment_and_workdir(backend: str) -> None:
    with Sandbox.create(env={"CI": "1"}, isolation=backend) as original:
        original.files.write("/app/x", "x")
        image = original.snapshot()
    with Sandbox.create(image=image, isolation=backend) as fork:
        assert fork.run("sh", "-c", 'echo "$CI"').stdout == "1\n"
        assert fork.files.read("/app/x") == b"x"


def test_snapshot_of_a_snapshot(backend: str) -> None:
    with Sandbox.create(isolation=backend) as first:
        first.files.write("/layers/one", "1")
        image = first.snapshot()
    with Sandbox.create(image=image, isolation=backend) as second:
        second.files.write("/layers/two", "2")
        image2 = second.snapshot()
    with Sandbox.create(image=image2, isolation=backend) as third:
        assert sorted(info.name for info in third.files.list("/layers")) == ["one", "two"]


def test_snapshot_while_a_command_runs(sandbox: Sandbox) -> None:
    process = sandbox.exec("sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; echo done")
    image = sandbox.snapshot()
    assert isinstance(image, Image)
    assert within(BOUND, process.stdout.read) == "done\n"
    assert within(BOUND, process.wait) == 0


# ----------------------------------------------------------------- lifecycle, lookup


def test_list_and_from_id(sandbox: Sandbox) -> None:
    infos = {info.id: info for info in Sandbox.list()}
    assert sandbox.id in infos
    info = infos[sandbox.id]
    assert isinstance(info, errand.sandbox.SandboxInfo)
    assert info.alive
    assert info.owner_pid == os.getpid()
    sandbox.files.write("/shared-state", "from the first handle")
    other = Sandbox.from_id(sandbox.id)
    assert other.id == sandbox.id
    assert other.alive
    assert other.files.read("/shared-state") == b"from the first handle"
    assert other.run("echo", "via from_id").stdout == "via from_id\n"


async def test_from_id_async(async_sandbox: AsyncSandbox) -> None:
    other = await AsyncSandbox.from_id(async_sandbox.id)
    assert (await other.run("echo", "hi")).stdout == "hi\n"
    assert async_sandbox.id in {info.id for info in await AsyncSandbox.list()}


@pytest.mark.parametrize("sandbox_id", ["sb-0000000000", "not-an-id", "", "../../etc"])
def test_from_id_of_an_unknown_sandbox(backend: str, sandbox_id: str) -> None:
    with pytest.raises(SandboxNotFound) as caught:
        Sandbox.from_id(sandbox_id)
    assert caught.value.code == "sandbox_not_found"


def test_terminate_is_idempotent_and_final(backend: str) -> None:
    sb = Sandbox.create(isolation=backend)
    sandbox_id = sb.id
    process = sb.exec("sleep", "60")
    sb.terminate()
    sb.terminate()
    assert not sb.alive
    with pytest.raises(SandboxTerminated) as caught:
        sb.exec("true")
    assert caught.value.code == "sandbox_terminated"
    assert caught.value.sandbox_id == sandbox_id
    with pytest.raises(SandboxTerminated):
        sb.run("true")
    with pytest.raises(SandboxTerminated):
        sb.files.read("/etc/passwd")
    with pytest.raises(SandboxTerminated):
        sb.snapshot()
    # A command that was running when the sandbox ended does not hang its waiter.
    with pytest.raises(SandboxTerminated):
        within(BOUND, process.wait)
    assert sandbox_id not in {info.id for info in Sandbox.list()}
    with pytest.raises(SandboxNotFound):
        Sandbox.from_id(sandbox_id)
    assert not (Path(os.environ["ERRAND_RUNTIME_DIR"]) / sandbox_id).exists()
    assert not cgroup_dir(sandbox_id).exists()


def test_terminate_through_another_handle(backend: str) -> None:
    sb = Sandbox.create(isolation=backend)
    try:
        Sandbox.from_id(sb.id).terminate()
        assert eventually(lambda: not sb.alive)
        with pytest.raises(SandboxTerminated):
            sb.run("true")
    finally:
        sb.terminate()


def test_context_manager_terminates_on_error(backend: str) -> None:
    with pytest.raises(RuntimeError), Sandbox.create(isolation=backend) as sb:
        raise RuntimeError("boom")
    assert not sb.alive
    assert sb.id not in {info.id for info in Sandbox.list()}


def test_lifetime_timeout_ends_the_sandbox(backend: str) -> None:
    sb = Sandbox.create(timeout=1, isolation=backend)
    try:
        process = sb.exec("sleep", "60")
        within(BOUND, sb.wait)
        assert not sb.alive
        with pytest.raises(SandboxTerminated):
            within(BOUND, process.wait)
        with pytest.raises(SandboxTerminated):
            sb.run("true")
        assert sb.id not in {info.id for info in Sandbox.list()}
        assert not cgroup_dir(sb.id).exists()
    finally:
        sb.terminate()


def test_lifetime_timeout_ends_the_sandbox_even_when_busy(backend: str) -> None:
    sb = Sandbox.create(timeout=1, idle_timeout=60, isolation=backend)
    try:
        sb.exec("sh", "-c", "while :; do :; done")
        assert eventually(lambda: not sb.alive, 10), "the lifetime timeout did not end a busy sandbox"
    finally:
        sb.terminate()


def test_idle_timeout_ends_an_idle_sandbox(backend: str) -> None:
    sb = Sandbox.create(timeout=60, idle_timeout=1, isolation=backend)
    try:
        assert sb.run("true").exit_code == 0
        within(BOUND, sb.wait)
        assert not sb.alive
        with pytest.raises(SandboxTerminated):
            sb.run("true")
    finally:
        sb.terminate()


def test_idle_timeout_does_not_end_a_busy_sandbox(backend: str) -> None:
    sb = Sandbox.create(timeout=60, idle_timeout=0.5, isolation=backend)
    try:
        # Running a command is activity: it outlives the idle timeout several times over.
        assert within(BOUND, sb.run, "sleep", "2").exit_code == 0
        assert sb.alive
    finally:
        sb.terminate()


def test_no_timeout_means_no_lifetime_limit(backend: str) -> None:
    with Sandbox.create(timeout=None, isolation=backend) as sb:
        assert sb.run("true").ok


_OTHER_INSTANCE = """
from errand import Sandbox
with Sandbox.create(timeout=60) as sb:
    print(sb.run("echo", "other").stdout.strip())
"""


def test_another_errand_instance_leaves_our_sandboxes_alone(sandbox: Sandbox) -> None:
    # A second errand (another user, service or test session) with its own runtime directory
    # creates a sandbox, which reaps *its* orphans first. Ours are not its orphans.
    runtime = tempfile.mkdtemp(prefix="ert-", dir="/run" if os.access("/run", os.W_OK) else None)
    home = tempfile.mkdtemp(prefix="errand-other-home-")
    try:
        environment = {**os.environ, "ERRAND_RUNTIME_DIR": runtime, "ERRAND_HOME": home}
        other = subprocess.run([sys.executable, "-c", _OTHER_INSTANCE], env=environment, capture_output=True,
                               text=True, timeout=120, check=False)
        assert other.stdout.strip() == "other", other.stderr
        assert sandbox.alive, "another errand instance killed this sandbox"
        assert sandbox.run("echo", "still mine").stdout == "still mine\n"
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def test_memory_usage_is_reported(sandbox: Sandbox) -> None:
    assert sandbox.memory_usage() > 0


def test_cpu_time_and_memory_are_reported_together(sandbox: Sandbox) -> None:
    before = sandbox.usage()
    sandbox.run("sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done")  # ended processes count too
    after = sandbox.usage()
    assert after.memory_bytes > 0
    assert after.memory_peak_bytes is None or after.memory_peak_bytes >= after.memory_bytes
    assert after.cpu_seconds is not None and before.cpu_seconds is not None
    assert after.cpu_seconds > before.cpu_seconds


# ------------------------------------------------------------------------ disk quota

MiB = 1024 * 1024
# Writes 1 MiB at a time to a file until the disk refuses; prints what it took and why it stopped.
FILL = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
chunk, written = b"x" * (1 << 20), 0
while True:
    try:
        written += os.write(fd, chunk)
    except OSError as error:
        print(written, error.strerror)
        break
"""


def _fill(sb: Sandbox, path: str) -> tuple[int, str]:
    result = within(BOUND * 3, sb.run, "/usr/bin/python3", "-c", FILL, path)
    assert result.exit_code == 0, result
    written, reason = result.stdout.strip().split(" ", 1)
    return int(written), reason


def _oom_kills(sb: Sandbox) -> int:
    """OOM kills in the sandbox's memory cgroup, as the kernel counts them (v1 or v2)."""
    group = cgroup_dir(sb.id, "memory")
    for name in ("memory.oom_control", "memory.events"):
        if (group / name).exists():
            counters = dict(line.split() for line in (group / name).read_text().splitlines())
            return int(counters["oom_kill"])
    raise AssertionError(f"no OOM counter in {group}")


@pytest.mark.slow
def test_a_disk_quota_above_the_memory_limit_ends_in_enospc_not_an_oom_kill(backend: str) -> None:
    before, devices = _host_state(), loop_devices()
    with Sandbox.create(resources=Resources(memory="128MiB", disk="512MiB"), isolation=backend,
                        timeout=120) as sb:
        # Over twice the memory limit fits the disk quota...
        wrote = within(BOUND * 3, sb.run, "sh", "-c", "head -c 300000000 /dev/zero > /big && stat -c %s /big")
        assert wrote == ExecResult(0, "300000000\n", ""), wrote
        # ...and past the quota the writer is told the disk is full, while the sandbox lives on.
        more, reason = _fill(sb, "/more")
        assert reason == "No space left on device"
        assert 512 * MiB - 4 * MiB <= 300_000_000 + more <= 512 * MiB * 101 // 100
        assert sb.alive and sb.run("echo", "alive") == ExecResult(0, "alive\n", "")
        assert _oom_kills(sb) == 0
        assert sb.run("sh", "-c", "rm /more && echo again > /again && cat /big /again | tail -c 6").stdout == "again\n"
        assert loop_devices() - devices, "the writable layer is not on a disk of its own"
    assert_nothing_created(before)
    assert loop_devices() - devices == set(), "a loop device was left behind"


def test_a_disk_backed_sandbox_snapshots_pauses_and_resumes(backend: str) -> None:
    resources = Resources(memory="64MiB", disk="256MiB")
    with Sandbox.create(resources=resources, isolation=backend, timeout=120) as original:
        original.run("sh", "-c", "mkdir -p /data && echo v1 > /data/state && rm /etc/hostname && "
                     "ln -s state /data/link && chmod 0750 /data")
        original.pause()
        original.resume()
        assert original.run("cat", "/data/link").stdout == "v1\n"
        image = original.snapshot()
        with Sandbox.create(image=image, resources=resources, isolation=backend) as fork:
            assert fork.run("sh", "-c", "cat /data/link; stat -c %a /data").stdout == "v1\n750\n"
            assert not fork.files.exists("/etc/hostname")  # a whiteout on the disk image, kept
            fork.files.write("/data/state", "fork")
            assert original.files.read("/data/state") == b"v1\n"


@pytest.mark.parametrize(("resources", "on_disk"), [
    (Resources(memory="256MiB", disk="128MiB"), False),  # fits in memory: tmpfs, the fastest
    (Resources(memory="128MiB", disk="256MiB"), True),  # does not: a disk of its own
    (Resources(memory="256MiB", disk="128MiB", disk_medium="disk"), True),
    (Resources(memory="128MiB", disk="256MiB", disk_medium="memory"), False),
    (Resources(memory="128MiB", disk="100GiB"), True),  # sparse: takes only what is written
], ids=["fits-memory", "exceeds-memory", "asked-disk", "asked-memory", "100GiB"])
def test_the_writable_layer_medium_follows_the_quota(backend: str, resources: Resources, on_disk: bool) -> None:
    devices = loop_devices()
    with Sandbox.create(resources=resources, isolation=backend, timeout=60) as sb:
        statvfs = "import os; s = os.statvfs('/'); print(s.f_bavail * s.f_frsize)"
        free = int(sb.run("/usr/bin/python3", "-c", statvfs).stdout)  # the sandbox is up
        assert resources.disk - MiB <= free <= resources.disk * 101 // 100
        assert bool(loop_devices() - devices) == on_disk


# ------------------------------------------------------------------------- async API


async def test_async_create_exec_and_stream(backend: str, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("input\n")
    async with await AsyncSandbox.create(mounts=[Mount.copy(tmp_path, "/in")], env={"CI": "1"},
                                         isolation=backend) as sb:
        assert isinstance(sb, AsyncSandbox)
        process = await sb.exec("sh", "-c", 'cat /in/in.txt; echo "$CI"; echo oops >&2; exit 3')
        assert isinstance(process, AsyncProcess)
        lines = [line async for line in process.stdout]
        assert lines == ["input\n", "1\n"]
        assert await asyncio.wait_for(process.stderr.read(), BOUND) == "oops\n"
        assert await asyncio.wait_for(process.wait(), BOUND) == 3
        result = await sb.run("sh", "-c", "echo ok")
        assert result == ExecResult(0, "ok\n", "")
    assert not sb.alive


async def test_async_interactive_stdin(async_sandbox: AsyncSandbox) -> None:
    process = await async_sandbox.exec("cat")
    lines = process.stdout.__aiter__()
    for word in ("alpha", "beta"):
        await process.stdin.write(f"{word}\n")
        assert await asyncio.wait_for(lines.__anext__(), BOUND) == f"{word}\n"
    await process.stdin.close()
    assert await asyncio.wait_for(process.wait(), BOUND) == 0


async def test_async_exec_timeout(async_sandbox: AsyncSandbox) -> None:
    with pytest.raises(ExecTimeout):
        await asyncio.wait_for(async_sandbox.run("sleep", "60", timeout=0.3), BOUND)


async def test_a_run_whose_command_leaves_its_input_unread_returns_and_keeps_nothing_open(
        async_sandbox: AsyncSandbox) -> None:
    """As in subprocess.run, a command that closes its stdin or ends without reading its input is no
    error. Each such run once raised BrokenPipeError and kept a pipe, a socket and one of the agent's
    connections open (past 1,024 runs the sandbox refused every call); and a process left holding
    stdin unread held the run past its own timeout."""
    big = b"x" * (4 << 20)  # far past a pipe's buffer
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        closed = await asyncio.wait_for(async_sandbox.run("sh", "-c", "exec 0<&-; exit 3", input=big), BOUND)
        assert closed.exit_code == 3
    assert len(os.listdir("/proc/self/fd")) <= before + 2
    held = await asyncio.wait_for(async_sandbox.run(
        "sh", "-c", "setsid sleep 1000 <&0 >/dev/null 2>&1 & exit 4", input=big, timeout=60), BOUND)
    assert held.exit_code == 4
    agent_fds = await async_sandbox.run("sh", "-c", "ls /proc/1/fd | wc -l")
    assert int(agent_fds.stdout) < 20, agent_fds  # its listening socket, stdio, this command's connection


async def test_a_cancelled_run_leaves_no_command_running(async_sandbox: AsyncSandbox) -> None:
    run = asyncio.ensure_future(async_sandbox.run("sh", "-c", "echo $$ > /tmp/pid.part; mv /tmp/pid.part /tmp/pid; "
                                                  "exec sleep 1000"))
    while not await async_sandbox.files.exists("/tmp/pid"):
        await asyncio.sleep(0.01)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    pid = (await async_sandbox.files.read_text("/tmp/pid")).strip()

    async def ended() -> None:
        while (await async_sandbox.run("test", "-e", f"/proc/{pid}")).exit_code == 0:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(ended(), BOUND)


async def test_a_listing_past_the_limit_is_refused_not_waited_on(
        async_sandbox: AsyncSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host reads a listing up to its limit: the agent, writing the rest, once waited for room
    for ever, and the host for its answer (a directory of 1.25 million long names, at 256 MiB)."""
    monkeypatch.setattr(files_module, "MAX_READ", 64 * 1024)
    made = await async_sandbox.run("/usr/bin/python3", "-c", "import os; os.mkdir('/tmp/big'); "
                                   "[open(f'/tmp/big/{n:0200d}', 'w').close() for n in range(2000)]")
    assert made.exit_code == 0, made
    with pytest.raises(FilesError) as refused:
        await asyncio.wait_for(async_sandbox.files.list("/tmp/big"), BOUND)
    assert refused.value.errno == errno.EFBIG and "listing is larger than 65536 bytes" in str(refused.value)
    assert len(await async_sandbox.files.list("/tmp")) == 1  # a listing within the limit is served still


async def test_async_kill(async_sandbox: AsyncSandbox) -> None:
    process = await async_sandbox.exec("sh", "-c", "echo started; exec sleep 60")
    assert await asyncio.wait_for(process.stdout.__aiter__().__anext__(), BOUND) == "started\n"
    await process.kill()
    assert await asyncio.wait_for(process.wait(), BOUND) == -signal.SIGKILL


async def test_kill_right_after_exec_is_never_lost(async_sandbox: AsyncSandbox) -> None:
    # A kill sent the moment exec returns must still reach the command; a lost one
    # leaves it running its full minute. Repeated because the window is narrow.
    for attempt in range(200):
        process = await async_sandbox.exec("sleep", "60")
        await process.kill()
        waiter = asyncio.ensure_future(process.wait())
        done, _ = await asyncio.wait({waiter}, timeout=5)
        if not done:
            waiter.cancel()
            pytest.fail(f"kill() right after exec() was lost on attempt {attempt + 1}")
        assert process.returncode == -signal.SIGKILL


async def test_wait_can_be_retried_after_a_cancelled_wait(async_sandbox: AsyncSandbox) -> None:
    process = await async_sandbox.exec("sh", "-c", "sleep 0.5; exit 4")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(process.wait(), 0.05)
    assert await asyncio.wait_for(process.wait(), 5) == 4


async def test_async_concurrent_commands(async_sandbox: AsyncSandbox) -> None:
    results = await asyncio.wait_for(
        asyncio.gather(*(async_sandbox.run("sh", "-c", f"sleep 0.3; echo {n}") for n in range(10))), BOUND)
    assert [r.stdout for r in results] == [f"{n}\n" for n in range(10)]


async def test_async_files(async_sandbox: AsyncSandbox) -> None:
    files = async_sandbox.files
    assert isinstance(files, AsyncFiles)
    await files.write("/a/b/c.txt", "c")
    await files.mkdir("/a/empty")
    assert await files.read("/a/b/c.txt") == b"c"
    assert [info.name for info in await files.list("/a")] == ["b", "empty"]
    assert (await files.stat("/a/b/c.txt")).size == 1
    assert await files.exists("/a/b")
    await files.remove("/a", recursive=True)
    assert not await files.exists("/a")


async def test_async_snapshot_fork(async_sandbox: AsyncSandbox, backend: str) -> None:
    await async_sandbox.files.write("/state", "before")
    image = await async_sandbox.snapshot()
    async with await AsyncSandbox.create(image=image, isolation=backend) as fork:
        assert await fork.files.read("/state") == b"before"
        await fork.files.write("/state", "fork")
    assert await async_sandbox.files.read("/state") == b"before"


async def test_async_lifetime_and_terminate(backend: str) -> None:
    sb = await AsyncSandbox.create(timeout=1, isolation=backend)
    try:
        await asyncio.wait_for(sb.wait(), BOUND)
        assert not sb.alive
        with pytest.raises(SandboxTerminated):
            await sb.exec("true")
    finally:
        await sb.terminate()
        await sb.terminate()


async def test_async_bad_input_is_rejected(backend: str) -> None:
    before = _host_state()
    with pytest.raises(ConfigError):
        await AsyncSandbox.create(workdir="relative", isolation=backend)
    assert_nothing_created(before)


# ------------------------------------------------------------------ sync/async parity


PAIRS = [(AsyncSandbox, Sandbox), (AsyncProcess, Process), (AsyncFiles, Files), (AsyncStream, Stream),
         (AsyncWriter, Writer)]
DUNDER = {"__aenter__": "__enter__", "__aexit__": "__exit__", "__aiter__": "__iter__"}


def _public_members(cls: type) -> Iterator[tuple[str, str, Any]]:
    for name, member in inspect.getmembers_static(cls):
        if name.startswith("_") and name not in DUNDER:
            continue
        if isinstance(member, staticmethod | classmethod | property) or inspect.isfunction(member):
            yield name, DUNDER.get(name, name), member


def _function(member: Any) -> Any:
    if isinstance(member, staticmethod | classmethod):
        return member.__func__
    if isinstance(member, property):
        return member.fget
    return member


@pytest.mark.parametrize(("async_class", "sync_class"), PAIRS, ids=[s.__name__ for _, s in PAIRS])
def test_sync_api_mirrors_async_api(async_class: type, sync_class: type) -> None:
    members = list(_public_members(async_class))
    assert members, f"{async_class.__name__} has no public members?"
    for _name, sync_name, member in members:
        assert hasattr(sync_class, sync_name), f"{sync_class.__name__} lacks {sync_name}"
        sync_member = inspect.getattr_static(sync_class, sync_name)
        assert type(sync_member) is type(member) or (
            inspect.isfunction(_function(member)) and inspect.isfunction(sync_member)
        ), f"{sync_class.__name__}.{sync_name} is a {type(sync_member).__name__}, not {type(member).__name__}"
        if isinstance(member, property):
            continue
        async_parameters = list(inspect.signature(_function(member)).parameters.values())
        sync_parameters = list(inspect.signature(_function(sync_member)).parameters.values())
        assert [(p.name, p.kind, p.default) for p in sync_parameters] == [
            (p.name, p.kind, p.default) for p in async_parameters], f"{sync_class.__name__}.{sync_name}"


def test_sync_api_exposes_instance_attributes(sandbox: Sandbox) -> None:
    process = sandbox.exec("true")
    for name in ("pid", "returncode", "signal", "stdin", "stdout", "stderr"):
        assert hasattr(process, name), name
    within(BOUND, process.wait)
    assert isinstance(process.stdout, Stream)
    assert isinstance(sandbox.files, Files)
    assert isinstance(sandbox.id, str)


def test_public_names_are_exported() -> None:
    for name in errand.__all__:
        assert hasattr(errand, name), name
    for name in errand.sandbox.__all__:
        assert hasattr(errand.sandbox, name), name


# ------------------------------------------------------------------------- bad input


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "does-not-exist"


BAD_CREATES: dict[str, Callable[[Path, str], Any]] = {
    "apt_install_on_base": lambda tmp, b: Sandbox.create(image=Image.base().apt_install("x"), isolation=b),
    "empty_run_step": lambda tmp, b: Sandbox.create(image=Image.base().run(""), isolation=b),
    "blank_run_step": lambda tmp, b: Sandbox.create(image=Image.base().run("   "), isolation=b),
    "bad_package_name": lambda tmp, b: Sandbox.create(image=Image.base().pip_install("evil; rm -rf /"),
                                                      isolation=b),
    "no_packages": lambda tmp, b: Sandbox.create(image=Image.base().pip_install(), isolation=b),
    "unknown_image_step": lambda tmp, b: Sandbox.create(
        image=Image((*Image.base().steps, Step("bogus", ("x",)))), isolation=b),
    "image_not_an_image": lambda tmp, b: Sandbox.create(image="debian:bookworm", isolation=b),  # type: ignore[arg-type]
    "cpus_zero": lambda tmp, b: Sandbox.create(resources=Resources(cpus=0), isolation=b),
    "cpus_negative": lambda tmp, b: Sandbox.create(resources=Resources(cpus=-1), isolation=b),
    "memory_lots": lambda tmp, b: Sandbox.create(resources=Resources(memory="lots"), isolation=b),
    "memory_tiny": lambda tmp, b: Sandbox.create(resources=Resources(memory="1KiB"), isolation=b),
    "disk_medium_unknown": lambda tmp, b: Sandbox.create(resources=Resources(disk_medium="ssd"),  # type: ignore[arg-type]
                                                         isolation=b),
    "pids_two": lambda tmp, b: Sandbox.create(resources=Resources(pids=2), isolation=b),
    "disk_negative": lambda tmp, b: Sandbox.create(resources=Resources(disk=-1), isolation=b),
    "disk_zero": lambda tmp, b: Sandbox.create(resources=Resources(disk="0"), isolation=b),
    "missing_mount_source": lambda tmp, b: Sandbox.create(mounts=[Mount.copy(_missing(tmp), "/x")], isolation=b),
    "missing_bind_source": lambda tmp, b: Sandbox.create(mounts=[Mount.bind(_missing(tmp), "/x")], isolation=b),
    "relative_mount_target": lambda tmp, b: Sandbox.create(mounts=[Mount.bind(tmp, "relative/dir")], isolation=b),
    "dotdot_mount_target": lambda tmp, b: Sandbox.create(mounts=[Mount.bind(tmp, "/a/../etc")], isolation=b),
    "mount_over_proc": lambda tmp, b: Sandbox.create(mounts=[Mount.bind(tmp, "/proc")], isolation=b),
    "mount_under_proc": lambda tmp, b: Sandbox.create(mounts=[Mount.copy(tmp, "/proc/sys")], isolation=b),
    "mount_over_dev": lambda tmp, b: Sandbox.create(mounts=[Mount.bind(tmp, "/dev")], isolation=b),
    "mount_over_root": lambda tmp, b: Sandbox.create(mounts=[Mount.bind(tmp, "/")], isolation=b),
    "duplicate_mount_targets": lambda tmp, b: Sandbox.create(
        mounts=[Mount.copy(tmp, "/x"), Mount.bind(tmp, "/x")], isolation=b),
    "duplicate_mount_targets_normalised": lambda tmp, b: Sandbox.create(
        mounts=[Mount.copy(tmp, "/x"), Mount.copy(tmp, "/x/")], isolation=b),
    "mount_not_a_mount": lambda tmp, b: Sandbox.create(mounts=[str(tmp)], isolation=b),  # type: ignore[list-item]
    "relative_workdir": lambda tmp, b: Sandbox.create(workdir="workspace", isolation=b),
    "empty_workdir": lambda tmp, b: Sandbox.create(workdir="", isolation=b),
    "timeout_zero": lambda tmp, b: Sandbox.create(timeout=0, isolation=b),
    "timeout_negative": lambda tmp, b: Sandbox.create(timeout=-5, isolation=b),
    "timeout_string": lambda tmp, b: Sandbox.create(timeout="10", isolation=b),  # type: ignore[arg-type]
    "timeout_nan": lambda tmp, b: Sandbox.create(timeout=float("nan"), isolation=b),
    "idle_timeout_zero": lambda tmp, b: Sandbox.create(idle_timeout=0, isolation=b),
    "env_value_nul": lambda tmp, b: Sandbox.create(env={"A": "b\0c"}, isolation=b),
    "env_name_nul": lambda tmp, b: Sandbox.create(env={"A\0B": "c"}, isolation=b),
    "env_name_equals": lambda tmp, b: Sandbox.create(env={"A=B": "c"}, isolation=b),
    "env_not_string": lambda tmp, b: Sandbox.create(env={"A": 1}, isolation=b),  # type: ignore[dict-item]
    "unknown_isolation": lambda tmp, b: Sandbox.create(isolation="no-such-backend"),
    "network_overbroad_wildcard": lambda tmp, b: Sandbox.create(network=Network.allow("*"),
                                                                          isolation=b),
}


# On one backend: AsyncSandbox.create checks what it is told before it picks a backend,
# so the gVisor run of each case ran the same checks again.
@pytest.mark.parametrize("backend", ["namespace"], indirect=True)
@pytest.mark.parametrize("case", list(BAD_CREATES))
def test_bad_input_to_create_is_rejected_and_creates_nothing(backend: str, tmp_path: Path, case: str) -> None:
    before = _host_state()
    with pytest.raises(ErrandError) as caught:
        sb = BAD_CREATES[case](tmp_path, backend)
        sb.terminate()  # only reached if the bad input was accepted
    error = caught.value
    assert isinstance(error.code, str) and error.code and error.code != "errand_error"
    assert str(error)
    assert_nothing_created(before)


BAD_CALLS: dict[str, Callable[[Sandbox], Any]] = {
    "exec_no_command": lambda sb: sb.exec(),
    "run_no_command": lambda sb: sb.run(),
    "exec_nul_argument": lambda sb: sb.exec("echo", "a\0b"),
    "exec_env_nul": lambda sb: sb.exec("true", env={"A": "b\0c"}),
    "exec_relative_cwd": lambda sb: sb.exec("true", cwd="tmp"),
    "exec_timeout_zero": lambda sb: sb.exec("true", timeout=0),
    "exec_unknown_user": lambda sb: sb.exec("true", user="no-such-user"),
    "exec_negative_uid": lambda sb: sb.exec("true", user=-1),
    "files_read_relative": lambda sb: sb.files.read("etc/passwd"),
    "files_write_relative": lambda sb: sb.files.write("tmp/x", "x"),
    "files_list_relative": lambda sb: sb.files.list("."),
    "files_stat_relative": lambda sb: sb.files.stat("tmp"),
    "files_exists_relative": lambda sb: sb.files.exists("tmp"),
    "files_mkdir_relative": lambda sb: sb.files.mkdir("tmp/new"),
    "files_remove_relative": lambda sb: sb.files.remove("tmp"),
    "files_remove_root": lambda sb: sb.files.remove("/", recursive=True),
    "files_path_nul": lambda sb: sb.files.read("/etc/pass\0wd"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_input_to_a_sandbox_is_rejected(sandbox: Sandbox, case: str) -> None:
    before = _host_state()
    listing = sandbox.run("ls", "-a", "/", "/tmp").stdout
    with pytest.raises(ErrandError) as caught:
        within(BOUND, BAD_CALLS[case], sandbox)
    assert isinstance(caught.value.code, str) and caught.value.code not in ("", "errand_error")
    assert_nothing_created(before)
    assert sandbox.run("ls", "-a", "/", "/tmp").stdout == listing
    assert sandbox.run("true").ok
