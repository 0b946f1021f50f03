// stg launch: N local processes of one command with the data-parallel variables set (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), as torchrun would, so one node needs no MPI.
// When one process fails, the others are stopped; the exit status is the first failure's.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/stg/cli.h"

static const char *launch_usage =
    "usage: stg launch -n N [--nnodes M --node-rank K] [--port P] [--addr A] -- COMMAND [ARGS...]\n"
    "  starts N processes of COMMAND with RANK, WORLD_SIZE, LOCAL_RANK (0..N-1), MASTER_ADDR (default 127.0.0.1)\n"
    "  and MASTER_PORT (default: a free port; give --port with --nnodes) set; e.g. stg launch -n 2 -- stg train MODEL\n"
    "  several nodes: on node K of M, stg launch -n N --nnodes M --node-rank K --addr NODE0 --port P -- ...\n"
    "  (RANK = K * N + LOCAL_RANK, WORLD_SIZE = M * N)\n";

// A port nothing listens on now (the kernel's choice for port 0).
static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    int port = -1;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &n) == 0) port = ntohs(a.sin_port);
    close(s);
    return port;
}

static int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0); }

int cmd_launch(int argc, char **argv) {
    int64_t n = 0, port = 0, nnodes = 1, node = 0;
    const char *addr = "127.0.0.1";
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *v;
        if (strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--nproc") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int("-n", v, 1, 1024, &n)) return 2;
        } else if (strcmp(argv[i], "--nnodes") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int("--nnodes", v, 1, 65536, &nnodes)) return 2;
        } else if (strcmp(argv[i], "--node-rank") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int("--node-rank", v, 0, 65535, &node)) return 2;
        } else if (strcmp(argv[i], "--port") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int("--port", v, 1, 65535, &port)) return 2;
        } else if (strcmp(argv[i], "--addr") == 0) {
            if (!(addr = cli_value(argc, argv, &i))) return 2;
        } else {
            fprintf(stderr, "stg launch: unexpected argument '%s'\n%s", argv[i], launch_usage);
            return 2;
        }
    }
    if (n < 1 || i + 1 >= argc) {
        fputs(launch_usage, stderr);
        return 2;
    }
    char **cmd = argv + i + 1;
    if (node >= nnodes) {
        fprintf(stderr, "stg launch: --node-rank %lld is not below --nnodes %lld\n", (long long)node, (long long)nnodes);
        return 2;
    }
    if (nnodes > 1 && !port) {
        fprintf(stderr, "stg launch: with --nnodes, give every node the same --port (and --addr of node 0)\n");
        return 2;
    }
    if (!port && (port = free_port()) < 0) {
        fprintf(stderr, "stg launch: cannot find a free port (give --port): %s\n", strerror(errno));
        return 1;
    }
    pid_t *pid = calloc((size_t)n, sizeof *pid);
    if (!pid) {
        fprintf(stderr, "stg launch: out of memory\n");
        return 1;
    }
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)(n * nnodes));
    if (setenv("WORLD_SIZE", buf, 1) || setenv("MASTER_ADDR", addr, 1) || (snprintf(buf, sizeof buf, "%lld", (long long)port), setenv("MASTER_PORT", buf, 1)) ||
        (!getenv("NCCL_NVLS_ENABLE") && setenv("NCCL_NVLS_ENABLE", "0", 1))) {
        fprintf(stderr, "stg launch: setenv: %s\n", strerror(errno));
        free(pid);
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    int rc = 0;
    int64_t started = 0;
    for (; started < n; started++) {
        pid_t p = fork();
        if (p < 0) {
            fprintf(stderr, "stg launch: fork: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (p == 0) {
            char r[32], l[32];
            snprintf(r, sizeof r, "%lld", (long long)(node * n + started));
            snprintf(l, sizeof l, "%lld", (long long)started);
            if (setenv("RANK", r, 1) || setenv("LOCAL_RANK", l, 1)) _exit(127);
            execvp(cmd[0], cmd);
            fprintf(stderr, "stg launch: cannot run '%s': %s\n", cmd[0], strerror(errno));
            _exit(127);
        }
        pid[started] = p;
    }
    // Wait; at the first failure stop the rest (SIGTERM, then SIGKILL after 10 s).
    int64_t live = started;
    bool stopping = rc != 0;
    time_t stop_at = 0;
    if (stopping) {
        for (int64_t k = 0; k < started; k++) kill(pid[k], SIGTERM);
        stop_at = time(NULL);
    }
    while (live > 0) {
        int status;
        pid_t p = waitpid(-1, &status, stopping ? WNOHANG : 0);
        if (p < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p == 0) { // stopping: nothing exited yet
            if (time(NULL) - stop_at > 10)
                for (int64_t k = 0; k < started; k++)
                    if (pid[k] > 0) kill(pid[k], SIGKILL);
            usleep(50000);
            continue;
        }
        for (int64_t k = 0; k < started; k++) {
            if (pid[k] != p) continue;
            pid[k] = 0;
            live--;
            int code = exit_code(status);
            if (code != 0 && !stopping) {
                fprintf(stderr, "stg launch: rank %lld exited with status %d; stopping the other %lld\n", (long long)k, code, (long long)live);
                rc = code;
                stopping = true;
                stop_at = time(NULL);
                for (int64_t j = 0; j < started; j++)
                    if (pid[j] > 0) kill(pid[j], SIGTERM);
            }
        }
    }
    free(pid);
    return rc;
}
