/*
 * The files API's operations, run by the agent inside the sandbox.
 *
 * Every path is resolved here, in the sandbox's own root, with the sandbox's
 * own credentials. Contents never travel as descriptors from the sandbox to
 * the host (gVisor cannot pass them that way, and the host is safer without
 * them): the host sends one end of a pipe with the request, and the agent
 * moves the bytes through it from its poll loop, so a large file does not
 * stop other clients. Only regular files are read or written: a FIFO or a
 * device could hang or exhaust the host.
 *
 *   read  path max       + pipe write end  -> "ok", the content, then "done"
 *   write path flags mode + pipe read end  -> "ok", then "done" once the pipe ends
 *   list  path           + pipe write end  -> "ok", entries, then "done"
 *   stat  path                             -> "ok" type size mode mtime
 *
 * An entry is "name\0type\0size\0mode\0mtime\0"; type is f, d, l or o.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "agent.h"

#define CHUNK 65536
#define ROUNDS 16 /* chunks per turn, so one transfer cannot starve other clients */

struct transfer {
    int from, to;       /* from is -1 when everything to send is already in buf */
    char *buf;
    size_t start, end;  /* the bytes of buf still to write */
    long long left;     /* bytes `from` may still give (a read stops past the host's limit); -1: all */
};

static void reply_not_regular(struct client *c, mode_t mode) {
    if (S_ISDIR(mode)) reply_errno(c->fd, EISDIR);
    else reply(c->fd, "error\n22\nnot a regular file");
}

/* Open without blocking (a FIFO cannot wedge the agent) and only a regular file. */
static int open_regular(struct client *c, const char *path, int flags, mode_t mode) {
    int fd = open(path, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode);
    if (fd < 0) { reply_errno(c->fd, errno); return -1; }
    struct stat info;
    if (fstat(fd, &info) < 0) { reply_errno(c->fd, errno); close(fd); return -1; }
    if (!S_ISREG(info.st_mode)) { reply_not_regular(c, info.st_mode); close(fd); return -1; }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* Takes ownership of `from`, `to` and `buf`. */
static void transfer_start(struct client *c, int from, int to, char *buf, size_t len, long long left) {
    struct transfer *t = calloc(1, sizeof *t);
    if (!buf) buf = malloc(CHUNK);
    if (!t || !buf) {
        free(t);
        free(buf);
        if (from >= 0) close(from);
        close(to);
        reply_errno(c->fd, ENOMEM);
        return;
    }
    *t = (struct transfer){from, to, buf, 0, len, left};
    /* The pipe end is polled; the file end is a regular file and never blocks long. */
    int pipe_end = from >= 0 && left < 0 ? from : to;
    fcntl(pipe_end, F_SETFL, fcntl(pipe_end, F_GETFL) | O_NONBLOCK);
    c->xfer = t;
    reply(c->fd, "ok");
}

void transfer_end(struct client *c) {
    struct transfer *t = c->xfer;
    if (!t) return;
    if (t->from >= 0) close(t->from);
    close(t->to);
    free(t->buf);
    free(t);
    c->xfer = NULL;
}

static void transfer_finish(struct client *c, int err) {
    transfer_end(c); /* closing the pipe first: the host sees the end of the data, then the verdict */
    if (err) reply_errno(c->fd, err);
    else reply(c->fd, "done");
}

int transfer_poll(const struct client *c, short *events) {
    const struct transfer *t = c->xfer;
    if (!t) return -1;
    if (t->from >= 0 && t->left < 0) { *events = POLLIN; return t->from; }
    *events = POLLOUT;
    return t->to;
}

void transfer_step(struct client *c) {
    struct transfer *t = c->xfer;
    for (int round = 0; round < ROUNDS; round++) {
        if (t->start == t->end) {
            if (t->from < 0 || t->left == 0) { transfer_finish(c, 0); return; }
            size_t want = t->left > 0 && t->left < CHUNK ? (size_t)t->left : CHUNK;
            ssize_t got = read(t->from, t->buf, want);
            if (got < 0 && errno == EAGAIN) return;
            if (got <= 0) { transfer_finish(c, got < 0 ? errno : 0); return; }
            t->start = 0;
            t->end = (size_t)got;
            if (t->left > 0) t->left -= got;
        }
        ssize_t put = write(t->to, t->buf + t->start, t->end - t->start);
        if (put < 0 && errno == EAGAIN) return;
        if (put < 0) { transfer_finish(c, errno); return; }
        t->start += (size_t)put;
    }
}

static int take_pipe(struct client *c, int nf, int want, int *fds, int nfds) {
    if (c->xfer || nf != want || nfds != 1) { reply_errno(c->fd, c->xfer ? EBUSY : EINVAL); return -1; }
    int fd = fds[0];
    fds[0] = -1; /* ours now: the caller closes what is left */
    return fd;
}

void do_read(struct client *c, char **f, int nf, int *fds, int nfds) {
    int out = take_pipe(c, nf, 3, fds, nfds);
    if (out < 0) return;
    long long max = atoll(f[2]);
    int fd = open_regular(c, f[1], O_RDONLY, 0);
    struct stat info;
    if (fd >= 0 && fstat(fd, &info) == 0 && info.st_size > max) {
        reply_errno(c->fd, EFBIG);
        close(fd);
        fd = -1;
    }
    if (fd < 0) { close(out); return; }
    transfer_start(c, fd, out, NULL, 0, max + 1); /* max + 1: a file grown meanwhile is still caught */
}

void do_write(struct client *c, char **f, int nf, int *fds, int nfds) {
    int in = take_pipe(c, nf, 4, fds, nfds);
    if (in < 0) return;
    int fd = open_regular(c, f[1], atoi(f[2]), (mode_t)strtoul(f[3], NULL, 8));
    if (fd < 0) { close(in); return; }
    /* /proc and /sys are the kernel's, and /proc/self is this agent: a write there (its timer
     * slack, its OOM score) would change errand's own process, not a file of the sandbox. */
    struct statfs where;
    if (fstatfs(fd, &where) < 0 || where.f_type == PROC_SUPER_MAGIC || where.f_type == SYSFS_MAGIC) {
        reply_errno(c->fd, EACCES);
        close(fd);
        close(in);
        return;
    }
    transfer_start(c, in, fd, NULL, 0, -1);
}

static char kind_of(mode_t mode) {
    return S_ISREG(mode) ? 'f' : S_ISDIR(mode) ? 'd' : S_ISLNK(mode) ? 'l' : 'o';
}

static int describe(char *out, size_t room, const struct stat *info) {
    return snprintf(out, room, "%c%c%lld%c%o%c%lld.%09ld", kind_of(info->st_mode), 0,
                    (long long)info->st_size, 0, (unsigned)(info->st_mode & 07777), 0,
                    (long long)info->st_mtim.tv_sec, info->st_mtim.tv_nsec);
}

void do_stat(struct client *c, char **f, int nf) {
    struct stat info;
    if (nf != 2) { reply_errno(c->fd, EINVAL); return; }
    if (lstat(f[1], &info) < 0) { reply_errno(c->fd, errno); return; }
    char text[128] = "ok";
    int n = describe(text + 3, sizeof text - 3, &info);
    send_msg(c->fd, text, (size_t)n + 3, -1);
}

void do_list(struct client *c, char **f, int nf, int *fds, int nfds) {
    int out = take_pipe(c, nf, 2, fds, nfds);
    if (out < 0) return;
    DIR *dir = opendir(f[1]);
    if (!dir) { reply_errno(c->fd, errno); close(out); return; }
    size_t len = 0, cap = CHUNK;
    char *buf = malloc(cap);
    struct dirent *entry;
    while (buf && (entry = readdir(dir))) {
        struct stat info;
        if (!strcmp(entry->d_name, ".") || !strcmp(entry->d_name, "..")) continue;
        if (fstatat(dirfd(dir), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) < 0) continue; /* removed meanwhile */
        size_t need = strlen(entry->d_name) + 128;
        if (len + need > cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) { free(buf); buf = NULL; break; }
            buf = grown;
        }
        len += (size_t)sprintf(buf + len, "%s", entry->d_name) + 1;
        len += (size_t)describe(buf + len, cap - len, &info) + 1;
    }
    closedir(dir);
    if (!buf) { reply_errno(c->fd, ENOMEM); close(out); return; }
    transfer_start(c, -1, out, buf, len, 0);
}
