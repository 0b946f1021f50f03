#include "runtime/dist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/exec.h"

#define DIST_MAGIC 0x53544744u // "STGD"

static double dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int env_int(const char *name, long lo, long hi, long *out, bool *found, stg_err *err) {
    const char *v = getenv(name);
    *found = v != NULL && *v;
    if (!*found) return 0;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || !end || *end || x < lo || x > hi)
        return stg_errf(err, "environment: %s='%s' is not an integer in [%ld, %ld]", name, v, lo, hi);
    *out = x;
    return 0;
}

// Slurm's task variables, when both SLURM_PROCID and SLURM_NTASKS are set (srun sets them for every
// task; a salloc shell has SLURM_NTASKS alone and is not a task).
typedef struct {
    bool set;
    long rank, world, local;
    bool local_set;
} slurm_env;

static int slurm_from_env(slurm_env *s, stg_err *err) {
    memset(s, 0, sizeof *s);
    bool fr, fw;
    if (env_int("SLURM_PROCID", 0, 1 << 20, &s->rank, &fr, err) || env_int("SLURM_NTASKS", 1, 1 << 20, &s->world, &fw, err) ||
        env_int("SLURM_LOCALID", 0, 1 << 20, &s->local, &s->local_set, err))
        return -1;
    s->set = fr && fw;
    if (s->set && s->rank >= s->world)
        return stg_errf(err, "environment: SLURM_PROCID=%ld is not below SLURM_NTASKS=%ld", s->rank, s->world);
    return 0;
}

bool rt_dist_launched(void) {
    const char *a = getenv("OMPI_COMM_WORLD_SIZE"), *b = getenv("WORLD_SIZE");
    if ((a && *a) || (b && *b)) return true;
    // Slurm alone: a launch when it started several tasks (a one-task job is a plain run)
    slurm_env s;
    stg_err ignored;
    return slurm_from_env(&s, &ignored) == 0 && s.set && s.world > 1;
}

int rt_dist_first_host(const char *list, char *out, size_t n, stg_err *err) {
    if (!list || !*list) return stg_errf(err, "an empty node list");
    size_t k = 0;
    int depth = 0;
    bool skipping = false; // inside brackets, past the first host's number
    for (const char *p = list; *p; p++) {
        char c = *p;
        if (depth == 0 && c == ',') break; // the first item ends
        if (c == '[') {
            if (depth++ || !p[1] || !strchr("0123456789", p[1]))
                return stg_errf(err, "node list '%s': '[' must open a range of numbers, e.g. node[03-05,07]", list);
            skipping = false;
            continue;
        }
        if (c == ']') {
            if (!depth--) return stg_errf(err, "node list '%s': a ']' without '['", list);
            continue;
        }
        if (depth) {
            if (!strchr("0123456789,-", c)) return stg_errf(err, "node list '%s': '%c' inside brackets (numbers, ',' and '-' only)", list, c);
            if (c == ',' || c == '-') skipping = true;
            if (skipping) continue;
        }
        if (k + 1 >= n) return stg_errf(err, "node list '%s': the first host name is too long", list);
        out[k++] = c;
    }
    if (depth) return stg_errf(err, "node list '%s': a '[' without ']'", list);
    out[k] = 0;
    if (k == 0) return stg_errf(err, "node list '%s': no host before the first ','", list);
    return 0;
}

int rt_dist_from_env(rt_dist *d, stg_err *err) {
    memset(d, 0, sizeof *d);
    d->world = 1;
    d->source = "none";
    d->timeout_s = 120;
    long rank = 0, world = 1, local = 0, port = 29500, tmo = 120;
    bool fr, fw, fl, fp, ft;
    const char *rn = "OMPI_COMM_WORLD_RANK", *wn = "OMPI_COMM_WORLD_SIZE", *ln = "OMPI_COMM_WORLD_LOCAL_RANK";
    if (!getenv("OMPI_COMM_WORLD_SIZE")) {
        rn = "RANK";
        wn = "WORLD_SIZE";
        ln = "LOCAL_RANK";
    }
    slurm_env sl;
    if (env_int(wn, 1, 1 << 20, &world, &fw, err) || env_int(rn, 0, 1 << 20, &rank, &fr, err) ||
        env_int(ln, 0, 1 << 20, &local, &fl, err) || env_int("MASTER_PORT", 1, 65535, &port, &fp, err) ||
        env_int("STG_DIST_TIMEOUT", 1, 86400, &tmo, &ft, err) || slurm_from_env(&sl, err))
        return -1;
    if (fw || fr) {
        if (!fw || !fr) return stg_errf(err, "environment: %s is set but %s is not", fw ? wn : rn, fw ? rn : wn);
        if (rank >= world) return stg_errf(err, "environment: %s=%ld is not below %s=%ld", rn, rank, wn, world);
        d->source = wn[0] == 'O' ? "OMPI_COMM_WORLD_*" : "RANK/WORLD_SIZE";
        if (!fl) local = rank; // one node
        // Under Slurm as well: the launcher's variables describe this process when they are Slurm's
        // (the same rank and world: exported from them), or when the launcher runs inside each Slurm
        // task (WORLD_SIZE = k x SLURM_NTASKS, task SLURM_PROCID holding ranks [k x PROCID, k x
        // (PROCID + 1)): stg launch --nnodes $SLURM_NTASKS --node-rank $SLURM_PROCID). Anything else
        // is two launches' leftovers mixed.
        if (sl.set) {
            bool same = world == sl.world && rank == sl.rank;
            bool nested = world % sl.world == 0 && rank / (world / sl.world) == sl.rank;
            if (!same && !nested)
                return stg_errf(err, "environment: Slurm says task %ld of %ld (SLURM_PROCID, SLURM_NTASKS) but %s=%ld, %s=%ld: neither the "
                                     "same process nor %s/SLURM_NTASKS processes started inside each Slurm task; unset the variables of "
                                     "the launcher that did not start this process",
                                sl.rank, sl.world, rn, rank, wn, world, wn);
            if (same && fl && sl.local_set && local != sl.local)
                return stg_errf(err, "environment: %s=%ld but SLURM_LOCALID=%ld for the same task", ln, local, sl.local);
        }
    } else if (sl.set) {
        rank = sl.rank;
        world = sl.world;
        local = sl.local_set ? sl.local : rank;
        d->source = "SLURM_*";
        if (!fp) { // a port of the job's own, so two jobs sharing a node do not meet
            bool fj;
            long job = 0;
            if (env_int("SLURM_JOB_ID", 0, 0x7fffffffL, &job, &fj, err)) return -1;
            if (fj) port = 20000 + job % 20000;
        }
    }
    d->rank = (int)rank;
    d->world = (int)world;
    d->local_rank = (int)local;
    d->port = (int)port;
    d->timeout_s = (double)tmo;
    const char *addr = getenv("MASTER_ADDR");
    if (addr && *addr) snprintf(d->addr, sizeof d->addr, "%s", addr);
    else if (sl.set && !fw) { // the first host of the step (of the job when srun did not say)
        const char *list = getenv("SLURM_STEP_NODELIST"), *which = "SLURM_STEP_NODELIST";
        if (!list || !*list) list = getenv("SLURM_JOB_NODELIST"), which = "SLURM_JOB_NODELIST";
        if (list && *list) {
            if (rt_dist_first_host(list, d->addr, sizeof d->addr, err)) return stg_err_prefix(err, "environment: %s", which);
        } else
            snprintf(d->addr, sizeof d->addr, "127.0.0.1");
    } else
        snprintf(d->addr, sizeof d->addr, "127.0.0.1");
    return 0;
}

// Waits until fd is ready for `events` or the deadline passes.
static int dist_wait(int fd, short events, double deadline, const char *what, int peer, stg_err *err) {
    for (;;) {
        double left = deadline - dist_now();
        if (left <= 0) return stg_errf(err, "timed out %s (did the other rank die or hang?)", what);
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0) {
            if (p.revents & (POLLERR | POLLNVAL)) return stg_errf(err, "%s: the connection to rank %d failed", what, peer);
            return 0;
        }
        if (r < 0 && errno != EINTR) return stg_errf(err, "%s: poll: %s", what, strerror(errno));
    }
}

static int send_all(rt_dist *d, int fd, const void *buf, size_t n, int peer, stg_err *err) {
    const char *p = buf;
    double deadline = dist_now() + d->timeout_s;
    while (n > 0) {
        if (dist_wait(fd, POLLOUT, deadline, "sending", peer, err)) return -1;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return stg_errf(err, "rank %d: sending to rank %d: %s (did it exit?)", d->rank, peer, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int recv_all(rt_dist *d, int fd, void *buf, size_t n, int peer, stg_err *err) {
    char *p = buf;
    double deadline = dist_now() + d->timeout_s;
    while (n > 0) {
        if (dist_wait(fd, POLLIN, deadline, "receiving", peer, err))
            return stg_err_prefix(err, "rank %d, waiting %.0f s for rank %d", d->rank, d->timeout_s, peer);
        ssize_t r = recv(fd, p, n, 0);
        if (r == 0) return stg_errf(err, "rank %d: rank %d closed the connection (it exited or failed)", d->rank, peer);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return stg_errf(err, "rank %d: receiving from rank %d: %s", d->rank, peer, strerror(errno));
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); // latency only: failure is harmless
}

static int resolve(const rt_dist *d, struct sockaddr_in *sa, stg_err *err) {
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)d->port);
    if (inet_pton(AF_INET, d->addr, &sa->sin_addr) == 1) return 0;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int r = getaddrinfo(d->addr, NULL, &hints, &res);
    if (r != 0 || !res) return stg_errf(err, "MASTER_ADDR '%s': %s", d->addr, r ? gai_strerror(r) : "no address");
    sa->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return 0;
}

int rt_dist_connect(rt_dist *d, stg_err *err) {
    if (d->connected) return 0;
    d->fd = stg_calloc((size_t)d->world, sizeof *d->fd, err);
    if (!d->fd) return -1;
    for (int i = 0; i < d->world; i++) d->fd[i] = -1;
    d->connected = true;
    if (d->world == 1) return 0;
    struct sockaddr_in sa;
    if (resolve(d, &sa, err)) return -1;
    double deadline = dist_now() + d->timeout_s;
    uint32_t hello[3] = {DIST_MAGIC, (uint32_t)d->rank, (uint32_t)d->world};
    if (d->rank == 0) {
        int ls = socket(AF_INET, SOCK_STREAM, 0);
        if (ls < 0) return stg_errf(err, "rank 0: socket: %s", strerror(errno));
        int one = 1;
        setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in any = sa;
        any.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(ls, (struct sockaddr *)&any, sizeof any) != 0 || listen(ls, d->world) != 0) {
            int e = errno;
            close(ls);
            return stg_errf(err, "rank 0: cannot listen on port %d (MASTER_PORT): %s", d->port, strerror(e));
        }
        for (int k = 1; k < d->world; k++) {
            if (dist_wait(ls, POLLIN, deadline, "waiting for the other ranks", -1, err)) {
                close(ls);
                return stg_errf(err, "rank 0: only %d of %d ranks connected within %.0f s (STG_DIST_TIMEOUT)%s", k, d->world,
                                d->timeout_s,
                                strcmp(d->source, "SLURM_*") == 0 ? "; under Slurm every task runs stg: start it with srun (a batch script "
                                                                    "is task 0 of SLURM_NTASKS)"
                                                                  : "");
            }
            int fd = accept(ls, NULL, NULL);
            if (fd < 0) {
                if (errno == EINTR) {
                    k--;
                    continue;
                }
                int e = errno;
                close(ls);
                return stg_errf(err, "rank 0: accept: %s", strerror(e));
            }
            nodelay(fd);
            uint32_t h[3];
            if (recv_all(d, fd, h, sizeof h, -1, err)) {
                close(fd);
                close(ls);
                return -1;
            }
            if (h[0] != DIST_MAGIC || h[2] != (uint32_t)d->world || h[1] == 0 || h[1] >= (uint32_t)d->world || d->fd[h[1]] >= 0) {
                close(fd);
                close(ls);
                return stg_errf(err, "rank 0: a process said it is rank %u of %u (expected a new rank of %d): two launches on one MASTER_PORT?",
                                h[1], h[2], d->world);
            }
            d->fd[h[1]] = fd;
        }
        close(ls);
        for (int k = 1; k < d->world; k++)
            if (send_all(d, d->fd[k], hello, sizeof hello, k, err)) return -1;
        return 0;
    }
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return stg_errf(err, "rank %d: socket: %s", d->rank, strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            nodelay(fd);
            d->fd[0] = fd;
            break;
        }
        int e = errno;
        close(fd);
        if (dist_now() > deadline)
            return stg_errf(err, "rank %d: cannot reach rank 0 at %s:%d within %.0f s: %s", d->rank, d->addr, d->port, d->timeout_s,
                            strerror(e));
        usleep(20000);
    }
    uint32_t ack[3];
    if (send_all(d, d->fd[0], hello, sizeof hello, 0, err) || recv_all(d, d->fd[0], ack, sizeof ack, 0, err)) return -1;
    if (ack[0] != DIST_MAGIC || ack[1] != 0 || ack[2] != (uint32_t)d->world)
        return stg_errf(err, "rank %d: rank 0 answered for a world of %u, not %d", d->rank, ack[2], d->world);
    return 0;
}

void rt_dist_close(rt_dist *d) {
    if (!d || !d->fd) return;
    for (int i = 0; i < d->world; i++)
        if (d->fd[i] >= 0) close(d->fd[i]);
    free(d->fd);
    d->fd = NULL;
    d->connected = false;
}

int rt_dist_bcast(rt_dist *d, void *buf, size_t n, stg_err *err) {
    if (!d->connected) return stg_errf(err, "rt_dist_bcast: not connected");
    if (d->rank == 0) {
        for (int k = 1; k < d->world; k++)
            if (send_all(d, d->fd[k], buf, n, k, err)) return -1;
        return 0;
    }
    return recv_all(d, d->fd[0], buf, n, 0, err);
}

int rt_dist_bcast_root(rt_dist *d, void *buf, size_t n, int root, stg_err *err) {
    if (!d->connected) return stg_errf(err, "rt_dist_bcast_root: not connected");
    if (root < 0 || root >= d->world) return stg_errf(err, "broadcast from rank %d of %d", root, d->world);
    if (d->world == 1 || root == 0) return rt_dist_bcast(d, buf, n, err);
    if (d->rank == root) {
        if (send_all(d, d->fd[0], buf, n, 0, err)) return -1;
        return 0;
    }
    if (d->rank == 0) {
        if (recv_all(d, d->fd[root], buf, n, root, err)) return -1;
        for (int k = 1; k < d->world; k++)
            if (k != root && send_all(d, d->fd[k], buf, n, k, err)) return -1;
        return 0;
    }
    return recv_all(d, d->fd[0], buf, n, 0, err);
}

int rt_dist_to_root(rt_dist *d, void *buf, size_t n, int from, stg_err *err) {
    if (!d->connected) return stg_errf(err, "rt_dist_to_root: not connected");
    if (from < 0 || from >= d->world) return stg_errf(err, "a message from rank %d of %d", from, d->world);
    if (from == 0 || (d->rank != 0 && d->rank != from)) return 0;
    if (d->rank == from) return send_all(d, d->fd[0], buf, n, 0, err);
    return recv_all(d, d->fd[from], buf, n, from, err);
}

int rt_dist_barrier(rt_dist *d, stg_err *err) {
    uint32_t token = DIST_MAGIC;
    if (!d->connected) return stg_errf(err, "rt_dist_barrier: not connected");
    if (d->rank == 0) {
        for (int k = 1; k < d->world; k++)
            if (recv_all(d, d->fd[k], &token, sizeof token, k, err)) return -1;
        for (int k = 1; k < d->world; k++)
            if (send_all(d, d->fd[k], &token, sizeof token, k, err)) return -1;
        return 0;
    }
    return send_all(d, d->fd[0], &token, sizeof token, 0, err) || recv_all(d, d->fd[0], &token, sizeof token, 0, err);
}

static double load_at(const void *buf, int64_t i, stg_dtype dt) {
    switch (dt) {
    case STG_F32: return ((const float *)buf)[i];
    case STG_F64: return ((const double *)buf)[i];
    case STG_BF16: return stg_bf16_to_f32(((const uint16_t *)buf)[i]);
    default: return 0;
    }
}

static void store_at(void *buf, int64_t i, stg_dtype dt, double v) {
    switch (dt) {
    case STG_F32: ((float *)buf)[i] = (float)v; break;
    case STG_F64: ((double *)buf)[i] = v; break;
    case STG_BF16: ((uint16_t *)buf)[i] = stg_f32_to_bf16((float)v); break;
    default: break;
    }
}

int rt_dist_allreduce_mean(rt_dist *d, void *buf, int64_t n, stg_dtype dt, stg_err *err) {
    if (dt != STG_F32 && dt != STG_F64 && dt != STG_BF16)
        return stg_errf(err, "all-reduce: %s tensors cannot be averaged", stg_dtype_name(dt));
    if (!d->connected) return stg_errf(err, "all-reduce: not connected");
    if (d->world == 1 || n == 0) return 0;
    size_t bytes = (size_t)n * stg_dtype_size(dt);
    if (d->rank != 0)
        return send_all(d, d->fd[0], buf, bytes, 0, err) || recv_all(d, d->fd[0], buf, bytes, 0, err) ? -1 : 0;
    double *sum = stg_malloc(sizeof(double) * (size_t)n, err);
    void *tmp = stg_malloc(bytes, err);
    int rc = -1;
    if (!sum || !tmp) goto out;
    for (int64_t i = 0; i < n; i++) sum[i] = load_at(buf, i, dt);
    for (int k = 1; k < d->world; k++) { // rank order: the same sum on every run
        if (recv_all(d, d->fd[k], tmp, bytes, k, err)) goto out;
        for (int64_t i = 0; i < n; i++) sum[i] += load_at(tmp, i, dt);
    }
    for (int64_t i = 0; i < n; i++) store_at(buf, i, dt, sum[i] / (double)d->world);
    for (int k = 1; k < d->world; k++)
        if (send_all(d, d->fd[k], buf, bytes, k, err)) goto out;
    rc = 0;
out:
    free(sum);
    free(tmp);
    return rc;
}

// Each line of a description is "key=value"; the first key whose line differs, or NULL.
static void first_difference(const char *a, const char *b, char *out, size_t n, int rank) {
    while (*a || *b) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        if (la != lb || memcmp(a, b, la) != 0) {
            snprintf(out, n, "rank %d has %.*s but rank 0 has %.*s", rank, (int)(lb > 400 ? 400 : lb), b, (int)(la > 400 ? 400 : la), a);
            return;
        }
        a += la + (ea ? 1 : 0);
        b += lb + (eb ? 1 : 0);
    }
    snprintf(out, n, "rank %d differs from rank 0", rank);
}

int rt_dist_agree(rt_dist *d, const char *desc, stg_err *err) {
    if (!d->connected || d->world <= 1) return 0;
    char *mine = stg_calloc(1, RT_DIST_DESC_MAX, err), *theirs = stg_calloc(1, RT_DIST_DESC_MAX, err);
    int rc = -1;
    if (!mine || !theirs) goto out;
    snprintf(mine, RT_DIST_DESC_MAX, "%s", desc);
    stg_err verdict;
    memset(&verdict, 0, sizeof verdict);
    for (int k = 1; k < d->world; k++) {
        if (rt_dist_to_root(d, d->rank == k ? mine : theirs, RT_DIST_DESC_MAX, k, err)) goto out;
        if (d->rank == 0 && !verdict.msg[0] && memcmp(mine, theirs, RT_DIST_DESC_MAX) != 0) {
            theirs[RT_DIST_DESC_MAX - 1] = 0;
            first_difference(mine, theirs, verdict.msg, sizeof verdict.msg, k);
        }
    }
    if (rt_dist_bcast(d, &verdict, sizeof verdict, err)) goto out;
    verdict.msg[sizeof verdict.msg - 1] = 0;
    if (verdict.msg[0]) {
        stg_errf(err, "the ranks were launched with different models or options: %s", verdict.msg);
        goto out;
    }
    rc = 0;
out:
    free(mine);
    free(theirs);
    return rc;
}
