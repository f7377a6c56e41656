/*
 * gvisor-statx.so: preloaded (via /etc/ld.so.preload) in gVisor sandboxes only.
 *
 * Debian's runsc (20221219) answers statx() and fstatat() with EINVAL when the
 * flags hold AT_NO_AUTOMOUNT, which coreutils 9 passes on every stat: `ls -l`,
 * `stat`, `cp -a` all fail. The flag only matters for automount points, which
 * a sandbox has none of, so these wrappers drop it and make the system call.
 * Statically linked programs bypass this; they are rarely coreutils.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf) {
    return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}

int fstatat(int dirfd, const char *path, struct stat *buf, int flags) {
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}

int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags) {
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}
