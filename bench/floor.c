/*
 * floor.c -- the least a Redis lock wrapper can do, to measure redlock's start-up against.
 *
 *   floor PORT[,PORT...] -- PROGRAM [ARG...]
 *
 * Connects to each server on 127.0.0.1, sends SET key token NX PX 30000 to all at once,
 * reads the replies, runs PROGRAM (vfork + exec) if a majority said OK, waits for it, and
 * releases with the compare-and-delete script (EVAL), again to all at once. No config,
 * no renewal, no metadata, no fence, no signal handling, no error messages: libc only.
 * Exit status: PROGRAM's, 75 when the lock was held, 69 on any failure.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SERVERS 16

static const char release_script[] =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0";

static int send_all(const int *fds, int n, const char *buf, size_t len) {
    for (int i = 0; i < n; ++i)
        if (write(fds[i], buf, len) != (ssize_t)len)
            return -1;
    return 0;
}

/* Reads one reply line from each server; counts those that start with `ok`. */
static int count_replies(const int *fds, int n, char ok) {
    int yes = 0;
    for (int i = 0; i < n; ++i) {
        char reply[256];
        ssize_t got = read(fds[i], reply, sizeof reply);
        if (got > 0 && reply[0] == ok)
            ++yes;
    }
    return yes;
}

int main(int argc, char **argv) {
    if (argc < 4 || strcmp(argv[2], "--") != 0)
        return 64;
    int fds[MAX_SERVERS], n = 0;
    for (char *p = argv[1]; *p && n < MAX_SERVERS;) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(p))};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
            return 69;
        fds[n++] = fd;
        p = strchr(p, ',');
        if (!p)
            break;
        ++p;
    }
    char token[33];
    unsigned long long r[2];
    if (getentropy(r, sizeof r) != 0)
        return 69;
    snprintf(token, sizeof token, "%016llx%016llx", r[0], r[1]);

    char cmd[512];
    int len = snprintf(cmd, sizeof cmd,
                       "*6\r\n$3\r\nSET\r\n$10\r\nlock:floor\r\n$32\r\n%s\r\n$2\r\nNX\r\n"
                       "$2\r\nPX\r\n$5\r\n30000\r\n",
                       token);
    if (send_all(fds, n, cmd, (size_t)len) != 0)
        return 69;
    if (count_replies(fds, n, '+') < n / 2 + 1)
        return 75;

    int status = 0;
    pid_t pid = vfork();
    if (pid == 0) {
        execvp(argv[3], argv + 3);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0) {
    }

    len = snprintf(cmd, sizeof cmd,
                   "*5\r\n$4\r\nEVAL\r\n$%zu\r\n%s\r\n$1\r\n1\r\n$10\r\nlock:floor\r\n$32\r\n%s\r\n",
                   strlen(release_script), release_script, token);
    if (send_all(fds, n, cmd, (size_t)len) != 0)
        return 69;
    (void)count_replies(fds, n, ':');
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
