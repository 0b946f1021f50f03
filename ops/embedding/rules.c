// The embedding family's rules (embedding, embedding_bwd): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int infer_embedding(stg_graph *g, int id, stg_err *err) {
    const stg_tensor *tok = OPS_IN(g, id, 0), *w = OPS_IN(g, id, 1);
    if (tok->dtype != STG_I32) return ops_bad(g, id, err, "token ids '%s' must be i32", tok->name, NULL);
    if (tok->ndim > STG_MAX_DIMS - 1) return ops_bad(g, id, err, "token ids '%s' have too many dims", tok->name, NULL);
    if (ops_need_ndim(g, id, 1, 2, 2, err) || ops_need_float(g, id, 1, err)) return -1;
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i < tok->ndim; i++) s[i] = tok->shape[i];
    s[tok->ndim] = w->shape[1];
    ops_set_shape(OPS_OUT(g, id, 0), tok->ndim + 1, s, w->dtype);
    return 0;
}

static int infer_embedding_bwd(stg_graph *g, int id, stg_err *err) {
    const stg_tensor *tok = OPS_IN(g, id, 0), *dy = OPS_IN(g, id, 1);
    if (tok->dtype != STG_I32) return ops_bad(g, id, err, "token ids '%s' must be i32", tok->name, NULL);
    if (dy->ndim != tok->ndim + 1) return ops_bad(g, id, err, "gradient '%s' must have one more dim than the tokens", dy->name, NULL);
    for (int i = 0; i < tok->ndim; i++)
        if (dy->shape[i] != tok->shape[i]) return ops_bad(g, id, err, "gradient '%s' does not match the tokens' shape", dy->name, NULL);
    int64_t v = OPS_OP(g, id)->a.embedding_bwd.vocab;
    if (v <= 0) return ops_bad(g, id, err, "vocab must be positive%s%s", NULL, NULL);
    int64_t s[2] = {v, dy->shape[dy->ndim - 1]};
    ops_set_shape(OPS_OUT(g, id, 0), 2, s, g->grad_dtype);
    return ops_check_addend(g, id, err);
}

static int grad_embedding(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    int tok = g->ops[id].in[0], w = g->ops[id].in[1];
    if (!want[1]) return 0;
    stg_attrs a = ops_no_attrs();
    a.embedding_bwd.vocab = g->t[w].shape[0];
    int in[2] = {tok, dout[0]};
    return (din[1] = ops_emit1(e, g, id, STG_OP_EMBEDDING_BWD, in, 2, &a, w, err)) < 0 ? -1 : 0;
}

// pos_embedding: x (..., S, D), W (P, D) with P >= S -> x + W[s] at position s (a learned position
// embedding added to the token embedding).
static int infer_pos_embedding(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 2, STG_MAX_DIMS, err) || ops_need_ndim(g, id, 1, 2, 2, err)) return -1;
    if (ops_need_float(g, id, 0, err) || ops_need_float(g, id, 1, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0), *w = OPS_IN(g, id, 1);
    char a[128], b[128], what[400];
    if (x->dtype != w->dtype) return ops_bad(g, id, err, "'%s' and '%s' must have the same dtype", x->name, w->name);
    if (w->shape[1] != x->shape[x->ndim - 1]) {
        snprintf(what, sizeof what, "'%s' %s has %lld features but the position table '%s' %s has %lld", x->name, ops_sh(x, a),
                 (long long)x->shape[x->ndim - 1], w->name, ops_sh(w, b), (long long)w->shape[1]);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    if (w->shape[0] < x->shape[x->ndim - 2]) {
        snprintf(what, sizeof what, "'%s' %s has %lld positions but the position table '%s' %s has only %lld rows", x->name,
                 ops_sh(x, a), (long long)x->shape[x->ndim - 2], w->name, ops_sh(w, b), (long long)w->shape[0]);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    ops_copy_shape(OPS_OUT(g, id, 0), x, x->dtype);
    return 0;
}

// pos_embedding_bwd: dy (..., S, D) -> dW (positions, D): row s < S the sum of dy[..., s, :], the
// rest zero.
static int infer_pos_embedding_bwd(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 2, STG_MAX_DIMS, err) || ops_need_float(g, id, 0, err)) return -1;
    const stg_tensor *dy = OPS_IN(g, id, 0);
    const stg_pos_embedding_bwd_attrs *a = &OPS_OP(g, id)->a.pos_embedding_bwd;
    if (a->positions < dy->shape[dy->ndim - 2])
        return ops_bad(g, id, err, "positions must be at least the gradient's sequence length%s%s", NULL, NULL);
    int64_t s[2] = {a->positions, dy->shape[dy->ndim - 1]};
    ops_set_shape(OPS_OUT(g, id, 0), 2, s, a->grad_out ? g->grad_dtype : dy->dtype);
    return 0;
}

static int grad_pos_embedding(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din,
                              stg_err *err) {
    int w = g->ops[id].in[1];
    if (want[0]) din[0] = dout[0]; // x's gradient is the output's
    if (want[1]) {
        stg_attrs a = ops_no_attrs();
        a.pos_embedding_bwd.positions = g->t[w].shape[0];
        a.pos_embedding_bwd.grad_out = g->t[w].cls == STG_CLASS_PARAM;
        if ((din[1] = ops_emit1(e, g, id, STG_OP_POS_EMBEDDING_BWD, &dout[0], 1, &a, w, err)) < 0) return -1;
    }
    return 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_embedding_bwd[] = {ATTR(embedding_bwd, vocab, STG_ATTR_I64, 0, 1)};

// The sweep's model for embedding (tests/test_ops.c).
static const char sample_embedding[] =
    "inputs: {tok: [2, 3, i32], t: [2, 3, i32]}\n"
    "graph:\n"
    "  - param e [7, 6] init=embedding\n"
    "  - loss = cross_entropy(embedding(tok, e), t)\n";

const stg_op_def stg_rule_embedding = {"embedding", 2, 2, 1, NULL, 0, infer_embedding, grad_embedding, ops_flops_zero,
                          .saves_in = OPS_BIT(0), .no_grad_in = OPS_BIT(0), .no_decay_in = OPS_BIT(1), .inplace_in = -1,
    .sample = sample_embedding,
    .doc = "tokens (…) i32, W (V, D) → (…, D)"};

// An addend (input 2): the gradient the other use of a tied weight made (graph_fold_add), which
// dW takes over in place when it dies here (the fused head's: no second (V, D) buffer, no add op).
const stg_op_def stg_rule_embedding_bwd = {"embedding_bwd", 2, 3, 1, ATTRS(attrs_embedding_bwd), infer_embedding_bwd, NULL, ops_flops_elem1,
                              .inplace_in = 2, .accum_out = OPS_BIT(0), .addend_in = 2};

static const stg_attr_def attrs_pos_embedding_bwd[] = {ATTR(pos_embedding_bwd, positions, STG_ATTR_I64, 0, 1),
                                                       ATTR(pos_embedding_bwd, grad_out, STG_ATTR_INT, 0, 0)};

// The sweep's model for pos_embedding (tests/test_ops.c): a table longer than the sequence.
static const char sample_pos_embedding[] =
    "inputs: {t: [2, 3, i32]}\n"
    "graph:\n"
    "  - param x [2, 3, 6] init=embedding\n"
    "  - param p [5, 6] init=embedding\n"
    "  - loss = cross_entropy(pos_embedding(x, p), t)\n";

// output 0 may take x's buffer (x + W[s] element by element)
const stg_op_def stg_rule_pos_embedding = {"pos_embedding", 2, 2, 1, NULL, 0, infer_pos_embedding, grad_pos_embedding,
                                           ops_flops_elem1, .no_decay_in = OPS_BIT(1), .inplace_in = 0,
                                           .sample = sample_pos_embedding,
    .doc = "x (…, S, D), W (P, D), P ≥ S → x + W[s] at position s (a learned position embedding, added in place)"};

const stg_op_def stg_rule_pos_embedding_bwd = {"pos_embedding_bwd", 1, 1, 1, ATTRS(attrs_pos_embedding_bwd),
                                               infer_pos_embedding_bwd, NULL, ops_flops_elem1, .inplace_in = -1};
