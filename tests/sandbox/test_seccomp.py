"""Tests for the bubblewrap seccomp filter: the program's shape, and real bwrap runs."""

from __future__ import annotations

import errno
import os
import platform
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from errand.errors import BackendUnavailable
from errand.sandbox._backends import seccomp
from errand.sandbox._backends.seccomp import build_filter, decode, filter_fd

MACHINES = ("x86_64", "aarch64")
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# Taken from the kernel headers independently of the module, for the in-sandbox probes.
PROBE_NR = {
    "x86_64": {"clone": 56, "keyctl": 250, "bpf": 321, "io_uring_setup": 425, "clone3": 435},
    "aarch64": {"clone": 220, "keyctl": 219, "bpf": 280, "io_uring_setup": 425, "clone3": 435},
}
CLONE_NEW = {
    "NEWNS": 0x00020000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000, "NEWIPC": 0x08000000,
    "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000, "NEWTIME": 0x00000080,
}
SIGCHLD = 17


# --- a tiny classic-BPF interpreter, to run the program against made-up syscalls ---

def run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate ``program`` on a seccomp_data with this nr, arch and 64-bit args."""
    words = {0: nr & 0xFFFFFFFF, 4: arch}
    for i, arg in enumerate(args):
        words[16 + 8 * i] = arg & 0xFFFFFFFF
        words[20 + 8 * i] = arg >> 32 & 0xFFFFFFFF
    insns, pc, acc = decode(program), 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == seccomp.RET_K:
            return k
        if code == seccomp.LD_W_ABS:
            acc, pc = words.get(k, 0), pc + 1
        elif code == seccomp.JEQ_K:
            pc += 1 + (jt if acc == k else jf)
        elif code == seccomp.JSET_K:
            pc += 1 + (jt if acc & k else jf)
        else:
            raise AssertionError(f"unexpected opcode {code:#x} at {pc}")


EPERM = seccomp.RET_ERRNO | errno.EPERM
ENOSYS = seccomp.RET_ERRNO | errno.ENOSYS
ALLOW = seccomp.RET_ALLOW


def nr_of(machine: str, name: str) -> int:
    number = seccomp._SYSCALLS[name][MACHINES.index(machine)]
    assert number is not None
    return number


def denied_names(machine: str) -> list[str]:
    names = [name for group in seccomp._DENIED for name in group]
    return [n for n in names if seccomp._SYSCALLS[n][MACHINES.index(machine)] is not None]


# --- the program's shape -------------------------------------------------------

@pytest.mark.parametrize("machine", MACHINES)
def test_program_shape(machine: str) -> None:
    program = build_filter(machine)
    assert len(program) % 8 == 0
    insns = decode(program)
    assert 0 < len(insns) < 4096
    assert insns[0] == (seccomp.LD_W_ABS, 0, 0, 4)  # load seccomp_data.arch first
    assert insns[1][0] == seccomp.JEQ_K and insns[1][3] == AUDIT_ARCH[machine]
    assert insns[-1][0] == seccomp.RET_K
    for pc, (code, jt, jf, _) in enumerate(insns):  # every jump lands inside the program
        if code in (seccomp.JEQ_K, seccomp.JSET_K):
            assert pc + 1 + max(jt, jf) < len(insns)


def test_numbers_differ_per_arch() -> None:
    def compared(machine: str) -> set[int]:
        return {k for code, _, _, k in decode(build_filter(machine)) if code == seccomp.JEQ_K}

    assert 165 in compared("x86_64") and 40 not in compared("x86_64")
    assert 40 in compared("aarch64") and 165 not in compared("aarch64")


def test_default_machine_and_cache() -> None:
    if platform.machine() not in MACHINES:
        pytest.skip("unsupported machine")
    assert build_filter() == build_filter(platform.machine())
    assert build_filter("aarch64") is build_filter("aarch64")


@pytest.mark.parametrize("machine", ["i686", "armv7l", "riscv64"])
def test_unknown_machine_raises(machine: str) -> None:
    with pytest.raises(BackendUnavailable, match=machine):
        build_filter(machine)
    with pytest.raises(BackendUnavailable):
        filter_fd(machine)


def test_assembler_rejects_long_jumps() -> None:
    ret: seccomp._Insn = (seccomp.RET_K, 0, 0, 0)
    far: list[seccomp._Insn | str] = [(seccomp.JEQ_K, "end", 0, 1), *[ret] * 256, "end", ret]
    with pytest.raises(ValueError, match="out of range"):
        seccomp._assemble(far)


def test_filter_fd_holds_program_at_offset_zero() -> None:
    fd = filter_fd()
    try:
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
        assert os.read(fd, 1 << 16) == build_filter()
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("header", "column"),
    [("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", 0), ("/usr/include/asm-generic/unistd.h", 1)],
)
def test_numbers_match_kernel_headers(header: str, column: int) -> None:
    path = Path(header)
    if not path.exists():
        pytest.skip(f"{header} not installed")
    pattern = re.compile(r"^#define __NR(?:3264)?_(\w+)\s+(\d+)\s*$", re.MULTILINE)
    defined = {m[1]: int(m[2]) for m in pattern.finditer(path.read_text())}
    for name, numbers in seccomp._SYSCALLS.items():
        assert defined.get(name) == numbers[column], name


# --- the policy, evaluated by the interpreter above --------------------------------

@pytest.mark.parametrize("machine", MACHINES)
def test_policy_decisions(machine: str) -> None:
    program, arch = build_filter(machine), AUDIT_ARCH[machine]

    def verdict(name_or_nr: str | int, *args: int) -> int:
        nr = nr_of(machine, name_or_nr) if isinstance(name_or_nr, str) else name_or_nr
        return run_bpf(program, nr, arch, args)

    for name in denied_names(machine):
        assert verdict(name) == EPERM, name
    assert run_bpf(program, nr_of(machine, "mount"), 0x40000003) == seccomp.RET_KILL_PROCESS  # i386
    assert verdict("clone3") == ENOSYS
    assert verdict("clone", SIGCHLD) == ALLOW
    assert verdict("clone", 0x003D0F00) == ALLOW  # glibc's pthread_create flags
    for flag in CLONE_NEW.values():
        assert verdict("clone", flag | SIGCHLD) == EPERM
    assert verdict("ioctl", 1, 0x5412) == EPERM  # TIOCSTI
    assert verdict("ioctl", 1, 0x541C) == EPERM  # TIOCLINUX
    assert verdict("ioctl", 1, 0x5401) == ALLOW  # TCGETS
    nofile, limits = 7, 0x7FFD_2000_1000  # a pointer whose low half is not zero
    assert verdict("prlimit64", 0, nofile, limits, 0) == ALLOW  # its own (setrlimit)
    assert verdict("prlimit64", 1, nofile, 0, limits) == ALLOW  # another's, read
    assert verdict("prlimit64", 1, nofile, limits, 0) == EPERM  # another's, set (pid 1: the agent)
    assert verdict("prlimit64", 1, nofile, 0x7FFD_0000_0000, 0) == EPERM  # a pointer whose low half is zero
    for name in ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open"):
        assert verdict(name, 1, 19) == EPERM, name  # the agent, pid 1 inside (19: SIGSTOP)
        assert verdict(name, 2, 19) == ALLOW, name
        assert verdict(name, -1 & 0xFFFF_FFFF, 9) == ALLOW, name  # kill(-1): everyone but init, as Linux has it
    assert verdict("fcntl", 3, 8, 1) == EPERM  # F_SETOWN: the agent
    assert verdict("fcntl", 3, 8, -1 & 0xFFFF_FFFF) == EPERM  # F_SETOWN: its process group
    assert verdict("fcntl", 3, 8, 1234) == ALLOW  # F_SETOWN: another (its own, say)
    assert verdict("fcntl", 3, 15, 0x7FFD_2000_1000) == EPERM  # F_SETOWN_EX: an owner behind a pointer
    assert verdict("fcntl", 3, 4, 0o4000) == ALLOW  # F_SETFL O_NONBLOCK
    assert verdict("ioctl", 3, 0x8901) == EPERM  # FIOSETOWN
    assert verdict("ioctl", 3, 0x8902) == EPERM  # SIOCSPGRP
    getpid = {"x86_64": 39, "aarch64": 172}[machine]
    assert verdict(getpid) == ALLOW
    x32 = EPERM if machine == "x86_64" else ALLOW
    assert verdict(getpid | 0x40000000) == x32


# --- real bubblewrap runs --------------------------------------------------------------

BWRAP = "/usr/bin/bwrap"
BWRAP_ARGS = [
    "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
    "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
    "--dev", "/dev", "--tmpfs", "/tmp",
]
needs_bwrap = pytest.mark.skipif(
    not os.path.exists(BWRAP) or platform.machine() not in MACHINES, reason="needs bwrap on x86_64/aarch64"
)


def _memfd(program: bytes) -> int:
    fd = os.memfd_create("test-seccomp")
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def bwrap(argv: list[str], *, program: bytes | None = None, extra: tuple[str, ...] = ()) -> str:
    """Run argv in the sandbox under ``program`` (default: ours); return its stdout."""
    fd = filter_fd() if program is None else _memfd(program)
    try:
        result = subprocess.run(
            [BWRAP, *BWRAP_ARGS, *extra, "--seccomp", str(fd), "--", *argv],
            pass_fds=[fd], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
        )
    finally:
        os.close(fd)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


PRELUDE = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {nr!r}
def report(ret):
    print(errno.errorcode[ctypes.get_errno()] if ret == -1 else "OK")
def fork_like(ret):  # a raw clone/clone3 that succeeded: the child leaves at once
    if ret == 0:
        os._exit(0)
    if ret > 0:
        os.waitpid(ret, 0)
    report(ret)
"""


def python(code: str, *, program: bytes | None = None, extra: tuple[str, ...] = ()) -> str:
    """Run a Python snippet (after PRELUDE) in the sandbox; return its stdout."""
    source = PRELUDE.format(nr=PROBE_NR[platform.machine()]) + textwrap.dedent(code)
    return bwrap(["/usr/bin/python3", "-c", source], program=program, extra=extra)


# Each probe prints the errno name of a call the filter must deny, or OK.
PROBES = {
    # Kernel would say ENOENT (lookup precedes the privilege check), whoever runs the tests.
    "mount": 'report(libc.mount(b"none", b"/no/such/dir", b"tmpfs", 0, None))',
    "unshare_user": f"report(libc.unshare({CLONE_NEW['NEWUSER']}))",
    "unshare_net": f"report(libc.unshare({CLONE_NEW['NEWNET']}))",
    # Kernel would say EINVAL (a net namespace fd, but a UTS nstype), whoever runs the tests.
    "setns": f'report(libc.setns(os.open("/proc/self/ns/net", os.O_RDONLY), {CLONE_NEW["NEWUTS"]}))',
    # From a forked child: bwrap's pid 1 holds fewer capabilities, so it may not become a tracer.
    "ptrace_traceme": """
        pid = os.fork()
        if pid == 0:
            report(libc.ptrace(0, 0, None, None))
            sys.stdout.flush()
            os._exit(0)
        os.waitpid(pid, 0)
    """,
    "bpf": 'report(libc.syscall(NR["bpf"], 0, ctypes.create_string_buffer(128), 72))',  # BPF_MAP_CREATE
    "keyctl": 'report(libc.syscall(NR["keyctl"], 0, -3, 1))',  # KEYCTL_GET_KEYRING_ID(session, create)
    "io_uring_setup": 'report(libc.syscall(NR["io_uring_setup"], 1, ctypes.create_string_buffer(120)))',
    # On a pipe, so the kernel would say ENOTTY rather than inject anything.
    "ioctl_tiocsti": 'report(libc.ioctl(os.pipe()[0], 0x5412, b"x"))',
    "ioctl_tioclinux": 'report(libc.ioctl(os.pipe()[0], 0x541C, b"\\x0b"))',
    "clone_newpid": f'fork_like(libc.syscall(NR["clone"], {CLONE_NEW["NEWPID"] | SIGCHLD}, 0, 0, 0, 0))',
}
if platform.machine() == "x86_64":
    PROBES["x32_getpid"] = "report(libc.syscall(0x40000000 | 39))"

# CAP_SYS_ADMIN & co. inside the sandbox, so only the filter stands in the way.
ALL_CAPS = ("--cap-add", "ALL")


@needs_bwrap
@pytest.mark.parametrize("probe", PROBES)
def test_denied_with_eperm(probe: str) -> None:
    assert python(PROBES[probe], extra=ALL_CAPS) == "EPERM"


@needs_bwrap
@pytest.mark.parametrize("probe", PROBES)
def test_probe_is_not_denied_without_filter(probe: str) -> None:
    """Control: under an allow-everything filter the same call is not refused with EPERM."""
    allow_all = seccomp._assemble([(seccomp.RET_K, 0, 0, seccomp.RET_ALLOW)])
    assert python(PROBES[probe], program=allow_all, extra=ALL_CAPS) != "EPERM"


@needs_bwrap
def test_shell_runs() -> None:
    assert bwrap(["sh", "-c", "echo ok"]) == "ok"


@needs_bwrap
def test_thread_and_subprocess() -> None:
    code = """
    import subprocess, threading
    out = []
    def work():
        out.append(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout)
    t = threading.Thread(target=work)
    t.start(); t.join()
    print(out[0].strip())
    """
    assert python(code) == "child"


@needs_bwrap
def test_fork() -> None:
    code = """
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """
    assert python(code) == "7"


@needs_bwrap
def test_plain_clone_allowed() -> None:
    assert python(f'fork_like(libc.syscall(NR["clone"], {SIGCHLD}, 0, 0, 0, 0))') == "OK"


@needs_bwrap
def test_sockets() -> None:
    code = """
    import socket
    a, b = socket.socketpair()
    a.sendall(b"ping")
    print(b.recv(4).decode(), end=" ")
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE).close()
    print("netlink")
    """
    assert python(code) == "ping netlink"


@needs_bwrap
def test_clone3_enosys_and_subprocess_falls_back() -> None:
    code = """
    import subprocess
    args = ctypes.create_string_buffer(88)  # struct clone_args, all zero but exit_signal
    ctypes.c_uint64.from_buffer(args, 32).value = 17
    fork_like(libc.syscall(NR["clone3"], args, 88))
    print(subprocess.run(["true"]).returncode)
    """
    assert python(code).split() == ["ENOSYS", "0"]
