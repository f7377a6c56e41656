"""``attach()`` in ``native/disk.c`` against a scripted kernel and /dev.

The loop devices a launcher meets when it loses the lowest free one to another (which it then
tries a random distance past) cannot be arranged on a shared host, so disk.c is compiled here
with ``open`` and ``ioctl`` answered by a small model of the kernel and of /dev; each scenario
runs many times, as the launcher's pick is random.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "src" / "errand" / "sandbox" / "_backends" / "native"

HARNESS = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MAX 4096
/* The model: a device exists in the kernel, has a node in /dev, is bound (attached) or not. */
static int exists[MAX], node[MAX], bound[MAX], fd_device[MAX];
static int control_fd = -1, configures = 0;
/* How the world behaves, from argv[1]:
 *   racing  /dev is devtmpfs, and every device past the last one is being added by another
 *           launcher as this one asks: LOOP_CTL_ADD says EEXIST, the node appears a moment later,
 *           and that launcher attaches it;
 *   nodes   /dev is a container's: a device made after it was filled has no node, ever;
 *   unlive  the lowest free device's node is there but its disk is not live yet (another
 *           launcher's add under way): opening it says ENXIO, and that launcher attaches it. */
static int racing, node_pending = -1, unlive = -1;

static void lose_pending(void) {  /* the other launcher's add completes: its node is there now */
    if (node_pending >= 0) { node[node_pending] = 1; node_pending = -1; }
}

static int fake_open(const char *path, int flags, ...) {
    (void)flags;
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC), n;
    if (strcmp(path, "/dev/loop-control") == 0) return control_fd = fd;
    if (sscanf(path, "/dev/loop%d", &n) != 1 || n < 0 || n >= MAX) abort();
    if (!exists[n] || !node[n]) { lose_pending(); close(fd); errno = ENOENT; return -1; }
    if (n == unlive) { bound[n] = 1; unlive = -1; close(fd); errno = ENXIO; return -1; }
    lose_pending();
    fd_device[fd] = n;
    return fd;
}

static int fake_ioctl(int fd, unsigned long request, ...) {
    va_list args;
    va_start(args, request);
    long arg = va_arg(args, long);
    va_end(args);
    if (request == LOOP_CTL_GET_FREE) {
        lose_pending();
        for (int n = 0; n < MAX; n++)
            if (exists[n] && !bound[n]) return n;
        for (int n = 0; n < MAX; n++)
            if (!exists[n]) { exists[n] = 1; node[n] = racing; return n; }  /* the kernel makes one */
        abort();
    }
    if (request == LOOP_CTL_ADD) {
        int n = (int)arg;
        if (exists[n]) { errno = EEXIST; return -1; }
        exists[n] = 1;
        if (racing) {  /* another launcher took the number first; its node comes a moment later */
            bound[n] = 1;
            node_pending = n;
            errno = EEXIST;
            return -1;
        }
        return n;  /* made, but with no node: the container's /dev was filled before */
    }
    if (request == LOOP_CONFIGURE) {
        int n = fd_device[fd];
        if (bound[n] || configures++ == 0) { bound[n] = 1; errno = EBUSY; return -1; }  /* the first: lost */
        bound[n] = 1;
        return 0;
    }
    abort();
}

#define open fake_open
#define ioctl fake_ioctl
#include "disk.c"
#undef open
#undef ioctl

void die(const char *what) { fprintf(stderr, "die: %s: %s\n", what, strerror(errno)); exit(1); }
void drop_to(uid_t uid) { (void)uid; abort(); }

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    racing = strcmp(argv[1], "racing") == 0;
    int last = racing ? 9 : 7, free_from = racing ? 9 : 5;
    if (strcmp(argv[1], "unlive") == 0) {  /* every device made, with a node; 9 the lowest free, not live */
        last = MAX - 1, free_from = 9, unlive = 9;
        configures = 1;  /* no configure is lost here */
    }
    for (int n = 0; n <= last; n++) { exists[n] = node[n] = 1; bound[n] = n < free_from; }
    /* racing: 9 is free (and lost to another at once); then GET_FREE makes 10, the only free one.
     * nodes: 5 is free (and lost at once); 6 and 7 are free, with nodes. */
    char device[64];
    int backing = open("/dev/null", O_RDWR | O_CLOEXEC);
    attach(backing, "image", device, sizeof device);
    printf("%s\n", device);
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    directory = tmp_path_factory.mktemp("attach")
    (directory / "harness.c").write_text(HARNESS)
    binary = directory / "harness"
    subprocess.run([compiler, "-O2", "-Wall", "-I", str(NATIVE), "-o", str(binary), str(directory / "harness.c")],
                   check=True, capture_output=True, text=True)
    return binary


def _runs(harness: Path, world: str, times: int = 40) -> list[str]:
    """What each of ``times`` launchers said: the device it attached, or why it died."""
    said = []
    for _ in range(times):
        done = subprocess.run([str(harness), world], capture_output=True, text=True, timeout=30, check=False)
        said.append(done.stdout.strip() if done.returncode == 0 else done.stderr.strip())
    return said


def test_a_launcher_that_meets_a_device_another_is_adding_tries_another_rather_than_dying(harness: Path) -> None:
    """LOOP_CTL_ADD answers EEXIST as soon as another launcher has taken the number, before the
    kernel has made the device's node (loop_add allocates the number, then adds the disk): the
    node is not there yet. That device is another's; the launcher must go on to another, as it
    does after any loss, not die with "/dev/loopN: No such file or directory"."""
    said = _runs(harness, "racing")
    assert said == ["/dev/loop10"] * len(said), sorted(set(said))


def test_a_launcher_whose_dev_gets_no_node_for_a_new_device_takes_a_free_one_that_has_one(harness: Path) -> None:
    """Where /dev is not devtmpfs (a container's, filled as it started) a device made now has no
    node. A launcher that lost the lowest free device found the next free one before the spread;
    it must still, not die on the first random pick past the last node."""
    said = _runs(harness, "nodes")
    assert set(said) <= {"/dev/loop6", "/dev/loop7"}, sorted(set(said))


def test_a_launcher_that_opens_a_device_whose_disk_is_not_live_tries_another_rather_than_dying(
        harness: Path) -> None:
    """The node of a device another launcher is adding can be there before its disk is live (or
    still be there as it is removed): opening it says ENXIO. That is a loss like the others, not
    "/dev/loop9: No such device or address" (55 of 1,000 sandboxes started at once died on it)."""
    said = _runs(harness, "unlive")
    assert all(re.fullmatch(r"/dev/loop\d+", line) and int(line.removeprefix("/dev/loop")) >= 10
               for line in said), sorted(set(said))
