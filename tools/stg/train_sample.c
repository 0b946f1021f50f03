// stg train --sample-every N: a short sample from the parameters being trained, printed and logged.
// The sampler's prefill and decode executors read the training executor's parameters in place and
// use its arena between steps (rt_exec_opts.share): the training step's plan and graph are not
// touched, and the cache and the sampler's state are their only extra memory.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/infer.h"
#include "runtime/backend.h"
#include "runtime/sample.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/stg/cli.h"

#define TRAIN_SAMPLE_TOKENS 64 // new tokens per sample (fewer when the context is shorter)

struct cli_train_sampler {
    stg_infer *inf;
    rt_backend *bp, *bd;
    rt_sampler *s;
    rt_tok *tok;
    int32_t *prompt, *ids;
    int64_t P, n, vocab;
};

void cli_train_sampler_free(cli_train_sampler *t) {
    if (!t) return;
    rt_sampler_free(t->s);
    stg_infer_free(t->inf);
    if (t->bp) t->bp->ops->destroy(t->bp);
    if (t->bd) t->bd->ops->destroy(t->bd);
    rt_tok_free(t->tok);
    free(t->prompt);
    free(t->ids);
    free(t);
}

int cli_train_sampler_open(const cli_model_opts *m, const char *tok_path, const char *prompt, uint64_t seed, const char *backend, int device,
                           const rt_exec *train, cli_train_sampler **out) {
    *out = NULL;
    stg_err err;
    cli_train_sampler *t = calloc(1, sizeof *t);
    if (!t) return fprintf(stderr, "stg train: out of host memory\n"), -1;
    const stg_graph *g = rt_exec_graph(train);
    bool fv, fc;
    t->vocab = graph_role_value(g, STG_DIM_VOCAB, &fv);
    int64_t ctx = graph_role_value(g, STG_DIM_CTX, &fc);
    if (!fv || !fc) {
        fprintf(stderr, "stg train: --sample-every: sampling needs a vocab and a ctx: %s\n", graph_role_missing(fv ? STG_DIM_CTX : STG_DIM_VOCAB));
        goto fail;
    }
    size_t len = strlen(prompt);
    if (tok_path) {
        rt_tok_ids ids = {0};
        if (rt_tok_load(tok_path, &t->tok, &err) || rt_tok_encode(t->tok, (const uint8_t *)prompt, len, &ids, &err)) {
            fprintf(stderr, "stg train: --sample-prompt: %s\n", err.msg);
            rt_tok_ids_free(&ids);
            goto fail;
        }
        t->P = (int64_t)ids.n;
        if ((t->prompt = malloc(sizeof(int32_t) * (ids.n ? ids.n : 1))))
            for (size_t i = 0; i < ids.n; i++) t->prompt[i] = (int32_t)ids.v[i];
        rt_tok_ids_free(&ids);
    } else {
        if (t->vocab < 256) {
            fprintf(stderr, "stg train: --sample-prompt without --tokenizer uses the text's bytes as ids, which needs a vocab of at least 256 "
                            "(the model's is %lld)\n", (long long)t->vocab);
            goto fail;
        }
        t->P = (int64_t)len;
        if ((t->prompt = malloc(sizeof(int32_t) * (len ? len : 1))))
            for (size_t i = 0; i < len; i++) t->prompt[i] = (unsigned char)prompt[i];
    }
    if (!t->prompt) {
        fprintf(stderr, "stg train: out of host memory\n");
        goto fail;
    }
    if (t->P < 1 || t->P >= ctx) {
        fprintf(stderr, "stg train: --sample-prompt has %lld tokens; it needs at least 1 and fewer than the context, %lld\n", (long long)t->P,
                (long long)ctx);
        goto fail;
    }
    t->n = ctx - t->P < TRAIN_SAMPLE_TOKENS ? ctx - t->P : TRAIN_SAMPLE_TOKENS;
    const char *sets[CLI_MAX_SETS + 3];
    int ns = 0;
    if (m->vocab_set[0]) sets[ns++] = m->vocab_set;
    for (int i = 0; i < m->nsets; i++) sets[ns++] = m->sets[i];
    if (m->attention_set[0]) sets[ns++] = m->attention_set;
    stg_infer_opts io = stg_infer_defaults();
    io.model_path = m->model;
    io.sets = sets;
    io.nsets = ns;
    io.precision = m->precision;
    io.prompt = t->P;
    io.ungrouped = m->ungrouped;
    io.sample.temperature = 1.0;
    io.sample.seed = (int64_t)seed;
    if (stg_infer_build(&io, &t->inf, &err)) {
        fprintf(stderr, "stg train: --sample-every: %s\n", err.msg);
        goto fail;
    }
    if (!(t->bp = cli_open_backend_at(backend, m->precision, 0, device)) || !(t->bd = cli_open_backend_at(backend, m->precision, 0, device)))
        goto fail;
    rt_sampler_opts so = {.graph = true, .params = train};
    if (rt_sampler_new(t->inf, t->bp, t->bd, &so, &t->s, &err)) {
        fprintf(stderr, "stg train: --sample-every: %s\n", err.msg);
        goto fail;
    }
    if (!(t->ids = malloc(sizeof(int32_t) * (size_t)ctx))) {
        fprintf(stderr, "stg train: out of host memory\n");
        goto fail;
    }
    *out = t;
    return 0;
fail:
    cli_train_sampler_free(t);
    return -1;
}

int cli_train_sample(void *ctx, int64_t step, rt_text *text, stg_err *err) {
    cli_train_sampler *t = ctx;
    if (rt_sampler_prefill(t->s, t->prompt, err)) return -1;
    for (int64_t k = 1; k < t->n; k++)
        if (rt_sampler_submit(t->s, err)) return -1;
    if (rt_sampler_ids(t->s, t->ids, err)) return -1;
    for (int64_t k = 0; k < t->n; k++)
        if (rt_text_token(t->tok, t->vocab, t->ids[t->P + k], text)) return stg_errf(err, "out of host memory");
    printf("sample at step %lld: ", (long long)step);
    if (fwrite(text->p, 1, text->n, stdout) != text->n || printf("\n") < 0 || fflush(stdout)) return stg_errf(err, "writing the sample failed");
    return 0;
}
