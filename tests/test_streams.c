// The executor's concurrent streams (graph mode), checked without a GPU: a recording backend
// wraps the CPU backend, offers 3 streams and events, records what a capture enqueues and replays
// it on the CPU. From the recorded stream order and event waits (vector clocks) the test proves
// that every two ops that touch the same bytes (one writing) are ordered, that every stream joins
// stream 0 before the capture ends, that more than one stream was used, and that replay gives
// bitwise the losses and parameters of one-stream eager execution.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/registry.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/dist.h"
#include "runtime/exec.h"
#include "runtime/train.h"
#include "tests/rig.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p
#define NS 3      // compute streams
#define NSTR (NS + 1)
#define MAXREC 200000

typedef enum { R_UPLOAD, R_DOWNLOAD, R_FILL, R_OP } rec_kind;

typedef struct {
    rec_kind kind;
    void *dst;
    const void *src;
    size_t n;
    int v;
    const stg_graph *g;
    int op, stream;
    void *const *ptr;
    int seq;              // R_OP: position of the op on its stream (1-based)
    int clock[NSTR];      // R_OP: what its stream had completed when it ran (vector clock)
} rec;

static struct {
    rt_backend *cpu;
    bool capturing;
    rec *r;
    int nr;
    int seq[NSTR];
    int vc[NSTR][NSTR];
    int (*evc)[NSTR];
    int nev;
    int streams_used;
    int violations, graphs;
} M;

static rt_backend *inner(void) { return M.cpu; }

static int m_alloc(rt_backend *b, size_t n, void **out, stg_err *err) { return inner()->ops->alloc(inner(), n, out, err); }
static void m_release(rt_backend *b, void *p) { inner()->ops->release(inner(), p); }
static int m_alloc_host(rt_backend *b, size_t n, void **out, stg_err *err) { return inner()->ops->alloc_host(inner(), n, out, err); }
static void m_release_host(rt_backend *b, void *p) { inner()->ops->release_host(inner(), p); }

static rec *push(void) {
    assert_true(M.nr < MAXREC);
    rec *x = &M.r[M.nr++];
    memset(x, 0, sizeof *x);
    return x;
}

static int m_upload(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err) {
    if (!M.capturing) return inner()->ops->upload(inner(), dst, src, n, err);
    rec *x = push();
    *x = (rec){.kind = R_UPLOAD, .dst = dst, .src = src, .n = n};
    return 0;
}

static int m_download(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err) {
    if (!M.capturing) return inner()->ops->download(inner(), dst, src, n, err);
    rec *x = push();
    *x = (rec){.kind = R_DOWNLOAD, .dst = dst, .src = src, .n = n};
    return 0;
}

static int m_fill(rt_backend *b, void *dst, int v, size_t n, stg_err *err) {
    if (!M.capturing) return inner()->ops->fill(inner(), dst, v, n, err);
    rec *x = push();
    *x = (rec){.kind = R_FILL, .dst = dst, .v = v, .n = n};
    return 0;
}

static int m_prepare(rt_backend *b, const stg_graph *g, void *const *ptr, stg_err *err) {
    return inner()->ops->prepare(inner(), g, ptr, err);
}

static int m_run(rt_backend *b, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    if (M.capturing) return stg_errf(err, "mock: run_op during a capture (all ops should go through run_op_on)");
    return inner()->ops->run_op(inner(), g, op, ptr, err);
}

static int m_streams(rt_backend *b) { return NS; }

// The mock's own lane policy, the same as the CUDA records' (ops/<family>/cuda.cu): ops that would use
// shared scratch stay on stream 0, the optimizer's multi-tensor ops wait for everything,
// communication has its own stream, the rest may go anywhere. A table (1 + lane; 0: ANY); with the
// optimizer in backward (adamw ops with slots) the updates and lr_schedule take the communication
// stream (m_lane), as ops/optim/cuda.cu's records do.
static const int m_lanes[STG_OP_COUNT] = {
    [STG_OP_GLOBAL_NORM] = 1 + RT_LANE_BARRIER, [STG_OP_ADAMW] = 1 + RT_LANE_BARRIER,
    [STG_OP_LR_SCHEDULE] = 1 + RT_LANE_BARRIER, [STG_OP_RMSNORM_BWD] = 1 + RT_LANE_MAIN,
    [STG_OP_LAYERNORM_BWD] = 1 + RT_LANE_MAIN,  [STG_OP_ATTENTION_BWD] = 1 + RT_LANE_MAIN,
    [STG_OP_CROSS_ENTROPY] = 1 + RT_LANE_MAIN,  [STG_OP_CROSS_ENTROPY_BWD] = 1 + RT_LANE_MAIN,
    [STG_OP_EMBEDDING_BWD] = 1 + RT_LANE_MAIN,  [STG_OP_ALLREDUCE] = 1 + RT_LANE_COMM,
    [STG_OP_BROADCAST] = 1 + RT_LANE_COMM,     [STG_OP_LINEAR_CROSS_ENTROPY] = 1 + RT_LANE_MAIN,
    [STG_OP_LINEAR_CROSS_ENTROPY_BWD] = 1 + RT_LANE_MAIN,
};

static int m_lane(rt_backend *b, const stg_graph *g, int op) {
    if (g->ops[op].kind == STG_OP_ADAMW && g->ops[op].a.adamw.slot > 0) return RT_LANE_COMM;
    if (g->ops[op].kind == STG_OP_LR_SCHEDULE)
        for (int o = 0; o < g->nops; o++)
            if (g->ops[o].kind == STG_OP_ADAMW && g->ops[o].a.adamw.slot > 0) return RT_LANE_COMM;
    int l = m_lanes[g->ops[op].kind];
    return l ? l - 1 : RT_LANE_ANY;
}

static int m_run_on(rt_backend *b, int s, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    if (!M.capturing) return stg_errf(err, "mock: run_op_on outside a capture");
    if (s < 0 || s > NS) return stg_errf(err, "mock: no stream %d", s);
    int lane = m_lane(b, g, op);
    if ((lane == RT_LANE_MAIN || lane == RT_LANE_BARRIER) && s != 0) return stg_errf(err, "mock: %s on stream %d", ops_name(g->ops[op].kind), s);
    if (lane == RT_LANE_COMM && s != NS) return stg_errf(err, "mock: %s on stream %d", ops_name(g->ops[op].kind), s);
    if (lane == RT_LANE_ANY && s == NS) return stg_errf(err, "mock: compute on the communication stream");
    rec *x = push();
    M.seq[s]++;
    M.vc[s][s] = M.seq[s];
    *x = (rec){.kind = R_OP, .g = g, .op = op, .stream = s, .ptr = ptr, .seq = M.seq[s]};
    memcpy(x->clock, M.vc[s], sizeof x->clock);
    M.streams_used |= 1 << s;
    return 0;
}

static int m_events(rt_backend *b, int n, stg_err *err) {
    if (n <= M.nev) return 0;
    int(*e)[NSTR] = realloc(M.evc, sizeof *e * (size_t)n);
    if (!e) return stg_errf(err, "mock: out of memory");
    M.evc = e;
    for (; M.nev < n; M.nev++) memset(M.evc[M.nev], 0, sizeof M.evc[0]);
    return 0;
}

static int m_record_ev(rt_backend *b, int s, int ev, stg_err *err) {
    if (ev < 0 || ev >= M.nev) return stg_errf(err, "mock: event %d of %d", ev, M.nev);
    memcpy(M.evc[ev], M.vc[s], sizeof M.evc[ev]);
    return 0;
}

static int m_wait_ev(rt_backend *b, int s, int ev, stg_err *err) {
    if (ev < 0 || ev >= M.nev) return stg_errf(err, "mock: event %d of %d", ev, M.nev);
    for (int k = 0; k < NSTR; k++)
        if (M.evc[ev][k] > M.vc[s][k]) M.vc[s][k] = M.evc[ev][k];
    return 0;
}

static int m_capture_begin(rt_backend *b, stg_err *err) {
    M.capturing = true;
    M.nr = 0;
    memset(M.seq, 0, sizeof M.seq);
    memset(M.vc, 0, sizeof M.vc);
    return 0;
}

typedef struct {
    uintptr_t lo, hi;
} span;

static int spans_of(const rec *x, span *r, int *nr, span *w, int *nw) {
    const stg_op *op = &x->g->ops[x->op];
    uint32_t mut = ops_def(op->kind)->mutates_in;
    assert_true(op->n_in + op->n_out <= 64);
    *nr = *nw = 0;
    for (int k = 0; k < op->n_in + op->n_out; k++) {
        int t = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
        if (!x->ptr[t]) continue;
        span sp = {(uintptr_t)x->ptr[t], (uintptr_t)x->ptr[t] + (uintptr_t)stg_bytes(&x->g->t[t])};
        if (k >= op->n_in || ops_bit(mut, k)) w[(*nw)++] = sp;
        else r[(*nr)++] = sp;
    }
    return 0;
}

static bool meet(const span *a, int na, const span *b, int nb) {
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (a[i].lo < b[j].hi && b[j].lo < a[i].hi) return true;
    return false;
}

// Every conflicting pair of recorded ops ordered (i happened before j); every stream joined.
static void check_order(void) {
    span (*r)[64] = calloc((size_t)M.nr, sizeof *r), (*w)[64] = calloc((size_t)M.nr, sizeof *w);
    int *nr = calloc((size_t)M.nr, sizeof *nr), *nw = calloc((size_t)M.nr, sizeof *nw);
    assert_non_null(r);
    assert_non_null(w);
    for (int i = 0; i < M.nr; i++)
        if (M.r[i].kind == R_OP) spans_of(&M.r[i], r[i], &nr[i], w[i], &nw[i]);
    for (int j = 0; j < M.nr; j++) {
        if (M.r[j].kind != R_OP) continue;
        for (int i = 0; i < j; i++) {
            if (M.r[i].kind != R_OP) continue;
            bool conflict = meet(w[i], nw[i], r[j], nr[j]) || meet(w[i], nw[i], w[j], nw[j]) || meet(r[i], nr[i], w[j], nw[j]);
            if (conflict && M.r[j].clock[M.r[i].stream] < M.r[i].seq) {
                if (M.violations++ < 5)
                    print_message("unordered: %s (stream %d) and %s (stream %d)\n", ops_name(M.r[i].g->ops[M.r[i].op].kind), M.r[i].stream,
                                  ops_name(M.r[j].g->ops[M.r[j].op].kind), M.r[j].stream);
            }
        }
    }
    for (int k = 1; k < NSTR; k++) assert_true(M.vc[0][k] >= M.seq[k]); // joined
    free(r);
    free(w);
    free(nr);
    free(nw);
}

typedef struct {
    rec *r;
    int n;
} mgraph;

static int m_capture_end(rt_backend *b, void **out, stg_err *err) {
    M.capturing = false;
    check_order();
    mgraph *gr = malloc(sizeof *gr);
    if (!gr || !(gr->r = malloc(sizeof(rec) * (size_t)(M.nr ? M.nr : 1)))) {
        free(gr);
        return stg_errf(err, "mock: out of memory");
    }
    memcpy(gr->r, M.r, sizeof(rec) * (size_t)M.nr);
    gr->n = M.nr;
    M.graphs++;
    *out = gr;
    return 0;
}

static int m_launch(rt_backend *b, void *graph, stg_err *err) {
    mgraph *gr = graph;
    rt_backend *c = inner();
    for (int i = 0; i < gr->n; i++) { // the recorded order is one valid order of the captured graph
        rec *x = &gr->r[i];
        int rc = x->kind == R_UPLOAD     ? c->ops->upload(c, x->dst, x->src, x->n, err)
                 : x->kind == R_DOWNLOAD ? c->ops->download(c, x->dst, x->src, x->n, err)
                 : x->kind == R_FILL     ? c->ops->fill(c, x->dst, x->v, x->n, err)
                                         : c->ops->run_op(c, x->g, x->op, x->ptr, err);
        if (rc) return -1;
    }
    return 0;
}

static void m_graph_destroy(rt_backend *b, void *graph) {
    mgraph *gr = graph;
    if (gr) free(gr->r);
    free(gr);
}

static int m_slot(rt_backend *b, int slot, stg_err *err) { return 0; }
static int m_sync(rt_backend *b, stg_err *err) { return 0; }
static int64_t m_mem(rt_backend *b) { return -1; }
static void m_destroy(rt_backend *b) { free(b); }

static const rt_backend_ops mock_ops = {
    .name = "mock",
    .alloc = m_alloc,
    .release = m_release,
    .alloc_host = m_alloc_host,
    .release_host = m_release_host,
    .upload = m_upload,
    .download = m_download,
    .fill = m_fill,
    .prepare = m_prepare,
    .run_op = m_run,
    .record = m_slot,
    .wait = m_slot,
    .sync = m_sync,
    .capture_begin = m_capture_begin,
    .capture_end = m_capture_end,
    .graph_launch = m_launch,
    .graph_destroy = m_graph_destroy,
    .streams = m_streams,
    .op_lane = m_lane,
    .run_op_on = m_run_on,
    .events = m_events,
    .event_record = m_record_ev,
    .event_wait = m_wait_ev,
    .mem_used = m_mem,
    .mem_free = m_mem,
    .destroy = m_destroy,
};

static int dp_world; // data parallel graphs (allreduce ops on the communication stream) when >= 1
static bool in_bwd;  // the optimizer in backward (its updates on the communication stream)

static stg_step *load(const char *attention) {
    const char *sets[] = {RIG_TINY, "batch=2", "ctx=16", attention};
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), STG_PREC_FP32, sets, 8);
    o.optim = rig_optim(1e-2, graph_optim_defaults().min_lr, 1, 5);
    o.optim.dp_world = dp_world;
    o.optim.in_backward = in_bwd;
    o.optim.dp_bucket_bytes = 8 << 10;
    o.optim.dp_first_bucket_bytes = 2 << 10;
    return rig_step(&o);
}

// 4 steps; losses and parameters (and AdamW state) as bytes.
static void run(rt_backend *b, const char *attention, bool graph, bool poison, double *loss, char **state, size_t *n) {
    rig r;
    rt_exec_opts eo = {.graph = graph, .poison = poison};
    rig_open(&r, load(attention), &(rig_cfg){.b = b, .eo = &eo, .init_seed = 4, .feed_seed = 3, .rng_seed = 8});
    rig_steps(&r, 4, loss);
    *state = rig_state(&r, n);
    rig_close(&r);
}

static void streams_equal_eager(const char *attention) {
    stg_err err;
    rt_backend *cpu, *mock = calloc(1, sizeof *mock);
    assert_non_null(mock);
    if (rt_backend_cpu_new(&cpu, &err)) fail_msg("%s", err.msg);
    rt_dist d; // one rank: the allreduce ops average over one process
    memset(&d, 0, sizeof d);
    if (dp_world && (rt_dist_from_env(&d, &err) || rt_dist_connect(&d, &err) || rt_backend_cpu_join(cpu, &d, &err)))
        fail_msg("%s", err.msg);
    memset(&M, 0, sizeof M);
    M.cpu = cpu;
    M.r = malloc(sizeof(rec) * MAXREC);
    assert_non_null(M.r);
    mock->ops = &mock_ops;
    double l0[4], l1[4], l2[4];
    char *s0, *s1, *s2;
    size_t n0, n1, n2;
    run(cpu, attention, false, false, l0, &s0, &n0);   // one stream, eager
    run(mock, attention, true, false, l1, &s1, &n1);   // captured on 3 + 1 streams, replayed
    run(mock, attention, true, true, l2, &s2, &n2);    // the same with a NaN-poisoned arena
    print_message("%s%s%s: %d captures, streams used 0x%x, %d unordered pairs\n", attention, dp_world ? ", data parallel" : "",
                  in_bwd ? ", optimizer in backward" : "", M.graphs, M.streams_used, M.violations);
    assert_int_equal(M.violations, 0);
    assert_true(M.graphs >= 2);
    assert_true((M.streams_used & 0x6) != 0); // some op left stream 0
    if (dp_world || in_bwd) assert_true(M.streams_used & (1 << NS)); // allreduce or AdamW on the communication stream
    assert_memory_equal(l0, l1, sizeof l0);
    assert_memory_equal(l0, l2, sizeof l0);
    assert_int_equal(n0, n1);
    assert_memory_equal(s0, s1, n0);
    assert_memory_equal(s0, s2, n0);
    free(s0);
    free(s1);
    free(s2);
    free(M.r);
    free(M.evc);
    cpu->ops->destroy(cpu);
    rt_dist_close(&d);
    free(mock);
}

// rt_exec_critical_path on the lanes of a captured step, with made-up op times: the chain it finds
// is a chain of the capture (each op ordered after the one before by stream or event), its times add
// up to the length, and the slacks are exact: lengthening an op by less than its slack changes
// nothing, by more lengthens the run by the difference, and an op on the chain lengthens it fully.
static double path_len(rt_exec *e, const stg_graph *g, const double *ms, bool *on, double *slack) {
    double len;
    stg_err err;
    if (rt_exec_critical_path(e, RT_PHASE_ALL, ms, &len, on, slack, &err)) fail_msg("%s", err.msg);
    return len;
}

static void test_critical_path(void **s) {
    stg_err err;
    rt_backend *cpu, *mock = calloc(1, sizeof *mock);
    assert_non_null(mock);
    if (rt_backend_cpu_new(&cpu, &err)) fail_msg("%s", err.msg);
    memset(&M, 0, sizeof M);
    M.cpu = cpu;
    M.r = malloc(sizeof(rec) * MAXREC);
    assert_non_null(M.r);
    mock->ops = &mock_ops;
    rig r;
    rt_exec_opts eo = {.graph = true};
    rig_open(&r, load("attention=flash"), &(rig_cfg){.b = mock, .eo = &eo, .init_seed = 4, .feed_seed = 3, .rng_seed = 3});
    if (rt_feed_next(r.f, r.e, &r.rng, &err) || rt_exec_run(r.e, RT_PHASE_ALL, &err)) fail_msg("%s", err.msg);
    stg_graph *g = r.g;
    rt_exec *e = r.e;
    int n = g->nsched;
    double *ms = malloc(sizeof *ms * (size_t)n), *slack = malloc(sizeof *slack * (size_t)n), total = 0;
    bool *on = malloc(sizeof *on * (size_t)n);
    int *rec_of = malloc(sizeof *rec_of * (size_t)g->nops);
    assert_true(ms && slack && on && rec_of);
    for (int i = 0; i < n; i++) total += ms[i] = 0.25 + (double)((i * 7919) % 13) * 0.5;
    for (int o = 0; o < g->nops; o++) rec_of[o] = -1;
    for (int i = 0; i < M.nr; i++)
        if (M.r[i].kind == R_OP) rec_of[M.r[i].op] = i;
    double len = path_len(e, g, ms, on, slack), on_sum = 0, stream_sum[NSTR] = {0}, widest = 0;
    int last = -1, pick_off = -1, pick_on = -1;
    for (int i = 0; i < n; i++) {
        const rec *x = &M.r[rec_of[g->schedule[i]]];
        assert_true(rec_of[g->schedule[i]] >= 0);
        assert_true(slack[i] >= 0);
        stream_sum[x->stream] += ms[i];
        if (!on[i]) {
            if (pick_off < 0 || slack[i] > slack[pick_off]) pick_off = i;
            continue;
        }
        assert_true(slack[i] < 1e-9 * len);
        on_sum += ms[i];
        if (last >= 0) { // ordered after the previous op of the chain
            const rec *y = &M.r[rec_of[g->schedule[last]]];
            assert_true(x->clock[y->stream] >= y->seq);
        }
        last = i;
        pick_on = i;
    }
    for (int k = 0; k < NSTR; k++) widest = stream_sum[k] > widest ? stream_sum[k] : widest;
    print_message("critical path %.2f of %.2f (widest stream %.2f), %d ops\n", len, total, widest, n);
    assert_true(fabs(on_sum - len) < 1e-9 * len);
    assert_true(len >= widest - 1e-9 && len < total); // streams overlap some work
    assert_true(pick_off >= 0 && slack[pick_off] > 1.0 && pick_on >= 0);
    double sl = slack[pick_off], base = ms[pick_off];
    ms[pick_off] = base + 0.5 * sl;
    assert_true(fabs(path_len(e, g, ms, on, slack) - len) < 1e-9 * len);
    ms[pick_off] = base + sl + 2.0;
    assert_true(fabs(path_len(e, g, ms, on, slack) - (len + 2.0)) < 1e-9 * len);
    assert_true(on[pick_off]);
    ms[pick_off] = base;
    ms[pick_on] += 1.0;
    assert_true(fabs(path_len(e, g, ms, on, slack) - (len + 1.0)) < 1e-9 * len);
    ms[pick_on] -= 1.0;
    // the same order as a reusable graph: what-if timings
    rt_dag *d;
    if (rt_exec_dag(e, RT_PHASE_ALL, &d, &err)) fail_msg("%s", err.msg);
    double *w = malloc(sizeof *w * (size_t)n);
    assert_non_null(w);
    assert_true(fabs(rt_dag_length(d, ms, NULL, NULL) - len) < 1e-9 * len);
    path_len(e, g, ms, on, slack);
    for (int i = 0; i < n; i++) w[i] = on[i] ? ms[i] : 0; // off-chain ops free: the same length
    assert_true(fabs(rt_dag_length(d, w, NULL, NULL) - len) < 1e-9 * len);
    for (int i = 0; i < n; i++) w[i] = on[i] ? 0 : ms[i]; // chain free: shorter, by at most the chain
    double l1 = rt_dag_length(d, w, NULL, NULL);
    assert_true(l1 < len && l1 >= widest - on_sum - 1e-9);
    for (int i = 0; i < n; i++) w[i] = 0;
    assert_true(rt_dag_length(d, w, NULL, NULL) == 0);
    free(w);
    rt_dag_free(d);
    // the lanes planned for other stream counts: 1 is the sum, the run's own 3 the length above
    double by_k[8];
    for (int k = 1; k <= 7; k++) {
        if (rt_exec_dag_streams(e, RT_PHASE_ALL, k, &d, &err)) fail_msg("%s", err.msg);
        by_k[k] = rt_dag_length(d, ms, NULL, NULL);
        rt_dag_free(d);
        assert_true(by_k[k] <= total + 1e-9 && by_k[k] >= 0.5 * len);
    }
    print_message("critical path by streams: 1 %.2f, 2 %.2f, 3 %.2f, 4 %.2f, 7 %.2f\n", by_k[1], by_k[2], by_k[3], by_k[4], by_k[7]);
    assert_true(fabs(by_k[1] - total) < 1e-9 * total);
    assert_true(fabs(by_k[3] - len) < 1e-9 * len);
    assert_true(by_k[2] < by_k[1]);
    assert_int_not_equal(rt_exec_dag_streams(e, RT_PHASE_ALL, 8, &d, &err), 0);
    free(ms), free(slack), free(on), free(rec_of);
    rig_close(&r);
    free(M.r);
    free(M.evc);
    cpu->ops->destroy(cpu);
    free(mock);
}

static void test_flash(void **s) { streams_equal_eager("attention=flash"); }
static void test_naive(void **s) { streams_equal_eager("attention=naive"); }
static void test_data_parallel(void **s) {
    dp_world = 1;
    streams_equal_eager("attention=flash");
    dp_world = 0;
}
// The updates beside the backward on their own stream: every gradient read by its update before
// anything reuses its bytes, every parameter read by the backward before its update writes it.
static void test_optimizer_in_backward(void **s) {
    in_bwd = true;
    streams_equal_eager("attention=flash");
    in_bwd = false;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flash),
        cmocka_unit_test(test_naive),
        cmocka_unit_test(test_data_parallel),
        cmocka_unit_test(test_optimizer_in_backward),
        cmocka_unit_test(test_critical_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
