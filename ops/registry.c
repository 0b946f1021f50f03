// The op registry: shape rules, gradient rules and FLOPs of every op kind, in one table.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// ---- helpers --------------------------------------------------------------------------------

#define OP(g, id) (&(g)->ops[(id)])
#define IN(g, id, i) (&(g)->t[(g)->ops[(id)].in[(i)]])
#define OUT(g, id, o) (&(g)->t[(g)->ops[(id)].out[(o)]])

static void set_shape(stg_tensor *t, int ndim, const int64_t *shape, stg_dtype dt) {
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->dtype = dt;
}

static void copy_shape(stg_tensor *t, const stg_tensor *src, stg_dtype dt) { set_shape(t, src->ndim, src->shape, dt); }

static bool is_float(stg_dtype d) { return d == STG_F32 || d == STG_BF16 || d == STG_F64; }

static bool same_shape(const stg_tensor *a, const stg_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static int bad(stg_graph *g, int id, stg_err *err, const char *fmt, const char *a, const char *b) {
    const stg_op *op = OP(g, id);
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
    return stg_errf_at(err, op->loc, "%s: %s", ops_name(op->kind), msg);
}

static const char *sh(const stg_tensor *t, char *buf) { return stg_shape_str(t, buf, 128); }

static int need_float(stg_graph *g, int id, int i, stg_err *err) {
    const stg_tensor *t = IN(g, id, i);
    if (!is_float(t->dtype)) return bad(g, id, err, "input '%s' must be a float tensor", t->name, NULL);
    return 0;
}

static int need_ndim(stg_graph *g, int id, int i, int lo, int hi, stg_err *err) {
    const stg_tensor *t = IN(g, id, i);
    if (t->ndim < lo || t->ndim > hi) {
        char b[128], want[64];
        if (lo == hi) snprintf(want, sizeof want, "%d dims", lo);
        else snprintf(want, sizeof want, "%d to %d dims", lo, hi);
        char what[300];
        snprintf(what, sizeof what, "'%s' has shape %s; expected %s", t->name, sh(t, b), want);
        return bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

static int need_same(stg_graph *g, int id, int i, int j, stg_err *err) {
    const stg_tensor *a = IN(g, id, i), *b = IN(g, id, j);
    if (!same_shape(a, b) || a->dtype != b->dtype) {
        char x[128], y[128], what[400];
        snprintf(what, sizeof what, "'%s' %s %s and '%s' %s %s must have the same shape and dtype", a->name, sh(a, x),
                 stg_dtype_name(a->dtype), b->name, sh(b, y), stg_dtype_name(b->dtype));
        return bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

// rows = product of all dims but the last; as a shape.
static void rows_shape(const stg_tensor *x, int *nd, int64_t *s) {
    *nd = x->ndim - 1;
    for (int i = 0; i + 1 < x->ndim; i++) s[i] = x->shape[i];
}

static int64_t rows_of(const stg_tensor *x) {
    int64_t r = 1;
    for (int i = 0; i + 1 < x->ndim; i++) r *= x->shape[i];
    return r;
}

static stg_dtype grad_dtype_for(const stg_graph *g, const stg_tensor *t) {
    return t->cls == STG_CLASS_PARAM ? g->grad_dtype : t->dtype;
}

// ---- shape rules ----------------------------------------------------------------------------

static int infer_embedding(stg_graph *g, int id, stg_err *err) {
    const stg_tensor *tok = IN(g, id, 0), *w = IN(g, id, 1);
    if (tok->dtype != STG_I32) return bad(g, id, err, "token ids '%s' must be i32", tok->name, NULL);
    if (tok->ndim > STG_MAX_DIMS - 1) return bad(g, id, err, "token ids '%s' have too many dims", tok->name, NULL);
    if (need_ndim(g, id, 1, 2, 2, err) || need_float(g, id, 1, err)) return -1;
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i < tok->ndim; i++) s[i] = tok->shape[i];
    s[tok->ndim] = w->shape[1];
    set_shape(OUT(g, id, 0), tok->ndim + 1, s, w->dtype);
    return 0;
}

static int infer_embedding_bwd(stg_graph *g, int id, stg_err *err) {
    const stg_tensor *tok = IN(g, id, 0), *dy = IN(g, id, 1);
    if (tok->dtype != STG_I32) return bad(g, id, err, "token ids '%s' must be i32", tok->name, NULL);
    if (dy->ndim != tok->ndim + 1) return bad(g, id, err, "gradient '%s' must have one more dim than the tokens", dy->name, NULL);
    for (int i = 0; i < tok->ndim; i++)
        if (dy->shape[i] != tok->shape[i]) return bad(g, id, err, "gradient '%s' does not match the tokens' shape", dy->name, NULL);
    int64_t v = OP(g, id)->a.embedding_bwd.vocab;
    if (v <= 0) return bad(g, id, err, "vocab must be positive%s%s", NULL, NULL);
    int64_t s[2] = {v, dy->shape[dy->ndim - 1]};
    set_shape(OUT(g, id, 0), 2, s, g->grad_dtype);
    return 0;
}

// The optional addend input (stg_op_def.addend_in): of output 0's shape and dtype.
static int check_addend(stg_graph *g, int id, stg_err *err) {
    int k = ops_def(OP(g, id)->kind)->addend_in;
    if (k <= 0 || OP(g, id)->n_in != k + 1) return 0;
    const stg_tensor *acc = IN(g, id, k), *C = OUT(g, id, 0);
    bool same = acc->ndim == C->ndim && acc->dtype == C->dtype;
    for (int i = 0; same && i < C->ndim; i++) same = acc->shape[i] == C->shape[i];
    if (!same) return bad(g, id, err, "the addend '%s' must have the product's shape and dtype%s", acc->name, "");
    return 0;
}

static int infer_linear(stg_graph *g, int id, stg_err *err) {
    if (need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || need_ndim(g, id, 1, 2, 2, err)) return -1;
    if (need_float(g, id, 0, err) || need_float(g, id, 1, err)) return -1;
    const stg_tensor *x = IN(g, id, 0), *w = IN(g, id, 1);
    if (x->dtype != w->dtype) return bad(g, id, err, "'%s' and '%s' must have the same dtype", x->name, w->name);
    if (x->shape[x->ndim - 1] != w->shape[1]) {
        char a[128], b[128], what[400];
        snprintf(what, sizeof what, "'%s' %s has %lld features but weight '%s' %s expects %lld (weights are [d_out, d_in])",
                 x->name, sh(x, a), (long long)x->shape[x->ndim - 1], w->name, sh(w, b), (long long)w->shape[1]);
        return bad(g, id, err, "%s%s", what, NULL);
    }
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
    s[x->ndim - 1] = w->shape[0];
    set_shape(OUT(g, id, 0), x->ndim, s, x->dtype);
    return check_addend(g, id, err);
}

// The product of inputs ia and ib of op id (matmul's rule: A (..., a0, a1), B 2-D or with A's batch
// dims, op = transpose of the last two dims when ta / tb is set) into output o.
static int infer_product(stg_graph *g, int id, int ia, int ib, int o, const stg_matmul_attrs *a, stg_err *err) {
    if (need_ndim(g, id, ia, 2, STG_MAX_DIMS, err) || need_ndim(g, id, ib, 2, STG_MAX_DIMS, err)) return -1;
    if (need_float(g, id, ia, err) || need_float(g, id, ib, err)) return -1;
    const stg_tensor *A = IN(g, id, ia), *B = IN(g, id, ib);
    if (A->dtype != B->dtype) return bad(g, id, err, "'%s' and '%s' must have the same dtype", A->name, B->name);
    if (B->ndim != 2 && B->ndim != A->ndim)
        return bad(g, id, err, "'%s' must be 2-D or have the same number of dims as '%s'", B->name, A->name);
    if (B->ndim == A->ndim)
        for (int i = 0; i + 2 < A->ndim; i++)
            if (A->shape[i] != B->shape[i]) return bad(g, id, err, "batch dims of '%s' and '%s' differ", A->name, B->name);
    int64_t a0 = A->shape[A->ndim - 2], a1 = A->shape[A->ndim - 1];
    int64_t b0 = B->shape[B->ndim - 2], b1 = B->shape[B->ndim - 1];
    int64_t m = a->ta ? a1 : a0, k = a->ta ? a0 : a1, kb = a->tb ? b1 : b0, n = a->tb ? b0 : b1;
    if (k != kb) {
        char x[128], y[128], what[400];
        snprintf(what, sizeof what, "inner dims differ: op('%s' %s) has %lld columns, op('%s' %s) has %lld rows", A->name,
                 sh(A, x), (long long)k, B->name, sh(B, y), (long long)kb);
        return bad(g, id, err, "%s%s", what, NULL);
    }
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i + 2 < A->ndim; i++) s[i] = A->shape[i];
    s[A->ndim - 2] = m;
    s[A->ndim - 1] = n;
    set_shape(OUT(g, id, o), A->ndim, s, a->grad_out ? g->grad_dtype : A->dtype);
    return 0;
}

static int infer_matmul(stg_graph *g, int id, stg_err *err) {
    if (infer_product(g, id, 0, 1, 0, &OP(g, id)->a.matmul, err)) return -1;
    return check_addend(g, id, err);
}

// Products of equal shapes in one launch: inputs (A1, B1, A2, B2, ...), output i = op(Ai) op(Bi).
static int infer_matmul_group(stg_graph *g, int id, stg_err *err) {
    const stg_op *op = OP(g, id);
    if (op->n_in % 2 || op->n_in / 2 != op->n_out)
        return bad(g, id, err, "takes pairs of operands, one pair per output%s%s", NULL, NULL);
    for (int p = 0; p < op->n_out; p++) {
        if (infer_product(g, id, 2 * p, 2 * p + 1, p, &OP(g, id)->a.matmul, err)) return -1;
        if (p > 0 && (need_same(g, id, 0, 2 * p, err) || need_same(g, id, 1, 2 * p + 1, err))) return -1;
    }
    return 0;
}

static int infer_norm_common(stg_graph *g, int id, int n_params, stg_err *err) {
    if (need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || need_float(g, id, 0, err)) return -1;
    const stg_tensor *x = IN(g, id, 0);
    for (int p = 1; p <= n_params; p++) {
        if (need_ndim(g, id, p, 1, 1, err) || need_float(g, id, p, err)) return -1;
        const stg_tensor *w = IN(g, id, p);
        if (w->shape[0] != x->shape[x->ndim - 1]) {
            char what[300];
            snprintf(what, sizeof what, "gain '%s' has %lld elements but '%s' has %lld features", w->name,
                     (long long)w->shape[0], x->name, (long long)x->shape[x->ndim - 1]);
            return bad(g, id, err, "%s%s", what, NULL);
        }
    }
    if (!(OP(g, id)->a.norm.eps > 0)) return bad(g, id, err, "eps must be positive%s%s", NULL, NULL);
    return 0;
}

static int infer_rmsnorm(stg_graph *g, int id, stg_err *err) {
    if (infer_norm_common(g, id, 1, err)) return -1;
    const stg_tensor *x = IN(g, id, 0);
    copy_shape(OUT(g, id, 0), x, x->dtype);
    int nd;
    int64_t s[STG_MAX_DIMS];
    rows_shape(x, &nd, s);
    set_shape(OUT(g, id, 1), nd, s, g->grad_dtype);
    return 0;
}

static int infer_layernorm(stg_graph *g, int id, stg_err *err) {
    if (infer_norm_common(g, id, 2, err)) return -1;
    const stg_tensor *x = IN(g, id, 0);
    copy_shape(OUT(g, id, 0), x, x->dtype);
    int nd;
    int64_t s[STG_MAX_DIMS];
    rows_shape(x, &nd, s);
    s[nd++] = 2;
    set_shape(OUT(g, id, 1), nd, s, g->grad_dtype);
    return 0;
}

// (x, w, stats, dy) -> dx, dw[, db]
static int infer_norm_bwd(stg_graph *g, int id, stg_err *err) {
    if (need_same(g, id, 0, 3, err)) return -1;
    const stg_tensor *x = IN(g, id, 0), *w = IN(g, id, 1);
    if (w->ndim != 1 || w->shape[0] != x->shape[x->ndim - 1]) return bad(g, id, err, "gain '%s' does not match '%s'", w->name, x->name);
    copy_shape(OUT(g, id, 0), x, x->dtype);
    for (int o = 1; o < OP(g, id)->n_out; o++) copy_shape(OUT(g, id, o), w, grad_dtype_for(g, w));
    return check_addend(g, id, err);
}

static int infer_rope(stg_graph *g, int id, stg_err *err) {
    if (need_ndim(g, id, 0, 3, STG_MAX_DIMS, err) || need_float(g, id, 0, err)) return -1;
    const stg_tensor *x = IN(g, id, 0);
    if (x->shape[x->ndim - 1] % 2) return bad(g, id, err, "'%s': head_dim (the last dim) must be even for RoPE", x->name, NULL);
    if (!(OP(g, id)->a.rope.theta > 0)) return bad(g, id, err, "theta must be positive%s%s", NULL, NULL);
    copy_shape(OUT(g, id, 0), x, x->dtype);
    return 0;
}

static int infer_same_as_in0(stg_graph *g, int id, stg_err *err) {
    if (need_float(g, id, 0, err)) return -1;
    copy_shape(OUT(g, id, 0), IN(g, id, 0), IN(g, id, 0)->dtype);
    return 0;
}

static int infer_causal_mask(stg_graph *g, int id, stg_err *err) {
    if (need_ndim(g, id, 0, 2, STG_MAX_DIMS, err)) return -1;
    const stg_tensor *x = IN(g, id, 0);
    if (x->shape[x->ndim - 2] > x->shape[x->ndim - 1])
        return bad(g, id, err, "'%s': a causal mask needs at least as many keys (last dim) as queries%s", x->name, NULL);
    return infer_same_as_in0(g, id, err);
}

static int infer_softmax(stg_graph *g, int id, stg_err *err) {
    if (need_ndim(g, id, 0, 1, STG_MAX_DIMS, err)) return -1;
    return infer_same_as_in0(g, id, err);
}

// (a, b) same shape -> out same shape; for the *_bwd(x, dy) forms and mul/add/swiglu.
static int infer_binary_same(stg_graph *g, int id, stg_err *err) {
    if (need_float(g, id, 0, err) || need_same(g, id, 0, 1, err)) return -1;
    for (int o = 0; o < OP(g, id)->n_out; o++) copy_shape(OUT(g, id, o), IN(g, id, 0), IN(g, id, 0)->dtype);
    return 0;
}

static int infer_ternary_same(stg_graph *g, int id, stg_err *err) {
    if (need_float(g, id, 0, err) || need_same(g, id, 0, 1, err) || need_same(g, id, 0, 2, err)) return -1;
    for (int o = 0; o < OP(g, id)->n_out; o++) copy_shape(OUT(g, id, o), IN(g, id, 0), IN(g, id, 0)->dtype);
    return 0;
}

static int infer_attention(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < 3; i++)
        if (need_ndim(g, id, i, 4, 4, err) || need_float(g, id, i, err)) return -1;
    if (need_same(g, id, 0, 1, err) || need_same(g, id, 0, 2, err)) return -1;
    const stg_tensor *q = IN(g, id, 0);
    copy_shape(OUT(g, id, 0), q, q->dtype);
    int64_t s[3] = {q->shape[0], q->shape[2], q->shape[1]}; // (B, H, S)
    set_shape(OUT(g, id, 1), 3, s, g->grad_dtype);
    return 0;
}

static int infer_attention_bwd(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < 6; i++)
        if (i != 4 && (need_ndim(g, id, i, 4, 4, err) || need_same(g, id, 0, i, err))) return -1;
    const stg_tensor *q = IN(g, id, 0), *lse = IN(g, id, 4);
    if (lse->ndim != 3 || lse->shape[0] != q->shape[0] || lse->shape[1] != q->shape[2] || lse->shape[2] != q->shape[1])
        return bad(g, id, err, "log-sum-exp '%s' must be (B, H, S) for '%s'", lse->name, q->name);
    for (int o = 0; o < 3; o++) copy_shape(OUT(g, id, o), q, q->dtype);
    return 0;
}

static int infer_scale(stg_graph *g, int id, stg_err *err) {
    if (!isfinite(OP(g, id)->a.scale.factor)) return bad(g, id, err, "factor must be finite%s%s", NULL, NULL);
    return infer_same_as_in0(g, id, err);
}

static int infer_reshape(stg_graph *g, int id, stg_err *err) {
    stg_reshape_attrs *r = &OP(g, id)->a.reshape;
    const stg_tensor *x = IN(g, id, 0);
    if (r->ndim < 0 || r->ndim > STG_MAX_DIMS) return bad(g, id, err, "shape has too many dims%s%s", NULL, NULL);
    int64_t known = 1;
    int infer_at = -1;
    for (int i = 0; i < r->ndim; i++) {
        if (r->shape[i] == -1 && infer_at < 0) infer_at = i;
        else if (r->shape[i] <= 0) return bad(g, id, err, "shape sizes must be positive (one may be -1)%s%s", NULL, NULL);
        else known *= r->shape[i];
    }
    int64_t n = stg_numel(x);
    if (infer_at >= 0) {
        if (known == 0 || n % known) return bad(g, id, err, "cannot infer the -1 dim for '%s'%s", x->name, NULL);
        r->shape[infer_at] = n / known;
        known *= r->shape[infer_at];
    }
    if (known != n) {
        char b[128], what[300];
        snprintf(what, sizeof what, "'%s' %s has %lld elements; the new shape has %lld", x->name, sh(x, b), (long long)n,
                 (long long)known);
        return bad(g, id, err, "%s%s", what, NULL);
    }
    set_shape(OUT(g, id, 0), r->ndim, r->shape, x->dtype);
    return 0;
}

static int infer_transpose(stg_graph *g, int id, stg_err *err) {
    stg_transpose_attrs *t = &OP(g, id)->a.transpose;
    const stg_tensor *x = IN(g, id, 0);
    if (t->d0 < 0) t->d0 += x->ndim;
    if (t->d1 < 0) t->d1 += x->ndim;
    if (t->d0 < 0 || t->d0 >= x->ndim || t->d1 < 0 || t->d1 >= x->ndim)
        return bad(g, id, err, "dims to swap are out of range for '%s'%s", x->name, NULL);
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
    s[t->d0] = x->shape[t->d1];
    s[t->d1] = x->shape[t->d0];
    set_shape(OUT(g, id, 0), x->ndim, s, x->dtype);
    return 0;
}

static int check_targets(stg_graph *g, int id, stg_err *err) {
    if (need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || need_float(g, id, 0, err)) return -1;
    const stg_tensor *x = IN(g, id, 0), *t = IN(g, id, 1);
    if (t->dtype != STG_I32) return bad(g, id, err, "targets '%s' must be i32", t->name, NULL);
    bool ok = t->ndim == x->ndim - 1;
    for (int i = 0; ok && i < t->ndim; i++) ok = t->shape[i] == x->shape[i];
    if (!ok) {
        char a[128], b[128], what[400];
        snprintf(what, sizeof what, "targets '%s' %s must have the shape of logits '%s' %s without the last dim", t->name,
                 sh(t, a), x->name, sh(x, b));
        return bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

static int infer_cross_entropy(stg_graph *g, int id, stg_err *err) {
    if (check_targets(g, id, err)) return -1;
    const stg_tensor *x = IN(g, id, 0);
    set_shape(OUT(g, id, 0), 0, NULL, g->grad_dtype);
    int nd;
    int64_t s[STG_MAX_DIMS];
    rows_shape(x, &nd, s);
    set_shape(OUT(g, id, 1), nd, s, g->grad_dtype);
    return 0;
}

static int infer_cross_entropy_bwd(stg_graph *g, int id, stg_err *err) {
    if (check_targets(g, id, err)) return -1;
    const stg_tensor *x = IN(g, id, 0);
    if (stg_numel(IN(g, id, 2)) != rows_of(x)) return bad(g, id, err, "log-sum-exp '%s' must have one value per row%s", IN(g, id, 2)->name, NULL);
    copy_shape(OUT(g, id, 0), x, x->dtype);
    return 0;
}

static int infer_global_norm(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < OP(g, id)->n_in; i++)
        if (need_float(g, id, i, err)) return -1;
    set_shape(OUT(g, id, 0), 0, NULL, g->grad_dtype);
    return 0;
}

// Data parallel: allreduce: the tensors (one contiguous bucket of the planner's, or one scalar)
// become their mean over the ranks, in place; broadcast: the tensor becomes rank `root`'s. Float.
static int infer_allreduce(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < OP(g, id)->n_in; i++) {
        if (need_float(g, id, i, err)) return -1;
        if (IN(g, id, i)->dtype != IN(g, id, 0)->dtype)
            return bad(g, id, err, "'%s' and '%s' must have one dtype", IN(g, id, i)->name, IN(g, id, 0)->name);
    }
    return 0;
}

// slots (k), norm (): norm = sqrt(slots[0] + ... + slots[k-1]), in place (optimizer in backward).
static int infer_slot_norm(stg_graph *g, int id, stg_err *err) {
    const stg_tensor *sl = IN(g, id, 0), *n = IN(g, id, 1);
    if (sl->ndim != 1 || !is_float(sl->dtype)) return bad(g, id, err, "slots '%s' must be a float vector%s", sl->name, NULL);
    if (stg_numel(n) != 1 || !is_float(n->dtype)) return bad(g, id, err, "norm '%s' must be a float scalar%s", n->name, NULL);
    return 0;
}

static int infer_lr_schedule(stg_graph *g, int id, stg_err *err) {
    if (stg_numel(IN(g, id, 0)) != 2 || !is_float(IN(g, id, 0)->dtype))
        return bad(g, id, err, "schedule state '%s' must hold [steps done, lr]%s", IN(g, id, 0)->name, NULL);
    const stg_lr_attrs *a = &OP(g, id)->a.lr;
    if (!(a->lr >= 0 && a->min_lr >= 0 && a->warmup >= 0 && a->cosine_steps >= 0))
        return bad(g, id, err, "learning-rate schedule out of range (lr, min_lr, warmup, cosine_steps >= 0)%s%s", NULL, NULL);
    return 0;
}

static int infer_adamw(stg_graph *g, int id, stg_err *err) {
    const stg_op *op = OP(g, id);
    const stg_tensor *p = IN(g, id, 0);
    int n = op->n_in;
    if (op->a.adamw.slot < 0) return bad(g, id, err, "slot must be >= 0 (0: no slot)%s%s", NULL, NULL);
    if (op->a.adamw.slot > 0) { // the optimizer-in-backward form: the last input holds the slots
        const stg_tensor *sl = IN(g, id, n - 1);
        if (n < 7 || sl->ndim != 1 || !is_float(sl->dtype) || op->a.adamw.slot > sl->shape[0])
            return bad(g, id, err, "the slot must index the slots vector '%s' (the last input)%s", sl->name, NULL);
        n--;
    } else if (n > 7) {
        return bad(g, id, err, "at most 7 inputs without a slot (param, grad, m, v, norm, sched, master)%s%s", NULL, NULL);
    }
    for (int i = 1; i < n; i++) {
        if (i == 4 || i == 5) continue;
        const stg_tensor *t = IN(g, id, i);
        if (!same_shape(p, t)) return bad(g, id, err, "'%s' must have the shape of parameter '%s'", t->name, p->name);
    }
    if (stg_numel(IN(g, id, 4)) != 1) return bad(g, id, err, "norm '%s' must be a scalar%s", IN(g, id, 4)->name, NULL);
    if (stg_numel(IN(g, id, 5)) != 2) return bad(g, id, err, "schedule state '%s' must hold [step, lr]%s", IN(g, id, 5)->name, NULL);
    const stg_adamw_attrs *a = &op->a.adamw;
    if (!(a->beta1 >= 0 && a->beta1 < 1 && a->beta2 >= 0 && a->beta2 < 1 && a->eps > 0 && a->weight_decay >= 0 && a->max_norm >= 0))
        return bad(g, id, err, "hyperparameters out of range (0 <= beta < 1, eps > 0, weight decay >= 0, clip >= 0)%s%s", NULL, NULL);
    return 0;
}

// ---- FLOPs ----------------------------------------------------------------------------------

static double numel_in(const stg_graph *g, const stg_op *op, int i) { return (double)stg_numel(&g->t[op->in[i]]); }
static double numel_out(const stg_graph *g, const stg_op *op, int o) { return (double)stg_numel(&g->t[op->out[o]]); }

static double flops_linear(const stg_graph *g, const stg_op *op) {
    const stg_tensor *w = &g->t[op->in[1]];
    return 2.0 * numel_out(g, op, 0) * (double)w->shape[1];
}

static double flops_matmul(const stg_graph *g, const stg_op *op) {
    double f = 0; // matmul_group: the sum over its pairs
    for (int p = 0; p < (op->kind == STG_OP_MATMUL_GROUP ? op->n_out : 1); p++) {
        const stg_tensor *A = &g->t[op->in[2 * p]];
        int64_t k = op->a.matmul.ta ? A->shape[A->ndim - 2] : A->shape[A->ndim - 1];
        f += 2.0 * numel_out(g, op, p) * (double)k;
    }
    return f;
}

// Attention: QKᵀ and PV, 4·B·H·S²·Dh forward and 8 backward (no causal discount, as the peers
// count; see ../shared/peers/NUMBERS.md).
static double flops_attention(const stg_graph *g, const stg_op *op) {
    const stg_tensor *q = &g->t[op->in[0]];
    return 4.0 * (double)q->shape[0] * (double)q->shape[2] * (double)q->shape[1] * (double)q->shape[1] * (double)q->shape[3];
}
static double flops_attention_bwd(const stg_graph *g, const stg_op *op) { return 2.0 * flops_attention(g, op); }

static double flops_elem1(const stg_graph *g, const stg_op *op) { return numel_out(g, op, 0); }
static double flops_elem4(const stg_graph *g, const stg_op *op) { return 4.0 * numel_in(g, op, 0); }
static double flops_elem8(const stg_graph *g, const stg_op *op) { return 8.0 * numel_in(g, op, 0); }
static double flops_softmax(const stg_graph *g, const stg_op *op) { return 5.0 * numel_in(g, op, 0); }
static double flops_global_norm(const stg_graph *g, const stg_op *op) {
    double f = 0;
    for (int i = 0; i < op->n_in; i++) f += 2.0 * numel_in(g, op, i);
    return f;
}
static double flops_adamw(const stg_graph *g, const stg_op *op) { return (op->a.adamw.slot > 0 ? 16.0 : 14.0) * numel_in(g, op, 0); }
static double flops_slot_norm(const stg_graph *g, const stg_op *op) { return numel_in(g, op, 0); }
static double flops_zero(const stg_graph *g, const stg_op *op) { return 0; }

// ---- gradient rules -------------------------------------------------------------------------

// Emits one backward op for forward op `fwd`; names its outputs after `names` (may be NULL).
static int emit(stg_graph *g, int fwd, stg_op_kind k, const int *in, int n, const stg_attrs *a, const char *hint,
                int *outs, stg_err *err) {
    stg_loc loc = g->ops[fwd].loc;
    int id = graph_add_op(g, k, in, n, a, STG_PHASE_BACKWARD, hint, loc, outs, err);
    if (id < 0) return stg_err_prefix(err, "in the gradient of %s", ops_name(g->ops[fwd].kind));
    g->ops[id].fwd = fwd;
    return id;
}

// "d.<name of tensor t>"
static const char *dname(const stg_graph *g, int t, char *buf) {
    snprintf(buf, STG_NAME_MAX, "d.%s", g->t[t].name);
    return buf;
}

static void name_out(stg_graph *g, int t, int like) {
    char b[STG_NAME_MAX];
    snprintf(g->t[t].name, STG_NAME_MAX, "%s", dname(g, like, b));
}

static int emit1(stg_graph *g, int fwd, stg_op_kind k, const int *in, int n, const stg_attrs *a, int like, stg_err *err) {
    char b[STG_NAME_MAX];
    int out[STG_MAX_OUT];
    if (emit(g, fwd, k, in, n, a, dname(g, like, b), out, err) < 0) return -1;
    return out[0];
}

static stg_attrs no_attrs(void) {
    stg_attrs a;
    memset(&a, 0, sizeof a);
    return a;
}

static int grad_embedding(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    int tok = g->ops[id].in[0], w = g->ops[id].in[1];
    if (!want[1]) return 0;
    stg_attrs a = no_attrs();
    a.embedding_bwd.vocab = g->t[w].shape[0];
    int in[2] = {tok, dout[0]};
    return (din[1] = emit1(g, id, STG_OP_EMBEDDING_BWD, in, 2, &a, w, err)) < 0 ? -1 : 0;
}

static int reshape_to(stg_graph *g, int fwd, int t, int ndim, const int64_t *shape, stg_err *err) {
    stg_attrs a = no_attrs();
    a.reshape.ndim = ndim;
    for (int i = 0; i < ndim; i++) a.reshape.shape[i] = shape[i];
    char b[STG_NAME_MAX + 8];
    snprintf(b, sizeof b, "%s.flat", g->t[t].name);
    b[STG_NAME_MAX - 1] = 0;
    int out[STG_MAX_OUT];
    if (emit(g, fwd, STG_OP_RESHAPE, &t, 1, &a, b, out, err) < 0) return -1;
    return out[0];
}

// Flattens t to 2-D (rows, last dim).
static int flatten2(stg_graph *g, int fwd, int t, stg_err *err) {
    const stg_tensor *x = &g->t[t];
    if (x->ndim == 2) return t;
    int64_t s[2] = {rows_of(x), x->shape[x->ndim - 1]};
    return reshape_to(g, fwd, t, 2, s, err);
}

static int grad_linear(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    int x = g->ops[id].in[0], w = g->ops[id].in[1], dy = dout[0];
    if (want[0]) {
        stg_attrs a = no_attrs(); // dx (..., in) = dy (..., out) · W (out, in)
        a.matmul.grad_out = g->t[x].cls == STG_CLASS_PARAM;
        int in[2] = {dy, w};
        if ((din[0] = emit1(g, id, STG_OP_MATMUL, in, 2, &a, x, err)) < 0) return -1;
    }
    if (want[1]) {
        int dyf = flatten2(g, id, dy, err), xf = dyf < 0 ? -1 : flatten2(g, id, x, err);
        if (xf < 0) return -1;
        stg_attrs a = no_attrs(); // dW (out, in) = dyᵀ (out, N) · x (N, in)
        a.matmul.ta = 1;
        a.matmul.grad_out = g->t[w].cls == STG_CLASS_PARAM;
        int in[2] = {dyf, xf};
        if ((din[1] = emit1(g, id, STG_OP_MATMUL, in, 2, &a, w, err)) < 0) return -1;
    }
    if (g->ops[id].n_in == 3 && want[2]) din[2] = dy; // the addend's gradient is the output's
    return 0;
}

static int transpose_last2(stg_graph *g, int fwd, int t, int like, stg_err *err) {
    stg_attrs a = no_attrs();
    a.transpose.d0 = g->t[t].ndim - 2;
    a.transpose.d1 = g->t[t].ndim - 1;
    return emit1(g, fwd, STG_OP_TRANSPOSE, &t, 1, &a, like, err);
}

static int grad_matmul(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    int A = f.in[0], B = f.in[1], dC = dout[0], ta = f.a.matmul.ta, tb = f.a.matmul.tb;
    bool b_bcast = g->t[B].ndim == 2 && g->t[A].ndim > 2;
    if (want[0]) {
        // dop(A) = dC · op(B)ᵀ; with ta the stored A is its transpose.
        stg_attrs a = no_attrs();
        a.matmul.tb = !tb;
        a.matmul.grad_out = g->t[A].cls == STG_CLASS_PARAM;
        int in[2] = {dC, B};
        int t = emit1(g, id, STG_OP_MATMUL, in, 2, &a, A, err);
        if (t < 0) return -1;
        if (ta && (t = transpose_last2(g, id, t, A, err)) < 0) return -1;
        din[0] = t;
    }
    if (want[1]) {
        int a_op = A; // A laid out as op(A): (..., m, k)
        if (ta && b_bcast && (a_op = transpose_last2(g, id, A, A, err)) < 0) return -1;
        int lhs = a_op, rhs = dC;
        int ta2 = ta && !b_bcast;
        if (b_bcast) { // sum over A's batch: flatten both to rows
            if ((lhs = flatten2(g, id, a_op, err)) < 0 || (rhs = flatten2(g, id, dC, err)) < 0) return -1;
        }
        stg_attrs a = no_attrs();
        a.matmul.grad_out = g->t[B].cls == STG_CLASS_PARAM;
        int in[2];
        if (!tb) { // dB (k, n) = op(A)ᵀ · dC
            in[0] = lhs;
            in[1] = rhs;
            a.matmul.ta = !ta2;
        } else { // dB (n, k) = dCᵀ · op(A)
            in[0] = rhs;
            in[1] = lhs;
            a.matmul.ta = 1;
            a.matmul.tb = ta2;
        }
        if ((din[1] = emit1(g, id, STG_OP_MATMUL, in, 2, &a, B, err)) < 0) return -1;
    }
    if (f.n_in == 3 && want[2]) din[2] = dC; // the addend's gradient is the product's
    return 0;
}

// Norms: (x, w[, b]) -> (y, stats); backward (x, w, stats, dy) -> (dx, dw[, db]).
static int grad_norm(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    stg_op_kind k = f.kind == STG_OP_RMSNORM ? STG_OP_RMSNORM_BWD : STG_OP_LAYERNORM_BWD;
    int in[4] = {f.in[0], f.in[1], f.out[1], dout[0]};
    int out[STG_MAX_OUT];
    char b[STG_NAME_MAX];
    if (emit(g, id, k, in, 4, &f.a, dname(g, f.in[0], b), out, err) < 0) return -1;
    for (int i = 0; i < f.n_in; i++) {
        name_out(g, out[i], f.in[i]);
        if (want[i]) din[i] = out[i];
    }
    return 0;
}

static int grad_rope(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    stg_attrs a = g->ops[id].a;
    a.rope.inverse = !a.rope.inverse;
    return (din[0] = emit1(g, id, STG_OP_ROPE, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_causal_mask(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    stg_attrs a = no_attrs();
    a.mask.fill = 0.0;
    return (din[0] = emit1(g, id, STG_OP_CAUSAL_MASK, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_softmax(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    int in[2] = {g->ops[id].out[0], dout[0]};
    stg_attrs a = no_attrs();
    return (din[0] = emit1(g, id, STG_OP_SOFTMAX_BWD, in, 2, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_attention(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    int in[6] = {f.in[0], f.in[1], f.in[2], f.out[0], f.out[1], dout[0]};
    int out[STG_MAX_OUT];
    char b[STG_NAME_MAX];
    if (emit(g, id, STG_OP_ATTENTION_BWD, in, 6, &f.a, dname(g, f.in[0], b), out, err) < 0) return -1;
    for (int i = 0; i < 3; i++) {
        name_out(g, out[i], f.in[i]);
        if (want[i]) din[i] = out[i];
    }
    return 0;
}

static int grad_unary_in(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err, stg_op_kind k,
                         int saved) {
    int in[2] = {saved, dout[0]};
    stg_attrs a = no_attrs();
    return (din[0] = emit1(g, id, k, in, 2, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_silu(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    return grad_unary_in(g, id, dout, want, din, err, STG_OP_SILU_BWD, g->ops[id].in[0]);
}

static int grad_relu(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    return grad_unary_in(g, id, dout, want, din, err, STG_OP_RELU_BWD, g->ops[id].out[0]);
}

static int grad_swiglu(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    int in[3] = {f.in[0], f.in[1], dout[0]};
    int out[STG_MAX_OUT];
    char b[STG_NAME_MAX];
    stg_attrs a = no_attrs();
    if (emit(g, id, STG_OP_SWIGLU_BWD, in, 3, &a, dname(g, f.in[0], b), out, err) < 0) return -1;
    for (int i = 0; i < 2; i++) {
        name_out(g, out[i], f.in[i]);
        if (want[i]) din[i] = out[i];
    }
    return 0;
}

static int grad_mul(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    stg_attrs a = no_attrs();
    for (int i = 0; i < 2; i++) {
        if (!want[i]) continue;
        int in[2] = {dout[0], f.in[1 - i]};
        if ((din[i] = emit1(g, id, STG_OP_MUL, in, 2, &a, f.in[i], err)) < 0) return -1;
    }
    return 0;
}

static int grad_add(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    for (int i = 0; i < 2; i++)
        if (want[i]) din[i] = dout[0];
    return 0;
}

static int grad_scale(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    stg_attrs a = g->ops[id].a;
    return (din[0] = emit1(g, id, STG_OP_SCALE, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_reshape(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_tensor *x = &g->t[g->ops[id].in[0]];
    int64_t s[STG_MAX_DIMS];
    int nd = x->ndim;
    for (int i = 0; i < nd; i++) s[i] = x->shape[i];
    stg_attrs a = no_attrs();
    a.reshape.ndim = nd;
    for (int i = 0; i < nd; i++) a.reshape.shape[i] = s[i];
    return (din[0] = emit1(g, id, STG_OP_RESHAPE, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_transpose(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    stg_attrs a = g->ops[id].a;
    return (din[0] = emit1(g, id, STG_OP_TRANSPOSE, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_cross_entropy(stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    if (dout[0] != STG_GRAD_SEED)
        return stg_errf_at(err, f.loc, "cross_entropy: its loss must be the model's loss itself (scaling or summing losses is not supported)");
    int in[3] = {f.in[0], f.in[1], f.out[1]};
    stg_attrs a = no_attrs();
    return (din[0] = emit1(g, id, STG_OP_CROSS_ENTROPY_BWD, in, 3, &a, f.in[0], err)) < 0 ? -1 : 0;
}

// ---- the table ------------------------------------------------------------------------------

#define ATTR(T, field, type, def, req) {#field, type, offsetof(stg_attrs, T.field), def, req}

static const stg_attr_def attrs_matmul[] = {ATTR(matmul, ta, STG_ATTR_INT, 0, 0), ATTR(matmul, tb, STG_ATTR_INT, 0, 0)};
static const stg_attr_def attrs_matmul_group[] = {ATTR(matmul, ta, STG_ATTR_INT, 0, 0), ATTR(matmul, tb, STG_ATTR_INT, 0, 0),
                                                  ATTR(matmul, grad_out, STG_ATTR_INT, 0, 0)};
static const stg_attr_def attrs_norm[] = {ATTR(norm, eps, STG_ATTR_FLOAT, 1e-5, 0)};
static const stg_attr_def attrs_rope[] = {ATTR(rope, theta, STG_ATTR_FLOAT, 10000.0, 0), ATTR(rope, inverse, STG_ATTR_INT, 0, 0)};
static const stg_attr_def attrs_mask[] = {ATTR(mask, fill, STG_ATTR_FLOAT, -INFINITY, 0)};
static const stg_attr_def attrs_attention[] = {ATTR(attention, scale, STG_ATTR_FLOAT, 0.0, 0)};
static const stg_attr_def attrs_scale[] = {ATTR(scale, factor, STG_ATTR_FLOAT, 1.0, 1)};
static const stg_attr_def attrs_reshape[] = {{"shape", STG_ATTR_SHAPE, offsetof(stg_attrs, reshape), 0, 1}};
static const stg_attr_def attrs_transpose[] = {ATTR(transpose, d0, STG_ATTR_INT, 0, 1), ATTR(transpose, d1, STG_ATTR_INT, 0, 1)};
static const stg_attr_def attrs_embedding_bwd[] = {ATTR(embedding_bwd, vocab, STG_ATTR_I64, 0, 1)};
static const stg_attr_def attrs_adamw[] = {
    ATTR(adamw, beta1, STG_ATTR_FLOAT, 0.9, 0),        ATTR(adamw, beta2, STG_ATTR_FLOAT, 0.95, 0),
    ATTR(adamw, eps, STG_ATTR_FLOAT, 1e-8, 0),         ATTR(adamw, weight_decay, STG_ATTR_FLOAT, 0.1, 0),
    ATTR(adamw, max_norm, STG_ATTR_FLOAT, 1.0, 0),     ATTR(adamw, slot, STG_ATTR_INT, 0, 0),
};
static const stg_attr_def attrs_comm[] = {ATTR(comm, root, STG_ATTR_I64, 0, 1)};
#define ATTRS(x) x, (int)(sizeof x / sizeof x[0])
#define BIT(i) (1u << (i))

static const stg_op_def defs[STG_OP_COUNT] = {
    [STG_OP_EMBEDDING] = {"embedding", 2, 2, 1, NULL, 0, infer_embedding, grad_embedding, flops_zero,
                          .saves_in = BIT(0), .no_grad_in = BIT(0), .no_decay_in = BIT(1), .inplace_in = -1},
    [STG_OP_EMBEDDING_BWD] = {"embedding_bwd", 2, 2, 1, ATTRS(attrs_embedding_bwd), infer_embedding_bwd, NULL, flops_elem1,
                              .inplace_in = -1},
    [STG_OP_LINEAR] = {"linear", 2, 3, 1, NULL, 0, infer_linear, grad_linear, flops_linear, .saves_in = BIT(0) | BIT(1),
                       .inplace_in = -1, .addend_in = 2},
    [STG_OP_MATMUL] = {"matmul", 2, 3, 1, ATTRS(attrs_matmul), infer_matmul, grad_matmul, flops_matmul,
                       .saves_in = BIT(0) | BIT(1), .inplace_in = -1, .addend_in = 2},
    [STG_OP_RMSNORM] = {"rmsnorm", 2, 2, 2, ATTRS(attrs_norm), infer_rmsnorm, grad_norm, flops_elem4,
                        .saves_in = BIT(0) | BIT(1), .saves_out = BIT(1), .no_decay_in = BIT(1), .inplace_in = -1},
    [STG_OP_RMSNORM_BWD] = {"rmsnorm_bwd", 4, 5, 2, ATTRS(attrs_norm), infer_norm_bwd, NULL, flops_elem8, .inplace_in = 3,
                            .addend_in = 4},
    [STG_OP_LAYERNORM] = {"layernorm", 3, 3, 2, ATTRS(attrs_norm), infer_layernorm, grad_norm, flops_elem8,
                          .saves_in = BIT(0) | BIT(1), .saves_out = BIT(1), .no_decay_in = BIT(1) | BIT(2),
                          .inplace_in = -1},
    [STG_OP_LAYERNORM_BWD] = {"layernorm_bwd", 4, 5, 3, ATTRS(attrs_norm), infer_norm_bwd, NULL, flops_elem8, .inplace_in = 3,
                              .addend_in = 4},
    [STG_OP_ROPE] = {"rope", 1, 1, 1, ATTRS(attrs_rope), infer_rope, grad_rope, flops_elem4, .inplace_in = 0},
    [STG_OP_CAUSAL_MASK] = {"causal_mask", 1, 1, 1, ATTRS(attrs_mask), infer_causal_mask, grad_causal_mask, flops_zero,
                            .inplace_in = 0},
    [STG_OP_SOFTMAX] = {"softmax", 1, 1, 1, NULL, 0, infer_softmax, grad_softmax, flops_softmax, .saves_out = BIT(0),
                        .inplace_in = 0},
    [STG_OP_SOFTMAX_BWD] = {"softmax_bwd", 2, 2, 1, NULL, 0, infer_binary_same, NULL, flops_elem4, .inplace_in = 1},
    [STG_OP_ATTENTION] = {"attention", 3, 3, 2, ATTRS(attrs_attention), infer_attention, grad_attention, flops_attention,
                          .saves_in = BIT(0) | BIT(1) | BIT(2), .saves_out = BIT(0) | BIT(1), .inplace_in = -1},
    [STG_OP_ATTENTION_BWD] = {"attention_bwd", 6, 6, 3, ATTRS(attrs_attention), infer_attention_bwd, NULL,
                              flops_attention_bwd, .inplace_in = -1},
    [STG_OP_SILU] = {"silu", 1, 1, 1, NULL, 0, infer_same_as_in0, grad_silu, flops_elem4, .saves_in = BIT(0), .inplace_in = 0},
    [STG_OP_SILU_BWD] = {"silu_bwd", 2, 2, 1, NULL, 0, infer_binary_same, NULL, flops_elem8, .inplace_in = 1},
    [STG_OP_RELU] = {"relu", 1, 1, 1, NULL, 0, infer_same_as_in0, grad_relu, flops_elem1, .saves_out = BIT(0), .inplace_in = 0},
    [STG_OP_RELU_BWD] = {"relu_bwd", 2, 2, 1, NULL, 0, infer_binary_same, NULL, flops_elem1, .inplace_in = 1},
    [STG_OP_SWIGLU] = {"swiglu", 2, 2, 1, NULL, 0, infer_binary_same, grad_swiglu, flops_elem4, .saves_in = BIT(0) | BIT(1),
                       .inplace_in = 0},
    [STG_OP_SWIGLU_BWD] = {"swiglu_bwd", 3, 3, 2, NULL, 0, infer_ternary_same, NULL, flops_elem8, .inplace_in = 2},
    [STG_OP_MUL] = {"mul", 2, 2, 1, NULL, 0, infer_binary_same, grad_mul, flops_elem1, .saves_in = BIT(0) | BIT(1),
                    .inplace_in = 0},
    [STG_OP_ADD] = {"add", 2, 2, 1, NULL, 0, infer_binary_same, grad_add, flops_elem1, .inplace_in = 0},
    [STG_OP_SCALE] = {"scale", 1, 1, 1, ATTRS(attrs_scale), infer_scale, grad_scale, flops_elem1, .inplace_in = 0},
    [STG_OP_RESHAPE] = {"reshape", 1, 1, 1, ATTRS(attrs_reshape), infer_reshape, grad_reshape, flops_zero, .inplace_in = -1,
                        .view = 1},
    [STG_OP_TRANSPOSE] = {"transpose", 1, 1, 1, ATTRS(attrs_transpose), infer_transpose, grad_transpose, flops_zero,
                          .inplace_in = -1},
    [STG_OP_CROSS_ENTROPY] = {"cross_entropy", 2, 2, 2, NULL, 0, infer_cross_entropy, grad_cross_entropy, flops_softmax,
                              .saves_in = BIT(0) | BIT(1), .saves_out = BIT(1), .no_grad_in = BIT(1), .inplace_in = -1},
    [STG_OP_CROSS_ENTROPY_BWD] = {"cross_entropy_bwd", 3, 3, 1, NULL, 0, infer_cross_entropy_bwd, NULL, flops_softmax,
                                  .inplace_in = 0},
    [STG_OP_GLOBAL_NORM] = {"global_norm", 1, -1, 1, NULL, 0, infer_global_norm, NULL, flops_global_norm, .inplace_in = -1},
    [STG_OP_LR_SCHEDULE] = {"lr_schedule", 1, 1, 0, NULL, 0, infer_lr_schedule, NULL, flops_zero, .mutates_in = BIT(0),
                             .inplace_in = -1},
    [STG_OP_ADAMW] = {"adamw", 6, 8, 0, ATTRS(attrs_adamw), infer_adamw, NULL, flops_adamw,
                      .mutates_in = BIT(0) | BIT(2) | BIT(3) | BIT(6) | BIT(7), .inplace_in = -1},
    [STG_OP_SLOT_NORM] = {"slot_norm", 2, 2, 0, NULL, 0, infer_slot_norm, NULL, flops_slot_norm, .mutates_in = BIT(1),
                          .inplace_in = -1},
    [STG_OP_ALLREDUCE] = {"allreduce", 1, -1, 0, NULL, 0, infer_allreduce, NULL, flops_zero, .mutates_in = 0xffffffffu,
                          .inplace_in = -1},
    [STG_OP_BROADCAST] = {"broadcast", 1, 1, 0, ATTRS(attrs_comm), infer_allreduce, NULL, flops_zero, .mutates_in = BIT(0),
                          .inplace_in = -1},
    // made by graph_group_matmuls from independent matmuls of equal shapes (no gradient rule: it
    // runs after autodiff); one output per pair of inputs
    [STG_OP_MATMUL_GROUP] = {"matmul_group", 4, 2 * STG_MAX_OUT, -1, ATTRS(attrs_matmul_group), infer_matmul_group, NULL,
                             flops_matmul, .inplace_in = -1},
};

double ops_lr_at(const stg_lr_attrs *a, int64_t t) {
    if (t < a->warmup) return (double)t / (double)a->warmup * a->lr;
    if (a->cosine_steps == 0) return a->lr;
    if (t <= a->cosine_steps && a->cosine_steps > a->warmup)
        return a->min_lr + 0.5 * (1.0 + cos((double)(t - a->warmup) / (double)(a->cosine_steps - a->warmup) * M_PI)) *
                               (a->lr - a->min_lr);
    return a->min_lr;
}

const stg_op_def *ops_def(stg_op_kind k) { return (unsigned)k < STG_OP_COUNT && defs[k].name ? &defs[k] : NULL; }

int ops_n_out(const stg_op_def *d, int n_in) { return d->n_out >= 0 ? d->n_out : n_in / 2; }

const char *ops_name(stg_op_kind k) {
    const stg_op_def *d = ops_def(k);
    return d ? d->name : "?";
}

int ops_lookup(const char *name) {
    for (int k = 0; k < STG_OP_COUNT; k++)
        if (defs[k].name && strcmp(defs[k].name, name) == 0) return k;
    return -1;
}
