"""Where a sandbox's writable layer lives: in memory, or on a disk of its own.

The overlay root's upper layer takes everything a sandbox writes. Two media:

* ``memory``: a tmpfs capped at the disk quota. Its pages are charged to the
  sandbox's memory cgroup, so writing more than the memory limit is an OOM kill,
  not a full disk.
* ``disk``: an ext4 filesystem of the quota's size in a sparse file under
  errand's home, loop-mounted by the launcher (``native/disk.c``). Filling it
  is ENOSPC; what is written is page cache the kernel writes back and reclaims,
  so it is independent of the memory limit. Sparse means the quota is not
  reserved on the host: if the host's disk fills first, writing back fails and
  the sandbox sees I/O errors (EIO from fsync) instead of ENOSPC. (A home on
  tmpfs would put the "disk" back in memory.)

Each image is a copy of an empty filesystem formatted once per size (a
template, kept in ``<home>/disk-templates``): copying its few hundred written
kilobytes costs ~0.1 ms where mke2fs costs 3-20 ms, as it ends with an fsync.
The launcher unlinks the image once it has it open, and its loop device
detaches itself when the sandbox's mount namespace ends, so a normal end leaves
nothing behind; ``gc`` removes an image whose launcher never took it, and
detaches any device still bound to an image of a sandbox that is gone.

Freeing an image's blocks is the slow part of a disk's end: on a host
filesystem mounted with ``discard`` each freed extent is a synchronous discard
to the device, ~30 ms in all here, which the sandbox's last process would pay
in its exit (the last close of the image is the loop device's) and
``terminate`` would wait for. So the host keeps a second name for the image
(``<id>-disk-held``) while the sandbox lives: the loop device's close is then
not the last, and ``discard`` takes that name away at cleanup, holding the
image open, and closes it on a thread of errand's own, where the blocks are
freed after ``terminate`` has returned.

``auto`` (the default) takes memory when the quota fits within the memory
limit and disk when it does not: the choice that never turns a full disk into
an OOM kill. See ``Resources`` for what each costs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from errand import _settings
from errand.errors import BackendUnavailable
from errand.sandbox.config import Resources

__all__ = ["detach_orphans", "discard", "image_size", "launch_arguments", "loop_devices", "on_disk", "wait_freed"]

_MiB = 1024**2
# ext4 as the launcher mounts it: no journal (the image dies with the sandbox), no blocks
# kept for root (the quota is the sandbox's), an inode per 8 KiB (trees of small files;
# unused inode tables are holes), and inode tables mke2fs marks zeroed by punching them.
_MKE2FS_OPTIONS = ("-q", "-F", "-t", "ext4", "-b", "4096", "-i", "8192", "-I", "256", "-m", "0",
                   "-O", "^has_journal,^resize_inode", "-E", "lazy_itable_init=1")
_LOOP_CLR_FD = 0x4C01
_SUFFIX = "-disk"
_HELD = "-disk-held"
# Closes images whose last name is gone, so the host frees their blocks off every caller's
# path. A free mostly waits on the device, so a few run at once (a thousand sandboxes
# ending together free one after another on one thread for ~30 s). Its threads are joined
# at interpreter exit: a process ending soon after a terminate still frees what it took.
_FREEING = ThreadPoolExecutor(max_workers=4, thread_name_prefix="errand-disk-free")
_freeing = threading.Condition()
_unfreed = 0


def on_disk(resources: Resources) -> bool:
    """Whether the sandbox's writable layer is a filesystem of its own on the host's disk."""
    if resources.disk_medium == "auto":
        return resources.disk > resources.memory
    return resources.disk_medium == "disk"


def image_path(sandbox_id: str) -> Path:
    """Where a sandbox's disk image is made (named so gc can tell whose it is)."""
    return _settings.home() / "scratch" / f"{sandbox_id}{_SUFFIX}"


def held_path(sandbox_id: str) -> Path:
    """The host's second name for a sandbox's disk image, kept until its cleanup."""
    return _settings.home() / "scratch" / f"{sandbox_id}{_HELD}"


def image_size(disk: int) -> int:
    """The size of the image whose ext4 leaves at least ``disk`` bytes to write.

    What ext4 keeps for itself, as formatted here: inode tables (256 bytes per 8 KiB,
    holes in the file until used), a bitmap pair per 128 MiB group, and a reserve of
    2% of the blocks (at most 16 MiB) for its own allocations."""
    size = disk * 32 // 31 + disk // 8192 + min(disk // 49, 16 * _MiB) + _MiB
    return -(-size // _MiB) * _MiB


def launch_arguments(sandbox_id: str, resources: Resources) -> list[str]:
    """The launcher's options that make the writable layer (for a disk, its image is made here)."""
    if not on_disk(resources):
        return ["--tmpfs", f"size={resources.disk},mode=0711"]
    if not os.path.exists("/dev/loop-control"):
        raise BackendUnavailable("a disk-backed writable layer needs loop devices: modprobe loop "
                                 "(or Resources(disk_medium='memory'), whose writes count toward memory)")
    image = image_path(sandbox_id)
    image.parent.mkdir(parents=True, exist_ok=True)
    _copy_sparse(_template(image_size(resources.disk)), image)
    os.link(image, held_path(sandbox_id))
    return ["--disk", str(image)]


def discard(sandbox_id: str) -> None:
    """Remove a sandbox's disk image: the name its launcher takes (if it never did) and the
    host's own, whose blocks are freed in the background (see the module's doc)."""
    global _unfreed
    with contextlib.suppress(FileNotFoundError):
        image_path(sandbox_id).unlink()
    held = held_path(sandbox_id)
    try:
        image = os.open(held, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    try:
        with contextlib.suppress(FileNotFoundError):  # another process's gc got there first
            held.unlink()
    finally:
        with _freeing:
            _unfreed += 1
        try:
            _FREEING.submit(_free, image)
        except RuntimeError:  # the interpreter is shutting down: no new threads, free it here
            _free(image)


def _free(image: int) -> None:
    global _unfreed
    try:
        os.close(image)
    finally:
        with _freeing:
            _unfreed -= 1
            _freeing.notify_all()


def wait_freed() -> None:
    """Return once every image this process let go of has been freed (benchmarks: the
    freeing is the host's work, and must not land in a measurement that follows)."""
    with _freeing:
        _freeing.wait_for(lambda: _unfreed == 0)


def _template(size: int) -> Path:
    """An empty filesystem of ``size`` bytes, formatted once and kept: each sandbox's image
    is a copy of its few written blocks, which costs ~0.1 ms where mke2fs costs 3-20 ms
    (it ends with an fsync, so the host's disk sets its pace)."""
    key = hashlib.sha256(repr(_MKE2FS_OPTIONS).encode()).hexdigest()[:12]
    template = _settings.home() / "disk-templates" / f"ext4-{key}-{size}"
    if template.exists():
        return template
    mkfs = shutil.which("mke2fs", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if mkfs is None:
        raise BackendUnavailable("a disk-backed writable layer needs mke2fs: apt-get install e2fsprogs "
                                 "(or Resources(disk_medium='memory'), whose writes count toward memory)")
    template.parent.mkdir(parents=True, exist_ok=True)
    partial = template.with_name(f".{template.name}.{uuid.uuid4().hex[:12]}")
    try:
        with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), "wb") as handle:
            handle.truncate(size)
        result = subprocess.run([mkfs, *_MKE2FS_OPTIONS, str(partial)], capture_output=True, text=True,
                                stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise BackendUnavailable(f"formatting a disk image failed: {result.stderr.strip()}")
        os.replace(partial, template)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return template


def _copy_sparse(source: Path, target: Path) -> None:
    """Copy ``source``'s data extents into a new file ``target`` of the same size, holes kept."""
    # Private from the first byte: what the sandbox writes lands in it.
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with open(source, "rb") as src, open(descriptor, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        position = 0
        while position < size:
            try:
                data = os.lseek(src.fileno(), position, os.SEEK_DATA)
            except OSError as error:
                if error.errno == errno.ENXIO:
                    break  # only a hole is left
                raise
            hole = os.lseek(src.fileno(), data, os.SEEK_HOLE)
            while data < hole:
                copied = os.copy_file_range(src.fileno(), dst.fileno(), hole - data, data, data)
                if copied == 0:
                    raise OSError(errno.EIO, f"{source} ended while being copied")
                data += copied
            position = hole
        dst.truncate(size)


def loop_devices() -> dict[str, str]:
    """Loop devices bound to errand's disk images now: device name -> sandbox id."""
    prefix = str(_settings.home() / "scratch") + "/"
    names = os.listdir("/sys/block") if os.path.isdir("/sys/block") else []
    found = {name: _owner(name, prefix) for name in sorted(names) if name.startswith("loop")}
    return {name: owner for name, owner in found.items() if owner is not None}


def detach_orphans(devices: dict[str, str], live: set[str]) -> list[str]:
    """Detach those of ``devices`` whose sandbox is not in ``live``; the names of those freed.

    The kernel detaches a device by itself once its filesystem is unmounted, so one
    still bound is either held by nothing (its launcher died between attaching and
    mounting, and no close has run yet) or by a mount that outlived its sandbox; the
    second is left to clear itself when that mount goes."""
    prefix = str(_settings.home() / "scratch") + "/"
    freed = []
    for name, owner in devices.items():
        if owner not in live and _detach(name, owner, prefix):
            freed.append(name)
    return freed


def _detach(name: str, owner: str, prefix: str) -> bool:
    try:
        device = os.open(f"/dev/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        # Again, now that the device is open: it clears itself only on its last close, so
        # it cannot be detached and rebound to a new sandbox between this read and the ioctl.
        if _owner(name, prefix) != owner:
            return False
        with contextlib.suppress(OSError):
            # With other openers, this only marks the device to clear on its last close.
            fcntl.ioctl(device, _LOOP_CLR_FD)
    finally:
        os.close(device)
    return _owner(name, prefix) is None


def _owner(name: str, prefix: str) -> str | None:
    """The sandbox whose image backs loop device ``name``, or None if it is not errand's."""
    try:
        backing = Path(f"/sys/block/{name}/loop/backing_file").read_text().rstrip("\n")
    except OSError:
        return None  # not bound
    backing = backing.removesuffix(" (deleted)")
    if not backing.startswith(prefix) or not backing.endswith(_SUFFIX) or "/" in backing[len(prefix):]:
        return None
    return backing[len(prefix):-len(_SUFFIX)]
