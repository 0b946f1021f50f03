// The attention family's rules (attention, attention_bwd): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// q (B, S, H, Dh) against k (B, S, Hkv, Dh) (input ki; v at ki + 1 has k's shape and dtype):
// grouped-query attention when Hkv < H, H a multiple of Hkv.
static int need_qkv(stg_graph *g, int id, int ki, stg_err *err) {
    if (ops_need_same(g, id, ki, ki + 1, err)) return -1;
    const stg_tensor *q = OPS_IN(g, id, 0), *k = OPS_IN(g, id, ki);
    if (k->dtype != q->dtype || k->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] || k->shape[3] != q->shape[3]) {
        char x[128], y[128], what[400];
        snprintf(what, sizeof what, "'%s' %s %s must match '%s' %s %s in dtype, batch, sequence and head dim", k->name,
                 ops_sh(k, x), stg_dtype_name(k->dtype), q->name, ops_sh(q, y), stg_dtype_name(q->dtype));
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    if (k->shape[2] <= 0 || q->shape[2] % k->shape[2]) {
        char hq[32], hk[32];
        snprintf(hq, sizeof hq, "%lld", (long long)q->shape[2]);
        snprintf(hk, sizeof hk, "%lld", (long long)k->shape[2]);
        return ops_bad(g, id, err, "query heads (%s) must be a multiple of kv heads (%s)", hq, hk);
    }
    return 0;
}

// The optional docs input at index i: i32 (B, S), each position's document start.
static int need_docs(stg_graph *g, int id, int i, stg_err *err) {
    if (OPS_OP(g, id)->n_in <= i) return 0;
    const stg_tensor *q = OPS_IN(g, id, 0), *d = OPS_IN(g, id, i);
    if (d->dtype != STG_I32 || d->ndim != 2 || d->shape[0] != q->shape[0] || d->shape[1] != q->shape[1]) {
        char x[128], what[300];
        snprintf(what, sizeof what, "docs '%s' %s %s must be i32 (B, S) = [%lld, %lld]", d->name, ops_sh(d, x),
                 stg_dtype_name(d->dtype), (long long)q->shape[0], (long long)q->shape[1]);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

static int infer_attention(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < 3; i++)
        if (ops_need_ndim(g, id, i, 4, 4, err) || ops_need_float(g, id, i, err)) return -1;
    if (need_qkv(g, id, 1, err) || need_docs(g, id, 3, err)) return -1;
    const stg_tensor *q = OPS_IN(g, id, 0);
    ops_copy_shape(OPS_OUT(g, id, 0), q, q->dtype);
    int64_t s[3] = {q->shape[0], q->shape[2], q->shape[1]}; // (B, H, S)
    ops_set_shape(OPS_OUT(g, id, 1), 3, s, g->grad_dtype);
    return 0;
}

// q, k, v, o, lse, dout [, docs] -> dq (q's shape), dk, dv (k's shape)
static int infer_attention_bwd(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < 6; i++)
        if (i != 4 && ops_need_ndim(g, id, i, 4, 4, err)) return -1;
    if (ops_need_same(g, id, 0, 3, err) || ops_need_same(g, id, 0, 5, err) || need_qkv(g, id, 1, err) ||
        need_docs(g, id, 6, err))
        return -1;
    const stg_tensor *q = OPS_IN(g, id, 0), *k = OPS_IN(g, id, 1), *lse = OPS_IN(g, id, 4);
    if (lse->ndim != 3 || lse->shape[0] != q->shape[0] || lse->shape[1] != q->shape[2] || lse->shape[2] != q->shape[1])
        return ops_bad(g, id, err, "log-sum-exp '%s' must be (B, H, S) for '%s'", lse->name, q->name);
    ops_copy_shape(OPS_OUT(g, id, 0), q, q->dtype);
    for (int o = 1; o < 3; o++) ops_copy_shape(OPS_OUT(g, id, o), k, k->dtype);
    return 0;
}

// Attention: QKᵀ and PV, 4·B·H·S²·Dh forward and 8 backward with H the query heads (no causal or
// document discount, as the peers count; see ../shared/peers/NUMBERS.md).
static double flops_attention(const stg_graph *g, const stg_op *op) {
    const stg_tensor *q = &g->t[op->in[0]];
    return 4.0 * (double)q->shape[0] * (double)q->shape[2] * (double)q->shape[1] * (double)q->shape[1] * (double)q->shape[3];
}

static double flops_attention_bwd(const stg_graph *g, const stg_op *op) { return 2.0 * flops_attention(g, op); }

static int grad_attention(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    int in[7] = {f.in[0], f.in[1], f.in[2], f.out[0], f.out[1], dout[0], f.n_in > 3 ? f.in[3] : -1};
    int out[STG_MAX_OUT];
    char b[STG_NAME_MAX];
    if (ops_emit(e, g, id, STG_OP_ATTENTION_BWD, in, f.n_in > 3 ? 7 : 6, &f.a, ops_dname(g, f.in[0], b), out, err) < 0)
        return -1;
    for (int i = 0; i < 3; i++) {
        ops_name_out(g, out[i], f.in[i]);
        if (want[i]) din[i] = out[i];
    }
    return 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_attention[] = {ATTR(attention, scale, STG_ATTR_FLOAT, 0.0, 0)};

// The sweep's model for attention (tests/test_ops.c).
static const char sample_attention[] =
    "inputs: {t: [2, 5, 2, i32]}\n"
    "graph:\n"
    "  - param q [2, 5, 2, 8] init=embedding\n"
    "  - param k [2, 5, 2, 8] init=embedding\n"
    "  - param v [2, 5, 2, 8] init=embedding\n"
    "  - o, lse = attention(q, k, v)\n"
    "  - loss = cross_entropy(o, t)\n";

// Inputs q, k, v and the optional docs (packed documents: no gradient).
const stg_op_def stg_rule_attention = {"attention", 3, 4, 2, ATTRS(attrs_attention), infer_attention, grad_attention, flops_attention,
                          .saves_in = OPS_BIT(0) | OPS_BIT(1) | OPS_BIT(2) | OPS_BIT(3), .saves_out = OPS_BIT(0) | OPS_BIT(1),
                          .no_grad_in = OPS_BIT(3), .inplace_in = -1, .sample = sample_attention,
    .doc = "q (B, S, H, Dh), k, v (B, S, Hkv, Dh) [, docs (B, S) i32] → o (B, S, H, Dh), lse (B, H, S): fused causal attention; grouped-query when Hkv < H (H a multiple of Hkv; query head h reads kv head h / (H / Hkv)); packed documents with docs, each position's document start (query s sees keys docs[b][s] .. s; a row's starts are 0 or follow a document's end, as `stg train --doc-sep` makes them)",
    .doc_attrs = "`scale` (0: 1/sqrt(Dh))"};

const stg_op_def stg_rule_attention_bwd = {"attention_bwd", 6, 7, 3, ATTRS(attrs_attention), infer_attention_bwd, NULL,
                              flops_attention_bwd, .inplace_in = -1};
