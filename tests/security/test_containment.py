"""Containment: what untrusted code inside a sandbox must not be able to reach or do.

Every test here is written to FAIL if the boundary it names is broken, and each
pairs its denial with a positive control where one makes sense (the same probe
succeeding on something the sandbox *may* touch), so a probe that fails for an
unrelated reason cannot pass for containment. Probes run ``/usr/bin/python3``
inside the sandbox: the base image shares the host's read-only ``/usr``.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import signal
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bounded import within
from errand import ExecResult, FilesError, Mount, Resources, Sandbox, SandboxError, SandboxTerminated
from hostfacts import cgroup_dir

CGROUP_PIDS = Path("/sys/fs/cgroup/pids/errand")
BOUND = 30.0

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the namespace backend runs as root")


# --------------------------------------------------------------------------- helpers


def py(sb: Sandbox, code: str, **kwargs: Any) -> ExecResult:
    """Run a Python probe inside the sandbox (bounded)."""
    return within(BOUND, sb.run, "/usr/bin/python3", "-c", textwrap.dedent(code), **kwargs)


def probe(sb: Sandbox, code: str, **kwargs: Any) -> Any:
    """Run a probe that prints one JSON value as its last line; return that value."""
    result = py(sb, code, **kwargs)
    assert result.exit_code == 0, f"probe failed: {result}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


PF_EXITING = 0x4  # include/linux/sched.h: set as the kernel begins a task's exit; it never runs user code again


def alive(pid: int, started: str) -> bool:
    """Whether the very process (pid plus start time) can still run code: not a zombie, and not
    already in the kernel's exit path. A killed process under heavy load can sit runnable for
    a while after it has released its memory and left its cgroup, before it turns zombie (seen
    in CI: empty cmdline, state R, its cgroup already removed); that one is dead, not a survivor."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    state, flags = fields[0], int(fields[6])
    return state != "Z" and not flags & PF_EXITING and start_time(pid) == started


def cgroup_processes(sandbox_id: str) -> dict[int, str]:
    """Host pid → start time of every process in the sandbox's pids cgroup."""
    found = {}
    for text in (cgroup_dir(sandbox_id) / "cgroup.procs").read_text().split():
        started = start_time(int(text))
        if started is not None:
            found[int(text)] = started
    return found


def local_addresses() -> set[str]:
    """The host's own IPv4 addresses (from the kernel's local routing table)."""
    found = {"127.0.0.1"}
    previous = ""
    for line in Path("/proc/net/fib_trie").read_text().splitlines():
        if "/32 host LOCAL" in line and previous:
            found.add(previous)
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("|--", "+--"):
            previous = parts[1].split("/")[0]
    return found


@pytest.fixture
def host_secret(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    token = "errand-secret-" + secrets.token_hex(12)
    directory = tmp_path / "host-only"
    directory.mkdir()
    path = directory / "secret.txt"
    path.write_text(token + "\n")
    yield path, token


# ------------------------------------------------------------------------ host files


def test_host_files_outside_mounts_are_invisible(sandbox: Sandbox, host_secret: tuple[Path, str]) -> None:
    path, token = host_secret
    assert sandbox.run("test", "-e", str(path)).exit_code == 1
    assert sandbox.run("test", "-e", str(path.parent)).exit_code == 1
    assert not sandbox.files.exists(str(path))
    with pytest.raises(FilesError):
        sandbox.files.read(str(path))
    # Nowhere in the sandbox's own filesystem (the shared read-only /usr aside) holds it.
    found = within(BOUND, sandbox.run, "grep", "-rsl", "--exclude-dir=proc", "--exclude-dir=sys",
                   "--exclude-dir=usr", "--exclude-dir=dev", token, "/")
    assert found.exit_code == 1, found.stdout


def test_host_shadow_root_home_and_tmp_are_not_the_sandboxes(sandbox: Sandbox) -> None:
    inside = sandbox.run("cat", "/etc/shadow")
    host_shadow = Path("/etc/shadow").read_text()
    assert inside.exit_code != 0 or inside.stdout != host_shadow
    for directory in ("/root", "/tmp", "/home", "/etc", "/var", "/run", "/mnt", "/opt"):
        listing = probe(sandbox, f"""
            import json, os
            print(json.dumps(os.listdir({directory!r}) if os.path.isdir({directory!r}) else []))
        """)
        host = set(os.listdir(directory)) if os.path.isdir(directory) else set()
        leaked = set(listing) & host
        if directory == "/etc":
            # The base image copies a fixed list of public files from the host's /etc.
            leaked -= {"alternatives", "ssl", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "os-release",
                       "debian_version", "localtime", "python3", "python3.11", "python3.12", "python3.13",
                       "mime.types", "protocols", "services", "passwd", "group", "hosts", "hostname",
                       "resolv.conf", "nsswitch.conf"}
        if directory == "/opt":
            leaked -= {"errand"}
        if directory == "/var":
            leaked -= {"tmp"}
        assert leaked == set(), f"host entries visible in {directory}: {sorted(leaked)}"
    passwd = sandbox.files.read_text("/etc/passwd")
    assert passwd != Path("/etc/passwd").read_text()


def test_host_environment_does_not_leak(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "leak-" + secrets.token_hex(8)
    monkeypatch.setenv("ERRAND_TEST_HOST_SECRET", token)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", token)
    with Sandbox.create(isolation=backend, timeout=60) as sb:
        environment = sb.run("sh", "-c", "env; cat /proc/1/environ /proc/self/environ 2>/dev/null; true")
        assert token not in environment.stdout
        assert "ERRAND_TEST_HOST_SECRET" not in environment.stdout


def test_host_processes_are_invisible_and_unkillable(sandbox: Sandbox) -> None:
    victim = subprocess.Popen(["sleep", "120"])
    try:
        pids = probe(sandbox, """
            import json, os
            print(json.dumps([int(p) for p in os.listdir('/proc') if p.isdigit()]))
        """)
        assert len(pids) < 20, f"the sandbox sees {len(pids)} processes"
        for pid in (victim.pid, os.getpid()):
            seen = sandbox.run("cat", f"/proc/{pid}/cmdline").stdout
            assert "sleep\x00120" not in seen and "pytest" not in seen
        sandbox.run("kill", "-KILL", str(victim.pid))
        try:
            # Everything this sandbox's root may signal: the sandbox's own processes only.
            sandbox.run("kill", "-KILL", "-1")
        except SandboxError:
            pass  # it may well take the sandbox's own agent with it
        time.sleep(0.1)  # not an assertion: gives a wrongly delivered signal time to land
        assert victim.poll() is None, "a host process was killed from inside the sandbox"
    finally:
        victim.kill()
        victim.wait()


def test_no_host_file_descriptors_leak_in(sandbox: Sandbox) -> None:
    descriptors = probe(sandbox, """
        import json, os
        found = {}
        for name in os.listdir('/proc/self/fd'):
            if name not in ('0', '1', '2'):
                try:
                    found[name] = os.readlink('/proc/self/fd/' + name)
                except OSError:
                    pass  # the descriptor listdir itself used, closed by now
        print(json.dumps(found))
    """)
    assert descriptors == {}


# -------------------------------------------------------------------------- mounts


def _write_attempts(root: str) -> str:
    return f"""
        import json, os
        results = {{}}
        def attempt(name, action):
            try:
                action()
                results[name] = "ok"
            except OSError as error:
                results[name] = error.errno
        attempt("create", lambda: open({root!r} + "/new.txt", "w").write("x"))
        attempt("append", lambda: open({root!r} + "/existing.txt", "a").write("more"))
        attempt("truncate", lambda: os.truncate({root!r} + "/existing.txt", 0))
        attempt("chmod", lambda: os.chmod({root!r} + "/existing.txt", 0o777))
        attempt("utime", lambda: os.utime({root!r} + "/existing.txt", (0, 0)))
        attempt("mkdir", lambda: os.mkdir({root!r} + "/newdir"))
        attempt("symlink", lambda: os.symlink("/etc/passwd", {root!r} + "/link"))
        attempt("unlink", lambda: os.unlink({root!r} + "/sub/inner.txt"))
        attempt("rename", lambda: os.rename({root!r} + "/existing.txt", {root!r} + "/moved.txt"))
        print(json.dumps(results))
    """


def _host_tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    return {str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("explicit", [True, False], ids=["read_only=True", "default"])
def test_read_only_bind_mounts_are_unwritable(backend: str, tmp_path: Path, explicit: bool) -> None:
    shared = tmp_path / "shared"
    (shared / "sub").mkdir(parents=True)
    (shared / "existing.txt").write_text("original\n")
    (shared / "sub" / "inner.txt").write_text("inner\n")
    before = _host_tree(shared)
    bind = Mount.bind(shared, "/ro", read_only=True) if explicit else Mount.bind(shared, "/ro")
    with Sandbox.create(mounts=[bind, Mount.copy(shared, "/rw")], isolation=backend, timeout=60) as sb:
        # Positive control: the very same operations work on the sandbox's own copy.
        assert set(probe(sb, _write_attempts("/rw")).values()) == {"ok"}
        for user in (None, 1000):
            results = probe(sb, _write_attempts("/ro"), user=user)
            allowed = {name for name, outcome in results.items() if outcome == "ok"}
            assert allowed == set(), f"wrote to a read-only mount as {user or 'root'}: {allowed}"
        remount = sb.run("mount", "-o", "remount,rw", "/ro")
        assert remount.exit_code != 0
        assert sb.run("sh", "-c", "echo x > /ro/after-remount").exit_code != 0
        with pytest.raises(FilesError):
            sb.files.write("/ro/via-files-api.txt", "x")
        with pytest.raises(FilesError):
            sb.files.remove("/ro/existing.txt")
        with pytest.raises(FilesError):
            sb.files.mkdir("/ro/made-by-files-api")
    assert _host_tree(shared) == before


def test_copy_mounts_do_not_write_through(backend: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "existing.txt").write_text("original\n")
    (project / "sub" / "inner.txt").write_text("inner\n")
    before = _host_tree(project)
    with Sandbox.create(mounts=[Mount.copy(project, "/work")], isolation=backend, timeout=60) as sb:
        assert set(probe(sb, _write_attempts("/work")).values()) == {"ok"}
        sb.run("rm", "-rf", "/work/sub")
        sb.files.write("/work/by-api.txt", "x")
    assert _host_tree(project) == before


def test_files_written_inside_are_not_owned_by_host_root(backend: str, tmp_path: Path) -> None:
    shared = tmp_path / "rw"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with Sandbox.create(mounts=[Mount.bind(shared, "/rw", read_only=False)], isolation=backend, timeout=60) as sb:
        result = sb.run("sh", "-c", "touch /rw/made-by-root && chmod 4755 /rw/made-by-root")
        assert result.exit_code == 0, result
    info = (shared / "made-by-root").stat()
    assert info.st_uid != 0 and info.st_gid != 0, "in-sandbox root wrote a file owned by host root"


# ------------------------------------------------------------------------- network


def _serve_tcp(address: str) -> tuple[socket.socket, int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, 0))
    server.listen(16)
    server.setblocking(False)
    return server, server.getsockname()[1]


def _accepted_nothing(server: socket.socket) -> bool:
    try:
        connection, _ = server.accept()
    except BlockingIOError:
        return True
    connection.close()
    return False


_TCP_PROBE = """
    import json, socket, sys
    results = {}
    for host in sys.argv[2:]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect((host, int(sys.argv[1])))
            s.sendall(b"hello from the sandbox")
            results[host] = "connected"
        except OSError as error:
            results[host] = error.errno or str(error)
        finally:
            s.close()
    print(json.dumps(results))
"""


def test_host_loopback_and_addresses_are_unreachable(sandbox: Sandbox) -> None:
    loopback, port = _serve_tcp("127.0.0.1")
    anywhere = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    anywhere.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    anywhere.bind(("0.0.0.0", 0))
    anywhere.listen(16)
    anywhere.setblocking(False)
    try:
        targets = sorted(local_addresses())
        result = within(BOUND, sandbox.run, "/usr/bin/python3", "-c", textwrap.dedent(_TCP_PROBE), str(port),
                        "127.0.0.1")
        assert json.loads(result.stdout)["127.0.0.1"] != "connected"
        result = within(BOUND, sandbox.run, "/usr/bin/python3", "-c", textwrap.dedent(_TCP_PROBE),
                        str(anywhere.getsockname()[1]), *targets)
        outcomes = json.loads(result.stdout)
        assert set(outcomes) == set(targets)
        assert "connected" not in outcomes.values(), outcomes
        assert _accepted_nothing(loopback)
        assert _accepted_nothing(anywhere)
    finally:
        loopback.close()
        anywhere.close()


def test_sandbox_loopback_is_its_own(sandbox: Sandbox) -> None:
    # Positive control for the test above: loopback works inside, on the sandbox's own stack.
    outcome = probe(sandbox, """
        import json, socket
        server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
        client = socket.create_connection(server.getsockname(), timeout=3)
        peer, _ = server.accept(); client.sendall(b"ping")
        print(json.dumps(peer.recv(4).decode()))
    """)
    assert outcome == "ping"


def test_host_unix_sockets_are_unreachable(sandbox: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "host.sock"
    by_path = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    by_path.bind(str(path))
    by_path.listen(16)
    by_path.setblocking(False)
    abstract_name = "errand-test-" + secrets.token_hex(6)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + abstract_name)
    abstract.listen(16)
    abstract.setblocking(False)
    try:
        outcome = probe(sandbox, f"""
            import json, os, socket
            results = {{"path_exists": os.path.exists({str(path)!r})}}
            for key, address in (("path", {str(path)!r}), ("abstract", "\\0" + {abstract_name!r})):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(3)
                try:
                    s.connect(address)
                    results[key] = "connected"
                except OSError as error:
                    results[key] = error.errno
                s.close()
            # The abstract namespace is the sandbox's own: the host's name is free to take here.
            mine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                mine.bind("\\0" + {abstract_name!r})
                results["bind_same_name"] = "ok"
            except OSError as error:
                results["bind_same_name"] = error.errno
            print(json.dumps(results))
        """)
        assert outcome["path_exists"] is False
        assert outcome["path"] == errno.ENOENT
        assert outcome["abstract"] == errno.ECONNREFUSED
        assert outcome["bind_same_name"] == "ok"
        assert _accepted_nothing(by_path)
        assert _accepted_nothing(abstract)
    finally:
        by_path.close()
        abstract.close()


def test_no_route_out(sandbox: Sandbox) -> None:
    outcome = probe(sandbox, """
        import json, socket, time
        results = {}
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(10)
        started = time.monotonic()
        try:
            s.connect(("198.51.100.1", 80))
            results["tcp"] = "connected"
        except OSError as error:
            results["tcp"] = error.errno
        results["tcp_seconds"] = time.monotonic() - started
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.sendto(b"x", ("198.51.100.1", 53))
            results["udp"] = "sent"
        except OSError as error:
            results["udp"] = error.errno
        try:
            s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            s6.settimeout(10)
            s6.connect(("2001:db8::1", 80))
            results["tcp6"] = "connected"
        except OSError as error:
            results["tcp6"] = error.errno
        try:
            socket.getaddrinfo("example.com", 443)
            results["dns"] = "resolved"
        except OSError as error:
            results["dns"] = str(error)
        results["interfaces"] = sorted(line.split(":")[0].strip()
                                       for line in open("/proc/net/dev").read().splitlines()[2:])
        results["routes"] = open("/proc/net/route").read().splitlines()[1:]
        print(json.dumps(results))
    """)
    assert outcome["tcp"] == errno.ENETUNREACH, outcome
    assert outcome["tcp_seconds"] < 2, "an unroutable connect should fail at once, not time out"
    assert outcome["udp"] == errno.ENETUNREACH, outcome
    assert outcome["tcp6"] != "connected", outcome
    assert outcome["dns"] != "resolved", outcome
    assert outcome["interfaces"] == ["lo"], outcome
    assert outcome["routes"] == [], outcome


# ----------------------------------------------------------------------- resources


_FORK_BOMB = """
    import errno, json, os
    read_end, write_end = os.pipe()
    children, failure = [], None
    for _ in range(10000):
        try:
            pid = os.fork()
        except OSError as error:
            failure = error.errno
            break
        if pid == 0:
            os.close(write_end)
            os.read(read_end, 1)  # parked until the parent closes its end
            os._exit(0)
        children.append(pid)
    os.close(write_end)
    for pid in children:
        os.waitpid(pid, 0)
    print(json.dumps({"children": len(children), "errno": failure}))
"""


def test_fork_bomb_is_held_by_the_pids_limit(backend: str) -> None:
    with Sandbox.create(resources=Resources(pids=64), isolation=backend, timeout=60) as sb:
        outcome = probe(sb, _FORK_BOMB, timeout=BOUND)
        assert outcome["errno"] == errno.EAGAIN, outcome
        assert outcome["children"] < 64, outcome
        # The sandbox recovers, and the host was never short of processes.
        assert sb.run("true").exit_code == 0
    assert subprocess.run(["true"], check=False).returncode == 0


def test_memory_bomb_is_killed_inside_only(backend: str) -> None:
    if backend == "gvisor":
        pytest.skip("gVisor's kernel has no OOM killer of its own: see test_memory_bomb_ends_a_gvisor_sandbox")
    with Sandbox.create(resources=Resources(memory="64MiB"), isolation=backend, timeout=60) as sb:
        result = py(sb, "data = b'x' * (200 * 1024 * 1024); print(len(data))")
        assert result.exit_code == -signal.SIGKILL, result
        assert result.signal == signal.SIGKILL
        assert "209715200" not in result.stdout
        assert within(BOUND, sb.run, "true").exit_code == 0
        assert sb.alive
        limit = cgroup_dir(sb.id, "memory") / "memory.limit_in_bytes"
        if limit.exists():
            assert int(limit.read_text()) <= 64 * 1024 * 1024


def test_memory_bomb_ends_a_gvisor_sandbox() -> None:
    """On gVisor the memory limit holds the sandbox's kernel too, and that kernel kills no
    process of its own when the host refuses it memory: the host's OOM killer ends the whole
    sandbox instead. The bomb still gets nothing, and the sandbox leaves nothing behind."""
    sb = Sandbox.create(resources=Resources(memory="64MiB"), isolation="gvisor", timeout=60)
    try:
        with pytest.raises(SandboxTerminated):
            py(sb, "data = b'x' * (200 * 1024 * 1024); print(len(data))")
        within(BOUND, sb.wait)
        assert not sb.alive
        assert not cgroup_dir(sb.id).exists()
    finally:
        sb.terminate()


def test_disk_fill_stops_at_the_quota(backend: str) -> None:
    with Sandbox.create(resources=Resources(disk="16MiB"), isolation=backend, timeout=60) as sb:
        result = within(BOUND, sb.run, "dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M", "count=64")
        assert result.exit_code != 0, result
        assert "No space left" in result.stderr
        size = int(sb.run("stat", "-c", "%s", "/tmp/fill").stdout)
        assert size <= 16 * 1024 * 1024
        with pytest.raises(FilesError) as caught:
            sb.files.write("/tmp/more", os.urandom(32 * 1024 * 1024))
        assert caught.value.code == "no_space"
        # Freeing space makes the sandbox usable again.
        sb.run("rm", "-f", "/tmp/fill", "/tmp/more")
        assert sb.run("sh", "-c", "echo ok > /tmp/small && cat /tmp/small").stdout == "ok\n"


def test_disk_quota_covers_every_writable_place(backend: str) -> None:
    with Sandbox.create(resources=Resources(disk="16MiB"), isolation=backend, timeout=60) as sb:
        result = within(BOUND, sb.run, "sh", "-c",
                        "for d in / /root /var/tmp /opt /tmp; do "
                        "dd if=/dev/zero of=$d/fill bs=1M count=8 2>/dev/null; done; "
                        "stat -c %s /fill /root/fill /var/tmp/fill /opt/fill /tmp/fill")
        assert sum(int(size) for size in result.stdout.split()) <= 16 * 1024 * 1024


# ------------------------------------------------------------------ kernel surface


_PRIVILEGED_CALLS = """
    import ctypes, ctypes.util, json, os
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x00020000, 0x10000000, 0x40000000, 0x20000000
    PTRACE_TRACEME, PTRACE_ATTACH = 0, 16
    results = {}
    def call(name, function, *args):
        ctypes.set_errno(0)
        value = function(*args)
        results[name] = "ok" if value != -1 else ctypes.get_errno()
    os.makedirs("/tmp/mnt", exist_ok=True)
    call("mount_tmpfs", libc.mount, b"none", b"/tmp/mnt", b"tmpfs", 0, None)
    call("mount_bind", libc.mount, b"/usr", b"/tmp/mnt", None, 0x1000, None)
    call("remount_usr_rw", libc.mount, None, b"/usr", None, 0x20, None)
    call("umount_proc", libc.umount2, b"/proc", 2)
    call("unshare_user", libc.unshare, CLONE_NEWUSER)
    call("unshare_mount", libc.unshare, CLONE_NEWNS)
    call("unshare_net", libc.unshare, CLONE_NEWNET)
    call("unshare_pid", libc.unshare, CLONE_NEWPID)
    call("chroot", libc.chroot, b"/tmp")
    try:
        fd = os.open("/proc/1/ns/mnt", os.O_RDONLY)
    except OSError as error:
        results["setns"] = error.errno  # not even the namespace file is reachable
    else:
        call("setns", libc.setns, fd, 0)
    child = os.fork()
    if child == 0:
        import time
        time.sleep(30)
        os._exit(0)
    call("ptrace_attach", libc.ptrace, PTRACE_ATTACH, child, None, None)
    os.kill(child, 9)
    os.waitpid(child, 0)
    call("ptrace_traceme", libc.ptrace, PTRACE_TRACEME, 0, None, None)
    print(json.dumps(results))
"""


@pytest.mark.parametrize("user", [None, 1000], ids=["root", "uid1000"])
def test_mount_unshare_and_ptrace_are_denied(sandbox: Sandbox, user: int | None) -> None:
    results = probe(sandbox, _PRIVILEGED_CALLS, user=user)
    allowed = {name for name, outcome in results.items() if outcome == "ok"}
    assert allowed == set(), f"allowed inside the sandbox: {allowed}"
    # gVisor's /proc has no namespace files to open, so there setns has nothing to join.
    unreachable = {"setns": errno.ENOENT}
    assert all(outcome in (errno.EPERM, errno.EACCES) or unreachable.get(name) == outcome
               for name, outcome in results.items()), results
    for name in ("mount_tmpfs", "unshare_user", "unshare_mount", "ptrace_attach", "ptrace_traceme"):
        assert results[name] == errno.EPERM, results


@pytest.mark.parametrize("user", [None, "nobody"], ids=["root", "nobody"])
def test_no_command_can_stop_or_kill_the_agent(sandbox: Sandbox, user: str | None) -> None:
    """On gVisor a root command's SIGSTOP to the agent (pid 1) left every host call waiting, its SIGKILL
    ended the sandbox: gVisor does not keep a pid namespace's init from the processes in it, as Linux
    does. The seccomp filter lets no process signal pid 1, by any of the calls that name a pid."""
    for signal_name in ("STOP", "KILL", "SEGV", "TERM"):
        sent = within(BOUND, sandbox.run, "sh", "-c", f"kill -{signal_name} 1", user=user, timeout=20)
        assert sent.exit_code != 0, (signal_name, sent)
        assert within(BOUND, sandbox.run, "echo", "served", timeout=20).stdout == "served\n", signal_name
    assert within(BOUND, sandbox.run, "sh", "-c", "sleep 100 & kill $! && wait $!", user=user).exit_code == 143
    # Nor by making it the owner of a file, whom the kernel signals when it is ready (on gVisor,
    # F_SETOWN 1 with F_SETSIG SIGSTOP ended the sandbox).
    owned = within(BOUND, sandbox.run, "/usr/bin/python3", "-c", textwrap.dedent("""
        import fcntl, os, signal
        fcntl.fcntl(os.pipe()[0], fcntl.F_SETOWN, os.getpid())  # itself: as before
        r, w = os.pipe()
        try:
            fcntl.fcntl(r, fcntl.F_SETOWN, 1)
        except PermissionError:
            print("refused")
        fcntl.fcntl(r, 10, signal.SIGSTOP)  # F_SETSIG
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
        os.write(w, b"ready")
    """), user=user)
    assert owned.stdout == "refused\n", owned
    assert within(BOUND, sandbox.run, "echo", "served", timeout=20).stdout == "served\n"


@pytest.mark.parametrize("user", [None, "nobody"], ids=["root", "nobody"])
def test_no_command_can_lower_the_agents_limits_and_it_serves_on(sandbox: Sandbox, user: str | None) -> None:
    """A command run as root once lowered the agent's (pid 1) RLIMIT_NOFILE to 4: it could not accept
    the host's next connection, and the host's next call waited for ever. The seccomp filter lets a
    process set its own limits only."""
    lowered = within(BOUND, sandbox.run, "prlimit", "--pid", "1", "--nofile=4:4", user=user)
    assert lowered.exit_code != 0 and "Operation not permitted" in lowered.stderr, lowered
    assert within(BOUND, sandbox.run, "echo", "served").stdout == "served\n"
    # A process still sets its own (setrlimit), and what it starts inherits them.
    own = within(BOUND, sandbox.run, "sh", "-c",
                 "ulimit -n 100 && ulimit -n && prlimit --nofile=50:50 sh -c 'ulimit -n'", user=user)
    assert own.stdout == "100\n50\n", own


def test_proc_sys_and_sys_are_unwritable(sandbox: Sandbox) -> None:
    host_name = socket.gethostname()
    pids_max = cgroup_dir(sandbox.id) / "pids.max"
    limit_before = pids_max.read_text() if pids_max.exists() else None
    targets = ["/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger",
               "/proc/sys/kernel/core_pattern", "/sys/kernel/mm/transparent_hugepage/enabled",
               str(pids_max), "/sys/fs/cgroup/pids/cgroup.procs"]
    for user in (None, 1000):
        outcomes = probe(sandbox, f"""
            import json
            results = {{}}
            for path in {targets!r}:
                try:
                    with open(path, "w") as handle:
                        handle.write("1000000\\n")
                    results[path] = "ok"
                except OSError as error:
                    results[path] = error.errno
            print(json.dumps(results))
        """, user=user)
        written = {path for path, outcome in outcomes.items() if outcome == "ok"}
        assert written == set(), f"wrote as {user or 'root'}: {written}"
    mounts = sandbox.run("cat", "/proc/self/mounts").stdout.splitlines()
    writable_kernel_fs = [line for line in mounts
                          if line.split()[2] in ("sysfs", "cgroup", "cgroup2", "debugfs", "securityfs")
                          and "rw" in line.split()[3].split(",")]
    assert writable_kernel_fs == []
    assert socket.gethostname() == host_name
    if limit_before is not None:
        assert pids_max.read_text() == limit_before


def test_capabilities_and_no_new_privs(sandbox: Sandbox, backend: str) -> None:
    # gVisor has no ambient capability set, and its status file shows neither it nor NoNewPrivs:
    # no_new_privs is asked of the kernel itself (prctl PR_GET_NO_NEW_PRIVS) on every tier.
    fields = ("CapInh", "CapPrm", "CapEff", "CapBnd") + (("CapAmb",) if backend != "gvisor" else ())
    for user in (None, "nobody", 1000):
        status = dict(line.split(":", 1) for line in sandbox.run("cat", "/proc/self/status", user=user)
                      .stdout.splitlines() if ":" in line)
        for field in fields:
            assert int(status[field].strip(), 16) == 0, f"{field} as {user or 'root'}: {status[field].strip()}"
        assert py(sandbox, "import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))", user=user).stdout == "1\n"
        assert status["Seccomp"].strip() == "2"


def test_in_sandbox_root_is_not_host_root(sandbox: Sandbox, backend: str) -> None:
    # Inside gVisor the id maps are its own kernel's (identity): only the host's view below says
    # anything there. Its host processes run in the same user namespace the namespace tier uses.
    for kind in ("uid_map", "gid_map") if backend != "gvisor" else ():
        lines = [line.split() for line in sandbox.run("cat", f"/proc/self/{kind}").stdout.splitlines()]
        assert lines, kind
        for _inside, outside, count in lines:
            assert int(outside) != 0, f"{kind} maps onto host id 0: {lines}"
            assert not int(outside) <= 0 < int(outside) + int(count)
        assert any(int(inside) == 0 for inside, _, _ in lines)
    # Seen from the host, nothing in the sandbox runs as root.
    sandbox.exec("sleep", "30")
    processes = cgroup_processes(sandbox.id)
    assert processes
    for pid in processes:
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        ids = {line.split(":")[0]: line.split()[1:] for line in status if line.startswith(("Uid:", "Gid:"))}
        assert "0" not in ids["Uid"] + ids["Gid"], f"host pid {pid} runs with {ids}"


def test_setuid_binaries_do_not_raise_privilege(sandbox: Sandbox) -> None:
    result = sandbox.run("sh", "-c", "cp /usr/bin/id /tmp/suid-id && chmod 4755 /tmp/suid-id && /tmp/suid-id -u",
                         user=None)
    assert result.exit_code == 0
    as_user = sandbox.run("/tmp/suid-id", "-u", user=1000)
    assert as_user.stdout == "1000\n", "a setuid-root binary raised a user's privilege"


# --------------------------------------------------------------- files-API escapes


def test_no_command_writes_into_a_host_file_through_the_agents_output(sandbox: Sandbox) -> None:
    """On gVisor the agent's stdout and stderr were the host's log of the sandbox, and a root command
    could open them through /proc/1/fd: 10 MB written there grew that host file, outside the disk quota."""
    log = sandbox._record.directory / "log"
    before = log.stat().st_size
    for fd in (1, 2):
        within(BOUND, sandbox.run, "sh", "-c", f"head -c 1000000 /dev/zero > /proc/1/fd/{fd}")
    assert log.stat().st_size == before
    assert within(BOUND, sandbox.run, "echo", "served").stdout == "served\n"


def test_the_files_api_writes_no_file_of_the_kernels(sandbox: Sandbox) -> None:
    """/proc/self is the sandbox's agent, errand's own process inside: through the files API a write
    there once set its OOM score (and, on the namespace tier, its timer slack and its name)."""
    for path in ("/proc/self/oom_score_adj", "/proc/1/comm", "/proc/self/timerslack_ns"):
        with pytest.raises(FilesError) as refused:
            within(BOUND, sandbox.files.write, path, "1000")
        assert refused.value.errno in (errno.EACCES, errno.ENOENT), (path, refused.value)
    assert within(BOUND, sandbox.run, "cat", "/proc/1/oom_score_adj").stdout == "0\n"
    within(BOUND, sandbox.files.write, "/tmp/still", "files of the sandbox are written")
    assert within(BOUND, sandbox.files.read_text, "/tmp/still") == "files of the sandbox are written"


def test_files_api_dotdot_stays_inside(sandbox: Sandbox) -> None:
    host_shadow = Path("/etc/shadow").read_bytes()
    for path in ("/../../etc/shadow", "/../../../../../../etc/shadow", "/tmp/../../etc/shadow"):
        try:
            content = sandbox.files.read(path)
        except FilesError as error:
            assert error.code == "not_found"
        else:
            assert content != host_shadow
    assert sandbox.files.read("/../../etc/hostname") == sandbox.files.read("/etc/hostname")


def test_files_api_does_not_follow_symlinks_to_the_host(sandbox: Sandbox, host_secret: tuple[Path, str]) -> None:
    path, token = host_secret
    host_bashrc = Path("/root/.bashrc").read_bytes() if Path("/root/.bashrc").exists() else None
    links = {
        "/tmp/to-secret": str(path),
        "/tmp/to-secret-dir": str(path.parent),
        "/tmp/to-bashrc": "/root/.bashrc",
        "/tmp/to-shadow": "/etc/shadow",
        "/tmp/via-proc-root": f"/proc/1/root{path}",
        "/tmp/via-proc-root-shadow": "/proc/1/root/etc/shadow",
        "/tmp/via-self-root": f"/proc/self/root{path}",
        "/tmp/dotdot": f"../../../../..{path}",
        "/tmp/root-link": "/",
    }
    for link, target in links.items():
        assert sandbox.run("ln", "-s", target, link).exit_code == 0
    directories = {"/tmp/root-link"}  # reading a directory is a different error, tested elsewhere
    read_paths = [*sorted(set(links) - directories), "/tmp/to-secret-dir/secret.txt", f"/tmp/root-link{path}",
                  "/tmp/root-link/etc/shadow", f"/proc/1/root{path}", "/proc/1/root/etc/shadow",
                  "/tmp/root-link/root/.bashrc"]
    for read_path in read_paths:
        try:
            content = sandbox.files.read(read_path)
        except FilesError:
            continue
        assert token.encode() not in content, f"{read_path} reached the host secret"
        assert content != Path("/etc/shadow").read_bytes(), f"{read_path} reached the host's shadow"
        assert host_bashrc is None or content != host_bashrc, f"{read_path} reached the host's .bashrc"
    for read_path in ("/tmp/to-secret-dir", "/tmp/root-link/tmp"):
        try:
            names = [info.name for info in sandbox.files.list(read_path)]
        except FilesError:
            continue
        assert "secret.txt" not in names


def test_files_api_writes_through_symlinks_stay_inside(
        sandbox: Sandbox, host_secret: tuple[Path, str]) -> None:
    path, token = host_secret
    sandbox.run("ln", "-s", str(path), "/tmp/write-link")
    sandbox.run("ln", "-s", str(path.parent), "/tmp/write-dir-link")
    sandbox.run("mkdir", "-p", "/tmp/parent")
    sandbox.run("ln", "-s", "/proc/1/root" + str(path.parent), "/tmp/parent/escape")
    for target in ("/tmp/write-link", "/tmp/write-dir-link/secret.txt", "/tmp/write-dir-link/new.txt",
                   "/tmp/parent/escape/new.txt"):
        try:
            sandbox.files.write(target, "overwritten by the sandbox")
        except FilesError:
            pass
    for target in ("/tmp/write-dir-link/secret.txt", "/tmp/parent/escape/secret.txt"):
        try:
            sandbox.files.remove(target)
        except FilesError:
            pass
    try:
        sandbox.files.remove("/tmp/write-dir-link", recursive=True)
    except FilesError:
        pass
    assert path.read_text() == token + "\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret.txt"]


def test_snapshot_does_not_copy_host_files_through_symlinks(backend: str, host_secret: tuple[Path, str]) -> None:
    path, token = host_secret
    with Sandbox.create(isolation=backend, timeout=60) as sb:
        sb.run("ln", "-s", str(path), "/planted-secret")
        sb.run("ln", "-s", "/etc/shadow", "/planted-shadow")
        sb.run("ln", "-s", str(path.parent), "/planted-dir")
        image = sb.snapshot()
    with Sandbox.create(image=image, isolation=backend, timeout=60) as fork:
        for planted in ("/planted-secret", "/planted-shadow", "/planted-dir/secret.txt"):
            result = fork.run("cat", planted)
            assert token not in result.stdout
            assert result.stdout != Path("/etc/shadow").read_text()


# ---------------------------------------------------------------------- lifetimes


def _is_daemon(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"1000"]
    except OSError:
        return False


def _start_daemon(sb: Sandbox, backend: str) -> dict[int, str]:
    """Start a double-forked daemon; return every host process of the sandbox, the daemon among them
    (on gVisor the daemon lives in its kernel: the host processes are that kernel's)."""
    assert sb.run("sh", "-c", "(setsid sleep 1000 > /dev/null 2>&1 < /dev/null &)").exit_code == 0
    deadline = time.monotonic() + 10
    while not (_daemon_inside(sb) if backend == "gvisor" else any(map(_is_daemon, cgroup_processes(sb.id)))):
        assert time.monotonic() < deadline, "the double-forked daemon never showed up in the sandbox's cgroup"
        time.sleep(0.01)
    return cgroup_processes(sb.id)


def _daemon_inside(sb: Sandbox) -> bool:
    return "sleep\x001000" in sb.run("sh", "-c", "cat /proc/[0-9]*/cmdline").stdout


def test_lifetime_timeout_kills_a_double_forked_daemon(backend: str) -> None:
    sb = Sandbox.create(timeout=2, isolation=backend)
    try:
        processes = _start_daemon(sb, backend)
        within(BOUND, sb.wait)
        assert not sb.alive
        survivors = [pid for pid, started in processes.items() if alive(pid, started)]
        assert survivors == [], f"still running after the sandbox's lifetime ended: {survivors}"
        assert not cgroup_dir(sb.id).exists()
    finally:
        sb.terminate()


def test_terminate_kills_a_double_forked_daemon(backend: str) -> None:
    sb = Sandbox.create(timeout=60, isolation=backend)
    try:
        processes = _start_daemon(sb, backend)
    finally:
        sb.terminate()
    deadline = time.monotonic() + 10
    while any(alive(pid, started) for pid, started in processes.items()) and time.monotonic() < deadline:
        time.sleep(0.02)
    survivors = [pid for pid, started in processes.items() if alive(pid, started)]
    assert survivors == [], f"still running after terminate(): {survivors}"
    with pytest.raises(SandboxTerminated):
        sb.run("true")
