/*
 * The disk-backed writable layer: `launch --disk IMAGE`.
 *
 * IMAGE is a sparse file the host made for this sandbox, already holding an
 * empty ext4 of the sandbox's disk quota (see writable.py). The launcher
 *
 *   - opens it and unlinks it at once: from here on only descriptors and the
 *     host's own second name for it hold it (the host frees it, off the
 *     sandbox's exit: see writable.py), so nothing here leaves a name behind;
 *   - attaches it to a free loop device with LOOP_CONFIGURE and AUTOCLEAR: the
 *     kernel detaches the device by itself on its last close, that is once the
 *     filesystem is unmounted, or at once if this process dies before mounting;
 *   - mounts it at `run`, in the sandbox's private mount namespace, which dies
 *     with the sandbox's last process: unmounting, detaching and freeing the
 *     file's blocks follow without anyone having to ask;
 *   - tells ext4 not to prefetch block bitmaps (see no_prefetch below).
 *
 * The loop device does buffered I/O: writing back the sandbox's files costs no
 * host disk I/O until the host's own writeback runs, and none at all for what
 * a short-lived sandbox wrote, as the file's pages are dropped with it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

#define LOOP_BLOCK_SIZE 4096 /* the filesystem's own: no read-modify-write below it */
/* Launchers starting together are all told the same free device (the lowest), and only
 * one wins it; each loser waits out the winner's attach before it learns it lost, a few
 * milliseconds under load. Waiting and asking again, as this once did, cost each of 1,000
 * sandboxes started 50 at a time 69 losses and 3.2 s on average. So a launcher that lost
 * takes a device at a random distance of up to SPREAD past the lowest free one (made if
 * there is none yet), and a herd mostly lands on different devices the second time. The
 * device count grows to those in use at once plus SPREAD at most, only where launchers
 * collide; unused ones cost the host little, and the lowest free ones are taken first. */
#define SPREAD 64
#define ATTACH_TRIES 1024

/* A loop device over `backing`, its path in `device`; returns its descriptor. */
static int attach(int backing, const char *name, char *device, size_t size) {
    int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (control < 0) die("/dev/loop-control");
    struct timespec seed;
    clock_gettime(CLOCK_MONOTONIC, &seed);
    unsigned int draw = (unsigned int)getpid() ^ (unsigned int)seed.tv_nsec;
    int lost = EBUSY;
    for (int attempt = 0; attempt < ATTACH_TRIES; attempt++) {
        int n = ioctl(control, LOOP_CTL_GET_FREE);
        if (n < 0) die("find a free loop device");
        if (attempt > 0) n += (int)(rand_r(&draw) % SPREAD);
        snprintf(device, size, "/dev/loop%d", n);
        int loop = open(device, O_RDWR | O_CLOEXEC);
        if (loop < 0 && errno == ENOENT) { /* past the last device: make this one */
            if (ioctl(control, LOOP_CTL_ADD, n) < 0 && errno != EEXIST) die("add a loop device");
            loop = open(device, O_RDWR | O_CLOEXEC);
        }
        /* Each a loss, and another device is tried:
         * - ENOENT, still no node: another launcher is adding this device (LOOP_CTL_ADD says
         *   EEXIST as soon as it has the number, before the kernel has made the node), so it is
         *   that launcher's; or /dev is not devtmpfs (a container's, filled as it started), where
         *   a new device gets no node.
         * - ENXIO: its node is there but its disk is not live yet (another launcher's add, still
         *   under way) or no longer (being removed): 55 of 1,000 sandboxes started at once failed
         *   on it before.
         * - EBUSY: in use and mounted, where the kernel refuses writers. */
        if (loop < 0 && (errno == ENOENT || errno == ENXIO || errno == EBUSY)) {
            lost = errno;
            continue;
        }
        if (loop < 0) die(device);
        struct loop_config config;
        memset(&config, 0, sizeof config);
        config.fd = (unsigned int)backing;
        config.block_size = LOOP_BLOCK_SIZE;
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        snprintf((char *)config.info.lo_file_name, LO_NAME_SIZE, "%s", name);
        if (ioctl(loop, LOOP_CONFIGURE, &config) == 0) {
            close(control);
            return loop;
        }
        if (errno != EBUSY) die("attach a loop device");
        lost = EBUSY;
        close(loop);
    }
    errno = lost;
    die("attach a loop device");
    return -1;
}

/* ext4's allocator, on its first allocation, reads the block bitmaps of up to 8 flex
 * groups' worth of block groups ahead (128 for this image's 16-group flex_bg) and builds
 * their buddy caches: 3 pages a group, charged to the sandbox. For a 4 GiB quota (32
 * groups) that was 115 of an idle sandbox's pages, 0.45 MiB, and a 16 GiB quota's was three
 * times that, though the image is sparse and all but a group or two stay empty. Without
 * prefetch a group's bitmap is read when the allocator first looks at that group. The knob
 * is the mounted filesystem's, in sysfs; where it cannot be set (an older kernel, a
 * read-only /sys) the sandbox only idles larger, so that is not an error. */
static void no_prefetch(const char *device) {
    char knob[96];
    snprintf(knob, sizeof knob, "/sys/fs/ext4/%s/mb_prefetch", device + strlen("/dev/"));
    int fd = open(knob, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (write(fd, "0", 1) < 0) { /* nothing to do but idle larger */ }
    close(fd);
}

void mount_disk(const char *image, const char *run) {
    char device[64], lost[4096];
    int backing = open(image, O_RDWR | O_CLOEXEC);
    if (backing < 0) die(image);
    if (unlink(image) < 0) die("unlink the disk image");
    int loop = attach(backing, image, device, sizeof device);
    /* nobarrier: no cache flush or FUA write, which the loop device would turn into an
     * fsync of the image, so the host disk's pace (a journal commit) would set ours;
     * the image dies with the sandbox, so nothing is lost by not making it durable.
     * noinit_itable: its inode tables are holes, zero already; nothing for the
     * kernel's lazy-init thread to write behind the sandbox's back. */
    if (mount(device, run, "ext4", MS_NOSUID | MS_NODEV, "nobarrier,noinit_itable") < 0)
        die("mount the disk image");
    no_prefetch(device);
    close(loop); /* the mount holds the device now: its release is the detach */
    close(backing);
    if (chmod(run, 0711) < 0) die("chmod the disk's root");
    snprintf(lost, sizeof lost, "%s/lost+found", run);
    rmdir(lost); /* no fsck will ever look for it */
}
