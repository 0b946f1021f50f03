// stg eval: the exact mean loss of a checkpoint over every non-overlapping ctx-window of a token
// file (runtime/eval.h), with perplexity and, given the tokenizer, bits per byte.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/base/file.h"
#include "planner/budget.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/ckpt.h"
#include "runtime/data.h"
#include "runtime/eval.h"
#include "runtime/exec.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/stg/cli.h"

int cmd_eval(int argc, char **argv) {
    cli_model_opts m;
    cli_model_opts_init(&m);
    m.train = false;
    const char *init = NULL, *data = NULL, *device = NULL, *tok_path = NULL;
    int64_t limit = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) tok_path = argv[i + 1];
        int r = cli_model_arg(&m, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i];
        const char **slot = strcmp(a, "--init") == 0 ? &init : strcmp(a, "--data") == 0 ? &data : strcmp(a, "--device") == 0 ? &device : NULL;
        if (slot) {
            if (!(*slot = cli_value(argc, argv, &i))) return 2;
            continue;
        }
        if (strcmp(a, "--tokens") == 0) {
            const char *v = cli_value(argc, argv, &i);
            if (!v || cli_int(a, v, 2, INT64_MAX, &limit)) return 2;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            json = true;
            continue;
        }
        if (a[0] == '-' || m.model) {
            fprintf(stderr, "stg eval: unexpected argument '%s'\n", a);
            cli_usage(stderr, "eval");
            return 2;
        }
        m.model = a;
    }
    if (!m.model || !init || !data) {
        if (m.model) fprintf(stderr, "stg eval: %s\n", !init ? "--init CKPT (the parameters) is needed" : "--data FILE (the tokens) is needed");
        cli_usage(stderr, "eval");
        return 2;
    }
    if (cli_resolve_accum(&m, 1, "eval")) return 2;
    if (m.optim.in_backward || m.budget || m.optim.bf16_grads) {
        fprintf(stderr, "stg eval: %s is for training steps; evaluation runs the forward pass alone\n",
                m.optim.in_backward ? "--optimizer-in-backward" : m.budget ? "--memory-budget" : "--grad-dtype");
        return 2;
    }
    stg_err err;
    rt_tok *tok = NULL;
    rt_tokens *tk = NULL;
    cli_fwd main = {0}, rest = {0};
    rt_backend *b = NULL;
    int rc = 2;
    if (tok_path && rt_tok_load(tok_path, &tok, &err)) {
        fprintf(stderr, "stg eval: --tokenizer: %s\n", err.msg);
        goto out;
    }
    if (!(b = cli_open_backend(device, m.precision, 0))) goto out;
    if (cli_fwd_open(&m, 0, b, 0, &main)) goto out;
    const stg_graph *g = main.g;
    int itok = graph_find_tensor(g, "tokens");
    bool has_vocab, has_batch;
    int64_t vocab = graph_role_value(g, STG_DIM_VOCAB, &has_vocab);
    graph_role_value(g, STG_DIM_BATCH, &has_batch);
    if (itok < 0 || g->t[itok].ndim != 2 || !has_vocab) {
        fprintf(stderr, "stg eval: %s is not a token model (inputs tokens and targets [batch, ctx], a vocab dim)%s%s\n", m.model,
                has_vocab ? "" : ": ", has_vocab ? "" : graph_role_missing(STG_DIM_VOCAB));
        goto out;
    }
    int64_t B = g->t[itok].shape[0], ctx = g->t[itok].shape[1];
    if (rt_tokens_open(data, vocab, &tk, &err)) {
        fprintf(stderr, "stg eval: %s (the model's vocab is %lld)\n", err.msg, (long long)vocab);
        goto out;
    }
    rt_eval_shape s;
    if (rt_eval_shape_of(tk, limit, B, ctx, &s, &err)) {
        fprintf(stderr, "stg eval: %s: %s\n", data, err.msg);
        goto out;
    }
    if (s.rest > 0 && !has_batch) {
        fprintf(stderr, "stg eval: %lld windows do not fill batches of %lld and %s (for the last one); or give --tokens %lld\n",
                (long long)s.windows, (long long)B, graph_role_missing(STG_DIM_BATCH), (long long)(s.batches * B * ctx + 1));
        goto out;
    }
    int64_t bytes = -1;
    if (tok && (bytes = rt_eval_target_bytes(tok, tk, &s, &err)) < 0) {
        fprintf(stderr, "stg eval: %s: %s\n", data, err.msg);
        goto out;
    }
    if (rt_params_load(main.e, init, &err)) {
        fprintf(stderr, "stg eval: %s\n", err.msg);
        goto out;
    }
    if (s.rest > 0) {
        if (cli_fwd_open(&m, s.rest, b, 0, &rest)) goto out;
        if (rt_params_load(rest.e, init, &err)) {
            fprintf(stderr, "stg eval: %s\n", err.msg);
            goto out;
        }
    }
    rc = 1;
    double loss;
    if (rt_eval_run(main.e, rest.e, tk, &s, &loss, &err)) {
        fprintf(stderr, "stg eval: %s\n", err.msg);
        goto out;
    }
    double ppl = exp(loss), bpb = bytes > 0 ? loss * (double)s.targets / (log(2.0) * (double)bytes) : NAN;
    if (json) {
        printf("{\"model\": \"%s\", \"precision\": \"%s\", \"device\": \"%s\", \"tokens\": %lld, \"ctx\": %lld, \"windows\": %lld, "
               "\"targets\": %lld, \"dropped\": %lld, \"loss\": %.17g, \"perplexity\": %.17g",
               g->name, stg_precision_name(g->precision), b->ops->name, (long long)s.tokens, (long long)ctx, (long long)s.windows,
               (long long)s.targets, (long long)s.dropped, loss, ppl);
        if (bytes >= 0) printf(", \"bytes\": %lld, \"bits_per_byte\": %.17g", (long long)bytes, bpb);
        printf("}\n");
    } else {
        printf("stg eval: %s, %s on %s; %s: %lld tokens, %lld windows of %lld (%lld targets) in %lld batch%s of %lld", g->name,
               stg_precision_name(g->precision), b->ops->name, data, (long long)s.tokens, (long long)s.windows, (long long)ctx,
               (long long)s.targets, (long long)s.batches, s.batches == 1 ? "" : "es", (long long)B);
        if (s.rest) printf(" and one of %lld", (long long)s.rest);
        if (s.dropped) printf("; the last %lld target%s (less than a window) not scored", (long long)s.dropped, s.dropped == 1 ? "" : "s");
        printf("\nloss %.9g  perplexity %.6g", loss, ppl);
        if (bytes > 0) printf("  bits/byte %.6g (%lld bytes of targets)", bpb, (long long)bytes);
        else if (!tok) printf("  (bits/byte: give --tokenizer)");
        printf("\n");
    }
    rc = fflush(stdout) ? 1 : 0;
out:
    cli_fwd_free(&rest);
    cli_fwd_free(&main);
    if (b) b->ops->destroy(b);
    rt_tokens_free(tk);
    rt_tok_free(tok);
    return rc;
}
