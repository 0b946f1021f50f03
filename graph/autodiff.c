// Reverse-mode autodiff over the forward graph, from the registry's gradient rules; then the
// global gradient norm and one AdamW op per parameter.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "ops/registry.h"

// The gradient rules emit their ops through this (ops/registry.h: stg_grad_emit).
static const stg_grad_emit graph_grad_emit = {graph_add_op};

stg_optim_config graph_optim_defaults(void) {
    stg_optim_config c = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .max_norm = 1.0,
                          .lr = 1e-3, .min_lr = 1e-4, .warmup = 0, .cosine_steps = 0,
                          .lr_kind = STG_LR_COSINE, .wsd_shape = STG_WSD_LINEAR, .wsd_decay_frac = 0.2,
                          .decay_exempt_norms_embeddings = false};
    return c;
}

// gsum[t] += d. When t already has a gradient and d is made by an op of the gradient rule now
// running (id first_new or later: d is no other tensor's gradient) that takes an addend, that op adds
// the sum so far (graph_fold_add; fuse: d is no other input's gradient in this rule), else an add op.
static int accumulate(stg_graph *g, int *gsum, int t, int d, int fwd, int first_new, bool fuse, stg_err *err) {
    if (gsum[t] < 0) {
        gsum[t] = d;
        return 0;
    }
    char nm[STG_NAME_MAX];
    snprintf(nm, sizeof nm, "d.%s", g->t[t].name);
    int r = fuse ? graph_fold_add(g, d, gsum[t], nm, first_new, err) : 0;
    if (r < 0) return -1;
    if (r) {
        gsum[t] = d;
        return 0;
    }
    int in[2] = {gsum[t], d};
    int out[STG_MAX_OUT];
    int id = graph_add_op(g, STG_OP_ADD, in, 2, NULL, STG_PHASE_BACKWARD, nm, g->ops[fwd].loc, out, err);
    if (id < 0) return stg_err_prefix(err, "accumulating the gradient of '%s'", g->t[t].name);
    g->ops[id].fwd = fwd;
    gsum[t] = out[0];
    return 0;
}

// Copies a gradient into a tensor of its own (when the rule's result is a view or is shared).
static int materialize(stg_graph *g, int src, stg_loc loc, const char *name, stg_err *err) {
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.scale.factor = 1.0;
    int out[STG_MAX_OUT];
    int id = graph_add_op(g, STG_OP_SCALE, &src, 1, &a, STG_PHASE_BACKWARD, name, loc, out, err);
    if (id < 0) return -1;
    return out[0];
}

void graph_classify(stg_graph *g) {
    int nf = g->n_fwd_ops;
    for (int i = 0; i < g->nt; i++) {
        stg_tensor *t = &g->t[i];
        if (t->producer >= 0 && t->cls != STG_CLASS_GRAD) t->cls = STG_CLASS_TEMPORARY;
    }
    for (int o = nf; o < g->nops; o++) {
        const stg_op *op = &g->ops[o];
        for (int i = 0; i < op->n_in; i++) {
            int t = op->in[i];
            int root = g->t[t].base >= 0 ? g->t[t].base : t;
            if (g->t[t].producer >= 0 && g->t[t].producer < nf) g->t[t].cls = STG_CLASS_ACTIVATION;
            if (g->t[root].producer >= 0 && g->t[root].producer < nf) g->t[root].cls = STG_CLASS_ACTIVATION;
        }
    }
}

// bf16_grads: each parameter gradient that one product writes whole (a matmul with two operands and
// no addend, the gradient its only output, read by no other backward op) becomes a bf16 output of
// that product (grad_out 2), as autocast rounds dW. Everything else keeps grad_dtype.
static int bf16_gradients(stg_graph *g, const stg_optim_config *oc, int ntf, stg_err *err) {
    if (g->precision != STG_PREC_BF16)
        return stg_errf(err, "bf16 gradients (--grad-dtype bf16) need --precision bf16: in %s the products write %s gradients",
                        stg_precision_name(g->precision), stg_dtype_name(g->grad_dtype));
    if (oc->grad_accum > 1)
        return stg_errf(err, "bf16 gradients (--grad-dtype bf16) cannot combine with gradient accumulation (%d micro-batches): "
                             "the sum over micro-batches needs fp32 gradients",
                        oc->grad_accum);
    for (int p = 0; p < ntf; p++) {
        if (g->t[p].cls != STG_CLASS_PARAM || g->t[p].grad < 0) continue;
        int gt = g->t[p].grad, pr = g->t[gt].producer;
        if (pr < 0 || g->ops[pr].kind != STG_OP_MATMUL || g->ops[pr].n_in != 2 || g->ops[pr].n_out != 1 ||
            g->ops[pr].out[0] != gt || !g->ops[pr].a.matmul.grad_out || g->ops[pr].accum || g->t[gt].base >= 0)
            continue;
        bool read = false; // by a backward op (a sum that is not the final gradient was excluded above)
        for (int o = g->n_fwd_ops; o < g->nops && !read; o++)
            for (int i = 0; i < g->ops[o].n_in && !read; i++) read = g->ops[o].in[i] == gt || g->t[g->ops[o].in[i]].base == gt;
        if (read) continue;
        g->ops[pr].a.matmul.grad_out = 2;
        if (ops_def(g->ops[pr].kind)->infer(g, pr, err) < 0) return stg_err_prefix(err, "bf16 gradient of '%s'", g->t[p].name);
        if (g->t[gt].dtype != STG_BF16) { // a product of operands that are not bf16 keeps its grad_dtype output
            g->ops[pr].a.matmul.grad_out = 1;
            if (ops_def(g->ops[pr].kind)->infer(g, pr, err) < 0) return stg_err_prefix(err, "gradient of '%s'", g->t[p].name);
        }
    }
    g->bf16_grads = 1;
    return 0;
}

// The backward pass from `out` with gradient `seed` (STG_GRAD_SEED for the loss), parameter
// gradients, and (when oc is given) the global norm and AdamW.
static int differentiate(stg_graph *g, int out, int seed, const stg_optim_config *oc, stg_err *err) {
    int *owner = NULL; // ZeRO-1 owners of the parameters (graph_dp_owners)
    if (out < 0) return stg_errf(err, "the model has no loss");
    if (g->nops != g->n_fwd_ops) return stg_errf(err, "autodiff runs once, on a forward graph");
    int accum = oc && oc->grad_accum > 1 ? oc->grad_accum : 0; // micro-batches per optimizer step
    if (oc && oc->grad_accum < 0) return stg_errf(err, "gradient accumulation: %d micro-batches", oc->grad_accum);
    if (accum && oc->in_backward)
        return stg_errf(err, "--optimizer-in-backward and gradient accumulation cannot combine: the optimizer in backward "
                             "updates each parameter and frees its gradient as soon as that gradient is final, while "
                             "accumulation must keep every gradient until the last micro-batch has added to it");
    g->grad_accum = accum; // read by the loss's gradient rule (ops_loss_grad: 1 / accum)
    const int nf = g->nops, ntf = g->nt;
    int *gsum = malloc(sizeof(int) * (size_t)ntf);
    char *needs = calloc((size_t)ntf, 1), *no_decay = calloc((size_t)ntf, 1);
    if (!gsum || !needs || !no_decay) {
        free(gsum);
        free(needs);
        free(no_decay);
        return stg_errf(err, "out of host memory in autodiff");
    }
    int rc = -1;
    int *gsum_uses = NULL; // per tensor: how many tensors have it as their gradient sum
    for (int i = 0; i < ntf; i++) gsum[i] = -1;
    // which tensors depend on a parameter
    for (int i = 0; i < ntf; i++) needs[i] = g->t[i].cls == STG_CLASS_PARAM;
    for (int o = 0; o < nf; o++) {
        const stg_op *op = &g->ops[o];
        const stg_op_def *d = ops_def(op->kind);
        bool any = false;
        for (int i = 0; i < op->n_in; i++) {
            if (!ops_bit(d->no_grad_in, i) && needs[op->in[i]]) any = true;
            if (ops_bit(d->no_decay_in, i) && g->t[op->in[i]].cls == STG_CLASS_PARAM) no_decay[op->in[i]] = 1;
        }
        for (int k = 0; k < op->n_out; k++) needs[op->out[k]] = any;
    }
    if (!needs[out]) {
        stg_errf(err, "the loss does not depend on any parameter");
        goto done;
    }
    gsum[out] = seed;
    for (int o = nf - 1; o >= 0; o--) {
        const stg_op op = g->ops[o];
        const stg_op_def *d = ops_def(op.kind);
        int dout[STG_MAX_OUT] = {-1, -1, -1};
        bool any_out = false;
        for (int k = 0; k < op.n_out; k++) {
            dout[k] = gsum[op.out[k]];
            any_out |= dout[k] != -1;
        }
        if (!any_out) continue;
        bool want[64] = {false};
        int din[64];
        bool any_in = false;
        if (op.n_in > 64) {
            stg_errf_at(err, op.loc, "%s: too many inputs for autodiff", d->name);
            goto done;
        }
        for (int i = 0; i < op.n_in; i++) {
            want[i] = needs[op.in[i]] && !ops_bit(d->no_grad_in, i);
            din[i] = -1;
            any_in |= want[i];
        }
        if (!any_in) continue;
        if (!d->grad) {
            stg_errf_at(err, op.loc, "%s has no gradient rule", d->name);
            goto done;
        }
        if (dout[0] == STG_GRAD_SEED && !d->loss) { // the model's loss made by an op that is not a loss op
            char kinds[256] = "";
            for (int k = 0; k < STG_OP_COUNT; k++)
                if (ops_def((stg_op_kind)k) && ops_def((stg_op_kind)k)->loss)
                    snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%s%s", kinds[0] ? ", " : "", ops_def((stg_op_kind)k)->name);
            stg_errf_at(err, op.loc, "the model's loss '%s' is made by %s; it must be the output of a loss op (%s) itself: "
                        "summing or scaling losses is not supported", g->t[out].name, d->name, kinds);
            goto done;
        }
        int first_new = g->nops;
        if (d->grad(&graph_grad_emit, g, o, dout, want, din, err) < 0) goto done;
        for (int i = 0; i < op.n_in; i++) {
            if (!want[i]) continue;
            if (din[i] < 0) {
                stg_errf_at(err, op.loc, "internal: %s's gradient rule gave no gradient for input %d", d->name, i);
                goto done;
            }
            int uses = 0;
            for (int j = 0; j < op.n_in; j++) uses += want[j] && din[j] == din[i];
            if (accumulate(g, gsum, op.in[i], din[i], o, first_new, uses == 1, err)) goto done;
        }
    }
    // parameters: exactly one final gradient each. A gradient sum is shared when another tensor's
    // gradient is the same tensor: count the uses of each (a search per parameter was quadratic).
    int nparams = 0;
    gsum_uses = calloc((size_t)(g->nt ? g->nt : 1), sizeof(int));
    if (!gsum_uses) {
        stg_errf(err, "out of host memory in autodiff");
        goto done;
    }
    for (int q = 0; q < ntf; q++)
        if (gsum[q] >= 0 && gsum[q] < g->nt) gsum_uses[gsum[q]]++;
    if (accum) { // a gradient another backward op reads must not be a running sum: counted as shared
        for (int o = nf; o < g->nops; o++)
            for (int i = 0; i < g->ops[o].n_in; i++) {
                int t = g->ops[o].in[i];
                gsum_uses[t] += 2;
                if (g->t[t].base >= 0) gsum_uses[g->t[t].base] += 2;
            }
    }
    for (int p = 0; p < ntf; p++) {
        if (g->t[p].cls != STG_CLASS_PARAM) continue;
        nparams++;
        if (gsum[p] < 0) {
            stg_errf_at(err, g->t[p].loc, "parameter '%s' does not affect the loss; remove it or use it", g->t[p].name);
            goto done;
        }
        int gt = gsum[p];
        bool shared = g->t[gt].base >= 0 || g->t[gt].cls == STG_CLASS_GRAD || g->t[gt].producer < nf || gsum_uses[gt] > 1;
        // Accumulation: the op that makes the gradient adds into it after the first micro-batch when
        // its kind can (ops_can_accumulate); otherwise a copy (a scale op, which can) does.
        int pr = g->t[gt].producer, k = -1;
        for (int j = 0; !shared && accum && j < g->ops[pr].n_out; j++)
            if (g->ops[pr].out[j] == gt) k = j;
        bool native = accum && !shared && k >= 0 && ops_can_accumulate(g, pr, k);
        char nm[STG_NAME_MAX + 8];
        snprintf(nm, sizeof nm, "%s.grad", g->t[p].name);
        nm[STG_NAME_MAX - 1] = 0;
        if ((shared || (accum && !native)) && (gt = materialize(g, gt, g->t[p].loc, nm, err)) < 0)
            goto done;
        if (accum) g->ops[native ? pr : g->t[gt].producer].accum |= (uint8_t)(1u << (native ? k : 0));
        if (g->t[gt].dtype != g->grad_dtype) { // a parameter read as an activation (x of rmsnorm, a of add, ...)
            const char *reader = NULL; // the first forward op reading p (norm gains and embedding tables aside)
            for (int o = 0; o < g->n_fwd_ops && !reader; o++)
                for (int i = 0; i < g->ops[o].n_in && !reader; i++)
                    if (g->ops[o].in[i] == p && !ops_bit(ops_def(g->ops[o].kind)->no_decay_in, i)) reader = ops_name(g->ops[o].kind);
            if (!reader) reader = "an op";
            stg_errf_at(err, g->t[p].loc,
                        "parameter '%s' is an activation input of %s: its gradient would be %s, and %s parameters keep %s gradients; "
                        "in bf16 a parameter may only be a weight (of linear, matmul, embedding, pos_embedding, the norms' gains), "
                        "or train in fp32",
                        g->t[p].name, reader,
                        stg_dtype_name(g->t[gt].dtype), stg_precision_name(g->precision), stg_dtype_name(g->grad_dtype));
            goto done;
        }
        snprintf(g->t[gt].name, STG_NAME_MAX, "%s", nm);
        g->t[gt].cls = STG_CLASS_GRAD;
        g->t[gt].param = p;
        g->t[p].grad = gt;
    }
    if (oc && oc->bf16_grads && bf16_gradients(g, oc, ntf, err)) goto done;
    if (!oc) { // a backward pass only
        graph_classify(g);
        rc = 0;
        goto done;
    }
    if (oc->dp_world >= 1 && graph_data_parallel(g, oc, err) < 0) goto done;
    // optimizer: global norm over all gradients, then AdamW per parameter. In backward: no global
    // norm op; each AdamW op clips by the previous step's norm (a persistent scalar, 0 before the
    // first step: no clipping) and writes its gradient's sum of squares into its own slot; slot_norm
    // sums the slots in order into that scalar at the end of the step.
    stg_loc none = {NULL, 0, 0};
    int norm[STG_MAX_OUT];
    int slots = -1;
    if (oc->in_backward) {
        int64_t np = nparams;
        slots = graph_add_tensor(g, "optimizer.grad_sumsq", 1, &np, g->grad_dtype, STG_CLASS_WORKSPACE, none, err);
        if (slots < 0) goto done;
        norm[0] = graph_add_tensor(g, "optimizer.grad_norm", 0, NULL, g->grad_dtype, STG_CLASS_WORKSPACE, none, err);
        if (norm[0] < 0) goto done;
    } else {
        int *grads = malloc(sizeof(int) * (size_t)(nparams ? nparams : 1));
        if (!grads) {
            stg_errf(err, "out of host memory in autodiff");
            goto done;
        }
        int ng = 0;
        for (int p = 0; p < ntf; p++)
            if (g->t[p].cls == STG_CLASS_PARAM) grads[ng++] = g->t[p].grad;
        int nid = graph_add_op(g, STG_OP_GLOBAL_NORM, grads, ng, NULL, STG_PHASE_OPTIMIZER, "grad_norm", none, norm, err);
        free(grads);
        if (nid < 0) goto done;
    }
    g->grad_norm = norm[0];
    int64_t two = 2;
    int sched = graph_add_tensor(g, "optimizer.step_lr", 1, &two, g->grad_dtype, STG_CLASS_WORKSPACE, none, err);
    if (sched < 0) goto done;
    g->sched_state = sched;
    stg_attrs la;
    memset(&la, 0, sizeof la);
    la.lr.lr = oc->lr;
    la.lr.min_lr = oc->min_lr;
    la.lr.warmup = oc->warmup;
    la.lr.cosine_steps = oc->cosine_steps;
    la.lr.kind = oc->lr_kind;
    la.lr.wsd_shape = oc->wsd_shape;
    la.lr.wsd_decay_frac = oc->wsd_decay_frac;
    if (graph_add_op(g, STG_OP_LR_SCHEDULE, &sched, 1, &la, STG_PHASE_OPTIMIZER, "lr_schedule", none, NULL, err) < 0) goto done;
    int slot = 0;
    // ZeRO-1: AdamW state and update only for this rank's parameters (owner: freed at done)
    if (oc->dp_zero >= 1 && oc->dp_world >= 1) {
        if (oc->dp_zero > 1) {
            stg_errf(err, "ZeRO stage %d is not executed by stg (stages 0 and 1 are; memreport accounts for 2 and 3)", oc->dp_zero);
            goto done;
        }
        if (!(owner = stg_malloc(sizeof *owner * (size_t)g->nt, err))) goto done;
        graph_dp_owners(g, oc, owner);
    }
    for (int p = 0; p < ntf; p++) {
        if (g->t[p].cls != STG_CLASS_PARAM) continue;
        if (owner && owner[p] != oc->dp_rank) continue;
        int state[3];
        const char *suffix[3] = {"adam_m", "adam_v", "master"};
        const stg_role role[3] = {STG_ROLE_ADAM_M, STG_ROLE_ADAM_V, STG_ROLE_MASTER};
        int nstate = g->precision == STG_PREC_BF16 ? 3 : 2;
        for (int k = 0; k < nstate; k++) {
            char nm[STG_NAME_MAX + 16];
            snprintf(nm, sizeof nm, "%s.%s", g->t[p].name, suffix[k]);
            nm[STG_NAME_MAX - 1] = 0;
            stg_tensor pt = g->t[p];
            state[k] = graph_add_tensor(g, nm, pt.ndim, pt.shape, g->grad_dtype, STG_CLASS_OPTIMIZER, pt.loc, err);
            if (state[k] < 0) goto done;
            g->t[state[k]].param = p;
            g->t[state[k]].role = role[k];
        }
        stg_attrs a;
        memset(&a, 0, sizeof a);
        a.adamw.beta1 = oc->beta1;
        a.adamw.beta2 = oc->beta2;
        a.adamw.eps = oc->eps;
        a.adamw.weight_decay = (oc->decay_exempt_norms_embeddings && no_decay[p]) ? 0.0 : oc->weight_decay;
        a.adamw.max_norm = oc->max_norm;
        int in[8] = {p, g->t[p].grad, state[0], state[1], norm[0], sched, nstate == 3 ? state[2] : -1, -1};
        int nin = 6 + (nstate == 3);
        if (slots >= 0) {
            a.adamw.slot = ++slot;
            in[nin++] = slots;
        }
        char nm[STG_NAME_MAX + 16];
        snprintf(nm, sizeof nm, "adamw.%s", g->t[p].name);
        nm[STG_NAME_MAX - 1] = 0;
        if (graph_add_op(g, STG_OP_ADAMW, in, nin, &a, STG_PHASE_OPTIMIZER, nm, g->t[p].loc, NULL, err) < 0) goto done;
    }
    for (int p = 0; owner && p < ntf; p++) { // every rank gets each parameter from its owner
        if (g->t[p].cls != STG_CLASS_PARAM) continue;
        stg_attrs a;
        memset(&a, 0, sizeof a);
        a.comm.root = owner[p];
        char nm[STG_NAME_MAX + 16];
        snprintf(nm, sizeof nm, "broadcast.%s", g->t[p].name);
        nm[STG_NAME_MAX - 1] = 0;
        if (graph_add_op(g, STG_OP_BROADCAST, &p, 1, &a, STG_PHASE_OPTIMIZER, nm, g->t[p].loc, NULL, err) < 0) goto done;
    }
    if (slots >= 0) {
        int in[2] = {slots, norm[0]};
        if (graph_add_op(g, STG_OP_SLOT_NORM, in, 2, NULL, STG_PHASE_OPTIMIZER, "grad_norm", none, NULL, err) < 0) goto done;
    }
    graph_classify(g);
    rc = 0;
done:
    free(owner);
    free(gsum_uses);
    free(gsum);
    free(needs);
    free(no_decay);
    return rc;
}

int graph_autodiff(stg_graph *g, const stg_optim_config *oc, stg_err *err) {
    return differentiate(g, g->loss, STG_GRAD_SEED, oc, err);
}

int graph_backward(stg_graph *g, int out, int seed, stg_err *err) {
    if (seed < 0 || seed >= g->nt || out < 0 || out >= g->nt) return stg_errf(err, "graph_backward: bad tensor ids");
    const stg_tensor *a = &g->t[out], *b = &g->t[seed];
    bool same = a->ndim == b->ndim && a->dtype == b->dtype;
    for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
    if (!same) return stg_errf(err, "graph_backward: the seed '%s' must have the shape and dtype of '%s'", b->name, a->name);
    return differentiate(g, out, seed, NULL, err);
}

// Ops placed where they are first needed rather than where they were made: recomputation copies
// (made after their readers) and the kinds marked late (stg_op_def.late).
static bool deferred(const stg_graph *g, int o) { return g->ops[o].recompute_of >= 0 || ops_def(g->ops[o].kind)->late; }

// Creation order is topological by construction (every op reads tensors made before it), except
// for recomputation copies, which are made after their readers: each is placed just before the
// first op that needs what it makes, as are the late kinds (at the end when nothing reads them).
// Ops that update persistent state in place (lr_schedule, adamw) keep their creation order: readers
// after an update see the new value, by design; a late op is placed before the first op that reads
// what it makes, and every in-place update of what it reads (the optimizer) reads that gradient.
static int emit(stg_graph *g, int o, char *state, stg_err *err) {
    if (state[o] == 2) return 0;
    if (state[o] == 1) return stg_errf_at(err, g->ops[o].loc, "%s is part of a cycle", ops_name(g->ops[o].kind));
    state[o] = 1;
    const stg_op *op = &g->ops[o];
    for (int i = 0; i < op->n_in; i++) {
        int pr = g->t[op->in[i]].producer;
        if (pr >= 0 && deferred(g, pr) && emit(g, pr, state, err)) return -1;
    }
    state[o] = 2;
    g->schedule[g->nsched++] = o;
    return 0;
}

bool graph_optim_in_backward(const stg_graph *g) {
    for (int o = 0; o < g->nops; o++)
        if (g->ops[o].kind == STG_OP_ADAMW && g->ops[o].a.adamw.slot > 0) return true;
    return false;
}

static int view_root_of(const stg_graph *g, int t) {
    for (int k = 0; g->t[t].base >= 0 && k <= g->nt; k++) t = g->t[t].base;
    return t;
}

// The optimizer in backward: every adamw op (with a slot) right after the last of the other ops
// that writes one of its inputs (its gradient) or reads a tensor it updates in place (the parameter
// and its views, the moments, the master weight), in creation order among those placed at one
// point; lr_schedule just before the first adamw op; slot_norm last.
static int place_optimizer(stg_graph *g, stg_err *err) {
    int n = g->nsched;
    int *base = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *posb = malloc(sizeof(int) * (size_t)(g->nops ? g->nops : 1));
    int *last_read = malloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
    int *ready = malloc(sizeof(int) * (size_t)(g->nops ? g->nops : 1));
    int *adam = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int rc = -1;
    if (!base || !posb || !last_read || !ready || !adam) {
        stg_errf(err, "out of host memory in the scheduler");
        goto out;
    }
    int nb = 0, na = 0, lr = -1, fin = -1;
    for (int s = 0; s < n; s++) {
        int o = g->schedule[s];
        const stg_op *op = &g->ops[o];
        posb[o] = -1;
        if (op->kind == STG_OP_ADAMW && op->a.adamw.slot > 0)
            adam[na++] = o;
        else if (op->kind == STG_OP_LR_SCHEDULE && lr < 0)
            lr = o;
        else if (op->kind == STG_OP_SLOT_NORM && fin < 0)
            fin = o;
        else {
            posb[o] = nb;
            base[nb++] = o;
        }
    }
    for (int t = 0; t < g->nt; t++) last_read[t] = -1;
    for (int j = 0; j < nb; j++) {
        const stg_op *op = &g->ops[base[j]];
        for (int i = 0; i < op->n_in; i++) last_read[view_root_of(g, op->in[i])] = j;
    }
    for (int k = 0; k < na; k++) {
        const stg_op *op = &g->ops[adam[k]];
        const stg_op_def *d = ops_def(op->kind);
        int r = -1;
        for (int i = 0; i < op->n_in; i++) {
            int t = op->in[i], pr = g->t[t].producer;
            if (pr >= 0) {
                if (posb[pr] < 0) {
                    stg_errf_at(err, op->loc, "adamw reads '%s', which another optimizer op writes", g->t[t].name);
                    goto out;
                }
                if (posb[pr] > r) r = posb[pr];
            }
            int root = view_root_of(g, t);
            if (ops_bit(d->mutates_in, i) && last_read[root] > r) r = last_read[root];
        }
        ready[k] = r;
    }
    int s = 0;
    for (int j = -1; j < nb; j++) {
        if (j >= 0) g->schedule[s++] = base[j];
        for (int k = 0; k < na; k++) {
            if (ready[k] != j) continue;
            if (lr >= 0) {
                g->schedule[s++] = lr;
                lr = -1;
            }
            g->schedule[s++] = adam[k];
        }
    }
    if (lr >= 0) g->schedule[s++] = lr;
    if (fin >= 0) g->schedule[s++] = fin;
    if (s != n) {
        stg_errf(err, "internal: placing the optimizer in backward kept %d of %d ops", s, n);
        goto out;
    }
    rc = 0;
out:
    free(base);
    free(posb);
    free(last_read);
    free(ready);
    free(adam);
    return rc;
}

int graph_schedule(stg_graph *g, stg_err *err) {
    free(g->schedule);
    g->schedule = malloc(sizeof(int) * (size_t)(g->nops ? g->nops : 1));
    char *state = calloc((size_t)(g->nops ? g->nops : 1), 1);
    int *pos = malloc(sizeof(int) * (size_t)(g->nops ? g->nops : 1));
    int rc = -1;
    if (!g->schedule || !state || !pos) {
        stg_errf(err, "out of host memory in the scheduler");
        goto out;
    }
    g->nsched = 0;
    for (int o = 0; o < g->nops; o++)
        if (!deferred(g, o) && emit(g, o, state, err)) goto out;
    for (int o = 0; o < g->nops; o++) // late ops nothing reads (a gradient with no optimizer after it)
        if (g->ops[o].recompute_of < 0 && ops_def(g->ops[o].kind)->late && emit(g, o, state, err)) goto out;
    if (graph_optim_in_backward(g) && place_optimizer(g, err)) goto out;
    for (int s = 0; s < g->nsched; s++) pos[g->schedule[s]] = s;
    for (int o = 0; o < g->nops; o++) {
        const stg_op *op = &g->ops[o];
        if (state[o] != 2) continue; // a copy nothing reads
        for (int i = 0; i < op->n_in; i++) {
            int t = op->in[i], pr = g->t[t].producer;
            if (pr >= 0 && (state[pr] != 2 || pos[pr] >= pos[o])) {
                stg_errf_at(err, op->loc, "%s reads '%s' before it is written (a cycle)", ops_name(op->kind), g->t[t].name);
                goto out;
            }
            if (pr < 0 && !stg_class_persistent(g->t[t].cls)) {
                stg_errf_at(err, op->loc, "%s reads '%s', which nothing writes", ops_name(op->kind), g->t[t].name);
                goto out;
            }
        }
    }
    rc = 0;
out:
    free(state);
    free(pos);
    return rc;
}

int graph_validate(const stg_graph *g, stg_err *err) {
    int *writer = malloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
    if (!writer) return stg_errf(err, "out of host memory");
    for (int i = 0; i < g->nt; i++) writer[i] = -1;
    int rc = -1;
    for (int o = 0; o < g->nops; o++) {
        const stg_op *op = &g->ops[o];
        const stg_op_def *d = ops_def(op->kind);
        if (!d) {
            stg_errf(err, "op %d has an unknown kind", o);
            goto out;
        }
        if (op->n_out != ops_n_out(d, op->n_in) || op->n_in < d->min_in || (d->max_in >= 0 && op->n_in > d->max_in)) {
            stg_errf(err, "op %d (%s) has the wrong number of inputs or outputs", o, d->name);
            goto out;
        }
        for (int k = 0; k < op->n_out; k++) {
            int t = op->out[k];
            if (writer[t] >= 0) {
                stg_errf(err, "tensor '%s' is written by ops %d and %d (not SSA)", g->t[t].name, writer[t], o);
                goto out;
            }
            writer[t] = o;
            if (g->t[t].producer != o) {
                stg_errf(err, "tensor '%s' does not record op %d as its producer", g->t[t].name, o);
                goto out;
            }
        }
    }
    for (int t = 0; t < g->nt; t++) {
        const stg_tensor *x = &g->t[t];
        if (writer[t] < 0 && !stg_class_persistent(x->cls)) {
            stg_errf(err, "tensor '%s' (%s) is never written", x->name, stg_class_name(x->cls));
            goto out;
        }
        for (int k = 0; k < x->ndim; k++)
            if (x->shape[k] <= 0) {
                stg_errf(err, "tensor '%s' has a non-positive size", x->name);
                goto out;
            }
        if (x->cls == STG_CLASS_PARAM && g->nops > g->n_fwd_ops) {
            int gr = x->grad;
            if (gr < 0 || g->t[gr].cls != STG_CLASS_GRAD || g->t[gr].param != t) {
                stg_errf(err, "parameter '%s' does not have exactly one gradient", x->name);
                goto out;
            }
        }
        if (x->cls == STG_CLASS_GRAD) {
            int p = x->param;
            if (p < 0 || g->t[p].grad != t) {
                stg_errf(err, "gradient '%s' is not the gradient of its parameter", x->name);
                goto out;
            }
        }
    }
    rc = 0;
out:
    free(writer);
    return rc;
}

int graph_write_dot(const stg_graph *g, const char *path, stg_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return stg_errf(err, "%s: cannot write: %s", path, strerror(errno));
    static const char *colors[] = {"#dbeafe", "#fee2e2", "#dcfce7"};
    // The model's name is any YAML string: quotes and backslashes escaped, line breaks as \n, so
    // the ID stays one valid DOT string.
    fprintf(f, "digraph \"");
    for (const char *c = g->name; *c; c++) {
        if (*c == '"' || *c == '\\') fputc('\\', f);
        if (*c == '\n' || *c == '\r') fputs("\\n", f);
        else fputc(*c, f);
    }
    fprintf(f, "\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
    for (int o = 0; o < g->nops; o++) {
        const stg_op *op = &g->ops[o];
        fprintf(f, "  op%d [shape=box, style=filled, fillcolor=\"%s\", label=\"%s\"];\n", o, colors[op->phase], ops_name(op->kind));
    }
    for (int t = 0; t < g->nt; t++) {
        const stg_tensor *x = &g->t[t];
        char sb[128];
        fprintf(f, "  t%d [shape=%s, label=\"%s\\n%s %s\"];\n", t, x->cls == STG_CLASS_PARAM ? "note" : "ellipse", x->name,
                stg_shape_str(x, sb, sizeof sb), stg_dtype_name(x->dtype));
    }
    for (int o = 0; o < g->nops; o++) {
        const stg_op *op = &g->ops[o];
        for (int i = 0; i < op->n_in; i++) fprintf(f, "  t%d -> op%d;\n", op->in[i], o);
        for (int k = 0; k < op->n_out; k++) fprintf(f, "  op%d -> t%d;\n", o, op->out[k]);
    }
    fprintf(f, "}\n");
    if (ferror(f)) {
        fclose(f);
        return stg_errf(err, "%s: write failed", path);
    }
    if (fclose(f) != 0) return stg_errf(err, "%s: close failed: %s", path, strerror(errno));
    return 0;
}
