// planner/: liveness, in-place reuse, views, groups, offset assignment (checked by an independent
// brute force), lower bound, the analytical formula and the report in its four formats.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/graph.h"
#include "graph/loader.h"
#include "ops/registry.h"
#include "planner/formula.h"
#include "planner/plan.h"
#include "planner/report.h"
#include "tests/rig.h"

// ---- graphs built by hand (no shape inference) ------------------------------------------------

static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static int rnd(uint64_t *s, int n) { return (int)(rng_next(s) % (uint64_t)n); }

static stg_graph *new_graph(void) {
    stg_err err;
    stg_graph *g = graph_new(STG_PREC_FP32, &err);
    assert_non_null(g);
    snprintf(g->name, sizeof g->name, "test");
    return g;
}

// A 1-D f32 tensor of n elements.
static int add_t(stg_graph *g, const char *name, int64_t n, stg_tclass cls) {
    stg_err err;
    stg_loc loc = {0};
    int id = graph_add_tensor(g, name, 1, &n, STG_F32, cls, loc, &err);
    assert_true(id >= 0);
    return id;
}

// Appends an op writing existing tensors `out` and schedules it last.
static int add_op(stg_graph *g, stg_op_kind k, const int *in, int n_in, const int *out, int n_out, stg_phase ph) {
    if (g->nops == g->cap_ops) {
        g->cap_ops = g->cap_ops ? 2 * g->cap_ops : 64;
        g->ops = realloc(g->ops, sizeof *g->ops * (size_t)g->cap_ops);
        assert_non_null(g->ops);
    }
    int id = g->nops++;
    stg_op *op = &g->ops[id];
    memset(op, 0, sizeof *op);
    op->kind = k;
    op->phase = ph;
    op->fwd = -1;
    op->in = malloc(sizeof(int) * (size_t)(n_in ? n_in : 1));
    assert_non_null(op->in);
    memcpy(op->in, in, sizeof(int) * (size_t)n_in);
    op->n_in = n_in;
    op->n_out = n_out;
    for (int i = 0; i < n_out; i++) {
        op->out[i] = out[i];
        g->t[out[i]].producer = id;
    }
    g->schedule = realloc(g->schedule, sizeof(int) * (size_t)(g->nsched + 1));
    assert_non_null(g->schedule);
    g->schedule[g->nsched++] = id;
    return id;
}

static int op1(stg_graph *g, stg_op_kind k, int a, int out, stg_phase ph) { return add_op(g, k, &a, 1, &out, 1, ph); }
static int op2(stg_graph *g, stg_op_kind k, int a, int b, int out, stg_phase ph) {
    int in[2] = {a, b};
    return add_op(g, k, in, 2, &out, 1, ph);
}

static int view_root(const stg_graph *g, int t) {
    while (g->t[t].base >= 0) t = g->t[t].base;
    return t;
}

static int64_t al(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// A random DAG: parameters and an input, then ops of kinds add / scale (in place allowed on input
// 0), reshape (a view) and matmul (a stand-in for any op that never runs in place), with random
// output sizes and classes, some outputs in contiguous groups.
static stg_graph *random_graph(uint64_t seed, int nops) {
    uint64_t s = seed * 2654435761u + 12345;
    stg_graph *g = new_graph();
    int *pool = malloc(sizeof(int) * (size_t)(nops + 16));
    int np = 0;
    char nm[32];
    int npar = 2 + rnd(&s, 4);
    for (int i = 0; i < npar; i++) {
        snprintf(nm, sizeof nm, "p%d", i);
        pool[np++] = add_t(g, nm, 1 + rnd(&s, 3000), STG_CLASS_PARAM);
    }
    pool[np++] = add_t(g, "tokens", 64 + rnd(&s, 512), STG_CLASS_INPUT);
    for (int i = 0; i < nops; i++) {
        stg_phase ph = i < nops * 4 / 10 ? STG_PHASE_FORWARD : i < nops * 9 / 10 ? STG_PHASE_BACKWARD : STG_PHASE_OPTIMIZER;
        int in0 = rnd(&s, 10) < 7 ? pool[np - 1 - rnd(&s, np < 6 ? np : 6)] : pool[rnd(&s, np)];
        int in1 = pool[rnd(&s, np)];
        int kind = rnd(&s, 10);
        stg_tclass cls = rnd(&s, 5) == 0 ? STG_CLASS_GRAD : rnd(&s, 2) ? STG_CLASS_ACTIVATION : STG_CLASS_TEMPORARY;
        int64_t n0 = stg_numel(&g->t[in0]);
        int64_t n = rnd(&s, 2) ? n0 : rnd(&s, 2) ? 1 + rnd(&s, (int)n0) : n0 + 1 + rnd(&s, 2000);
        snprintf(nm, sizeof nm, "t%d", i);
        if (kind < 2) { // reshape: a view of in0
            int out = add_t(g, nm, n0, g->t[view_root(g, in0)].cls == STG_CLASS_PARAM ? STG_CLASS_TEMPORARY : cls);
            g->t[out].base = view_root(g, in0);
            op1(g, STG_OP_RESHAPE, in0, out, ph);
            pool[np++] = out;
            continue;
        }
        int out = add_t(g, nm, n, cls);
        if (rnd(&s, 8) == 0) g->t[out].group = rnd(&s, 3);
        if (kind < 5)
            op2(g, STG_OP_ADD, in0, in1, out, ph);
        else if (kind < 7)
            op1(g, STG_OP_SCALE, in0, out, ph);
        else if (rnd(&s, 2))
            op1(g, STG_OP_MATMUL, in0, out, ph);
        else
            op2(g, STG_OP_MATMUL, in0, in1, out, ph);
        pool[np++] = out;
    }
    free(pool);
    return g;
}

// Lives recomputed in the test: first = write (or first read), last = last read (or write).
static void lives(const stg_graph *g, int *first, int *last) {
    for (int t = 0; t < g->nt; t++) first[t] = last[t] = -1;
    for (int s = 0; s < g->nsched; s++) {
        const stg_op *op = &g->ops[g->schedule[s]];
        for (int i = 0; i < op->n_in; i++) {
            if (first[op->in[i]] < 0) first[op->in[i]] = s;
            last[op->in[i]] = s;
        }
        for (int k = 0; k < op->n_out; k++) first[op->out[k]] = last[op->out[k]] = s;
    }
    for (int s = 0; s < g->nsched; s++) { // reads after the write
        const stg_op *op = &g->ops[g->schedule[s]];
        for (int i = 0; i < op->n_in; i++)
            if (s > last[op->in[i]]) last[op->in[i]] = s;
    }
}

// The brute force: for every step and every pair of live non-view tensors in one region, byte
// ranges are disjoint unless one hands its bytes to the other in place at that very step; every
// tensor lies inside its region.
static void brute_force_check(const stg_graph *g, const stg_plan *p) {
    int nt = g->nt;
    int *first = malloc(sizeof(int) * (size_t)nt), *last = malloc(sizeof(int) * (size_t)nt);
    int *eff = malloc(sizeof(int) * (size_t)nt);
    lives(g, first, last);
    for (int t = 0; t < nt; t++) eff[t] = last[t];
    for (int t = 0; t < nt; t++) {
        int r = view_root(g, t);
        if (last[t] > eff[r]) eff[r] = last[t];
        if (first[t] >= 0 && (first[r] < 0 || first[t] < first[r])) {
            // a view used while its base never is: keep the base alive from there
            eff[r] = eff[r] > last[t] ? eff[r] : last[t];
        }
    }
    // Group blocks live as one.
    for (int t = 0; t < nt; t++)
        for (int u = 0; u < nt; u++)
            if (g->t[t].group >= 0 && g->t[u].group == g->t[t].group && first[u] >= 0) {
                if (first[t] < 0 || first[u] < first[t]) first[t] = first[u];
                if (eff[u] > eff[t]) eff[t] = eff[u];
            }
    for (int t = 0; t < nt; t++) {
        if (p->region[t] == STG_REGION_NONE) {
            assert_true(first[t] < 0 || g->t[t].base >= 0);
            continue;
        }
        int64_t cap = p->region[t] == STG_REGION_ARENA ? p->arena_bytes : p->persistent_bytes;
        assert_true(p->offset[t] >= 0);
        assert_true(p->offset[t] + stg_bytes(&g->t[t]) <= cap);
        assert_int_equal(p->region[t], stg_class_persistent(g->t[view_root(g, t)].cls) ? STG_REGION_PERSISTENT : STG_REGION_ARENA);
    }
    for (int s = 0; s < g->nsched; s++)
        for (int t = 0; t < nt; t++) {
            if (g->t[t].base >= 0 || p->region[t] == STG_REGION_NONE) continue;
            bool pt = p->region[t] == STG_REGION_PERSISTENT;
            if (!pt && (first[t] > s || eff[t] < s)) continue;
            for (int u = t + 1; u < nt; u++) {
                if (g->t[u].base >= 0 || p->region[u] != p->region[t]) continue;
                if (!pt && (first[u] > s || eff[u] < s)) continue;
                int64_t a0 = p->offset[t], a1 = a0 + stg_bytes(&g->t[t]);
                int64_t b0 = p->offset[u], b1 = b0 + stg_bytes(&g->t[u]);
                if (a1 <= b0 || b1 <= a0) continue;
                // Overlap: only legal as an in-place hand-over at step s.
                int older = first[t] <= first[u] ? t : u, newer = older == t ? u : t;
                bool ok = !pt && eff[older] == s && first[newer] == s;
                if (ok) {
                    const stg_op *op = &g->ops[g->t[newer].producer];
                    const stg_op_def *d = ops_def(op->kind);
                    ok = d->inplace_in >= 0 && op->out[0] == newer && view_root(g, op->in[d->inplace_in]) == older;
                }
                if (!ok)
                    fail_msg("step %d: '%s' [%lld,%lld) and '%s' [%lld,%lld) overlap", s, g->t[t].name, (long long)a0,
                             (long long)a1, g->t[u].name, (long long)b0, (long long)b1);
            }
        }
    free(first);
    free(last);
    free(eff);
}

// by_class sums the storage owners; persistent classes fill the persistent region; the live
// bytes per step agree with the storages' lives; lower bound <= peak.
static void check_totals(const stg_graph *g, const stg_plan *p) {
    int64_t bc[STG_CLASS_COUNT] = {0}, pers = 0;
    for (int t = 0; t < g->nt; t++)
        if (p->owner[t] == t && p->region[t] != STG_REGION_NONE) {
            bc[g->t[t].cls] += al(stg_bytes(&g->t[t]), p->alignment);
            if (p->region[t] == STG_REGION_PERSISTENT) pers += al(stg_bytes(&g->t[t]), p->alignment);
        }
    for (int c = 0; c < STG_CLASS_COUNT; c++) assert_int_equal(bc[c], p->by_class[c]);
    assert_int_equal(pers, p->persistent_bytes);
    assert_int_equal(p->peak_bytes, p->persistent_bytes + p->arena_bytes);
    assert_true(p->lower_bound_bytes <= p->peak_bytes);
    assert_true(p->lower_bound_bytes >= p->persistent_bytes);
    int64_t mx = 0;
    for (int s = 0; s < p->nsched; s++) {
        int64_t v = plan_live_at(p, s, -1);
        if (v > mx) mx = v;
        for (int c = 0; c < STG_CLASS_COUNT; c++) assert_true(plan_live_at(p, s, c) >= 0);
    }
    assert_int_equal(mx, p->lower_bound_bytes);
    if (p->nsched > 0) assert_int_equal(plan_live_at(p, p->peak_step, -1), mx);
}

// In place happens exactly when allowed: kind allows it, the input's storage has no later reader,
// both in the arena, sizes fit, no groups, no other input sharing the bytes.
static void check_inplace(const stg_graph *g, const stg_plan *p) {
    int nt = g->nt;
    int *first = malloc(sizeof(int) * (size_t)nt), *last = malloc(sizeof(int) * (size_t)nt);
    lives(g, first, last);
    for (int s = 0; s < g->nsched; s++) {
        const stg_op *op = &g->ops[g->schedule[s]];
        const stg_op_def *d = ops_def(op->kind);
        if (d->inplace_in < 0 || op->n_out < 1) continue;
        int out = op->out[0], in = op->in[d->inplace_in], st = p->owner[in];
        bool later = false;
        for (int t = 0; t < nt; t++)
            if (p->owner[t] == st && t != out && first[t] < s && last[t] > s) later = true;
        bool shared = false;
        for (int j = 0; j < op->n_in; j++)
            if (j != d->inplace_in && p->owner[op->in[j]] == st) shared = true;
        bool allowed = !later && !shared && !stg_class_persistent(g->t[st].cls) && g->t[st].group < 0 &&
                       g->t[out].group < 0 && al(stg_bytes(&g->t[out]), p->alignment) <= p->size[st];
        if (later) assert_int_not_equal(p->owner[out], st);
        if (allowed != (p->owner[out] == st))
            fail_msg("step %d: '%s' over '%s': allowed %d, planned %d", s, g->t[out].name, g->t[in].name, allowed,
                     p->owner[out] == st);
    }
    free(first);
    free(last);
}

static void check_groups(const stg_graph *g, const stg_plan *p) {
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].group < 0 || p->region[t] == STG_REGION_NONE) continue;
        for (int u = t + 1; u < g->nt; u++)
            if (g->t[u].group == g->t[t].group) {
                assert_int_equal(p->offset[u], p->offset[t] + al(stg_bytes(&g->t[t]), p->alignment));
                break;
            }
    }
}

static stg_plan *plan_ok(const stg_graph *g, int64_t alignment) {
    stg_plan_opts o = plan_defaults();
    if (alignment > 0) o.alignment = alignment;
    stg_plan *p = NULL;
    stg_err err = {{0}};
    if (plan_build(g, &o, &p, &err)) fail_msg("plan_build: %s", err.msg);
    if (plan_verify(g, p, &err)) fail_msg("plan_verify: %s", err.msg);
    return p;
}

static void test_random_graphs(void **state) {
    (void)state;
    int inplace = 0, grouped = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        stg_graph *g = random_graph(seed, 5 + (int)(seed % 60));
        int64_t aligns[3] = {256, 1, 64};
        for (int k = 0; k < 3; k++) {
            stg_plan *p = plan_ok(g, aligns[k]);
            brute_force_check(g, p);
            check_totals(g, p);
            check_inplace(g, p);
            check_groups(g, p);
            inplace += p->n_inplace;
            plan_free(p);
        }
        for (int t = 0; t < g->nt; t++) grouped += g->t[t].group >= 0;
        graph_free(g);
    }
    assert_true(inplace > 100); // the generator does exercise in-place reuse
    assert_true(grouped > 50);
}

// plan_verify catches a broken plan.
static void test_verify_catches_overlap(void **state) {
    (void)state;
    stg_graph *g = random_graph(7, 40);
    stg_plan *p = plan_ok(g, 256);
    stg_err err;
    // Move one arena storage onto another that lives at the same time.
    bool broke = false;
    for (int t = 0; t < g->nt && !broke; t++)
        for (int u = 0; u < g->nt && !broke; u++)
            if (t != u && p->owner[t] == t && p->owner[u] == u && p->region[t] == STG_REGION_ARENA &&
                p->region[u] == STG_REGION_ARENA && p->first[t] >= 0 && p->first[u] == p->first[t] + 1 &&
                p->last[t] > p->first[u] && p->offset[t] != p->offset[u]) {
                for (int v = 0; v < g->nt; v++)
                    if (p->owner[v] == u) p->offset[v] = p->offset[t];
                broke = true;
            }
    assert_true(broke);
    assert_int_equal(plan_verify(g, p, &err), -1);
    assert_non_null(strstr(err.msg, "overlap"));
    // Outside the region.
    plan_free(p);
    p = plan_ok(g, 256);
    for (int t = 0; t < g->nt; t++)
        if (p->region[t] == STG_REGION_PERSISTENT && p->owner[t] == t) {
            p->offset[t] = p->persistent_bytes;
            break;
        }
    assert_int_equal(plan_verify(g, p, &err), -1);
    plan_free(p);
    graph_free(g);
}

// Four tensors with a known optimal layout: A [0,1] 1024 B, B [1,2] 512 B, C [2,3] 1024 B,
// D [3,3] 512 B. Live bytes peak at 1536 at every step from 1; best fit reaches it exactly.
static void test_hand_example(void **state) {
    (void)state;
    stg_graph *g = new_graph();
    int P = add_t(g, "P", 75, STG_CLASS_PARAM); // 300 B -> 512 aligned
    int A = add_t(g, "A", 256, STG_CLASS_ACTIVATION);
    int B = add_t(g, "B", 128, STG_CLASS_TEMPORARY);
    int C = add_t(g, "C", 256, STG_CLASS_TEMPORARY);
    int D = add_t(g, "D", 128, STG_CLASS_TEMPORARY);
    op1(g, STG_OP_MATMUL, P, A, STG_PHASE_FORWARD);
    op1(g, STG_OP_MATMUL, A, B, STG_PHASE_FORWARD);
    op1(g, STG_OP_MATMUL, B, C, STG_PHASE_BACKWARD);
    op1(g, STG_OP_MATMUL, C, D, STG_PHASE_OPTIMIZER);
    stg_plan *p = plan_ok(g, 256);
    assert_int_equal(p->persistent_bytes, 512);
    assert_int_equal(p->offset[P], 0);
    assert_int_equal(p->arena_bytes, 1536);
    assert_int_equal(p->lower_bound_bytes, 512 + 1536);
    assert_int_equal(p->peak_bytes, 2048);
    assert_int_equal(p->offset[A], 0);
    assert_int_equal(p->offset[B], 1024);
    assert_int_equal(p->offset[C], 0);
    assert_int_equal(p->offset[D], 1024);
    assert_int_equal(p->first[A], 0);
    assert_int_equal(p->last[A], 1);
    assert_int_equal(p->first[D], 3);
    assert_int_equal(p->last[D], 3); // written, never read: lives at its producing step
    assert_true(p->fragmentation == 0.0);
    assert_int_equal(plan_live_at(p, 0, STG_CLASS_ACTIVATION), 1024);
    assert_int_equal(plan_live_at(p, 1, -1), 2048);
    assert_int_equal(p->by_class[STG_CLASS_TEMPORARY], 512 + 1024 + 512);
    plan_free(p);
    graph_free(g);
}

static void test_inplace_and_views(void **state) {
    (void)state;
    stg_graph *g = new_graph();
    int P = add_t(g, "P", 256, STG_CLASS_PARAM);
    // Chain: X -> scale -> Y -> add(Y, P) -> Z: all in X's bytes.
    int X = add_t(g, "X", 256, STG_CLASS_TEMPORARY);
    int Y = add_t(g, "Y", 256, STG_CLASS_TEMPORARY);
    int Z = add_t(g, "Z", 200, STG_CLASS_ACTIVATION);
    int W = add_t(g, "W", 16, STG_CLASS_TEMPORARY);
    op1(g, STG_OP_MATMUL, P, X, STG_PHASE_FORWARD);
    op1(g, STG_OP_SCALE, X, Y, STG_PHASE_FORWARD);
    op2(g, STG_OP_ADD, Y, P, Z, STG_PHASE_FORWARD);
    op1(g, STG_OP_MATMUL, Z, W, STG_PHASE_FORWARD);
    // Read later: X2 is read after scale, so Y2 gets its own bytes.
    int X2 = add_t(g, "X2", 256, STG_CLASS_TEMPORARY);
    int Y2 = add_t(g, "Y2", 256, STG_CLASS_TEMPORARY);
    int W2 = add_t(g, "W2", 16, STG_CLASS_TEMPORARY);
    op1(g, STG_OP_MATMUL, P, X2, STG_PHASE_FORWARD);
    op1(g, STG_OP_SCALE, X2, Y2, STG_PHASE_FORWARD);
    op2(g, STG_OP_MATMUL, X2, Y2, W2, STG_PHASE_FORWARD);
    // A view keeps its base alive: X3 dies at scale, but its reshape V is read later.
    int X3 = add_t(g, "X3", 256, STG_CLASS_TEMPORARY);
    int V = add_t(g, "V", 256, STG_CLASS_TEMPORARY);
    int Y3 = add_t(g, "Y3", 256, STG_CLASS_TEMPORARY);
    int W3 = add_t(g, "W3", 16, STG_CLASS_TEMPORARY);
    g->t[V].base = X3;
    op1(g, STG_OP_MATMUL, P, X3, STG_PHASE_FORWARD);
    op1(g, STG_OP_RESHAPE, X3, V, STG_PHASE_FORWARD);
    op1(g, STG_OP_SCALE, X3, Y3, STG_PHASE_FORWARD);
    op2(g, STG_OP_MATMUL, V, Y3, W3, STG_PHASE_BACKWARD);
    // Too big: the output does not fit in the input's bytes.
    int X4 = add_t(g, "X4", 64, STG_CLASS_TEMPORARY);
    int Y4 = add_t(g, "Y4", 256, STG_CLASS_TEMPORARY);
    op1(g, STG_OP_MATMUL, P, X4, STG_PHASE_BACKWARD);
    op1(g, STG_OP_SCALE, X4, Y4, STG_PHASE_BACKWARD);
    // In place over a view: scale(reshape(X5)) takes X5's bytes when both die there.
    int X5 = add_t(g, "X5", 256, STG_CLASS_TEMPORARY);
    int V5 = add_t(g, "V5", 256, STG_CLASS_TEMPORARY);
    int Y5 = add_t(g, "Y5", 256, STG_CLASS_GRAD);
    g->t[V5].base = X5;
    op1(g, STG_OP_MATMUL, P, X5, STG_PHASE_BACKWARD);
    op1(g, STG_OP_RESHAPE, X5, V5, STG_PHASE_BACKWARD);
    op1(g, STG_OP_SCALE, V5, Y5, STG_PHASE_BACKWARD);
    // Persistent inputs are never overwritten.
    int Y6 = add_t(g, "Y6", 256, STG_CLASS_TEMPORARY);
    op1(g, STG_OP_SCALE, P, Y6, STG_PHASE_OPTIMIZER);

    stg_plan *p = plan_ok(g, 256);
    brute_force_check(g, p);
    check_inplace(g, p);
    assert_int_equal(p->owner[Y], X);
    assert_int_equal(p->owner[Z], X); // chain: owner is the root storage
    assert_int_equal(p->next_inplace[X], Y);
    assert_int_equal(p->next_inplace[Y], Z);
    assert_int_equal(p->offset[Z], p->offset[X]);
    assert_int_equal(p->owner[Y2], Y2);
    assert_int_equal(p->owner[V], X3);
    assert_int_equal(p->last[V], p->first[W3]);
    assert_int_equal(p->owner[Y3], Y3);
    assert_int_equal(p->owner[Y4], Y4);
    assert_int_equal(p->owner[V5], X5);
    assert_int_equal(p->owner[Y5], X5);
    assert_int_equal(p->owner[Y6], Y6);
    assert_int_equal(p->n_inplace, 3);
    // The chain's bytes count as the class of the tenant: Z is an activation at its step.
    assert_int_equal(plan_live_at(p, p->first[Z], STG_CLASS_ACTIVATION), 1024);
    assert_int_equal(plan_live_at(p, p->first[Y5], STG_CLASS_GRAD), 1024);
    // by_class counts storage owners only: X, not Y and Z.
    (void)W;
    (void)W2;
    plan_free(p);
    graph_free(g);
}

// Group members sit back to back and the block lives as long as its longest-lived member: a tensor
// living between two members' lives cannot take the block's bytes.
static void test_groups(void **state) {
    (void)state;
    stg_graph *g = new_graph();
    int P = add_t(g, "P", 64, STG_CLASS_PARAM);
    int G1 = add_t(g, "G1", 256, STG_CLASS_GRAD);
    int G2 = add_t(g, "G2", 100, STG_CLASS_GRAD);
    int G3 = add_t(g, "G3", 256, STG_CLASS_GRAD);
    int T = add_t(g, "T", 256, STG_CLASS_TEMPORARY);
    int U = add_t(g, "U", 16, STG_CLASS_TEMPORARY);
    int E1 = add_t(g, "E1", 16, STG_CLASS_TEMPORARY);
    int E3 = add_t(g, "E3", 16, STG_CLASS_TEMPORARY);
    g->t[G1].group = g->t[G2].group = g->t[G3].group = 5;
    op1(g, STG_OP_MATMUL, P, G1, STG_PHASE_BACKWARD);  // 0
    op1(g, STG_OP_MATMUL, G1, E1, STG_PHASE_BACKWARD); // 1: G1 dies
    op1(g, STG_OP_MATMUL, P, T, STG_PHASE_BACKWARD);   // 2
    op1(g, STG_OP_MATMUL, T, U, STG_PHASE_BACKWARD);   // 3: T dies
    op1(g, STG_OP_MATMUL, P, G3, STG_PHASE_BACKWARD);  // 4
    op1(g, STG_OP_MATMUL, P, G2, STG_PHASE_BACKWARD);  // 5
    int in[2] = {G3, G2};
    add_op(g, STG_OP_MATMUL, in, 2, &E3, 1, STG_PHASE_OPTIMIZER); // 6
    stg_plan *p = plan_ok(g, 256);
    brute_force_check(g, p);
    check_groups(g, p);
    assert_int_equal(p->offset[G2], p->offset[G1] + 1024);
    assert_int_equal(p->offset[G3], p->offset[G2] + 512);
    int64_t b0 = p->offset[G1], b1 = p->offset[G3] + 1024;
    assert_true(p->offset[T] + 1024 <= b0 || p->offset[T] >= b1);
    assert_int_equal(p->by_class[STG_CLASS_GRAD], 1024 + 512 + 1024);
    // The block counts at every step of its life.
    assert_int_equal(plan_live_at(p, 2, STG_CLASS_GRAD), 2560);
    plan_free(p);
    // A scale of a grouped tensor never runs in place.
    stg_graph *h = new_graph();
    int Q = add_t(h, "Q", 64, STG_CLASS_PARAM);
    int A = add_t(h, "A", 256, STG_CLASS_GRAD), B = add_t(h, "B", 256, STG_CLASS_GRAD);
    h->t[A].group = 0;
    op1(h, STG_OP_MATMUL, Q, A, STG_PHASE_BACKWARD);
    op1(h, STG_OP_SCALE, A, B, STG_PHASE_BACKWARD);
    p = plan_ok(h, 256);
    assert_int_equal(p->owner[B], B);
    plan_free(p);
    graph_free(h);
    graph_free(g);
}

static void test_bad_graphs(void **state) {
    (void)state;
    stg_err err;
    stg_plan *p = NULL;
    stg_graph *g = new_graph();
    int P = add_t(g, "P", 64, STG_CLASS_PARAM);
    int A = add_t(g, "A", 64, STG_CLASS_TEMPORARY), B = add_t(g, "B", 64, STG_CLASS_TEMPORARY);
    op1(g, STG_OP_MATMUL, A, B, STG_PHASE_FORWARD); // reads A before it is written
    op1(g, STG_OP_MATMUL, P, A, STG_PHASE_FORWARD);
    assert_int_equal(plan_build(g, NULL, &p, &err), -1);
    assert_null(p);
    assert_non_null(strstr(err.msg, "'A'"));
    stg_plan_opts o = {.alignment = 0};
    assert_int_equal(plan_build(g, &o, &p, &err), -1);
    graph_free(g);
}

// ---- formula ----------------------------------------------------------------------------------

static stg_graph *dims_graph(stg_precision prec, int64_t D, int64_t F, int64_t L, int64_t H, const char *att) {
    stg_err err;
    stg_graph *g = graph_new(prec, &err);
    assert_non_null(g);
    const char *names[7] = {"vocab", "d_model", "d_ff", "n_layers", "n_heads", "batch", "ctx"};
    int64_t vals[7] = {10000, D, F, L, H, 4, 512};
    g->dims = calloc(7, sizeof *g->dims);
    for (int i = 0; i < 7; i++) {
        snprintf(g->dims[i].name, sizeof g->dims[i].name, "%s", names[i]);
        g->dims[i].value = vals[i];
    }
    g->ndims = 7;
    graph_roles_by_name(g); // batch, ctx and vocab, as the loader gives them
    if (att) {
        g->opt_names = calloc(1, sizeof *g->opt_names);
        g->opt_values = calloc(1, sizeof *g->opt_values);
        snprintf(g->opt_names[0], 64, "attention");
        snprintf(g->opt_values[0], 64, "%s", att);
        g->nopts = 1;
    }
    return g;
}

static const struct {
    const char *name;
    int64_t D, F, L, H, params;
} sizes[5] = {{"small", 768, 3072, 12, 12, 128625408},
              {"medium", 1024, 4096, 24, 16, 423183360},
              {"large", 1280, 5120, 36, 20, 969411840},
              {"xl", 1600, 6400, 48, 25, 1998235200},
              {"2.7B", 2560, 10240, 32, 32, 3406809600}};

static void test_formula(void **state) {
    (void)state;
    stg_err err;
    stg_formula f;
    for (int i = 0; i < 5; i++) {
        stg_graph *g = dims_graph(STG_PREC_FP32, sizes[i].D, sizes[i].F, sizes[i].L, sizes[i].H, "naive");
        assert_int_equal(formula_compute(g, true, &f, &err), 0);
        assert_true(f.available);
        assert_int_equal(f.params, sizes[i].params);
        int64_t P = f.params;
        assert_int_equal(f.param, 4 * P);
        assert_int_equal(f.grad, 4 * P);
        assert_int_equal(f.optimizer, 8 * P);
        int64_t N = 4 * 512, D = sizes[i].D, Fd = sizes[i].F, B = 4, S = 512, Hh = sizes[i].H, V = 10000;
        int64_t layer = (8 * N * D + 3 * N * Fd) * 4 + B * Hh * S * S * 4 + 2 * N * 4;
        assert_int_equal(f.activation_per_layer, layer);
        assert_int_equal(f.activation, sizes[i].L * layer + 2 * N * D * 4 + N * 4 + N * V * 4 + N * 4);
        assert_int_equal(f.input, 2 * N * 4);
        assert_int_equal(f.total, 16 * P + f.activation + f.input);
        int64_t sum = 0;
        for (int k = 0; k < f.nterms; k++)
            if (strcmp(f.terms[k].name, "activation per layer") != 0) sum += f.terms[k].bytes;
        assert_int_equal(sum, f.total);
        graph_free(g);

        g = dims_graph(STG_PREC_BF16, sizes[i].D, sizes[i].F, sizes[i].L, sizes[i].H, "flash");
        assert_int_equal(formula_compute(g, true, &f, &err), 0);
        assert_int_equal(f.param, 2 * P);
        assert_int_equal(f.grad, 4 * P);
        assert_int_equal(f.optimizer, 12 * P);
        assert_int_equal(f.activation_per_layer, (8 * N * D + 3 * N * Fd) * 2 + (2 * N + B * Hh * S) * 4);
        assert_int_equal(formula_compute(g, false, &f, &err), 0);
        assert_int_equal(f.grad, 0);
        assert_int_equal(f.optimizer, 0);
        assert_int_equal(f.param, 2 * P);
        assert_true(f.total < 2 * P + 2 * N * 4 + sizes[i].L * f.activation_per_layer + N * V * 2 + N * 4 + 1);
        graph_free(g);
    }
    // Not the CS336 LM: unavailable, with the reason.
    stg_graph *g = new_graph();
    assert_int_equal(formula_compute(g, true, &f, &err), 0);
    assert_false(f.available);
    assert_non_null(strstr(f.reason, "vocab"));
    graph_free(g);
    g = dims_graph(STG_PREC_FP32, 64, 128, 2, 4, "sparse");
    assert_int_equal(formula_compute(g, true, &f, &err), -1);
    graph_free(g);
}

// ---- report -----------------------------------------------------------------------------------

// A tiny JSON checker: one value, then only whitespace.
static const char *js_ws(const char *s) {
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    return s;
}
static const char *js_value(const char *s, int depth);
static const char *js_string(const char *s) {
    if (*s != '"') return NULL;
    for (s++; *s && *s != '"'; s++) {
        if ((unsigned char)*s < 0x20) return NULL;
        if (*s == '\\') {
            s++;
            if (*s == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)s[i])) return NULL;
                s += 4;
            } else if (!strchr("\"\\/bfnrt", *s) || !*s)
                return NULL;
        }
    }
    return *s == '"' ? s + 1 : NULL;
}
static const char *js_number(const char *s) {
    const char *b = s;
    if (*s == '-') s++;
    if (!isdigit((unsigned char)*s)) return NULL;
    while (isdigit((unsigned char)*s)) s++;
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s)) return NULL;
        while (isdigit((unsigned char)*s)) s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!isdigit((unsigned char)*s)) return NULL;
        while (isdigit((unsigned char)*s)) s++;
    }
    return s > b ? s : NULL;
}
static const char *js_value(const char *s, int depth) {
    if (depth > 64) return NULL;
    s = js_ws(s);
    if (*s == '{') {
        s = js_ws(s + 1);
        if (*s == '}') return s + 1;
        for (;;) {
            s = js_string(js_ws(s));
            if (!s) return NULL;
            s = js_ws(s);
            if (*s != ':') return NULL;
            s = js_value(s + 1, depth + 1);
            if (!s) return NULL;
            s = js_ws(s);
            if (*s == '}') return s + 1;
            if (*s != ',') return NULL;
            s++;
        }
    }
    if (*s == '[') {
        s = js_ws(s + 1);
        if (*s == ']') return s + 1;
        for (;;) {
            s = js_value(s, depth + 1);
            if (!s) return NULL;
            s = js_ws(s);
            if (*s == ']') return s + 1;
            if (*s != ',') return NULL;
            s++;
        }
    }
    if (*s == '"') return js_string(s);
    if (!strncmp(s, "true", 4)) return s + 4;
    if (!strncmp(s, "false", 5)) return s + 5;
    if (!strncmp(s, "null", 4)) return s + 4;
    return js_number(s);
}
static bool json_valid(const char *s) {
    const char *e = js_value(s, 0);
    return e && *js_ws(e) == 0;
}

// Balanced tags: every <x ...> closed by </x> in order, self-closing and <?...?> skipped.
static bool svg_balanced(const char *s) {
    char stack[64][32];
    int sp = 0;
    bool seen_svg = false;
    while ((s = strchr(s, '<'))) {
        if (s[1] == '?') {
            s = strstr(s, "?>");
            if (!s) return false;
            continue;
        }
        const char *e = strchr(s, '>');
        if (!e) return false;
        if (s[1] == '/') {
            size_t n = (size_t)(e - s - 2);
            if (sp == 0 || strlen(stack[sp - 1]) != n || strncmp(stack[sp - 1], s + 2, n)) return false;
            sp--;
        } else if (e[-1] != '/') {
            size_t n = strcspn(s + 1, " >\n/");
            if (sp == 64 || n >= 32) return false;
            memcpy(stack[sp], s + 1, n);
            stack[sp][n] = 0;
            if (!strcmp(stack[sp], "svg")) seen_svg = true;
            sp++;
        }
        for (const char *c = s + 1; c < e; c++)
            if (*c == '<') return false;
        s = e + 1;
    }
    return sp == 0 && seen_svg;
}

static __attribute__((noinline)) char *report_string( // inlined, gcc -O3 takes the result for the local &buf (-Wdangling-pointer)
    stg_report_format fmt, const stg_graph *g, const stg_plan *p, const stg_formula *fm,
                           const stg_report_extra *x) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    stg_err err;
    if (report_write(f, fmt, g, p, fm, x, &err)) fail_msg("report_write: %s", err.msg);
    fclose(f);
    return buf;
}

static void test_report(void **state) {
    (void)state;
    stg_graph *g = random_graph(11, 60);
    snprintf(g->name, sizeof g->name, "rand \"quoted\" <model>");
    stg_plan *p = plan_ok(g, 256);
    // A formula that is available (as if the dims were the CS336 LM's) and one that is not.
    stg_graph *dg = dims_graph(STG_PREC_FP32, 64, 256, 2, 4, "flash");
    stg_formula fm, none;
    stg_err err;
    assert_int_equal(formula_compute(dg, true, &fm, &err), 0);
    assert_int_equal(formula_compute(g, true, &none, &err), 0);
    stg_report_extra x = {.measured_bytes = -1, .mode = "train", .model_path = "models/x.yaml", .command = "stg plan \"x\""};
    for (int k = 0; k < 2; k++) {
        const stg_formula *f = k ? &none : &fm;
        char *txt = report_string(STG_REPORT_TEXT, g, p, f, &x);
        assert_non_null(strstr(txt, "Peak at schedule position"));
        assert_non_null(strstr(txt, "GiB"));
        assert_non_null(strstr(txt, "fragmentation"));
        if (!k) assert_non_null(strstr(txt, "total: the planned peak"));
        free(txt);
        char *md = report_string(STG_REPORT_MD, g, p, f, &x);
        assert_non_null(strstr(md, "## The peak"));
        assert_non_null(strstr(md, "|---|"));
        free(md);
        char *js = report_string(STG_REPORT_JSON, g, p, f, &x);
        if (!json_valid(js)) fail_msg("invalid JSON:\n%s", js);
        const char *keys[] = {"\"params\"", "\"precision\"", "\"mode\"", "\"dims\"", "\"peak_bytes\"",
                              "\"lower_bound_bytes\"", "\"arena_bytes\"", "\"persistent_bytes\"", "\"fragmentation\"",
                              "\"peak_step\"", "\"by_class\"", "\"temporary\"", "\"workspace\"", "\"total_bytes\"",
                              "\"measured_bytes\": null"};
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
            if (!strstr(js, keys[i])) fail_msg("JSON lacks %s", keys[i]);
        if (k) assert_non_null(strstr(js, "\"total_bytes\": null"));
        free(js);
        char *svg = report_string(STG_REPORT_SVG, g, p, f, &x);
        assert_true(svg_balanced(svg));
        assert_non_null(strstr(svg, ">forward</text>"));
        assert_non_null(strstr(svg, ">backward</text>"));
        assert_non_null(strstr(svg, ">optimizer</text>"));
        assert_non_null(strstr(svg, "peak "));
        assert_non_null(strstr(svg, "GiB</text>"));
        assert_null(strstr(svg, "<model>"));
        free(svg);
    }
    // Measured bytes shown when given.
    x.measured_bytes = p->peak_bytes + 1000;
    char *js = report_string(STG_REPORT_JSON, g, p, &fm, &x);
    assert_true(json_valid(js));
    assert_null(strstr(js, "\"measured_bytes\": null"));
    free(js);
    char *txt = report_string(STG_REPORT_TEXT, g, p, &fm, &x);
    assert_non_null(strstr(txt, "measured on the device"));
    assert_null(strstr(txt, "beside the plan"));
    free(txt);
    // What a backend holds beside the plan: one row each, their sum with the plan, the measured bytes
    // against both; the JSON names them.
    x.nbeside = 2;
    x.beside_name[0] = "lib workspace";
    x.beside_bytes[0] = 600;
    x.beside_name[1] = "scratch";
    x.beside_bytes[1] = 400;
    txt = report_string(STG_REPORT_TEXT, g, p, &fm, &x);
    assert_non_null(strstr(txt, "beside the plan: lib workspace"));
    assert_non_null(strstr(txt, "beside the plan: scratch"));
    char digits[32], want[64];
    int nd = snprintf(digits, sizeof digits, "%lld", (long long)(p->peak_bytes + 1000)), k = 0;
    want[k++] = '(';
    for (int i = 0; i < nd; i++) { // the report writes thousands separated by commas
        if (i > 0 && (nd - i) % 3 == 0) want[k++] = ',';
        want[k++] = digits[i];
    }
    snprintf(want + k, sizeof want - (size_t)k, " B)");
    assert_non_null(strstr(strstr(txt, "planned peak + beside the plan"), want));
    assert_non_null(strstr(txt, "+0.00% vs planned + beside"));
    free(txt);
    js = report_string(STG_REPORT_JSON, g, p, &fm, &x);
    assert_true(json_valid(js));
    assert_non_null(strstr(js, "\"beside_plan\": {\"lib workspace\": 600, \"scratch\": 400}"));
    free(js);
    x.nbeside = 0;
    // A failing stream is an error, not a silent partial report.
    FILE *ro = fopen("/dev/null", "r");
    assert_non_null(ro);
    assert_int_equal(report_write(ro, STG_REPORT_TEXT, g, p, &fm, &x, &err), -1);
    fclose(ro);
    assert_int_equal(report_format_from_name("svg"), STG_REPORT_SVG);
    assert_int_equal(report_format_from_name("pdf"), -1);
    plan_free(p);
    graph_free(dg);
    graph_free(g);
}


// ---- the CS336 LM, loaded from its model files --------------------------------------------------

static stg_graph *load_cs336(const char *size, const char *att, stg_precision prec) {
    char path[512], as[64];
    snprintf(path, sizeof path, "%s/models/cs336/%s.yaml", STG_SOURCE_DIR, size);
    snprintf(as, sizeof as, "attention=%s", att);
    const char *sets[3] = {"batch=4", "ctx=512", as};
    stg_step_opts o = rig_opts(path, prec, sets, 3); // ungrouped, planned by the test
    return rig_graph(&o);
}

// Every size, both attentions, both precisions: sound, tight against the lower bound, below the
// formula's everything-at-once total; fp32 naive under the budgets the course quotes.
static void test_cs336(void **state) {
    (void)state;
    const char *names[5] = {"small", "medium", "large", "xl", "2.7B"};
    const double budget_gib[5] = {4.2, 11.5, 23.3, 43.0, 59.0};
    const char *atts[2] = {"naive", "flash"};
    for (int i = 0; i < 5; i++)
        for (int a = 0; a < 2; a++)
            for (int pr = 0; pr < 2; pr++) {
                stg_precision prec = pr ? STG_PREC_BF16 : STG_PREC_FP32;
                stg_graph *g = load_cs336(names[i], atts[a], prec);
                clock_t c0 = clock();
                stg_plan *p = plan_ok(g, 256);
                double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
                stg_formula f;
                stg_err err;
                assert_int_equal(formula_compute(g, true, &f, &err), 0);
                assert_true(f.available);
                assert_int_equal(f.params, sizes[i].params);
                assert_int_equal(graph_param_count(g), sizes[i].params);
                check_totals(g, p);
                double gi = 1024.0 * 1024.0 * 1024.0;
                print_message("%-6s %-5s %s: peak %.2f GiB, lower bound %.2f, formula %.2f, %d tensors, %.3f s, %s\n",
                              names[i], atts[a], pr ? "bf16" : "fp32", (double)p->peak_bytes / gi,
                              (double)p->lower_bound_bytes / gi, (double)f.total / gi, g->nt, secs, p->strategy);
                assert_true(p->lower_bound_bytes <= p->peak_bytes);
                assert_true((double)p->peak_bytes <= 1.05 * (double)p->lower_bound_bytes);
                assert_true((double)p->peak_bytes <= 1.01 * (double)f.total);
                if (!pr) { // the dims make every fp32 tensor a multiple of 256 B: no padding
                    assert_int_equal(p->by_class[STG_CLASS_PARAM], 4 * f.params);
                    assert_int_equal(p->by_class[STG_CLASS_GRAD], 4 * f.params);
                    assert_int_equal(p->by_class[STG_CLASS_OPTIMIZER], 8 * f.params);
                    if (a == 0) assert_true((double)p->peak_bytes / gi < budget_gib[i]);
                }
                if (i == 0) { // the report on a real model, all four formats
                    stg_report_extra x = {.measured_bytes = -1, .mode = "train"};
                    for (int fmt = STG_REPORT_TEXT; fmt <= STG_REPORT_SVG; fmt++) {
                        char *s = report_string((stg_report_format)fmt, g, p, &f, &x);
                        if (fmt == STG_REPORT_JSON) assert_true(json_valid(s));
                        if (fmt == STG_REPORT_SVG) assert_true(svg_balanced(s));
                        free(s);
                    }
                }
                plan_free(p);
                graph_free(g);
            }
}

// ---- scale ------------------------------------------------------------------------------------

static void test_planning_time(void **state) {
    (void)state;
    stg_graph *g = random_graph(99, 5000);
    clock_t c0 = clock();
    stg_plan *p = NULL;
    stg_err err;
    assert_int_equal(plan_build(g, NULL, &p, &err), 0);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    assert_int_equal(plan_verify(g, p, &err), 0);
    print_message("planned %d tensors, %d steps in %.3f s (arena %lld, lower bound %lld, ordering %s)\n", g->nt, g->nsched,
                  secs, (long long)p->arena_bytes, (long long)(p->lower_bound_bytes - p->persistent_bytes), p->strategy);
    assert_true(secs < 10.0); // < 2 s without sanitizers
    plan_free(p);
    graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_example),   cmocka_unit_test(test_inplace_and_views),
        cmocka_unit_test(test_groups),         cmocka_unit_test(test_bad_graphs),
        cmocka_unit_test(test_random_graphs),  cmocka_unit_test(test_verify_catches_overlap),
        cmocka_unit_test(test_formula),        cmocka_unit_test(test_report),
        cmocka_unit_test(test_planning_time),  cmocka_unit_test(test_cs336),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
