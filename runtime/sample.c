#include "runtime/sample.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/ckpt.h"
#include "runtime/tokenizer/tokenizer.h"

struct rt_sampler {
    const stg_infer *inf;
    rt_exec *e[2];     // by STG_INFER_*
    int first;         // the executor that owns the shared memory (the one with the larger arena)
    bool own_params;   // the parameters are the sampler's (not another executor's)
    int64_t len;       // tokens in each sequence (prompt and drawn); 0 before the prefill
    int64_t submitted; // steps submitted and not collected
};

int rt_sampler_new(const stg_infer *inf, rt_backend *bp, rt_backend *bd, const rt_sampler_opts *o, rt_sampler **out, stg_err *err) {
    *out = NULL;
    if (!inf->p[0] || !inf->p[1]) return stg_errf(err, "sampler: the inference graphs have no plans");
    rt_sampler *s = stg_calloc(1, sizeof *s, err);
    if (!s) return -1;
    s->inf = inf;
    s->own_params = !o->params;
    s->first = inf->p[STG_INFER_DECODE]->arena_bytes > inf->p[STG_INFER_PREFILL]->arena_bytes ? STG_INFER_DECODE : STG_INFER_PREFILL;
    rt_backend *b[2] = {bp, bd};
    for (int j = 0; j < 2; j++) {
        int k = j == 0 ? s->first : 1 - s->first;
        // One stream: the prefill and decode steps are each one chain of ops, with nothing to overlap. On
        // several, the executor put the views of k and v on idle streams, and the capture carried every earlier
        // layer's q/k/v product into each layer's attention through their events: a cross-stream wait of
        // ~1.8 us a layer in the graph (the 2.7B decode step at batch 1: 2.311 -> 2.240 ms on one stream, H200,
        // docs/perf/LOG.md, twenty-eighth session).
        rt_exec_opts eo = {.separate = o->separate, .poison = o->poison, .graph = k == STG_INFER_DECODE && o->graph,
                           .share = j == 0 ? o->params : s->e[s->first], .streams = 1};
        if (rt_exec_new(inf->g[k], inf->p[k], b[k], &eo, &s->e[k], err)) {
            stg_err_prefix(err, "sampler, the %s graph", k == STG_INFER_PREFILL ? "prefill" : "decode");
            rt_sampler_free(s);
            return -1;
        }
    }
    *out = s;
    return 0;
}

void rt_sampler_free(rt_sampler *s) {
    if (!s) return;
    rt_exec_free(s->e[1 - s->first]); // it may use the first one's memory
    rt_exec_free(s->e[s->first]);
    free(s);
}

rt_exec *rt_sampler_exec(rt_sampler *s, int which) { return which == 0 || which == 1 ? s->e[which] : NULL; }

int64_t rt_sampler_allocated(const rt_sampler *s) { return rt_exec_allocated_bytes(s->e[0]) + rt_exec_allocated_bytes(s->e[1]); }

int64_t rt_sampler_measured(const rt_sampler *s) {
    int64_t a = rt_exec_measured_bytes(s->e[0]), b = rt_exec_measured_bytes(s->e[1]);
    return a < 0 || b < 0 ? -1 : a + b;
}

int rt_sampler_init(rt_sampler *s, uint64_t seed, bool fast, stg_err *err) {
    if (!s->own_params) return stg_errf(err, "sampler: the parameters are another executor's");
    rt_exec *e = s->e[s->first];
    return fast ? rt_exec_init_params_fast(e, err) : rt_exec_init_params(e, seed, err);
}

int rt_sampler_load(rt_sampler *s, const char *path, stg_err *err) {
    if (!s->own_params) return stg_errf(err, "sampler: the parameters are another executor's");
    return rt_params_load(s->e[s->first], path, err);
}

static int drain(rt_sampler *s, stg_err *err) {
    while (s->submitted > 0) {
        if (rt_exec_collect(s->e[STG_INFER_DECODE], NULL, err)) return -1;
        s->submitted--;
    }
    return 0;
}

int rt_sampler_prefill(rt_sampler *s, const int32_t *prompt, stg_err *err) {
    const stg_infer *inf = s->inf;
    const graph_infer_info *in = &inf->info[STG_INFER_PREFILL];
    rt_exec *e = s->e[STG_INFER_PREFILL];
    int64_t B = inf->batch, P = inf->prompt, C = inf->ctx;
    for (int64_t i = 0; i < P; i++)
        if (prompt[i] < 0 || prompt[i] >= in->vocab)
            return stg_errf(err, "prompt token %lld is %d; the model's ids are in [0, %lld)", (long long)i, prompt[i], (long long)in->vocab);
    if (drain(s, err)) return -1;
    int32_t *tok = stg_malloc(sizeof(int32_t) * (size_t)(B * P), err), *ids = stg_calloc((size_t)(B * C), sizeof(int32_t), err);
    int32_t zero = 0;
    int rc = -1;
    if (!tok || !ids) goto out;
    for (int64_t b = 0; b < B; b++) {
        memcpy(tok + b * P, prompt, sizeof(int32_t) * (size_t)P);
        memcpy(ids + b * C, prompt, sizeof(int32_t) * (size_t)P);
    }
    if (rt_exec_write(e, in->tokens, tok, sizeof(int32_t) * (size_t)(B * P), err) || rt_exec_write(e, in->pos, &zero, sizeof zero, err) ||
        rt_exec_write(e, in->ids, ids, sizeof(int32_t) * (size_t)(B * C), err) || rt_exec_run(e, RT_PHASE_FORWARD, err))
        goto out;
    s->len = P + 1;
    rc = 0;
out:
    free(tok);
    free(ids);
    return rc;
}

int64_t rt_sampler_room(const rt_sampler *s) { return s->len == 0 ? 0 : s->inf->ctx - s->len - s->submitted; }
int64_t rt_sampler_length(const rt_sampler *s) { return s->len; }

int rt_sampler_submit(rt_sampler *s, stg_err *err) {
    if (s->len == 0) return stg_errf(err, "sampler: a decode step before the prefill");
    if (rt_sampler_room(s) <= 0)
        return stg_errf(err, "sampler: the context of %lld tokens is full", (long long)s->inf->ctx);
    if (s->submitted == 2 && rt_sampler_collect(s, err)) return -1;
    if (rt_exec_submit(s->e[STG_INFER_DECODE], RT_PHASE_FORWARD, err)) return -1;
    s->submitted++;
    return 0;
}

int rt_sampler_collect(rt_sampler *s, stg_err *err) {
    if (s->submitted == 0) return stg_errf(err, "sampler: no decode step to collect");
    if (rt_exec_collect(s->e[STG_INFER_DECODE], NULL, err)) return -1;
    s->submitted--;
    s->len++;
    return 0;
}

int rt_sampler_step(rt_sampler *s, stg_err *err) {
    if (rt_sampler_submit(s, err)) return -1;
    while (s->submitted > 0)
        if (rt_sampler_collect(s, err)) return -1;
    return 0;
}

int rt_sampler_last(rt_sampler *s, int32_t *tokens, stg_err *err) {
    while (s->submitted > 0)
        if (rt_sampler_collect(s, err)) return -1;
    const graph_infer_info *in = &s->inf->info[STG_INFER_DECODE];
    return rt_exec_read(s->e[STG_INFER_DECODE], in->token, tokens, sizeof(int32_t) * (size_t)s->inf->batch, err);
}

int rt_sampler_ids(rt_sampler *s, int32_t *ids, stg_err *err) {
    while (s->submitted > 0)
        if (rt_sampler_collect(s, err)) return -1;
    const graph_infer_info *in = &s->inf->info[STG_INFER_DECODE];
    return rt_exec_read(s->e[STG_INFER_DECODE], in->ids, ids, sizeof(int32_t) * (size_t)(s->inf->batch * s->inf->ctx), err);
}

// ---- text ----------------------------------------------------------------------------------------

int rt_text_add(rt_text *s, const void *p, size_t n) {
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->n + n + 1) cap *= 2;
        uint8_t *q = realloc(s->p, cap);
        if (!q) return -1;
        s->p = q;
        s->cap = cap;
    }
    if (n) memcpy(s->p + s->n, p, n);
    s->n += n;
    s->p[s->n] = 0;
    return 0;
}

int rt_text_token(const rt_tok *tok, int64_t vocab, int32_t id, rt_text *s) {
    if (tok) {
        size_t len = 0;
        const uint8_t *p = id >= 0 && (uint32_t)id < rt_tok_vocab_size(tok) ? rt_tok_token_bytes(tok, (uint32_t)id, &len) : NULL;
        if (p) return rt_text_add(s, p, len);
    } else if (vocab <= 256 && id >= 0 && id < 256) {
        uint8_t c = (uint8_t)id;
        return rt_text_add(s, &c, 1);
    }
    char b[24];
    int k = snprintf(b, sizeof b, "%s%d", s->n ? " " : "", id);
    return rt_text_add(s, b, (size_t)k);
}

int rt_json_string(FILE *f, const uint8_t *s, size_t n) {
    uint8_t *u = malloc(3 * n + 1);
    if (!u) return -1;
    size_t held = 0, m = rt_tok_utf8_sanitize(s, n, 1, u, &held);
    int bad = fputc('"', f) == EOF;
    for (size_t i = 0; i < m && !bad; i++) {
        uint8_t c = u[i];
        if (c == '"' || c == '\\') bad = fprintf(f, "\\%c", c) < 0;
        else if (c == '\n') bad = fputs("\\n", f) == EOF;
        else if (c < 0x20 || c == 0x7f) bad = fprintf(f, "\\u%04x", c) < 0;
        else bad = fputc(c, f) == EOF;
    }
    free(u);
    return bad || fputc('"', f) == EOF ? -1 : 0;
}
