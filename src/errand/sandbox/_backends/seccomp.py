"""The seccomp filter the bubblewrap backend loads with ``bwrap --seccomp FD``.

The sandbox runs untrusted code, which must still be able to fork, exec, use
threads, sockets and pipes, and change uid inside its own user namespace. So the
policy allows by default and denies, with ``EPERM``, the syscalls that reach
outside the sandbox or widen the kernel's attack surface (see ``_DENIED``).

The program is classic BPF, hand-assembled with :mod:`struct`: the raw bytes of an
array of ``struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}`` in native byte
order, which is what bwrap reads from the fd up to EOF.
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import struct
from collections.abc import Iterable, Sequence
from typing import TypeAlias

from errand.errors import BackendUnavailable

__all__ = ["build_filter", "decode", "filter_fd"]

# Classic BPF opcodes (linux/filter.h) and seccomp return actions (linux/seccomp.h).
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = 32-bit word at seccomp_data[k]
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: if A == k
JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K: if A & k
RET_K = 0x06  # BPF_RET | BPF_K: return k
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# struct seccomp_data {int nr; u32 arch; u64 instruction_pointer; u64 args[6];}.
# Both supported arches are little-endian, so an argument's low 32 bits come first.
_NR, _ARCH = 0, 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index


_INSN = struct.Struct("=HBBI")
_MAX_INSNS = 4096  # BPF_MAXINSNS: the kernel refuses longer programs
_MAX_JUMP = 255  # jt and jf are u8
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_CLONE_NEW_NAMESPACES = (  # linux/sched.h
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
    | 0x00000080  # CLONE_NEWTIME
)

# name: (x86_64 number, aarch64 number or None where the syscall does not exist).
# x86_64: asm/unistd_64.h (syscall_64.tbl); aarch64: asm-generic/unistd.h.
_SYSCALLS: dict[str, tuple[int, int | None]] = {
    "ioctl": (16, 29), "clone": (56, 220), "ptrace": (101, 117), "syslog": (103, 116),
    "uselib": (134, None), "pivot_root": (155, 41), "adjtimex": (159, 171), "chroot": (161, 51),
    "acct": (163, 89), "settimeofday": (164, 170), "mount": (165, 40), "umount2": (166, 39),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142), "init_module": (175, 105),
    "delete_module": (176, 106), "quotactl": (179, 60), "lookup_dcookie": (212, 18),
    "clock_settime": (227, 112), "kexec_load": (246, 104), "add_key": (248, 217),
    "request_key": (249, 218), "keyctl": (250, 219), "unshare": (272, 97),
    "perf_event_open": (298, 241), "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265),
    "clock_adjtime": (305, 266), "setns": (308, 268), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "kcmp": (312, 272), "finit_module": (313, 273),
    "kexec_file_load": (320, 294), "bpf": (321, 280), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "clone3": (435, 435), "mount_setattr": (442, 442),
    "quotactl_fd": (443, 443), "prlimit64": (302, 261), "kill": (62, 129), "tkill": (200, 130),
    "tgkill": (234, 131), "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240),
    "pidfd_open": (434, 434), "fcntl": (72, 25),
}

# Syscalls whose first argument is a process to signal (or to take a pidfd of, to signal it by):
# none may be the agent, pid 1 inside, which every host call goes through. Linux keeps a pid
# namespace's init from the signals of the processes in it; gVisor did not: a root command's
# SIGSTOP to pid 1 left every host call waiting, and its SIGKILL ended the sandbox.
_AT_A_PID = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open")
_AGENT_PID = 1
# Nor may a process make the agent the owner of one of its files, whom the kernel signals (SIGIO,
# or any signal F_SETSIG names) when it is ready: fcntl F_SETOWN naming pid 1 or process group 1,
# and the calls that name an owner through a pointer BPF cannot read (F_SETOWN_EX, and the socket
# ioctls FIOSETOWN and SIOCSPGRP).
_F_SETOWN, _F_SETOWN_EX = 8, 15
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902

# Syscalls answered with EPERM, one group per reason.
_DENIED: tuple[tuple[str, ...], ...] = (
    # Mounting and re-rooting could expose host paths or hide the sandbox's own bind mounts.
    ("mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
     "move_mount", "open_tree", "mount_setattr"),
    # New or joined namespaces re-grant capabilities and open kernel code paths to attack.
    ("unshare", "setns"),
    # Reading or writing another process's memory or comparing its kernel objects.
    ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp"),
    # Loading kernel code: modules, kexec and eBPF programs.
    ("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "bpf"),
    # The kernel keyring is not fully namespaced, so keys could be shared across sandboxes.
    ("keyctl", "add_key", "request_key"),
    # Large, frequently exploited kernel surfaces that ordinary programs do not need.
    ("perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register"),
    # File handles bypass path-based access checks (the "shocker" container escape).
    ("open_by_handle_at", "name_to_handle_at"),
    # Host-wide administration: swap, reboot, accounting, quotas, kernel log, old loaders.
    ("swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "lookup_dcookie",
     "syslog", "uselib"),
    # The clock is shared with the host and every other sandbox.
    ("settimeofday", "clock_settime", "clock_adjtime", "adjtimex"),
)

# (code, jt, jf, k) where jt and jf may name a label; a bare str in a program is a label.
_Insn: TypeAlias = tuple[int, int | str, int | str, int]


def _assemble(items: Sequence[_Insn | str]) -> bytes:
    """Resolve labels into relative jump offsets and pack the instructions."""
    labels: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in items:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)

    def offset(here: int, target: int | str) -> int:
        if isinstance(target, int):
            return target
        jump = labels[target] - here - 1
        if not 0 <= jump <= _MAX_JUMP:
            raise ValueError(f"jump to {target!r} out of range ({jump})")
        return jump

    packed = [_INSN.pack(op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(insns)]
    if len(packed) > _MAX_INSNS:
        raise ValueError(f"seccomp program too long ({len(packed)} instructions)")
    return b"".join(packed)


def decode(program: bytes) -> list[tuple[int, int, int, int]]:
    """Split a program back into ``(code, jt, jf, k)`` instructions."""
    return list(_INSN.iter_unpack(program))


def _numbers(machine: str, names: Iterable[str]) -> list[int]:
    """The syscall numbers of ``names`` on ``machine``, skipping those it lacks."""
    column = 0 if machine == "x86_64" else 1
    return [nr for nr in (_SYSCALLS[name][column] for name in names) if nr is not None]


def _program(machine: str) -> list[_Insn | str]:
    clone, clone3, ioctl, prlimit = _numbers(machine, ("clone", "clone3", "ioctl", "prlimit64"))
    at_a_pid = _numbers(machine, _AT_A_PID)
    [fcntl] = _numbers(machine, ("fcntl",))
    denied = _numbers(machine, (name for group in _DENIED for name in group))
    return [
        (LD_W_ABS, 0, 0, _ARCH),
        (JEQ_K, 0, "kill", _AUDIT_ARCH[machine]),
        (LD_W_ABS, 0, 0, _NR),
        # x32 syscalls on x86_64 take a separate, rarely audited path into the kernel.
        *([(JSET_K, "eperm", 0, _X32_SYSCALL_BIT)] if machine == "x86_64" else []),
        # clone3's flags sit in a struct BPF cannot read; ENOSYS makes glibc fall back to clone.
        (JEQ_K, "enosys", 0, clone3),
        (JEQ_K, "clone", 0, clone),
        (JEQ_K, "ioctl", 0, ioctl),
        (JEQ_K, "prlimit", 0, prlimit),
        *[(JEQ_K, "at_a_pid", 0, number) for number in at_a_pid],
        (JEQ_K, "fcntl", 0, fcntl),
        *[(JEQ_K, "eperm", 0, number) for number in denied],
        (RET_K, 0, 0, RET_ALLOW),
        "clone",  # clone(flags, ...): no new namespaces (see unshare)
        (LD_W_ABS, 0, 0, _arg_low(0)),
        (JSET_K, "eperm", "allow", _CLONE_NEW_NAMESPACES),
        "ioctl",  # ioctl(fd, request, ...): no pushing input into a terminal, no owner named (above)
        (LD_W_ABS, 0, 0, _arg_low(1)),
        (JEQ_K, "eperm", 0, _TIOCSTI),
        (JEQ_K, "eperm", 0, _FIOSETOWN),
        (JEQ_K, "eperm", 0, _SIOCSPGRP),
        (JEQ_K, "eperm", "allow", _TIOCLINUX),
        "fcntl",  # fcntl(fd, cmd, arg): no file owned by the agent
        (LD_W_ABS, 0, 0, _arg_low(1)),
        (JEQ_K, "eperm", 0, _F_SETOWN_EX),
        (JEQ_K, 0, "allow", _F_SETOWN),
        (LD_W_ABS, 0, 0, _arg_low(2)),
        (JEQ_K, "eperm", 0, _AGENT_PID),
        (JEQ_K, "eperm", "allow", -_AGENT_PID & 0xFFFF_FFFF),
        "at_a_pid",  # kill(pid, ...) and the like: any process but the agent
        (LD_W_ABS, 0, 0, _arg_low(0)),
        (JEQ_K, "eperm", "allow", _AGENT_PID),
        # prlimit64(pid, resource, new, old): a process sets its own limits (pid 0, as setrlimit
        # does), and reads any it may: one lowering the agent's, pid 1, left it unable to take the
        # host's next call, and the host waiting on it for ever.
        "prlimit",
        (LD_W_ABS, 0, 0, _arg_low(0)),
        (JEQ_K, "allow", 0, 0),
        (LD_W_ABS, 0, 0, _arg_low(2)),
        (JEQ_K, 0, "eperm", 0),
        (LD_W_ABS, 0, 0, _arg_low(2) + 4),
        (JEQ_K, "allow", "eperm", 0),
        "allow", (RET_K, 0, 0, RET_ALLOW),
        "eperm", (RET_K, 0, 0, RET_ERRNO | errno.EPERM),
        "enosys", (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS),
        "kill", (RET_K, 0, 0, RET_KILL_PROCESS),
    ]


@functools.lru_cache
def build_filter(machine: str | None = None) -> bytes:
    """Return the seccomp program for ``machine`` (default: this one) as raw bytes."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        supported = ", ".join(sorted(_AUDIT_ARCH))
        raise BackendUnavailable(f"no seccomp filter for machine {machine!r}; supported: {supported}")
    return _assemble(_program(machine))


def filter_fd(machine: str | None = None) -> int:
    """Return a new readable fd, positioned at 0, holding the program.

    bwrap reads the fd to EOF, so use each fd for one bwrap only; the caller
    closes it. It is close-on-exec: hand it over with ``pass_fds``.
    """
    program = build_filter(machine)
    if not hasattr(os, "memfd_create"):
        raise BackendUnavailable("seccomp filter needs os.memfd_create (Linux)")
    fd = os.memfd_create("errand-seccomp", os.MFD_CLOEXEC)
    try:
        view = memoryview(program)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
