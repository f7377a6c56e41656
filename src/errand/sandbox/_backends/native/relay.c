/*
 * The gVisor tier's host side: `errand-agent launch --relay FD ... -- runsc ...`.
 *
 * The launcher prepares everything as it does for the namespace tier (cgroups,
 * the network namespace with the proxy listener, the user namespace, the
 * overlay root in a private mount namespace, staged binds); then, instead of
 * becoming bwrap, it
 *
 *   - starts runsc as root of the sandbox's user namespace (so files the
 *     sandbox writes belong to the same unprivileged host ids as in the
 *     namespace tier, and images move between tiers), with one end of a socket
 *     pair as the container's stdin: the agent, the container's init, serves
 *     on it (`serve --relay`);
 *   - stays on as a small relay: every connection accepted on the control
 *     socket is passed to the agent over the pair (SCM_RIGHTS). gVisor cannot
 *     accept() on a listening socket made outside it, but takes connected
 *     sockets and pipes; so exec costs one round trip, not a `runsc exec`;
 *   - reaps: it is a subreaper, `runsc run --detach` leaves the sandbox's host
 *     processes to it, and it exits once all are gone, so its pid lives
 *     exactly as long as the sandbox.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"

static void exec_runsc(int userns, int agent_end, char **argv, int die_with_parent) {
    if (die_with_parent) prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (setns(userns, CLONE_NEWUSER) < 0) die("enter the sandbox's user namespace");
    if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
        die("become the sandbox's root");
    if (dup2(agent_end, 0) < 0) die("dup2");
    close_range(3, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvp(argv[0], argv);
    die("exec runsc");
}

/* Hand each accepted connection to the agent; false once the agent is gone. */
static int pass_connection(int listen_fd, int relay_end) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return 1;
    int sent = send_fd(relay_end, fd);
    close(fd);
    return sent == 0;
}

/* True once every child (runsc, then the sandbox's processes it left us) has ended. */
static int reap_all(int sfd) {
    struct signalfd_siginfo info;
    while (read(sfd, &info, sizeof info) > 0) {}
    pid_t pid;
    while ((pid = waitpid(-1, NULL, WNOHANG)) > 0) {}
    return pid < 0 && errno == ECHILD;
}

int relay(int userns, uid_t uid, int listen_fd, int die_with_parent, char **argv) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) die("socketpair");
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) die("become a subreaper");
    int sfd = child_signalfd();
    pid_t owner = getppid();
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) exec_runsc(userns, pair[1], argv, die_with_parent);
    close(pair[1]);
    close(userns);
    drop_to(uid);
    /* Changing uid cleared any parent-death signal: set it now, then make sure
     * the owner did not die before it was set. */
    if (die_with_parent && (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != owner)) _exit(1);
    struct pollfd fds[3] = {{sfd, POLLIN, 0}, {listen_fd, POLLIN, 0}, {pair[0], POLLIN, 0}};
    for (;;) {
        if (poll(fds, 3, -1) < 0 && errno != EINTR) die("poll");
        if (fds[0].revents && reap_all(sfd)) return 0;
        /* The agent never writes to the pair: anything readable is its end. Stop
         * accepting, so new clients are refused instead of waiting for ever. */
        if (fds[2].revents || ((fds[1].revents & POLLIN) && !pass_connection(listen_fd, pair[0]))) {
            close(listen_fd);
            close(pair[0]);
            fds[1].fd = fds[2].fd = -1;
        }
    }
}
