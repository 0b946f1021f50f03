// The decode family's rules (attention_cached, kv_write, sample): the ops of the inference graphs
// graph/infer.c derives from a training model. None has a gradient; each writes persistent state
// in place (the KV cache, the next token, the position), so they are never differentiated.
//
//   attention_cached(q, k, v, kc, vc, pos) -> o
//       q (B, 1, Hq, Dh), k, v (B, 1, Hkv, Dh), kc, vc (B, Hkv, C, Dh), pos (1) i32, Hq % Hkv == 0.
//       With p = pos[0]: (rotates q and k at position p when rope_theta > 0,) writes k and v into
//       kc[:, :, p] and vc[:, :, p], and o[b, 0, h] = softmax_j(scale q_h . kc[b, h / G, j]) vc[b, h / G, j]
//       over j = 0..p, G = Hq / Hkv.
//   kv_write(k, v, kc, vc, pos)
//       k, v (B, S, Hkv, Dh) into kc, vc (B, Hkv, C, Dh) at positions pos[0] .. pos[0] + S - 1.
// The caches are head-major (each head's positions contiguous): a decoding step streams every head's
// positions, and on an H200 that read ran 13% faster than over position-major (B, C, Hkv, Dh) caches
// (docs/perf/LOG.md, 2026-11-29).
//   sample(logits, token, pos, ids)
//       logits (B, S, V) (the last row of each sequence is read) or (B, V), token (B, 1) i32,
//       pos (1) i32, ids (B, C) i32: writes the next token of every sequence to token[b] and to
//       ids[b, pos + advance], then pos += advance.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int need_i32(stg_graph *g, int id, int i, int64_t numel, stg_err *err) {
    const stg_tensor *t = OPS_IN(g, id, i);
    char b[128];
    if (t->dtype != STG_I32) return ops_bad(g, id, err, "'%s' must be i32, not %s", t->name, stg_dtype_name(t->dtype));
    if (numel >= 0 && stg_numel(t) != numel) {
        char what[256];
        snprintf(what, sizeof what, "'%s' has shape %s; expected %lld elements", t->name, ops_sh(t, b), (long long)numel);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

// The cache (B, Hkv, C, Dh) of x (B, S, Hkv, Dh): same B, Hkv, Dh and dtype, S <= C.
static int need_cache_for(stg_graph *g, int id, int x, int cache, stg_err *err) {
    const stg_tensor *a = OPS_IN(g, id, x), *c = OPS_IN(g, id, cache);
    char s1[128], s2[128], what[400];
    if (c->ndim != 4 || a->ndim != 4 || c->dtype != a->dtype || c->shape[0] != a->shape[0] || c->shape[1] != a->shape[2] ||
        c->shape[3] != a->shape[3] || c->shape[2] < a->shape[1]) {
        snprintf(what, sizeof what, "the cache '%s' %s %s does not hold '%s' %s %s; expected (B, Hkv, C, Dh) of its dtype, C >= S",
                 c->name, ops_sh(c, s1), stg_dtype_name(c->dtype), a->name, ops_sh(a, s2), stg_dtype_name(a->dtype));
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

static int infer_attention_cached(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < 5; i++)
        if (ops_need_ndim(g, id, i, 4, 4, err) || ops_need_float(g, id, i, err)) return -1;
    if (ops_need_same(g, id, 1, 2, err) || need_cache_for(g, id, 1, 3, err) || need_cache_for(g, id, 2, 4, err) ||
        need_i32(g, id, 5, 1, err))
        return -1;
    const stg_tensor *q = OPS_IN(g, id, 0), *k = OPS_IN(g, id, 1);
    char s1[128], s2[128], what[400];
    if (q->shape[1] != 1 || k->shape[1] != 1 || q->shape[0] != k->shape[0] || q->shape[3] != k->shape[3] ||
        q->shape[2] % k->shape[2] != 0 || q->dtype != k->dtype) {
        snprintf(what, sizeof what, "q '%s' %s and k '%s' %s: expected (B, 1, Hq, Dh) and (B, 1, Hkv, Dh) of one dtype with Hq %% Hkv == 0",
                 q->name, ops_sh(q, s1), k->name, ops_sh(k, s2));
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    const stg_attention_cached_attrs *a = &OPS_OP(g, id)->a.attention_cached;
    if (!(a->scale >= 0) || !(a->rope_theta >= 0) || !isfinite(a->scale) || !isfinite(a->rope_theta))
        return ops_bad(g, id, err, "scale and rope_theta must be finite and not negative%s%s", NULL, NULL);
    if (a->rope_theta > 0 && q->shape[3] % 2) return ops_bad(g, id, err, "'%s': head_dim must be even for RoPE%s", q->name, NULL);
    ops_copy_shape(OPS_OUT(g, id, 0), q, q->dtype);
    return 0;
}

static int infer_kv_write(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < 4; i++)
        if (ops_need_ndim(g, id, i, 4, 4, err) || ops_need_float(g, id, i, err)) return -1;
    if (ops_need_same(g, id, 0, 1, err) || need_cache_for(g, id, 0, 2, err) || need_cache_for(g, id, 1, 3, err) ||
        need_i32(g, id, 4, 1, err))
        return -1;
    return 0;
}

static int infer_sample(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 2, 3, err) || ops_need_float(g, id, 0, err)) return -1;
    const stg_tensor *lg = OPS_IN(g, id, 0), *ids = OPS_IN(g, id, 3);
    int64_t B = lg->shape[0];
    if (need_i32(g, id, 1, B, err) || need_i32(g, id, 2, 1, err) || need_i32(g, id, 3, -1, err)) return -1;
    char s1[128], s2[128], what[300];
    if (ids->ndim != 2 || ids->shape[0] != B) {
        snprintf(what, sizeof what, "ids '%s' %s must be (B, C) for logits %s", ids->name, ops_sh(ids, s1), ops_sh(lg, s2));
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    const stg_sample_attrs *a = &OPS_OP(g, id)->a.sample;
    int64_t V = lg->shape[lg->ndim - 1];
    if (!(a->temperature >= 0) || !isfinite(a->temperature)) return ops_bad(g, id, err, "temperature must be finite and >= 0%s%s", NULL, NULL);
    if (!(a->top_p > 0 && a->top_p <= 1)) return ops_bad(g, id, err, "top_p must be in (0, 1]%s%s", NULL, NULL);
    if (a->top_k < 0 || a->top_k > V) return ops_bad(g, id, err, "top_k must be in [0, vocab] (0: off)%s%s", NULL, NULL);
    if (a->advance < 1) return ops_bad(g, id, err, "advance must be at least 1%s%s", NULL, NULL);
    return 0;
}

// QK and PV over the whole cache (an upper bound: a step reads pos + 1 of its C positions).
static double flops_attention_cached(const stg_graph *g, const stg_op *op) {
    const stg_tensor *q = &g->t[op->in[0]], *kc = &g->t[op->in[3]];
    return 4.0 * (double)q->shape[0] * (double)q->shape[2] * (double)kc->shape[2] * (double)q->shape[3];
}

// softmax and the cumulative walk: a few operations per logit
static double flops_sample(const stg_graph *g, const stg_op *op) {
    const stg_tensor *lg = &g->t[op->in[0]];
    return 4.0 * (double)lg->shape[0] * (double)lg->shape[lg->ndim - 1];
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_attention_cached[] = {ATTR(attention_cached, scale, STG_ATTR_FLOAT, 0.0, 0),
                                                      ATTR(attention_cached, rope_theta, STG_ATTR_FLOAT, 0.0, 0)};
static const stg_attr_def attrs_sample[] = {ATTR(sample, temperature, STG_ATTR_FLOAT, 1.0, 0), ATTR(sample, top_p, STG_ATTR_FLOAT, 1.0, 0),
                                            ATTR(sample, top_k, STG_ATTR_I64, 0, 0), ATTR(sample, seed, STG_ATTR_I64, 0, 0),
                                            ATTR(sample, advance, STG_ATTR_I64, 1, 0)};

const stg_op_def stg_rule_attention_cached = {"attention_cached", 6, 6, 1, ATTRS(attrs_attention_cached), infer_attention_cached, NULL,
                                              flops_attention_cached, .no_grad_in = 0x3f, .mutates_in = OPS_BIT(3) | OPS_BIT(4),
                                              .inplace_in = -1};
const stg_op_def stg_rule_kv_write = {"kv_write", 5, 5, 0, NULL, 0, infer_kv_write, NULL, ops_flops_zero, .no_grad_in = 0x1f,
                                      .mutates_in = OPS_BIT(2) | OPS_BIT(3), .inplace_in = -1};
const stg_op_def stg_rule_sample = {"sample", 4, 4, 0, ATTRS(attrs_sample), infer_sample, NULL, flops_sample, .no_grad_in = 0xf,
                                    .mutates_in = OPS_BIT(1) | OPS_BIT(2) | OPS_BIT(3), .inplace_in = -1};
