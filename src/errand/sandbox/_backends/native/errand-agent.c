/*
 * errand-agent: the small native pieces of errand's sandboxes (both tiers).
 *
 *   errand-agent launch [options] -- bwrap-args...
 *       Runs on the host as root, in a fresh process that then *becomes* bwrap.
 *       It joins the sandbox's cgroups (so nothing the sandbox forks escapes its
 *       limits), creates a user namespace that maps in-sandbox ids 0..65535 onto
 *       an unprivileged host range, mounts the root overlay (a size-capped tmpfs,
 *       or with `--disk` a loop-mounted ext4 image, as the writable layer; see
 *       disk.c) in a private mount namespace that dies with the
 *       sandbox, drops to the unprivileged uid and execs bwrap.
 *       With `--relay FD` (the gVisor tier) it runs runsc instead and stays on as
 *       the relay for the control socket FD (see relay.c).
 *
 *   errand-agent serve --lifetime S --idle S [--relay 1]
 *       Runs inside the sandbox as its init: bwrap's command (bwrap --as-pid-1),
 *       or the gVisor container's init. It takes host connections (accepted on fd 3, a listening socket the
 *       host created, no path to which exists inside the sandbox; or, relayed,
 *       passed to it over fd 0) and starts commands with the stdio file
 *       descriptors the host sends it, so output never passes through the agent.
 *       It also serves the host's files API (files.c), so every path is resolved
 *       inside the sandbox's own root. Everything it starts inherits the
 *       sandbox's namespaces, seccomp filter and cgroups; exec in a running
 *       sandbox costs one fork.
 *
 * Why C: the agent must run in any image (even one without Python) and start in
 * well under a millisecond; the launcher must join cgroups before bwrap forks.
 *
 * Wire format (both directions): u32 little-endian length, then fields separated
 * by NUL bytes. File descriptors ride along as SCM_RIGHTS on the same message.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <arpa/inet.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

#define ID_RANGE 65536

void die(const char *what) {
    fprintf(stderr, "errand-agent: %s: %s\n", what, strerror(errno));
    _exit(125);
}

/* ---------------------------------------------------------------- launch -- */

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) < 0) die(path);
    close(fd);
}

void drop_to(uid_t uid) {
    if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
        die("drop privileges");
}

/* A user namespace owned by `uid`, with in-sandbox ids 0..65535 mapped onto
 * uid..uid+65535. Only a privileged parent may write a map wider than one id. */
static int make_userns(uid_t uid) {
    int ready[2], go[2];
    if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) die("pipe");
    pid_t child = fork();
    if (child < 0) die("fork");
    char byte = 0;
    if (child == 0) {
        close(ready[0]);
        close(go[1]); /* or the read below would never see end-of-file */
        drop_to(uid);
        if (unshare(CLONE_NEWUSER) < 0) die("unshare user namespace");
        if (write(ready[1], &byte, 1) != 1) _exit(1);
        if (read(go[0], &byte, 1) < 0) _exit(1);
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    if (read(ready[0], &byte, 1) != 1) { /* it died (killed by a terminate): reap it, or it is orphaned */
        waitpid(child, NULL, 0);
        die("user namespace child");
    }
    char path[64], map[64];
    snprintf(map, sizeof map, "0 %u %u\n", (unsigned)uid, ID_RANGE);
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)child);
    write_file(path, map);
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)child);
    write_file(path, map);
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
    int fd = open(path, O_RDONLY); /* inherited by bwrap: no O_CLOEXEC */
    if (fd < 0) die(path);
    close(go[1]);
    waitpid(child, NULL, 0);
    close(ready[0]);
    return fd;
}

static void mount_root(const char *run, const char *lower, const char *tmpfs_opts, const char *disk,
                       uid_t uid) {
    char upper[4096], work[4096], merged[4096];
    if (unshare(CLONE_NEWNS) < 0) die("unshare mount namespace");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("make / private");
    if (disk) mount_disk(disk, run);
    else if (mount("errand", run, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_opts) < 0) die("mount tmpfs");
    snprintf(upper, sizeof upper, "%s/upper", run);
    snprintf(work, sizeof work, "%s/work", run);
    snprintf(merged, sizeof merged, "%s/merged", run);
    if (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0 || mkdir(merged, 0755) < 0) die("mkdir");
    if (chown(upper, uid, uid) < 0) die("chown upper");
    size_t need = strlen(lower) + 2 * strlen(run) + 64;
    char *opts = malloc(need);
    if (!opts) die("malloc");
    snprintf(opts, need, "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work);
    if (mount("overlay", merged, "overlay", MS_NOSUID | MS_NODEV, opts) < 0) die("mount overlay");
    free(opts);
}

/* A network namespace owned by the host's (initial) user namespace: processes
 * in the sandbox's own user namespace hold no capability over it, so they can
 * change no address, route or filter. Only loopback is up. */
static void make_netns(void) {
    if (unshare(CLONE_NEWNET) < 0) die("unshare network namespace");
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strcpy(ifr.ifr_name, "lo");
    if (sock < 0 || ioctl(sock, SIOCGIFFLAGS, &ifr) < 0) die("read loopback flags");
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(sock, SIOCSIFFLAGS, &ifr) < 0) die("bring loopback up");
    close(sock);
}

/* One byte carrying one descriptor (a socket the receiver takes over). */
int send_fds(int channel, const int *fds, int count) {
    char byte = 'F';
    struct iovec iov = {&byte, 1};
    union { struct cmsghdr h; char space[CMSG_SPACE(2 * sizeof(int))]; } control;
    if (count < 1 || count > 2) return -1;
    memset(&control, 0, sizeof control);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                         .msg_controllen = CMSG_SPACE((size_t)count * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)count * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)count * sizeof(int));
    return sendmsg(channel, &msg, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

int send_fd(int channel, int fd) { return send_fds(channel, &fd, 1); }

static int loopback_listener(int port) {
    int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (sock < 0 || setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(sock, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(sock, 1024) < 0)
        die("proxy listener");
    return sock;
}

/* The egress proxy's listening socket, made inside the sandbox's network
 * namespace and sent to the host over `channel`; the host serves it. With a
 * gateway port, a second listener goes in the same message: the host relays
 * its connections to the model gateway's host socket. */
static void send_proxy_listener(int channel, int port, int gateway_port) {
    int socks[2] = {loopback_listener(port), -1};
    int count = 1;
    if (gateway_port > 0) socks[count++] = loopback_listener(gateway_port);
    if (send_fds(channel, socks, count) < 0) die("send proxy listener");
    for (int n = 0; n < count; n++) close(socks[n]);
    close(channel);
}

/* Host paths the sandbox binds are first bound here, as root, at <run>/b/<n>:
 * bwrap resolves its sources by path as the unprivileged uid, which may not be
 * able to traverse to them (a project under /root, say). */
static void stage_binds(const char *run, const char **binds, int nbinds) {
    char path[4096];
    snprintf(path, sizeof path, "%s/b", run);
    if (nbinds && mkdir(path, 0711) < 0) die("mkdir binds");
    for (int n = 0; n < nbinds; n++) {
        struct stat info;
        if (stat(binds[n], &info) < 0) die(binds[n]);
        snprintf(path, sizeof path, "%s/b/%d", run, n);
        if (S_ISDIR(info.st_mode) ? mkdir(path, 0755) < 0 : mknod(path, S_IFREG | 0644, 0) < 0) die(path);
        if (mount(binds[n], path, NULL, MS_BIND | MS_REC, NULL) < 0) die(binds[n]);
    }
}

static int launch(int argc, char **argv) {
    const char *run = NULL, *lower = NULL, *tmpfs_opts = "size=1g,mode=0711", *disk = NULL;
    const char *binds[256];
    int nbinds = 0, proxy_channel = -1, proxy_port = 0, gateway_port = 0, own_netns = 0, relay_fd = -1, die_with_parent = 0;
    uid_t uid = 0;
    int i = 2;
    for (; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (i + 1 >= argc) { fprintf(stderr, "errand-agent: %s needs a value\n", argv[i]); return 2; }
        const char *key = argv[i], *val = argv[i + 1];
        if (strcmp(key, "--cgroup") == 0) write_file(val, "0\n");
        else if (strcmp(key, "--run") == 0) run = val;
        else if (strcmp(key, "--lower") == 0) lower = val;
        else if (strcmp(key, "--tmpfs") == 0) tmpfs_opts = val;
        else if (strcmp(key, "--disk") == 0) disk = val;
        else if (strcmp(key, "--uid") == 0) uid = (uid_t)strtoul(val, NULL, 10);
        else if (strcmp(key, "--bind") == 0 && nbinds < 256) binds[nbinds++] = val;
        else if (strcmp(key, "--netns") == 0) own_netns = strcmp(val, "new") == 0;
        else if (strcmp(key, "--proxy-channel") == 0) proxy_channel = atoi(val);
        else if (strcmp(key, "--proxy-port") == 0) proxy_port = atoi(val);
        else if (strcmp(key, "--gateway-port") == 0) gateway_port = atoi(val);
        else if (strcmp(key, "--relay") == 0) relay_fd = atoi(val);
        else if (strcmp(key, "--die-with-parent") == 0) die_with_parent = strcmp(val, "1") == 0;
        else { fprintf(stderr, "errand-agent: unknown option %s\n", key); return 2; }
    }
    if (!run || !lower || uid == 0 || i + 1 >= argc) {
        fprintf(stderr, "errand-agent: launch needs --run, --lower, --uid and a command\n");
        return 2;
    }
    if (own_netns) make_netns();
    if (proxy_channel >= 0) send_proxy_listener(proxy_channel, proxy_port, gateway_port);
    int userns = make_userns(uid);
    mount_root(run, lower, tmpfs_opts, disk, uid);
    stage_binds(run, binds, nbinds);
    if (relay_fd >= 0) return relay(userns, uid, relay_fd, die_with_parent, &argv[i + 1]);
    drop_to(uid);
    /* Changing uid made this process non-dumpable, which hides /proc/self/fd
     * from itself; bwrap reads the bind sources we pass as fds through it. */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    /* argv[i] is "--": reuse its slot and the one before for "--userns N". */
    char fdtext[16];
    snprintf(fdtext, sizeof fdtext, "%d", userns);
    char **args = calloc((size_t)(argc - i) + 3, sizeof *args);
    if (!args) die("calloc");
    int n = 0;
    args[n++] = argv[i + 1];
    args[n++] = "--userns";
    args[n++] = fdtext;
    for (int j = i + 2; j < argc; j++) args[n++] = argv[j];
    execvp(args[0], args);
    die("exec bwrap");
    return 125;
}

/* ----------------------------------------------------------------- serve -- */

static struct client clients[MAX_CLIENTS];
static int nclients;

int send_msg(int fd, const char *payload, size_t len, int pass_fd) {
    uint32_t n = (uint32_t)len;
    unsigned char head[4] = {n & 255, (n >> 8) & 255, (n >> 16) & 255, (n >> 24) & 255};
    struct iovec iov[2] = {{head, 4}, {(void *)payload, len}};
    union { struct cmsghdr h; char space[CMSG_SPACE(sizeof(int))]; } control;
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
    if (pass_fd >= 0) {
        memset(&control, 0, sizeof control);
        msg.msg_control = control.space;
        msg.msg_controllen = sizeof control.space;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    return sendmsg(fd, &msg, MSG_NOSIGNAL) == (ssize_t)(4 + len) ? 0 : -1;
}

void reply(int fd, const char *text) {
    /* Replies are "word\0word..."; callers build them with '\n' for readability. */
    char buf[512];
    size_t len = strlen(text);
    if (len >= sizeof buf) len = sizeof buf - 1;
    for (size_t i = 0; i < len; i++) buf[i] = text[i] == '\n' ? '\0' : text[i];
    send_msg(fd, buf, len, -1);
}

void reply_errno(int fd, int err) {
    char text[300];
    snprintf(text, sizeof text, "error\n%d\n%s", err, strerror(err));
    reply(fd, text);
}

static int split(char *payload, size_t len, char **fields) {
    int n = 0;
    char *p = payload, *end = payload + len;
    while (p < end && n < MAX_FIELDS) {
        fields[n++] = p;
        p += strnlen(p, (size_t)(end - p)) + 1;
    }
    return n;
}

static const char *lookup_path(char **envp) {
    for (char **e = envp; *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0) return *e + 5;
    return "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
}

static void exec_in_path(char **argv, char **envp) {
    if (strchr(argv[0], '/')) { execve(argv[0], argv, envp); return; }
    const char *path = lookup_path(envp);
    char candidate[4096];
    int saved = ENOENT;
    while (*path) {
        const char *colon = strchrnul(path, ':');
        int dirlen = (int)(colon - path);
        snprintf(candidate, sizeof candidate, "%.*s/%s", dirlen, dirlen ? path : ".", argv[0]);
        execve(candidate, argv, envp);
        if (errno != ENOENT && errno != ENOTDIR) saved = errno;
        path = *colon ? colon + 1 : colon;
    }
    errno = saved;
}

/* A child must not keep the agent's CAP_SETUID/SETGID/SETPCAP. The bounding
 * set must be emptied while CAP_SETPCAP is still held, i.e. before switching
 * to another uid; the process sets are cleared last. */
/* Image build steps (and only they) keep a root-like set inside the sandbox's
 * own user namespace, so package installs can chown and create users; it is
 * given with `serve --keep-caps MASK` and applies to commands run as uid 0. */
static unsigned long long keep_caps;

static void drop_bounding_caps(void) {
    for (int cap = 0; cap <= 63; cap++)
        if (!(keep_caps & (1ULL << cap))) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

static void drop_all_caps(uid_t uid) {
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    if (uid == 0) {
        data[0].permitted = data[0].effective = (uint32_t)keep_caps;
        data[1].permitted = data[1].effective = (uint32_t)(keep_caps >> 32);
    }
    if (syscall(SYS_capset, &head, data) < 0) _exit(125);
}

static void child_exec(int *fds, char **f, int nf, int env_at, int nenv) {
    const char *cwd = f[1];
    uid_t uid = (uid_t)strtoul(f[2], NULL, 10);
    gid_t gid = (gid_t)strtoul(f[3], NULL, 10);
    char **envp = &f[env_at];
    char **argv = &f[env_at + nenv + 1];
    (void)nf;
    /* Until exec, this child still holds the agent's listening socket: make it
     * non-dumpable (no pidfd_getfd or /proc/<pid>/fd by other sandbox processes)
     * and close every descriptor but stdio at once. exec makes it dumpable again. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    setsid();
    for (int i = 0; i < 3; i++) if (dup2(fds[i], i) < 0) _exit(125);
    close_range(3, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (chdir(cwd) < 0) {
        dprintf(2, "errand: cannot enter working directory %s: %s\n", cwd, strerror(errno));
        _exit(126);
    }
    drop_bounding_caps();
    if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) {
        dprintf(2, "errand: cannot switch to uid %u gid %u: %s\n", uid, gid, strerror(errno));
        _exit(126);
    }
    drop_all_caps(uid);
    exec_in_path(argv, envp);
    int err = errno;
    dprintf(2, "errand: cannot run %s: %s\n", argv[0], strerror(err));
    _exit(err == ENOENT ? 127 : 126);
}

/* exec: op cwd uid gid nenv env... argv...   fds: stdin stdout stderr */
static void do_exec(struct client *c, char **f, int nf, int *fds, int nfds) {
    if (c->pid) { reply_errno(c->fd, EBUSY); return; }
    if (nfds != 3 || nf < 6) { reply_errno(c->fd, EINVAL); return; }
    int nenv = atoi(f[4]);
    int env_at = 5;
    if (nenv < 0 || env_at + nenv >= nf) { reply_errno(c->fd, EINVAL); return; }
    /* NUL-terminate the env and argv arrays inside the field table. */
    char *argv_store[MAX_FIELDS + 2];
    char *env_store[MAX_FIELDS + 2];
    for (int i = 0; i < nenv; i++) env_store[i] = f[env_at + i];
    env_store[nenv] = NULL;
    int nargv = nf - env_at - nenv;
    for (int i = 0; i < nargv; i++) argv_store[i] = f[env_at + nenv + i];
    argv_store[nargv] = NULL;
    char *table[2 * MAX_FIELDS + 8];
    int t = 0;
    for (int i = 0; i < env_at; i++) table[t++] = f[i];
    for (int i = 0; i <= nenv; i++) table[t++] = env_store[i];
    for (int i = 0; i <= nargv; i++) table[t++] = argv_store[i];
    pid_t pid = fork();
    if (pid < 0) { reply_errno(c->fd, errno); return; }
    if (pid == 0) child_exec(fds, table, t, env_at, nenv);
    c->pid = pid;
    char text[64];
    snprintf(text, sizeof text, "started\n%d", (int)pid);
    reply(c->fd, text);
}

/* unlink: op path dir(0|1). Removal happens here, with the sandbox's own
 * credentials, so the host can never delete what the sandbox could not. */
static void do_unlink(struct client *c, char **f, int nf) {
    if (nf != 3) { reply_errno(c->fd, EINVAL); return; }
    if (unlinkat(AT_FDCWD, f[1], atoi(f[2]) ? AT_REMOVEDIR : 0) < 0) { reply_errno(c->fd, errno); return; }
    reply(c->fd, "ok");
}

/* mkdir: op path mode (so new directories belong to the sandbox's user). */
static void do_mkdir(struct client *c, char **f, int nf) {
    if (nf != 3) { reply_errno(c->fd, EINVAL); return; }
    if (mkdir(f[1], (mode_t)strtoul(f[2], NULL, 8)) < 0) { reply_errno(c->fd, errno); return; }
    reply(c->fd, "ok");
}

static void handle(struct client *c, char *payload, size_t len, int *fds, int nfds) {
    static char *f[MAX_FIELDS];
    int nf = split(payload, len, f);
    if (nf == 0) { reply_errno(c->fd, EINVAL); goto out; }
    if (strcmp(f[0], "exec") == 0) do_exec(c, f, nf, fds, nfds);
    else if (strcmp(f[0], "read") == 0) do_read(c, f, nf, fds, nfds);
    else if (strcmp(f[0], "write") == 0) do_write(c, f, nf, fds, nfds);
    else if (strcmp(f[0], "list") == 0) do_list(c, f, nf, fds, nfds);
    else if (strcmp(f[0], "stat") == 0) do_stat(c, f, nf);
    else if (strcmp(f[0], "mkdir") == 0) do_mkdir(c, f, nf);
    else if (strcmp(f[0], "unlink") == 0) do_unlink(c, f, nf);
    else if (strcmp(f[0], "signal") == 0 && nf == 2) {
        /* Until the child's setsid() has run, its group does not exist yet: signal it alone. */
        if (c->pid && kill(-c->pid, atoi(f[1])) < 0 && errno == ESRCH) kill(c->pid, atoi(f[1]));
    } else if (strcmp(f[0], "ping") == 0) reply(c->fd, "pong");
    else if (strcmp(f[0], "shutdown") == 0) _exit(0);
    else reply_errno(c->fd, ENOSYS);
out:
    for (int i = 0; i < nfds; i++) if (fds[i] >= 0) close(fds[i]);
}

static void drop_client(int i) {
    struct client *c = &clients[i];
    /* A host that hung up cannot collect the result: do not leave it running. */
    if (c->pid && kill(-c->pid, SIGKILL) < 0 && errno == ESRCH) kill(c->pid, SIGKILL);
    transfer_end(c);
    close(c->fd);
    free(c->buf);
    clients[i] = clients[--nclients];
}

static int read_client(struct client *c) {
    char chunk[65536];
    union { struct cmsghdr h; char space[CMSG_SPACE(3 * sizeof(int))]; } control;
    struct iovec iov = {chunk, sizeof chunk};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                         .msg_controllen = sizeof control.space};
    ssize_t got = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);
    if (got <= 0) return -1;
    int fds[3], nfds = 0;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
        int n = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int k = 0; k < n; k++) {
            int fd;
            memcpy(&fd, CMSG_DATA(h) + k * sizeof(int), sizeof fd);
            if (nfds < 3) fds[nfds++] = fd; else close(fd);
        }
    }
    if (c->len + (size_t)got > MAX_MSG) return -1;
    char *grown = realloc(c->buf, c->len + (size_t)got);
    if (!grown) return -1;
    c->buf = grown;
    memcpy(c->buf + c->len, chunk, (size_t)got);
    c->len += (size_t)got;
    /* fds arrive with the first bytes of the message they belong to. */
    while (c->len >= 4) {
        unsigned char *h = (unsigned char *)c->buf;
        size_t n = h[0] | h[1] << 8 | h[2] << 16 | (size_t)h[3] << 24;
        if (n > MAX_MSG) return -1;
        if (c->len < 4 + n) break;
        char *payload = malloc(n + 1);
        if (!payload) return -1;
        memcpy(payload, c->buf + 4, n);
        payload[n] = '\0';
        memmove(c->buf, c->buf + 4 + n, c->len - 4 - n);
        c->len -= 4 + n;
        handle(c, payload, n, fds, nfds);
        nfds = 0;
        free(payload);
    }
    for (int i = 0; i < nfds; i++) close(fds[i]);
    return 0;
}

static void reap(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < nclients; i++) {
            if (clients[i].pid != pid) continue;
            char text[64];
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
            snprintf(text, sizeof text, "exit\n%d\n%d", code, sig);
            clients[i].pid = 0;
            reply(clients[i].fd, text);
        }
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* SIGCHLD, blocked, as a descriptor to poll. */
int child_signalfd(void) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) die("signalfd");
    return sfd;
}

/* `serve --seccomp HEX`: where no bwrap loads the filter (gVisor), the agent
 * loads it on itself, so every command it starts inherits it. */
static void load_seccomp(const char *hex) {
    size_t len = strlen(hex) / 2;
    if (len == 0 || len % sizeof(struct sock_filter)) { errno = EINVAL; die("seccomp program"); }
    unsigned char *code = malloc(len);
    if (!code) die("malloc");
    for (size_t i = 0; i < len; i++) {
        unsigned int byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1) { errno = EINVAL; die("seccomp program"); }
        code[i] = (unsigned char)byte;
    }
    struct sock_fprog program = {(unsigned short)(len / sizeof(struct sock_filter)), (struct sock_filter *)code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) < 0)
        die("load seccomp filter");
    free(code);
}

/* `serve --workdir PATH`: make it and its parents (bwrap's --dir, where there is no bwrap). */
static void make_dirs(const char *path) {
    char partial[4096];
    for (const char *p = path; *p; p++) {
        if (*p != '/' || p == path || (size_t)(p - path) >= sizeof partial) continue;
        memcpy(partial, path, (size_t)(p - path));
        partial[p - path] = '\0';
        mkdir(partial, 0755);
    }
    if (mkdir(path, 0755) < 0 && errno != EEXIST) die(path);
}

/* The connection the relay passed, -1 if none came, -2 once the relay is gone. */
static int receive_fd(int channel) {
    char byte;
    struct iovec iov = {&byte, 1};
    union { struct cmsghdr h; char space[CMSG_SPACE(sizeof(int))]; } control;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                         .msg_controllen = sizeof control.space};
    ssize_t got = recvmsg(channel, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return -2;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    int fd = -1;
    if (got == 1 && c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static int busy(void) {
    for (int i = 0; i < nclients; i++) if (clients[i].pid) return 1;
    return nclients > 0;
}

static int serve(int argc, char **argv) {
    double lifetime = 0, idle = 0;
    int listen_fd = 3, relayed = 0;
    const char *seccomp_hex = NULL, *workdir = NULL;
    unsigned long nproc = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--lifetime") == 0) lifetime = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--idle") == 0) idle = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--fd") == 0) listen_fd = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--relay") == 0) relayed = strcmp(argv[i + 1], "1") == 0;
        else if (strcmp(argv[i], "--seccomp") == 0) seccomp_hex = argv[i + 1];
        else if (strcmp(argv[i], "--workdir") == 0) workdir = argv[i + 1];
        else if (strcmp(argv[i], "--nproc") == 0) nproc = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--keep-caps") == 0) keep_caps = strtoull(argv[i + 1], NULL, 16);
    }
    /* Keep stdio and the listening socket (moved to fd 3); close whatever else
     * the launcher and bwrap passed along. Relayed (gVisor), fd 0 is instead a
     * connected socket on which the host's relay passes each new connection. */
    if (relayed) listen_fd = 0;
    if (listen_fd != 3 && dup2(listen_fd, 3) < 0) die("dup2 listening socket");
    if (relayed && dup2(open("/dev/null", O_RDONLY | O_CLOEXEC), 0) < 0) die("stdin");
    close_range(4, ~0U, 0);
    fcntl(3, F_SETFD, FD_CLOEXEC);
    umask(022);
    if (workdir) make_dirs(workdir);
    if (seccomp_hex) load_seccomp(seccomp_hex);
    /* `--nproc N`: where the host's pids cgroup cannot count the sandbox's processes
     * one for one (gVisor), they are held to N here; commands inherit it. */
    struct rlimit processes = {nproc, nproc};
    if (nproc && setrlimit(RLIMIT_NPROC, &processes) < 0) die("RLIMIT_NPROC");
    /* On gVisor the agent's stdout and stderr are the host's log of the sandbox (runsc's own),
     * and gVisor lets a root command open them through /proc/1/fd: what it wrote there grew a
     * host file past the sandbox's disk quota. Starting is over; a failure from here on ends
     * the sandbox, which the host reports. */
    if (relayed) {
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) die("stdout");
        close(null);
    }
    int sfd = child_signalfd();
    double start = now(), last_active = start;
    static struct pollfd fds[2 * MAX_CLIENTS + 2];
    for (;;) {
        double t = now();
        if (busy()) last_active = t;
        /* The earliest deadline that applies; none means wait for ever. */
        int deadline_set = 0;
        double wait = 0;
        if (lifetime > 0) { wait = start + lifetime - t; deadline_set = 1; }
        if (idle > 0 && (!deadline_set || last_active + idle - t < wait)) {
            wait = last_active + idle - t;
            deadline_set = 1;
        }
        if (deadline_set && wait <= 0) return 0; /* lifetime or idle timeout: the sandbox ends */
        fds[0] = (struct pollfd){3, POLLIN, 0};
        fds[1] = (struct pollfd){sfd, POLLIN, 0};
        for (int i = 0; i < nclients; i++) {
            fds[2 * i + 2] = (struct pollfd){clients[i].fd, POLLIN, 0};
            short events = 0; /* a negative fd (no transfer) is skipped by poll */
            int fd = transfer_poll(&clients[i], &events);
            fds[2 * i + 3] = (struct pollfd){fd, events, 0};
        }
        int timeout_ms = deadline_set ? (int)(wait * 1000) + 1 : -1;
        if (poll(fds, 2 * (nfds_t)nclients + 2, timeout_ms) < 0 && errno != EINTR) die("poll");
        if (fds[1].revents) {
            struct signalfd_siginfo info;
            while (read(sfd, &info, sizeof info) > 0) {}
            reap();
        }
        for (int i = nclients - 1; i >= 0; i--) {
            if (fds[2 * i + 3].revents && clients[i].xfer) transfer_step(&clients[i]);
            if (fds[2 * i + 2].revents && read_client(&clients[i]) < 0) drop_client(i);
        }
        if (fds[0].revents) {
            int fd = relayed ? receive_fd(3) : accept4(3, NULL, NULL, SOCK_CLOEXEC);
            if (relayed && fd == -2) return 0; /* the host's relay is gone: so is the sandbox */
            if (fd >= 0 && nclients < MAX_CLIENTS) clients[nclients++] = (struct client){fd, 0, NULL, 0, NULL};
            else if (fd >= 0) close(fd);
        }
    }
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "launch") == 0) return launch(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) return serve(argc, argv);
    fprintf(stderr, "usage: errand-agent launch ... -- bwrap|runsc ... | errand-agent serve [--fd N | --relay 1] [--lifetime S] [--idle S]\n");
    return 2;
}
