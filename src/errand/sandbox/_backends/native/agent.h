/*
 * What errand-agent's source files share: the wire format's helpers, the
 * client table of `serve`, and the entry points each file provides.
 *
 *   errand-agent.c  main, `launch` (host side) and `serve` (the in-sandbox agent)
 *   relay.c         `launch --relay`: the gVisor tier's host side (runsc + a relay)
 *   files.c         the files API's operations, streamed over pipes the host sends
 *   disk.c          `launch --disk`: the writable layer on a loop-mounted ext4 image
 */
#ifndef ERRAND_AGENT_H
#define ERRAND_AGENT_H

#include <stddef.h>
#include <sys/types.h>

#define MAX_CLIENTS 1024
#define MAX_FIELDS 4096
#define MAX_MSG (1 << 20)

struct transfer;

struct client {
    int fd;
    pid_t pid;              /* running command started on this connection, or 0 */
    char *buf;
    size_t len;
    struct transfer *xfer;  /* a file's content moving through a pipe, or NULL */
};

void die(const char *what);
void drop_to(uid_t uid);
int send_msg(int fd, const char *payload, size_t len, int pass_fd);
int send_fd(int channel, int fd);
int child_signalfd(void);
void reply(int fd, const char *text);
void reply_errno(int fd, int err);

/* relay.c: run `argv` (runsc) in the sandbox's user namespace with one end of a
 * socket pair as its stdin, then relay each connection accepted on `listen_fd`
 * to the agent over the other end. Returns when every child has ended. */
int relay(int userns, uid_t uid, int listen_fd, int die_with_parent, char **argv);

/* disk.c: attach `image` (unlinking it) to a self-clearing loop device and mount it at `run`. */
void mount_disk(const char *image, const char *run);

/* files.c */
void do_read(struct client *c, char **f, int nf, int *fds, int nfds);
void do_write(struct client *c, char **f, int nf, int *fds, int nfds);
void do_stat(struct client *c, char **f, int nf);
void do_list(struct client *c, char **f, int nf, int *fds, int nfds);
/* The descriptor and events to poll for c's transfer, or -1. */
int transfer_poll(const struct client *c, short *events);
/* Move what is ready; ends the transfer (and replies, for writes) when done. */
void transfer_step(struct client *c);
void transfer_end(struct client *c);

#endif
