// stg sample: text from a trained model. The prompt is prefilled once, then each decode step (a
// captured CUDA Graph on the GPU) draws one token per sequence on the device; the text streams to
// standard output as the tokens arrive (a 4-byte read per sequence and step), or --json prints ids,
// text and timings at the end.
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/base/file.h"
#include "planner/infer.h"
#include "planner/step.h"
#include "runtime/backend.h"
#include "runtime/data.h"
#include "runtime/exec.h"
#include "runtime/sample.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/stg/cli.h"
#ifdef STG_HAVE_CUDA
#include "runtime/cuda/backend_cuda.h"
#endif

typedef struct {
    const char *init, *tok_path, *prompt, *prompt_ids, *stop, *device, *exec;
    int64_t n, batch, top_k;
    double temperature, top_p;
    uint64_t seed;
    bool json, top_k_given, profile;
    bool tune; // --gemm-tune on: the decode step's products by timing cuBLASLt's candidates
} sample_args;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int sample_arg(sample_args *a, int argc, char **argv, int *i) {
    const char *o = argv[*i], *v;
    int64_t n;
#define VAL() ((v = cli_value(argc, argv, i)) != NULL)
    if (strcmp(o, "--init") == 0) return VAL() ? (a->init = v, 1) : -1;
    if (strcmp(o, "--prompt") == 0) return VAL() ? (a->prompt = v, 1) : -1;
    if (strcmp(o, "--prompt-ids") == 0) return VAL() ? (a->prompt_ids = v, 1) : -1;
    if (strcmp(o, "--stop") == 0) return VAL() ? (a->stop = v, 1) : -1;
    if (strcmp(o, "--device") == 0) return VAL() ? (a->device = v, 1) : -1;
    if (strcmp(o, "--json") == 0) return a->json = true, 1;
    if (strcmp(o, "--profile") == 0) return a->profile = true, 1;
    if (strcmp(o, "-n") == 0) return VAL() && !cli_int(o, v, 1, INT32_MAX, &n) ? (a->n = n, 1) : -1;
    if (strcmp(o, "--batch") == 0) return VAL() && !cli_int(o, v, 1, 1 << 20, &n) ? (a->batch = n, 1) : -1;
    if (strcmp(o, "--seed") == 0) return VAL() && !cli_int(o, v, 0, INT64_MAX, &n) ? (a->seed = (uint64_t)n, 1) : -1;
    if (strcmp(o, "--top-k") == 0) {
        if (!VAL() || cli_int(o, v, INT64_MIN + 1, INT64_MAX, &n)) return -1;
        if (n < 1) return fprintf(stderr, "stg sample: --top-k %lld: keep at least 1 token (leave --top-k out for no top-k)\n", (long long)n), -1;
        a->top_k = n;
        a->top_k_given = true;
        return 1;
    }
    if (strcmp(o, "--top-p") == 0) {
        double d;
        if (!VAL() || cli_double(o, v, -1e300, 1e300, &d)) return -1;
        if (!(d > 0 && d <= 1)) return fprintf(stderr, "stg sample: --top-p %s: expected a probability in (0, 1] (1: no top-p)\n", v), -1;
        a->top_p = d;
        return 1;
    }
    if (strcmp(o, "--temperature") == 0) {
        double d;
        if (!VAL() || cli_double(o, v, 0, 1e6, &d)) return -1;
        a->temperature = d;
        return 1;
    }
    if (strcmp(o, "--gemm-tune") == 0) return cli_gemm_tune_arg(argc, argv, i, &a->tune);
    if (strcmp(o, "--exec") == 0) {
        if (!VAL()) return -1;
        if (strcmp(v, "graph") && strcmp(v, "eager")) return fprintf(stderr, "stg: --exec '%s': expected graph or eager\n", v), -1;
        a->exec = v;
        return 1;
    }
#undef VAL
    return 0;
}

// The prompt's ids: --prompt through the tokenizer (or its bytes as ids without one), or
// --prompt-ids from a token file. Prints and returns -1 on bad input.
static int read_prompt(const sample_args *a, const rt_tok *tok, int64_t vocab, int32_t **out, int64_t *n) {
    *out = NULL;
    *n = 0;
    stg_err err;
    if (!a->prompt == !a->prompt_ids) {
        fprintf(stderr, "stg sample: give the prompt as --prompt TEXT or as --prompt-ids FILE (one of them)\n");
        return -1;
    }
    if (a->prompt_ids) {
        rt_tokens *t;
        if (rt_tokens_open(a->prompt_ids, vocab, &t, &err)) {
            fprintf(stderr, "stg sample: --prompt-ids: %s (the model's vocab is %lld)\n", err.msg, (long long)vocab);
            return -1;
        }
        int64_t c = rt_tokens_count(t);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(c ? c : 1));
        if (!ids) {
            rt_tokens_free(t);
            fprintf(stderr, "stg sample: out of host memory for %lld prompt ids\n", (long long)c);
            return -1;
        }
        for (int64_t i = 0; i < c; i++) ids[i] = (int32_t)rt_tokens_at(t, i);
        rt_tokens_free(t);
        *out = ids;
        *n = c;
        return 0;
    }
    size_t len = strlen(a->prompt);
    if (tok) {
        rt_tok_ids ids = {0};
        if (rt_tok_encode(tok, (const uint8_t *)a->prompt, len, &ids, &err)) {
            fprintf(stderr, "stg sample: --prompt: %s\n", err.msg);
            rt_tok_ids_free(&ids);
            return -1;
        }
        int32_t *v = malloc(sizeof(int32_t) * (ids.n ? ids.n : 1));
        if (!v) {
            rt_tok_ids_free(&ids);
            fprintf(stderr, "stg sample: out of host memory\n");
            return -1;
        }
        for (size_t i = 0; i < ids.n; i++) v[i] = (int32_t)ids.v[i];
        *n = (int64_t)ids.n;
        *out = v;
        rt_tok_ids_free(&ids);
        return 0;
    }
    if (vocab < 256) {
        fprintf(stderr, "stg sample: --prompt without --tokenizer uses the text's bytes as ids, which needs a vocab of at least 256 "
                        "(the model's is %lld): give --tokenizer TOK or --prompt-ids FILE\n", (long long)vocab);
        return -1;
    }
    int32_t *v = malloc(sizeof(int32_t) * (len ? len : 1));
    if (!v) return fprintf(stderr, "stg sample: out of host memory\n"), -1;
    for (size_t i = 0; i < len; i++) v[i] = (unsigned char)a->prompt[i];
    *out = v;
    *n = (int64_t)len;
    return 0;
}

// The model's ctx and vocab, from its forward graph (loaded as the user set it).
static int model_dims(const cli_model_opts *m, int64_t *ctx, int64_t *vocab) {
    cli_model_opts f = *m;
    f.train = false;
    stg_graph *g = cli_build(&f);
    if (!g) return -1;
    bool fc, fv;
    *ctx = graph_role_value(g, STG_DIM_CTX, &fc);
    *vocab = graph_role_value(g, STG_DIM_VOCAB, &fv);
    graph_free(g);
    if (!fc || !fv) {
        fprintf(stderr, "stg sample: sampling needs a ctx (the context) and a vocab: %s\n", graph_role_missing(fc ? STG_DIM_VOCAB : STG_DIM_CTX));
        return -1;
    }
    return 0;
}

typedef struct {
    const rt_tok *tok;
    int64_t vocab;
    int64_t stop_id;        // -1: none
    const char *stop_text;  // NULL: none
} text_rules;

static int append_token(const text_rules *r, int32_t id, rt_text *s) { return rt_text_token(r->tok, r->vocab, id, s); }

// Whether sequence text s (its last token id) has reached the stop: the id, or the text at its end.
static bool stopped(const text_rules *r, int32_t id, const rt_text *s) {
    if (r->stop_id >= 0) return id == r->stop_id;
    if (!r->stop_text) return false;
    size_t k = strlen(r->stop_text);
    return s->n >= k && memcmp(s->p + s->n - k, r->stop_text, k) == 0;
}

// --profile: one more decode step, eager, with a mark around every op (rt_exec_profile), to standard
// error: device time by op kind and by name, and the products' parameter bytes over their time.
static int profile_decode(rt_sampler *s, const stg_infer *inf, stg_err *err) {
    const stg_graph *g = inf->g[STG_INFER_DECODE];
    double *pm = calloc((size_t)(g->nsched ? g->nsched : 1), sizeof *pm);
    if (!pm) return stg_errf(err, "--profile: out of host memory");
    if (rt_exec_profile(rt_sampler_exec(s, STG_INFER_DECODE), RT_PHASE_ALL, pm, err)) {
        free(pm);
        return stg_err_prefix(err, "--profile"), -1;
    }
    fprintf(stderr, "stg sample: --profile, one decode step:\n");
    double total = cli_profile_kinds(stderr, g, pm), pbytes = 0, pms = 0;
    int rc = cli_profile_names(stderr, g, pm, NULL, NULL, 0, 40, 0);
    for (int k = 0; k < g->nsched; k++) { // ops reading parameters: their bytes over their time
        const stg_op *op = &g->ops[g->schedule[k]];
        double by = 0;
        for (int i = 0; i < op->n_in; i++)
            if (g->t[op->in[i]].cls == STG_CLASS_PARAM && op->kind != STG_OP_EMBEDDING) by += (double)stg_bytes(&g->t[op->in[i]]);
        if (by > 0) pbytes += by, pms += pm[k];
    }
    if (pms > 0)
        fprintf(stderr, "  params    %.3f GB read by ops taking %.3f of the %.3f ms: %.3f TB/s\n", pbytes / 1e9, pms, total,
                pbytes / (pms * 1e-3) / 1e12);
    free(pm);
    return rc ? stg_errf(err, "--profile: out of host memory") : 0;
}

int cmd_sample(int argc, char **argv) {
    cli_model_opts m;
    cli_model_opts_init(&m);
    m.train = false;
    sample_args a = {.n = 64, .batch = 1, .temperature = 1.0, .top_p = 1.0};
    rt_tok *tok = NULL;
    stg_err err;
    for (int i = 1; i < argc; i++) {
        int r = 0;
        if (strcmp(argv[i], "--tokenizer") == 0) { // kept for the text, and the vocab as cli_model_arg sets it
            const char *v = cli_value(argc, argv, &i);
            if (!v) goto bad;
            rt_tok_free(tok);
            if (rt_tok_load(v, &tok, &err)) {
                fprintf(stderr, "stg sample: --tokenizer: %s\n", err.msg);
                tok = NULL;
                goto bad;
            }
            a.tok_path = v;
            snprintf(m.vocab_set, sizeof m.vocab_set, "%s=%u", graph_role_key(STG_DIM_VOCAB), rt_tok_vocab_size(tok));
            continue;
        }
        r = cli_model_arg(&m, argc, argv, &i);
        if (!r) r = sample_arg(&a, argc, argv, &i);
        if (r < 0) goto bad;
        if (r > 0) continue;
        if (argv[i][0] == '-' || m.model) {
            fprintf(stderr, "stg sample: unexpected argument '%s'\n", argv[i]);
            cli_usage(stderr, "sample");
            goto bad;
        }
        m.model = argv[i];
    }
    if (!m.model || !a.init) {
        if (m.model) fprintf(stderr, "stg sample: --init CKPT names the parameters (a checkpoint or safetensors file; 'random' or 'fill' "
                                     "for untrained ones)\n");
        cli_usage(stderr, "sample");
        goto bad;
    }
    if (cli_resolve_accum(&m, 1, "sample")) goto bad;
    if (strcmp(m.attention_set, "attention=naive") == 0) {
        fprintf(stderr, "stg sample: decoding runs the fused attention's cached form; drop --attention naive\n");
        goto bad;
    }
    if (m.budget || m.optim.in_backward || m.optim.dp_zero || m.optim.bf16_grads) {
        fprintf(stderr, "stg sample: --memory-budget, --optimizer-in-backward, --grad-dtype and --zero are training options\n");
        goto bad;
    }
    bool random_init = strcmp(a.init, "random") == 0, fill_init = strcmp(a.init, "fill") == 0;
    int64_t ctx, vocab;
    if (model_dims(&m, &ctx, &vocab)) goto bad;
    if (a.top_k_given && a.top_k > vocab) {
        fprintf(stderr, "stg sample: --top-k %lld is above the model's vocab of %lld\n", (long long)a.top_k, (long long)vocab);
        goto bad;
    }
    text_rules tr = {tok, vocab, -1, NULL};
    if (a.stop) {
        char *end;
        errno = 0;
        long long id = strtoll(a.stop, &end, 10);
        if (*a.stop && !*end && !errno && !isspace((unsigned char)a.stop[0])) {
            if (id < 0 || id >= vocab) {
                fprintf(stderr, "stg sample: --stop %s: a token id must be in [0, %lld)\n", a.stop, (long long)vocab);
                goto bad;
            }
            tr.stop_id = id;
        } else if (tok && rt_tok_special_id(tok, a.stop) >= 0) {
            tr.stop_id = rt_tok_special_id(tok, a.stop);
        } else if (!*a.stop) {
            fprintf(stderr, "stg sample: --stop is empty: give a token id or the text to stop at\n");
            goto bad;
        } else {
            tr.stop_text = a.stop;
        }
    }
    int32_t *prompt = NULL;
    int64_t P;
    if (read_prompt(&a, tok, vocab, &prompt, &P)) goto bad;
    if (P == 0) {
        fprintf(stderr, "stg sample: the prompt is empty; it needs at least one token\n");
        free(prompt);
        goto bad;
    }
    if (P > ctx) {
        fprintf(stderr, "stg sample: the prompt has %lld tokens, more than the context of %lld (the model's ctx; --set ctx=N)\n",
                (long long)P, (long long)ctx);
        free(prompt);
        goto bad;
    }
    if (P + a.n > ctx) {
        fprintf(stderr, "stg sample: %lld prompt tokens and -n %lld new ones make %lld, more than the context of %lld (the model's ctx; "
                        "--set ctx=N, or a smaller -n)\n", (long long)P, (long long)a.n, (long long)(P + a.n), (long long)ctx);
        free(prompt);
        goto bad;
    }
    if (a.profile && P + a.n + 2 > ctx) { // rt_exec_profile runs the step twice: once to warm up, once op by op
        fprintf(stderr, "stg sample: --profile runs two more decode steps (a warm-up and the timed one), which need two positions left: "
                        "%lld prompt tokens and -n %lld leave %lld of the context of %lld (a smaller -n, or --set ctx=N)\n",
                (long long)P, (long long)a.n, (long long)(ctx - P - a.n), (long long)ctx);
        free(prompt);
        goto bad;
    }
    const unsigned cf = a.tune ? CLI_CUDA_GEMM_TUNE : 0u;
    rt_backend *bp = cli_open_backend(a.device, m.precision, cf), *bd = bp ? cli_open_backend(a.device, m.precision, cf) : NULL;
    if (!bp || !bd) {
        if (bp) bp->ops->destroy(bp);
        free(prompt);
        goto bad;
    }
    bool cpu = strcmp(bp->ops->name, "cpu") == 0;
    int rc = 1;
    stg_infer *inf = NULL;
    rt_sampler *s = NULL;
    int32_t *ids = NULL, *last = NULL;
    rt_text *texts = NULL;
    bool *done = NULL;
    int64_t *ntok = NULL;
    if (cpu && a.exec) {
        fprintf(stderr, "stg sample: --exec %s chooses how CUDA launches a step; the cpu backend runs every op in turn: drop --exec\n", a.exec);
        rc = 2;
        goto out;
    }
    {
        const char *sets[CLI_MAX_SETS + 3];
        int ns = 0;
        if (m.vocab_set[0]) sets[ns++] = m.vocab_set;
        for (int i = 0; i < m.nsets; i++) sets[ns++] = m.sets[i];
        stg_infer_opts io = stg_infer_defaults();
        io.model_path = m.model;
        io.sets = sets;
        io.nsets = ns;
        io.precision = m.precision;
        io.batch = a.batch;
        io.prompt = P;
        io.ungrouped = m.ungrouped;
        io.sample.temperature = a.temperature;
        io.sample.top_k = a.top_k;
        io.sample.top_p = a.top_p;
        io.sample.seed = (int64_t)a.seed;
        if (stg_infer_build(&io, &inf, &err)) {
            fprintf(stderr, "stg sample: %s\n", err.msg);
            goto out;
        }
    }
    rt_sampler_opts so = {.graph = !a.exec || strcmp(a.exec, "graph") == 0};
    if (rt_sampler_new(inf, bp, bd, &so, &s, &err) ||
        (random_init || fill_init ? rt_sampler_init(s, a.seed, fill_init, &err) : rt_sampler_load(s, a.init, &err))) {
        fprintf(stderr, "stg sample: %s\n", err.msg);
        if (s && !random_init && !fill_init) rc = 2; // the parameters file is bad input: missing, damaged or for another model
        goto out;
    }
    const int64_t B = a.batch, C = inf->ctx;
    ids = malloc(sizeof(int32_t) * (size_t)(B * C));
    last = malloc(sizeof(int32_t) * (size_t)B);
    texts = calloc((size_t)B, sizeof *texts);
    done = calloc((size_t)B, sizeof *done);
    ntok = calloc((size_t)B, sizeof *ntok);
    if (!ids || !last || !texts || !done || !ntok) {
        fprintf(stderr, "stg sample: out of host memory\n");
        goto out;
    }
    if (!a.json)
        fprintf(stderr, "stg sample: %s, %s on %s; %lld prompt tokens, %lld new, batch %lld, %s\n", inf->g[0]->name,
                stg_precision_name(m.precision), bp->ops->name, (long long)P, (long long)a.n, (long long)B,
                a.temperature == 0 ? "greedy" : "sampling");
    bool stream = !a.json && B == 1;
    if (a.json && rt_sampler_prefill(s, prompt, &err)) goto fail; // --json: a warm-up prefill (lazy loading, first launches), untimed
    double t0 = now_s();
    if (rt_sampler_prefill(s, prompt, &err)) goto fail;
    double t1 = now_s(), t2 = t1;
    int64_t steps = 0, live = B;
    // the token the prefill drew, then one per step
    for (int64_t k = 0; k < a.n && live > 0; k++) {
        if (k > 0) {
            if (a.json && !a.stop ? rt_sampler_submit(s, &err) : rt_sampler_step(s, &err)) goto fail;
            steps++;
            if (steps == 2 && (a.json && !a.stop) && rt_sampler_last(s, last, &err)) goto fail;
            if (steps == 2) t2 = now_s(); // the first two steps capture the decode graph (two slots)
        }
        if (a.json && !a.stop) continue; // ids read once at the end
        if (rt_sampler_last(s, last, &err)) goto fail;
        for (int64_t b = 0; b < B; b++) {
            if (done[b]) continue;
            size_t before = texts[b].n;
            if (append_token(&tr, last[b], &texts[b])) goto oom;
            ntok[b]++;
            bool st = stopped(&tr, last[b], &texts[b]);
            if (st && tr.stop_id >= 0) texts[b].n = before; // a stop token is not text
            if (stream && texts[b].n > before && (fwrite(texts[b].p + before, 1, texts[b].n - before, stdout) != texts[b].n - before || fflush(stdout)))
                goto werr;
            if (st) done[b] = true, live--;
        }
    }
    if (rt_sampler_ids(s, ids, &err)) goto fail;
    double t3 = now_s();
    if (a.json && !a.stop)
        for (int64_t b = 0; b < B; b++) {
            for (int64_t k = 0; k < a.n; k++)
                if (append_token(&tr, ids[b * C + P + k], &texts[b])) goto oom;
            ntok[b] = a.n;
        }
    if (a.json) {
        double dec = t3 - t1, steady = steps > 2 ? (t3 - t2) / (double)(steps - 2) : NAN;
        printf("{\"model\": ");
        if (rt_json_string(stdout, (const uint8_t *)inf->g[0]->name, strlen(inf->g[0]->name))) goto werr;
        printf(", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %lld, \"prompt_tokens\": %lld, \"new_tokens\": %lld, "
               "\"decode_steps\": %lld, \"prefill_ms\": %.4f, \"decode_ms\": %.4f, \"decode_tokens_per_s\": %.3f",
               bp->ops->name, stg_precision_name(m.precision), (long long)B, (long long)P, (long long)a.n, (long long)steps,
               (t1 - t0) * 1e3, dec * 1e3, steps > 0 ? (double)(B * steps) / dec : 0.0);
        if (steps > 2) printf(", \"steady_ms_per_step\": %.5f, \"steady_tokens_per_s\": %.3f", steady * 1e3, (double)B / steady);
        double pf = graph_phase_flops(inf->g[STG_INFER_PREFILL], STG_PHASE_FORWARD);
        printf(", \"prefill_flops\": %.6g, \"prefill_tflops_per_s\": %.3f", pf, pf / (t1 - t0) / 1e12);
#ifdef STG_HAVE_CUDA
        if (!cpu) {
            double peak = cuda_peak_tflops(rt_backend_cuda_context(bp), m.precision);
            if (peak > 0) printf(", \"peak_tflops_per_s\": %.1f, \"prefill_mfu\": %.4f", peak, pf / (t1 - t0) / 1e12 / peak);
        }
#endif
        printf(", \"ids\": [");
        for (int64_t b = 0; b < B; b++) {
            printf("%s[", b ? ", " : "");
            for (int64_t k = 0; k < ntok[b]; k++) printf("%s%d", k ? ", " : "", ids[b * C + P + k]);
            printf("]");
        }
        printf("], \"text\": [");
        for (int64_t b = 0; b < B; b++) {
            if (b) printf(", ");
            if (rt_json_string(stdout, texts[b].p, texts[b].n)) goto werr;
        }
        printf("]");
#ifdef STG_HAVE_CUDA
        if (!cpu) { // the bandwidth bound: weight bytes (the embedding table's gathered rows only) and KV bytes read per step
            double bw = 0;
            if (cuda_copy_bandwidth(rt_backend_cuda_context(bd), (size_t)256 << 20, 20, &bw, &err)) goto fail;
            double wbytes = 0, kvrow = 0, abytes = (double)stg_dtype_size(inf->g[1]->act_dtype);
            const stg_graph *g = inf->g[STG_INFER_DECODE];
            for (int t = 0; t < g->nt; t++)
                if (g->t[t].cls == STG_CLASS_PARAM) wbytes += (double)stg_bytes(&g->t[t]);
            for (int o = 0; o < g->nops; o++)
                if (g->ops[o].kind == STG_OP_EMBEDDING) { // the table is gathered: B rows of it are read
                    const stg_tensor *w = &g->t[g->ops[o].in[1]];
                    wbytes -= (double)stg_bytes(w) - (double)B * (double)w->shape[1] * abytes;
                }
            const graph_infer_info *in = &inf->info[STG_INFER_DECODE];
            kvrow = 2.0 * (double)in->n_layers * (double)in->kv_heads * (double)in->head_dim * abytes * (double)B;
            double avg_len = (double)P + 1 + (double)(steps + 1) / 2; // positions read, averaged over the steps
            double per_step = wbytes + kvrow * avg_len;
            printf(", \"copy_bandwidth_bytes_per_s\": %.6g, \"weight_bytes_per_step\": %.6g, \"kv_bytes_per_step\": %.6g, "
                   "\"bound_tokens_per_s\": %.3f",
                   bw, wbytes, kvrow * avg_len, (double)B * bw / per_step);
        }
#endif
        printf("}\n");
    } else if (!stream) {
        for (int64_t b = 0; b < B; b++) {
            printf("--- sequence %lld (%lld tokens) ---\n", (long long)b, (long long)ntok[b]);
            if (fwrite(texts[b].p, 1, texts[b].n, stdout) != texts[b].n) goto werr;
            printf("\n");
        }
    } else {
        printf("\n");
    }
    if (fflush(stdout) || ferror(stdout)) goto werr;
    if (!a.json)
        fprintf(stderr, "stg sample: prefill %.1f ms; %lld decode steps in %.1f ms (%.1f tokens/s)\n", (t1 - t0) * 1e3, (long long)steps,
                (t3 - t1) * 1e3, steps ? (double)(B * steps) / (t3 - t1) : 0.0);
    if (a.profile && profile_decode(s, inf, &err)) goto fail;
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "stg sample: out of host memory\n");
    goto out;
werr:
    fprintf(stderr, "stg sample: writing to standard output failed\n");
    goto out;
fail:
    fprintf(stderr, "stg sample: %s\n", err.msg);
out:
    if (texts)
        for (int64_t b = 0; b < a.batch; b++) free(texts[b].p);
    free(texts);
    free(done);
    free(ntok);
    free(ids);
    free(last);
    free(prompt);
    rt_sampler_free(s);
    stg_infer_free(inf);
    bp->ops->destroy(bp);
    bd->ops->destroy(bd);
    rt_tok_free(tok);
    return rc;
bad:
    rt_tok_free(tok);
    return 2;
}
