#include "planner/infer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"

stg_infer_opts stg_infer_defaults(void) {
    stg_infer_opts o;
    memset(&o, 0, sizeof o);
    o.precision = STG_PREC_FP32;
    o.batch = 1;
    o.prompt = 1;
    o.sample.temperature = 0.0;
    o.sample.top_p = 1.0;
    return o;
}

void stg_infer_free(stg_infer *s) {
    if (!s) return;
    for (int k = 0; k < 2; k++) {
        plan_free(s->p[k]);
        graph_free(s->g[k]);
    }
    free(s);
}

static int load(const stg_infer_opts *o, const char *const *sets, int nsets, stg_graph **g, stg_err *err) {
    stg_load_opts lo = {o->precision, sets, nsets};
    const char *name = o->model_path ? o->model_path : "model.yaml";
    return o->text ? graph_load_string(o->text, o->text_len, name, &lo, g, err) : graph_load(o->model_path, &lo, g, err);
}

// Every parameter of a has b's name and shape, in the same order: sampling loads the trained values.
static int same_params(const stg_graph *a, const stg_graph *b, stg_err *err) {
    int j = 0;
    for (int i = 0; i < a->nt; i++) {
        const stg_tensor *x = &a->t[i];
        if (x->cls != STG_CLASS_PARAM) continue;
        while (j < b->nt && b->t[j].cls != STG_CLASS_PARAM) j++;
        if (j == b->nt || strcmp(b->t[j].name, x->name) != 0 || !stg_same_shape(x, &b->t[j])) {
            char s1[128];
            return stg_errf(err, "parameter '%s' %s changes with the batch or ctx dims; sampling runs the model at other "
                            "batch and ctx sizes with the trained parameters", x->name, stg_shape_str(x, s1, sizeof s1));
        }
        j++;
    }
    return 0;
}

static int passes(const stg_infer_opts *o, stg_graph *g, stg_err *err) {
    graph_classify(g);
    if (!o->ungrouped && graph_group_matmuls(g, err) < 0) return -1;
    return graph_schedule(g, err) || graph_validate(g, err) ? -1 : 0;
}

static int build(const stg_infer_opts *o, stg_infer *s, stg_err *err) {
    stg_graph *g0 = NULL, *f = NULL;
    const char **sets = calloc((size_t)o->nsets + 4, sizeof *sets);
    int rc = -1;
    if (!sets) return stg_errf(err, "out of host memory");
    if (load(o, o->sets, o->nsets, &g0, err)) goto out;
    bool has_b, has_c;
    graph_role_value(g0, STG_DIM_BATCH, &has_b);
    s->ctx = graph_role_value(g0, STG_DIM_CTX, &has_c);
    if (!has_b || !has_c) {
        stg_errf(err, "%s; sampling sets the batch (sequences) and the ctx (the cache's positions)",
                 graph_role_missing(has_b ? STG_DIM_CTX : STG_DIM_BATCH));
        goto out;
    }
    s->batch = o->batch;
    s->prompt = o->prompt;
    if (o->batch < 1 || o->prompt < 1 || o->prompt > s->ctx) {
        stg_errf(err, "a prompt of %lld tokens for %lld sequences does not fit a context of %lld (ctx)", (long long)o->prompt,
                 (long long)o->batch, (long long)s->ctx);
        goto out;
    }
    int n = 0;
    for (int i = 0; i < o->nsets; i++) sets[n++] = o->sets[i];
    if (graph_option(g0, "attention")) sets[n++] = "attention=flash"; // the cached form is of the fused op
    if (graph_option(g0, "fused_head")) sets[n++] = "fused_head=off"; // the sampler reads the logits
    char bset[96], cset[96];
    snprintf(bset, sizeof bset, "%s=%lld", graph_role_name(g0, STG_DIM_BATCH), (long long)o->batch);
    sets[n++] = bset;
    sets[n++] = cset;
    for (int k = 0; k < 2; k++) {
        snprintf(cset, sizeof cset, "%s=%lld", graph_role_name(g0, STG_DIM_CTX), (long long)(k == STG_INFER_PREFILL ? o->prompt : 1));
        if (load(o, sets, n, &f, err) || same_params(g0, f, err)) goto out;
        graph_infer_opts io = {k == STG_INFER_PREFILL ? GRAPH_INFER_PREFILL : GRAPH_INFER_DECODE, s->ctx, o->sample};
        if (graph_infer(f, &io, &s->g[k], &s->info[k], err) || passes(o, s->g[k], err)) goto out;
        graph_free(f);
        f = NULL;
        if (!o->no_plan && plan_build(s->g[k], NULL, &s->p[k], err)) goto out;
    }
    rc = 0;
out:
    graph_free(g0);
    graph_free(f);
    free(sets);
    return rc;
}

int stg_infer_build(const stg_infer_opts *o, stg_infer **out, stg_err *err) {
    *out = NULL;
    stg_infer *s = stg_calloc(1, sizeof *s, err);
    if (!s) return -1;
    if (build(o, s, err)) {
        // the loader words its own errors with the file; the derivation does not know it
        if (o->model_path && !strstr(err->msg, o->model_path)) stg_err_prefix(err, "%s", o->model_path);
        stg_infer_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

// ---- memory ---------------------------------------------------------------------------------------

static void term(stg_infer_mem *m, const char *name, int64_t plan, int64_t formula, const char *how) {
    if (m->nterms >= STG_INFER_TERMS) return;
    stg_infer_term *t = &m->t[m->nterms++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->plan = plan;
    t->formula = formula;
    snprintf(t->how, sizeof t->how, "%s", how);
}

static int64_t dim(const stg_graph *g, const char *n, bool *ok) {
    bool f;
    int64_t v = graph_dim(g, n, &f);
    if (!f || v <= 0) *ok = false;
    return v;
}

static int64_t role(const stg_graph *g, stg_dim_role r, bool *ok) {
    bool f;
    int64_t v = graph_role_value(g, r, &f);
    if (!f || v <= 0) *ok = false;
    return v;
}

int stg_infer_memory(const stg_infer *s, stg_infer_mem *m, stg_err *err) {
    memset(m, 0, sizeof *m);
    const stg_plan *pp = s->p[STG_INFER_PREFILL], *pd = s->p[STG_INFER_DECODE];
    const stg_graph *gp = s->g[STG_INFER_PREFILL];
    const graph_infer_info *ip = &s->info[STG_INFER_PREFILL];
    if (!pp || !pd) return stg_errf(err, "inference memory: the graphs were built without plans");
    int64_t kv = 0, state = 0;
    for (int i = 0; i < 2 * ip->n_layers; i++) kv += pp->size[ip->kv0 + i];
    state = pp->size[ip->token] + pp->size[ip->pos] + pp->size[ip->ids];
    int64_t prompt = pp->size[ip->tokens];
    int64_t weights = pp->by_class[STG_CLASS_PARAM];
    // the closed forms of the CS336 LM (planner/formula.h's notation)
    bool ok = true;
    int64_t V = role(gp, STG_DIM_VOCAB, &ok), D = dim(gp, "d_model", &ok), F = dim(gp, "d_ff", &ok), L = dim(gp, "n_layers", &ok),
            H = dim(gp, "n_heads", &ok);
    bool fkv;
    int64_t Hkv = graph_dim(gp, "n_kv_heads", &fkv);
    if (!fkv) Hkv = H;
    int64_t a = gp->precision == STG_PREC_BF16 ? 2 : gp->precision == STG_PREC_FP64 ? 8 : 4, st = gp->precision == STG_PREC_FP64 ? 8 : 4;
    int64_t B = s->batch, C = s->ctx, Pr = s->prompt, Dh = ok ? D / H : 0;
    if (!ok) snprintf(m->formula_note, sizeof m->formula_note, "no formula: the model lacks the CS336 dims (vocab, d_model, d_ff, n_layers, n_heads)");
    char how[200];
    int64_t P = 2 * V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D;
    snprintf(how, sizeof how, "%lld B x (2VD + L(4D^2 + 3DF + 2D) + D) = %lld x %lld", (long long)a, (long long)a, (long long)P);
    term(m, "weights", weights, ok ? a * P : -1, how);
    snprintf(how, sizeof how, "2 (k, v) x B x L x C x Hkv x Dh x %lld = 2 x %lld x %lld x %lld x %lld x %lld x %lld", (long long)a,
             (long long)B, (long long)L, (long long)C, (long long)Hkv, (long long)Dh, (long long)a);
    term(m, "KV cache", kv, ok ? 2 * B * L * C * Hkv * Dh * a : -1, how);
    snprintf(how, sizeof how, "token B x 4 + position 4 + ids B x C x 4 (each aligned to 256 B)");
    int64_t al = 256, fs = ((B * 4 + al - 1) / al + (4 + al - 1) / al + (B * C * 4 + al - 1) / al) * al;
    term(m, "sampler state", state, fs, how);
    snprintf(how, sizeof how, "B x P x 4 = %lld x %lld x 4", (long long)B, (long long)Pr);
    term(m, "prompt tokens", prompt, B * Pr * 4, how);
    // the working sets of a forward pass that saves nothing (the planner's forward plan): attention
    // 5ND a + BHS s + N s (x, q, k, v, the attention output; its log-sum-exp; an rstd), the MLP
    // (2ND + 2NF) a + N s (x, the norm's output, the w1 and w3 outputs, swiglu writing over the
    // first), the head ND a + N s + NVa (the norm's output and the logits). Decode: N = B, no lse.
    int64_t N = B * Pr;
    int64_t att = 5 * N * D * a + B * H * Pr * st + N * st, mlp = (2 * N * D + 2 * N * F) * a + N * st, head = N * D * a + N * st + N * V * a;
    int64_t fpre = att > mlp ? att : mlp;
    if (head > fpre) fpre = head;
    snprintf(how, sizeof how, "max(attention 5ND a + BHP s + N s, MLP (2ND + 2NF) a + N s, head ND a + N s + NVa), N = B x P = %lld",
             (long long)N);
    term(m, "prefill temporaries", pp->arena_bytes, ok ? fpre : -1, how);
    int64_t Nd = B, attd = 5 * Nd * D * a + Nd * st, mlpd = (2 * Nd * D + 2 * Nd * F) * a + Nd * st, headd = Nd * D * a + Nd * st + Nd * V * a;
    int64_t fdec = attd > mlpd ? attd : mlpd;
    if (headd > fdec) fdec = headd;
    snprintf(how, sizeof how, "the same with N = B = %lld and no lse", (long long)Nd);
    term(m, "decode temporaries", pd->arena_bytes, ok ? fdec : -1, how);
    m->persistent = pp->persistent_bytes;
    m->arena = pp->arena_bytes > pd->arena_bytes ? pp->arena_bytes : pd->arena_bytes;
    m->total = m->persistent + m->arena;
    m->formula_total = ok ? a * P + 2 * B * L * C * Hkv * Dh * a + fs + B * Pr * 4 + (fpre > fdec ? fpre : fdec) : -1;
    return 0;
}

// Total bytes at (batch, prompt, ctx), or -1 when it cannot be built. `ctx` in the --set is the ctx
// role (the loader gives it to the role's dim, whatever the model calls it).
static int64_t total_at(const stg_infer_opts *o, int64_t batch, int64_t prompt, int64_t ctx) {
    const char **sets = calloc((size_t)o->nsets + 1, sizeof *sets);
    if (!sets) return -1;
    char cset[48];
    snprintf(cset, sizeof cset, "%s=%lld", graph_role_key(STG_DIM_CTX), (long long)ctx);
    for (int i = 0; i < o->nsets; i++) sets[i] = o->sets[i];
    sets[o->nsets] = cset;
    stg_infer_opts q = *o;
    q.sets = sets;
    q.nsets = o->nsets + 1;
    q.batch = batch;
    q.prompt = prompt;
    q.no_plan = false;
    stg_err err;
    stg_infer *s;
    int64_t t = -1;
    stg_infer_mem m;
    if (!stg_infer_build(&q, &s, &err)) {
        if (!stg_infer_memory(s, &m, &err)) t = m.total;
        stg_infer_free(s);
    }
    free(sets);
    return t;
}

// The largest x in [1, hi] with fits(x) (monotone), 0 when not even 1 fits.
static int64_t largest(const stg_infer_opts *o, bool by_batch, int64_t fixed, int64_t prompt, int64_t capacity, int64_t hi) {
    int64_t lo = 0, probe = 1;
    for (;;) { // doubling until it no longer fits, then bisection
        int64_t t = by_batch ? total_at(o, probe, prompt, fixed) : total_at(o, fixed, prompt < probe ? prompt : probe, probe);
        if (t < 0 || t > capacity) {
            hi = probe - 1;
            break;
        }
        lo = probe;
        if (probe >= hi) return lo;
        probe = probe * 2 > hi ? hi : probe * 2;
    }
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        int64_t t = by_batch ? total_at(o, mid, prompt, fixed) : total_at(o, fixed, prompt < mid ? prompt : mid, mid);
        if (t >= 0 && t <= capacity) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int stg_infer_fit(const stg_infer_opts *o, int64_t ctx, int64_t capacity, int64_t *max_batch, int64_t *max_ctx, stg_err *err) {
    if (capacity <= 0) return stg_errf(err, "the device capacity must be positive");
    int64_t prompt = o->prompt < ctx ? o->prompt : ctx;
    *max_batch = largest(o, true, ctx, prompt, capacity, INT64_C(1) << 20);
    *max_ctx = largest(o, false, o->batch, o->prompt, capacity, INT64_C(1) << 24);
    return 0;
}

// ---- the report -----------------------------------------------------------------------------------

static double mib(int64_t b) { return (double)b / (1 << 20); }

// s as a JSON string (quotes, backslashes and control characters escaped).
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

int stg_infer_report(FILE *f, bool json, const stg_infer_opts *o, const stg_infer *s, const stg_infer_mem *m, int64_t measured,
                     int64_t capacity, stg_err *err) {
    int64_t max_b = 0, max_c = 0;
    if (capacity > 0 && stg_infer_fit(o, s->ctx, capacity, &max_b, &max_c, err)) return -1;
    const stg_graph *g = s->g[STG_INFER_DECODE];
    if (json) {
        fprintf(f, "{\"mode\": \"sample\", \"model\": ");
        json_str(f, g->name);
        fprintf(f, ", \"precision\": \"%s\", \"batch\": %lld, \"prompt\": %lld, \"ctx\": %lld, \"terms\": [", stg_precision_name(g->precision),
                (long long)s->batch, (long long)s->prompt, (long long)s->ctx);
        for (int i = 0; i < m->nterms; i++)
            fprintf(f, "%s{\"name\": \"%s\", \"plan_bytes\": %lld, \"formula_bytes\": %lld}", i ? ", " : "", m->t[i].name,
                    (long long)m->t[i].plan, (long long)m->t[i].formula);
        fprintf(f, "], \"persistent_bytes\": %lld, \"arena_bytes\": %lld, \"total_bytes\": %lld, \"formula_total_bytes\": %lld, "
                   "\"measured_bytes\": %lld",
                (long long)m->persistent, (long long)m->arena, (long long)m->total, (long long)m->formula_total, (long long)measured);
        if (capacity > 0)
            fprintf(f, ", \"capacity_bytes\": %lld, \"max_batch\": %lld, \"max_ctx\": %lld", (long long)capacity, (long long)max_b,
                    (long long)max_c);
        fprintf(f, "}\n");
    } else {
        fprintf(f, "stg memreport --mode sample: %s, %s, batch %lld, prompt %lld tokens, context %lld (the KV cache's positions)\n",
                g->name, stg_precision_name(g->precision), (long long)s->batch, (long long)s->prompt, (long long)s->ctx);
        fprintf(f, "  %-22s %14s %14s  %s\n", "term", "plan MiB", "formula MiB", "formula");
        for (int i = 0; i < m->nterms; i++) {
            const stg_infer_term *t = &m->t[i];
            char fb[32] = "-";
            if (t->formula >= 0) snprintf(fb, sizeof fb, "%.2f", mib(t->formula));
            fprintf(f, "  %-22s %14.2f %14s  %s\n", t->name, mib(t->plan), fb, t->formula >= 0 ? t->how : "");
        }
        fprintf(f, "  persistent (weights, cache, state, prompt; one copy shared by prefill and decode): %.2f MiB\n", mib(m->persistent));
        fprintf(f, "  arena (the larger of prefill's %.2f and decode's %.2f MiB, shared): %.2f MiB\n",
                mib(s->p[STG_INFER_PREFILL]->arena_bytes), mib(s->p[STG_INFER_DECODE]->arena_bytes), mib(m->arena));
        fprintf(f, "  total (plan): %.2f MiB", mib(m->total));
        if (m->formula_total >= 0) fprintf(f, "; formula %.2f MiB (%+.1f%%)", mib(m->formula_total),
                                           100.0 * (double)(m->total - m->formula_total) / (double)m->formula_total);
        fprintf(f, "\n");
        if (m->formula_note[0]) fprintf(f, "  %s\n", m->formula_note);
        if (measured >= 0)
            fprintf(f, "  measured on the device: %.2f MiB (%+.2f%% against the plan; the backends' workspaces are beside it)\n", mib(measured),
                    100.0 * (double)(measured - m->total) / (double)m->total);
        if (capacity > 0) {
            fprintf(f, "  fits %.2f GiB: batch up to %lld at context %lld (prompt %lld)", (double)capacity / (1 << 30), (long long)max_b,
                    (long long)s->ctx, (long long)(o->prompt < s->ctx ? o->prompt : s->ctx));
            fprintf(f, "; context up to %lld at batch %lld\n", (long long)max_c, (long long)o->batch);
        }
    }
    if (ferror(f)) return stg_errf(err, "writing the report failed");
    return 0;
}
