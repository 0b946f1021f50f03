#include "runtime/hf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/base/file.h"
#include "ops/base/tensor.h"
#include "ops/registry.h"
#include "runtime/ckpt.h"
#include "runtime/fsutil.h"
#include "runtime/json.h"
#include "runtime/safetensors.h"
#include "runtime/tokenizer/tokenizer.h"

// ---- family tables ------------------------------------------------------------------------------

// HF_ROPE: rows permuted within each head (see hf.h); HF_T: transposed (GPT-2's Conv1D weights are
// [d_in, d_out], stg's [d_out, d_in])
enum { HF_COPY, HF_ROPE, HF_T };

typedef struct {
    const char *stg, *hf; // "{i}": the layer
    int xform;
    bool optional;        // a tied head: absent when the model ties it to the embedding
} hf_row;

typedef struct {
    int64_t vocab, d_model, d_ff, n_layers, n_heads, n_kv_heads, head_dim, ctx, n_positions;
    double eps, theta;
    bool tied; // the LM head is the token embedding
} hf_dims;

// A growable text buffer.
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} hf_buf;

static void bput(hf_buf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = 2 * b->cap + (size_t)k + 256;
        char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
}

typedef struct hf_family {
    const char *name, *architecture;
    const hf_row *rows;
    int nrows;
    // The dims, from the parameters (row_param[r]: a parameter of row r at layer 0, -1 for an absent
    // optional row) and the graph's ops; fails when the model's structure is not the family's.
    int (*dims)(const stg_graph *g, const int *row_param, int n_layers, hf_dims *d, stg_err *err);
    void (*config)(const hf_dims *d, hf_buf *b);
    // config.json against the model's dims; *tied: the file's head is the embedding
    int (*check)(const rt_json *cfg, const hf_dims *d, const char *path, bool *tied, stg_err *err);
    const char *hf_prefix; // import: names may come without it (GPT-2's "transformer.")
    // import: tensors some checkpoints carry that are no parameter (buffers)
    bool (*ignorable)(const char *hf_name);
} hf_family;

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int count_ops(const stg_graph *g, stg_op_kind k) {
    int n = 0;
    for (int o = 0; o < g->nops; o++) n += g->ops[o].kind == k;
    return n;
}

// The one value attribute `get` gives over every op of kind k (NAN when there is none); -1 when two differ.
static int one_value(const stg_graph *g, stg_op_kind k, double (*get)(const stg_op *), const char *what, double *out, stg_err *err) {
    *out = NAN;
    for (int o = 0; o < g->nops; o++) {
        if (g->ops[o].kind != k) continue;
        double v = get(&g->ops[o]);
        if (!isnan(*out) && *out != v) return stg_errf(err, "%s ops with different %s (%g and %g)", ops_name(k), what, *out, v);
        *out = v;
    }
    return 0;
}
static double norm_eps(const stg_op *op) { return op->a.norm.eps; }
static double rope_theta(const stg_op *op) { return op->a.rope.inverse ? NAN : op->a.rope.theta; }

// The fused attention's scale: Hugging Face's models use 1/sqrt(head_dim).
static int check_scale(const stg_graph *g, int64_t head_dim, stg_err *err) {
    for (int o = 0; o < g->nops; o++)
        if (g->ops[o].kind == STG_OP_ATTENTION && g->ops[o].a.attention.scale != 0 &&
            fabs(g->ops[o].a.attention.scale - 1 / sqrt((double)head_dim)) > 1e-12)
            return stg_errf(err, "attention with scale %g (1/sqrt(head_dim) expected)", g->ops[o].a.attention.scale);
    return 0;
}

// -- Llama: the CS336 LM (stg's names) and Llama 3 (Meta's names) as a LlamaForCausalLM. Both tables
// keep this row order (the dims function reads the rows by it).

enum { LL_EMB, LL_LN1, LL_WQ, LL_WK, LL_WV, LL_WO, LL_LN2, LL_W1, LL_W2, LL_W3, LL_LNF, LL_HEAD };

static const hf_row cs336_rows[] = {
    {"tok_emb", "model.embed_tokens.weight", HF_COPY, false},
    {"blocks.{i}.ln1", "model.layers.{i}.input_layernorm.weight", HF_COPY, false},
    {"blocks.{i}.wq", "model.layers.{i}.self_attn.q_proj.weight", HF_ROPE, false},
    {"blocks.{i}.wk", "model.layers.{i}.self_attn.k_proj.weight", HF_ROPE, false},
    {"blocks.{i}.wv", "model.layers.{i}.self_attn.v_proj.weight", HF_COPY, false},
    {"blocks.{i}.wo", "model.layers.{i}.self_attn.o_proj.weight", HF_COPY, false},
    {"blocks.{i}.ln2", "model.layers.{i}.post_attention_layernorm.weight", HF_COPY, false},
    {"blocks.{i}.w1", "model.layers.{i}.mlp.gate_proj.weight", HF_COPY, false},
    {"blocks.{i}.w2", "model.layers.{i}.mlp.down_proj.weight", HF_COPY, false},
    {"blocks.{i}.w3", "model.layers.{i}.mlp.up_proj.weight", HF_COPY, false},
    {"ln_f", "model.norm.weight", HF_COPY, false},
    {"lm_head", "lm_head.weight", HF_COPY, false},
};

// models/llama3/llama3.yaml: Meta's checkpoint names; RoPE on interleaved pairs as stg's rope op
static const hf_row llama3_rows[] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight", HF_COPY, false},
    {"layers.{i}.attention_norm.weight", "model.layers.{i}.input_layernorm.weight", HF_COPY, false},
    {"layers.{i}.attention.wq.weight", "model.layers.{i}.self_attn.q_proj.weight", HF_ROPE, false},
    {"layers.{i}.attention.wk.weight", "model.layers.{i}.self_attn.k_proj.weight", HF_ROPE, false},
    {"layers.{i}.attention.wv.weight", "model.layers.{i}.self_attn.v_proj.weight", HF_COPY, false},
    {"layers.{i}.attention.wo.weight", "model.layers.{i}.self_attn.o_proj.weight", HF_COPY, false},
    {"layers.{i}.ffn_norm.weight", "model.layers.{i}.post_attention_layernorm.weight", HF_COPY, false},
    {"layers.{i}.feed_forward.w1.weight", "model.layers.{i}.mlp.gate_proj.weight", HF_COPY, false},
    {"layers.{i}.feed_forward.w2.weight", "model.layers.{i}.mlp.down_proj.weight", HF_COPY, false},
    {"layers.{i}.feed_forward.w3.weight", "model.layers.{i}.mlp.up_proj.weight", HF_COPY, false},
    {"norm.weight", "model.norm.weight", HF_COPY, false},
    {"output.weight", "lm_head.weight", HF_COPY, true}, // absent with tie_embeddings=on
};

static int llama_dims(const stg_graph *g, const int *rp, int L, hf_dims *d, stg_err *err) {
    const stg_tensor *emb = &g->t[rp[LL_EMB]], *wq = &g->t[rp[LL_WQ]], *wk = &g->t[rp[LL_WK]], *w1 = &g->t[rp[LL_W1]];
    memset(d, 0, sizeof *d);
    d->vocab = emb->shape[0];
    d->d_model = emb->shape[1];
    d->d_ff = w1->shape[0];
    d->n_layers = L;
    d->tied = rp[LL_HEAD] < 0;
    bool found;
    d->n_heads = graph_dim(g, "n_heads", &found);
    if (!found || d->n_heads < 1) return stg_errf(err, "the model has no n_heads dim");
    d->head_dim = graph_dim(g, "head_dim", &found);
    if (!found) d->head_dim = d->d_model / d->n_heads;
    if (d->head_dim < 2 || d->head_dim % 2 || wq->shape[0] != d->n_heads * d->head_dim || wk->shape[0] % d->head_dim ||
        d->n_heads % (wk->shape[0] / d->head_dim))
        return stg_errf(err, "q and k projections [%lld, %lld] and [%lld, %lld] are not whole heads of an even head_dim %lld", (long long)wq->shape[0],
                        (long long)wq->shape[1], (long long)wk->shape[0], (long long)wk->shape[1], (long long)d->head_dim);
    d->n_kv_heads = wk->shape[0] / d->head_dim;
    int tok = graph_find_tensor(g, "tokens");
    d->ctx = tok >= 0 && g->t[tok].ndim == 2 ? g->t[tok].shape[1] : 0;
    // the structure: 2L + 1 RMSNorms of one eps, 2L RoPEs of one theta, L SwiGLUs, no LayerNorm or GELU
    int nr = count_ops(g, STG_OP_RMSNORM), nq = count_ops(g, STG_OP_ROPE), ns = count_ops(g, STG_OP_SWIGLU);
    if (nr != 2 * L + 1 || nq != 2 * L || ns != L || count_ops(g, STG_OP_LAYERNORM) || count_ops(g, STG_OP_GELU))
        return stg_errf(err, "%d RMSNorm, %d RoPE and %d SwiGLU ops (a Llama block has 2, 2 and 1 per layer, and one final RMSNorm)", nr, nq, ns);
    if (one_value(g, STG_OP_RMSNORM, norm_eps, "eps", &d->eps, err) || one_value(g, STG_OP_ROPE, rope_theta, "theta", &d->theta, err)) return -1;
    if (isnan(d->theta)) return stg_errf(err, "an inverse rope in the forward pass");
    return check_scale(g, d->head_dim, err);
}

static void llama_config(const hf_dims *d, hf_buf *b) {
    bput(b,
         "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n"
         "  \"intermediate_size\": %lld,\n  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n  \"num_key_value_heads\": %lld,\n"
         "  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %.15g,\n"
         "  \"rope_theta\": %.15g,\n  \"rope_scaling\": null,\n  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n"
         "  \"mlp_bias\": false,\n  \"tie_word_embeddings\": %s,\n  \"initializer_range\": 0.02,\n  \"use_cache\": true,\n"
         "  \"torch_dtype\": \"float32\"\n}\n",
         (long long)d->vocab, (long long)d->d_model, (long long)d->d_ff, (long long)d->n_layers, (long long)d->n_heads, (long long)d->n_kv_heads,
         (long long)d->head_dim, (long long)d->ctx, d->eps, d->theta, d->tied ? "true" : "false");
}

// A number field that must equal `want` (absent: `dflt`, NAN when required).
static int check_num(const rt_json *cfg, const char *key, double want, double dflt, double rel, const char *path, stg_err *err) {
    const rt_json *v = rt_json_get(cfg, key);
    if (v && v->type == RT_JSON_NULL) v = NULL;
    if (v && v->type != RT_JSON_NUMBER) return stg_errf(err, "%s: \"%s\" is not a number", path, key);
    double have = v ? v->num : dflt;
    if (isnan(have)) return stg_errf(err, "%s: has no \"%s\" (the model's is %.17g)", path, key, want);
    if (!(fabs(have - want) <= rel * fabs(want)))
        return stg_errf(err, "%s: \"%s\" is %.17g but the model's is %.17g", path, key, have, want);
    return 0;
}

// A field that must be absent, null, false, or the given string.
static int check_flag(const rt_json *cfg, const char *key, const char *want_str, const char *path, stg_err *err) {
    const rt_json *v = rt_json_get(cfg, key);
    if (!v || v->type == RT_JSON_NULL || (v->type == RT_JSON_BOOL && !v->b)) return 0;
    if (want_str && v->type == RT_JSON_STRING && strcmp(v->str, want_str) == 0) return 0;
    return stg_errf(err, "%s: \"%s\" is set (%s); the model has no such part", path, key,
                    v->type == RT_JSON_STRING ? v->str : v->type == RT_JSON_BOOL ? "true" : "a value");
}

// tie_word_embeddings (absent: dflt) against the model: a tied model needs a tied file; an untied
// model takes a tied file's embedding as its head.
static int check_tied(const rt_json *cfg, const hf_dims *d, bool dflt, const char *path, bool *tied, stg_err *err) {
    const rt_json *t = rt_json_get(cfg, "tie_word_embeddings");
    if (t && t->type != RT_JSON_BOOL && t->type != RT_JSON_NULL) return stg_errf(err, "%s: \"tie_word_embeddings\" is not true or false", path);
    *tied = t && t->type == RT_JSON_BOOL ? t->b : dflt;
    if (d->tied && !*tied)
        return stg_errf(err, "%s: \"tie_word_embeddings\" is false but the model's LM head is its token embedding", path);
    return 0;
}

// A string field that must be one of `ok` (absent: fine when dflt_ok).
static int check_str(const rt_json *cfg, const char *key, const char *const *ok, int n, bool dflt_ok, const char *path, stg_err *err) {
    const rt_json *v = rt_json_get(cfg, key);
    if (!v && dflt_ok) return 0;
    for (int i = 0; v && v->type == RT_JSON_STRING && i < n; i++)
        if (strcmp(v->str, ok[i]) == 0) return 0;
    return stg_errf(err, "%s: \"%s\" is %s; the model's is %s", path, key, v && v->type == RT_JSON_STRING ? v->str : "missing or not a string", ok[0]);
}

static int llama_check(const rt_json *cfg, const hf_dims *d, const char *path, bool *tied, stg_err *err) {
    const char *silu[] = {"silu"};
    if (check_str(cfg, "hidden_act", silu, 1, true, path, err) || check_num(cfg, "vocab_size", (double)d->vocab, NAN, 0, path, err) ||
        check_num(cfg, "hidden_size", (double)d->d_model, NAN, 0, path, err) ||
        check_num(cfg, "intermediate_size", (double)d->d_ff, NAN, 0, path, err) ||
        check_num(cfg, "num_hidden_layers", (double)d->n_layers, NAN, 0, path, err) ||
        check_num(cfg, "num_attention_heads", (double)d->n_heads, NAN, 0, path, err) ||
        check_num(cfg, "num_key_value_heads", (double)d->n_kv_heads, (double)d->n_heads, 0, path, err) ||
        check_num(cfg, "head_dim", (double)d->head_dim, (double)d->head_dim, 0, path, err) ||
        check_num(cfg, "rms_norm_eps", d->eps, 1e-6, 1e-9, path, err) || check_num(cfg, "rope_theta", d->theta, 10000.0, 1e-9, path, err) ||
        check_flag(cfg, "rope_scaling", NULL, path, err) || check_flag(cfg, "attention_bias", NULL, path, err) ||
        check_flag(cfg, "mlp_bias", NULL, path, err))
        return -1;
    return check_tied(cfg, d, false, path, tied, err);
}

static bool llama_ignorable(const char *name) { return has_suffix(name, "rotary_emb.inv_freq"); }

// -- GPT-2 (models/gpt2/gpt2.yaml: Hugging Face's names without "transformer.") as a GPT2LMHeadModel

static const hf_row gpt2_rows[] = {
    {"wte.weight", "transformer.wte.weight", HF_COPY, false},
    {"wpe.weight", "transformer.wpe.weight", HF_COPY, false},
    {"h.{i}.ln_1.weight", "transformer.h.{i}.ln_1.weight", HF_COPY, false},
    {"h.{i}.ln_1.bias", "transformer.h.{i}.ln_1.bias", HF_COPY, false},
    {"h.{i}.attn.c_attn.weight", "transformer.h.{i}.attn.c_attn.weight", HF_T, false},
    {"h.{i}.attn.c_attn.bias", "transformer.h.{i}.attn.c_attn.bias", HF_COPY, false},
    {"h.{i}.attn.c_proj.weight", "transformer.h.{i}.attn.c_proj.weight", HF_T, false},
    {"h.{i}.attn.c_proj.bias", "transformer.h.{i}.attn.c_proj.bias", HF_COPY, false},
    {"h.{i}.ln_2.weight", "transformer.h.{i}.ln_2.weight", HF_COPY, false},
    {"h.{i}.ln_2.bias", "transformer.h.{i}.ln_2.bias", HF_COPY, false},
    {"h.{i}.mlp.c_fc.weight", "transformer.h.{i}.mlp.c_fc.weight", HF_T, false},
    {"h.{i}.mlp.c_fc.bias", "transformer.h.{i}.mlp.c_fc.bias", HF_COPY, false},
    {"h.{i}.mlp.c_proj.weight", "transformer.h.{i}.mlp.c_proj.weight", HF_T, false},
    {"h.{i}.mlp.c_proj.bias", "transformer.h.{i}.mlp.c_proj.bias", HF_COPY, false},
    {"ln_f.weight", "transformer.ln_f.weight", HF_COPY, false},
    {"ln_f.bias", "transformer.ln_f.bias", HF_COPY, false},
};
enum { G2_WTE, G2_WPE, G2_FC_W = 10 };

static int gpt2_dims(const stg_graph *g, const int *rp, int L, hf_dims *d, stg_err *err) {
    memset(d, 0, sizeof *d);
    d->vocab = g->t[rp[G2_WTE]].shape[0];
    d->d_model = g->t[rp[G2_WTE]].shape[1];
    d->n_positions = g->t[rp[G2_WPE]].shape[0];
    d->d_ff = g->t[rp[G2_FC_W]].shape[0];
    d->n_layers = L;
    d->tied = true; // no head parameter: the table has none, so the head is wte
    bool found;
    d->n_heads = graph_dim(g, "n_heads", &found);
    if (!found || d->n_heads < 1 || d->d_model % d->n_heads) return stg_errf(err, "the model has no n_heads dim dividing d_model");
    d->head_dim = d->d_model / d->n_heads;
    d->n_kv_heads = d->n_heads;
    int tok = graph_find_tensor(g, "tokens");
    d->ctx = tok >= 0 && g->t[tok].ndim == 2 ? g->t[tok].shape[1] : 0;
    int nl = count_ops(g, STG_OP_LAYERNORM), ng = count_ops(g, STG_OP_GELU);
    if (nl != 2 * L + 1 || ng != L || count_ops(g, STG_OP_RMSNORM) || count_ops(g, STG_OP_ROPE) || count_ops(g, STG_OP_SWIGLU))
        return stg_errf(err, "%d LayerNorm and %d GELU ops and RoPE or RMSNorm (a GPT-2 block has 2 LayerNorms and 1 GELU, no RoPE)", nl, ng);
    if (one_value(g, STG_OP_LAYERNORM, norm_eps, "eps", &d->eps, err)) return -1;
    return check_scale(g, d->head_dim, err);
}

static void gpt2_config(const hf_dims *d, hf_buf *b) {
    bput(b,
         "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n"
         "  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_inner\": %lld,\n"
         "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": %.15g,\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
         "  \"attn_pdrop\": 0.0,\n  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
         "  \"reorder_and_upcast_attn\": false,\n  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n"
         "  \"torch_dtype\": \"float32\"\n}\n",
         (long long)d->vocab, (long long)d->n_positions, (long long)d->n_positions, (long long)d->d_model, (long long)d->n_layers,
         (long long)d->n_heads, (long long)d->d_ff, d->eps);
}

static int gpt2_check(const rt_json *cfg, const hf_dims *d, const char *path, bool *tied, stg_err *err) {
    const char *gelu[] = {"gelu_new", "gelu_pytorch_tanh"}; // the tanh approximation, stg's gelu
    if (check_str(cfg, "activation_function", gelu, 2, true, path, err) || check_num(cfg, "vocab_size", (double)d->vocab, NAN, 0, path, err) ||
        check_num(cfg, "n_embd", (double)d->d_model, NAN, 0, path, err) || check_num(cfg, "n_layer", (double)d->n_layers, NAN, 0, path, err) ||
        check_num(cfg, "n_head", (double)d->n_heads, NAN, 0, path, err) || check_num(cfg, "n_positions", (double)d->n_positions, NAN, 0, path, err) ||
        check_num(cfg, "n_inner", (double)d->d_ff, 4.0 * (double)d->d_model, 0, path, err) ||
        check_num(cfg, "layer_norm_epsilon", d->eps, 1e-5, 1e-9, path, err) || check_flag(cfg, "scale_attn_by_inverse_layer_idx", NULL, path, err))
        return -1;
    const rt_json *sc = rt_json_get(cfg, "scale_attn_weights");
    if (sc && sc->type == RT_JSON_BOOL && !sc->b) return stg_errf(err, "%s: \"scale_attn_weights\" is false; the model scales by 1/sqrt(head_dim)", path);
    return check_tied(cfg, d, true, path, tied, err);
}

// the causal-mask buffers older GPT-2 checkpoints carry
static bool gpt2_ignorable(const char *name) { return has_suffix(name, ".attn.bias") || has_suffix(name, ".attn.masked_bias"); }

static const hf_family families[] = {
    {"cs336", "LlamaForCausalLM", cs336_rows, (int)(sizeof cs336_rows / sizeof *cs336_rows), llama_dims, llama_config, llama_check, NULL,
     llama_ignorable},
    {"llama3", "LlamaForCausalLM", llama3_rows, (int)(sizeof llama3_rows / sizeof *llama3_rows), llama_dims, llama_config, llama_check, NULL,
     llama_ignorable},
    {"gpt2", "GPT2LMHeadModel", gpt2_rows, (int)(sizeof gpt2_rows / sizeof *gpt2_rows), gpt2_dims, gpt2_config, gpt2_check, "transformer.",
     gpt2_ignorable},
};

// ---- matching a model to a family ---------------------------------------------------------------

// name against pattern: 1 when it matches (*layer: the {i} value, -1 for none), else 0.
static int match(const char *pat, const char *name, int64_t *layer) {
    *layer = -1;
    const char *br = strstr(pat, "{i}");
    if (!br) return strcmp(pat, name) == 0;
    size_t pre = (size_t)(br - pat);
    if (strncmp(pat, name, pre) != 0) return 0;
    const char *p = name + pre;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return 0;
    int64_t v = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p++ - '0');
        if (v > (1 << 20)) return 0;
    }
    if (strcmp(p, br + 3) != 0) return 0;
    *layer = v;
    return 1;
}

static void expand(const char *pat, int64_t layer, char *out, size_t n) {
    const char *br = strstr(pat, "{i}");
    if (!br) snprintf(out, n, "%s", pat);
    else snprintf(out, n, "%.*s%lld%s", (int)(br - pat), pat, (long long)layer, br + 3);
}

// The model's parameters in family order: for each (row, layer) the tensor id.
typedef struct {
    const hf_family *f;
    hf_dims d;
    int n;       // entries
    int *param;  // (n) tensor ids
    int *row;    // (n) row index
    int64_t *layer;
} hf_map;

static void map_free(hf_map *m) {
    free(m->param);
    free(m->row);
    free(m->layer);
    memset(m, 0, sizeof *m);
}

// Tries family f on g: 0 and *m when every parameter has one row and every row its layers, else -1
// (err says why).
static int map_family(const stg_graph *g, const hf_family *f, hf_map *m, stg_err *err) {
    memset(m, 0, sizeof *m);
    m->f = f;
    int np = 0;
    for (int t = 0; t < g->nt; t++) np += g->t[t].cls == STG_CLASS_PARAM;
    int count[64] = {0}, rp[64];
    int64_t maxl[64];
    for (int r = 0; r < f->nrows; r++) rp[r] = -1, maxl[r] = -1;
    m->param = stg_malloc(sizeof(int) * (size_t)(np + 1), err);
    m->row = stg_malloc(sizeof(int) * (size_t)(np + 1), err);
    m->layer = stg_malloc(sizeof(int64_t) * (size_t)(np + 1), err);
    if (!m->param || !m->row || !m->layer) {
        map_free(m);
        return -1;
    }
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].cls != STG_CLASS_PARAM) continue;
        int r = 0;
        int64_t l = -1;
        while (r < f->nrows && !match(f->rows[r].stg, g->t[t].name, &l)) r++;
        if (r == f->nrows) {
            stg_errf(err, "parameter '%s' has no row in the table", g->t[t].name);
            map_free(m);
            return -1;
        }
        m->param[m->n] = t;
        m->row[m->n] = r;
        m->layer[m->n++] = l;
        count[r]++;
        if (l > maxl[r]) maxl[r] = l;
        if (l <= 0) rp[r] = t;
    }
    int L = -1;
    for (int r = 0; r < f->nrows; r++) {
        bool layered = strstr(f->rows[r].stg, "{i}") != NULL;
        if (!count[r] && f->rows[r].optional) continue;
        if (!count[r]) {
            stg_errf(err, "the model has no '%s'", f->rows[r].stg);
            map_free(m);
            return -1;
        }
        if (layered && L < 0) L = count[r];
        if (layered && (count[r] != L || maxl[r] != L - 1)) {
            stg_errf(err, "'%s' is not there for each of %d layers 0..%d", f->rows[r].stg, L, L - 1);
            map_free(m);
            return -1;
        }
    }
    for (int i = 0; i < m->n; i++) { // 2-D weights, 1-D gains
        const stg_tensor *t = &g->t[m->param[i]];
        if (t->ndim < 1 || t->ndim > 2 || t->dtype == STG_I32) {
            stg_errf(err, "parameter '%s' is %d-D", t->name, t->ndim);
            map_free(m);
            return -1;
        }
    }
    if (f->dims(g, rp, L < 0 ? 0 : L, &m->d, err)) {
        map_free(m);
        return -1;
    }
    return 0;
}

static int map_model(const stg_graph *g, hf_map *m, stg_err *err) {
    char why[2048] = "";
    size_t k = 0;
    for (size_t i = 0; i < sizeof families / sizeof *families; i++) {
        stg_err e;
        if (map_family(g, &families[i], m, &e) == 0) return 0;
        k += (size_t)snprintf(why + k, k < sizeof why ? sizeof why - k : 0, "%s%s: %s", i ? "; " : "", families[i].name, e.msg);
        if (k >= sizeof why) k = sizeof why - 1;
    }
    return stg_errf(err, "%s is no model family stg exports (%s)", g->name, why);
}

// ---- tensors ------------------------------------------------------------------------------------

static float f16_to_f32(uint16_t h) {
    int s = h >> 15, e = h >> 10 & 31, f = h & 1023;
    double v = e == 0 ? ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexp(f + 1024, e - 25);
    return (float)(s ? -v : v);
}

// t's values as float32 into out (numel), converted from F32, F64, BF16 or F16; -1 on another dtype
// or a value that is not finite (err names the tensor through `what`).
static int to_f32(const rt_st_tensor *t, float *out, const char *what, stg_err *err) {
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < t->numel; i++) {
        float v;
        if (t->dtype == RT_DT_F32) memcpy(&v, p + 4 * i, 4);
        else if (t->dtype == RT_DT_F64) {
            double x;
            memcpy(&x, p + 8 * i, 8);
            v = (float)x;
        } else if (t->dtype == RT_DT_BF16 || t->dtype == RT_DT_F16) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            v = t->dtype == RT_DT_BF16 ? stg_bf16_to_f32(h) : f16_to_f32(h);
        } else
            return stg_errf(err, "%s is %s; stg reads F32, F64, BF16 and F16", what, rt_dtype_name(t->dtype));
        if (!isfinite(v)) return stg_errf(err, "%s: element %lld is %g", what, (long long)i, v);
        out[i] = v;
    }
    return 0;
}

// The tensor's values as float32 for the writer: in place in the file when it is F32 and its rows stay
// (after checking they are finite), else converted (and permuted for HF_ROPE rows) into *buf.
static const void *values(const rt_st_tensor *s, int xform, int64_t head_dim, bool inverse, float **buf, const char *what, stg_err *err);

// rows of a [heads x hd, cols] matrix: export (inverse 0) out[h hd + j] = in[h hd + perm(j)]; import
// the reverse. perm(j) = 2j for j < hd/2, 2(j - hd/2) + 1 after.
static void permute_rows(const float *in, float *out, int64_t rows, int64_t cols, int64_t hd, bool inverse) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t h = r / hd, j = r % hd;
        int64_t src = h * hd + (j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1);
        if (inverse) memcpy(out + src * cols, in + r * cols, sizeof(float) * (size_t)cols);
        else memcpy(out + r * cols, in + src * cols, sizeof(float) * (size_t)cols);
    }
}

static const void *values(const rt_st_tensor *s, int xform, int64_t head_dim, bool inverse, float **buf, const char *what, stg_err *err) {
    *buf = NULL;
    if (s->dtype == RT_DT_F32 && xform == HF_COPY) {
        const unsigned char *p = s->data;
        for (int64_t i = 0; i < s->numel; i++) {
            float v;
            memcpy(&v, p + 4 * i, 4);
            if (!isfinite(v)) return stg_errf(err, "%s: element %lld is %g", what, (long long)i, v), NULL;
        }
        return s->numel ? s->data : (const void *)"";
    }
    float *b = stg_malloc(sizeof(float) * (size_t)(s->numel ? s->numel : 1), err);
    if (!b || to_f32(s, b, what, err)) {
        free(b);
        return NULL;
    }
    if (xform == HF_ROPE || xform == HF_T) {
        float *q = stg_malloc(sizeof(float) * (size_t)s->numel, err);
        if (!q) {
            free(b);
            return NULL;
        }
        if (xform == HF_ROPE) permute_rows(b, q, s->shape[0], s->shape[1], head_dim, inverse);
        else // [rows, cols] -> [cols, rows]
            for (int64_t r = 0; r < s->shape[0]; r++)
                for (int64_t c = 0; c < s->shape[1]; c++) q[c * s->shape[0] + r] = b[r * s->shape[1] + c];
        free(b);
        b = q;
    }
    *buf = b;
    return b;
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static bool same_shape(const rt_st_tensor *a, const stg_tensor *t) {
    if (a->ndim != t->ndim) return false;
    for (int i = 0; i < t->ndim; i++)
        if (a->shape[i] != t->shape[i]) return false;
    return true;
}

// The Hugging Face shape of parameter t under transform x (HF_T: reversed).
static void hf_shape(const stg_tensor *t, int x, int64_t *shape) {
    for (int i = 0; i < t->ndim; i++) shape[i] = x == HF_T ? t->shape[t->ndim - 1 - i] : t->shape[i];
}

// ---- files and directories ----------------------------------------------------------------------

static const char *const export_files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};

// Removes the temporary export directory and what this program put in it.
static void remove_tmp_dir(const char *tmp) {
    char p[4400];
    for (size_t i = 0; i < sizeof export_files / sizeof *export_files; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp, export_files[i]);
        unlink(p);
    }
    rmdir(tmp);
}

// 0 when dir does not exist or is an empty directory; RT_HF_BAD otherwise.
static int check_new_dir(const char *dir, stg_err *err) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT) return 0;
        stg_errf(err, "%s: %s", dir, strerror(errno));
        return RT_HF_BAD;
    }
    if (!S_ISDIR(st.st_mode)) {
        stg_errf(err, "%s exists and is not a directory; stg export writes a new directory", dir);
        return RT_HF_BAD;
    }
    DIR *d = opendir(dir);
    if (!d) {
        stg_errf(err, "%s: cannot list: %s", dir, strerror(errno));
        return RT_HF_BAD;
    }
    struct dirent *de;
    bool empty = true;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = false;
    closedir(d);
    if (!empty) {
        stg_errf(err, "%s exists and is not empty; stg export writes a new directory (remove it or choose another)", dir);
        return RT_HF_BAD;
    }
    return 0;
}

static int fsync_parent(const char *path, stg_err *err) {
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", path);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    int fd = open(parent, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return stg_errf(err, "%s: cannot open to sync: %s", parent, strerror(errno));
    int r = fsync(fd);
    int e = errno;
    close(fd);
    return r ? stg_errf(err, "%s: fsync: %s", parent, strerror(e)) : 0;
}

// ---- export -------------------------------------------------------------------------------------

int rt_hf_export(const stg_graph *g, const char *init, const rt_tok *tok, const char *dir, rt_hf_report *rep, stg_err *err) {
    memset(rep, 0, sizeof *rep);
    hf_map m;
    if (map_model(g, &m, err)) return RT_HF_BAD;
    rep->family = m.f->name;
    rep->architecture = m.f->architecture;
    int rc = RT_HF_BAD;
    rt_st *st = NULL;
    rt_st_writer *w = NULL;
    float **bufs = stg_calloc((size_t)m.n + 1, sizeof *bufs, err);
    hf_buf cfg = {0}, tcfg = {0};
    char *tokjson = NULL, tmp[4300] = "";
    size_t toklen = 0;
    if (!bufs) goto out;
    if (check_new_dir(dir, err)) goto out;
    if (rt_require_regular(init, "--init", err) || rt_st_open(init, &st, err)) goto out;
    if (rt_st_meta_get(st, "checksum") && rt_ckpt_verify(init, err)) goto out;
    if (!(w = rt_st_writer_new(err))) goto out;
    for (int i = 0; i < m.n; i++) {
        const stg_tensor *t = &g->t[m.param[i]];
        const hf_row *row = &m.f->rows[m.row[i]];
        const rt_st_tensor *s = rt_st_find(st, t->name);
        char hs[96], ms[96], hfname[256];
        shape_text(t->ndim, t->shape, ms, sizeof ms);
        if (!s) {
            stg_errf(err, "%s has no tensor '%s' (the model's parameter %s)", init, t->name, ms);
            goto out;
        }
        if (!same_shape(s, t)) {
            shape_text(s->ndim, s->shape, hs, sizeof hs);
            stg_errf(err, "%s: '%s' has shape %s; the model's is %s", init, t->name, hs, ms);
            goto out;
        }
        char what[600];
        snprintf(what, sizeof what, "%s: '%s'", init, t->name);
        const void *v = values(s, row->xform, m.d.head_dim, false, &bufs[i], what, err);
        if (!v) goto out;
        rep->permuted += row->xform == HF_ROPE;
        expand(row->hf, m.layer[i], hfname, sizeof hfname);
        int64_t shape[STG_MAX_DIMS];
        hf_shape(t, row->xform, shape);
        if (rt_st_writer_add(w, hfname, RT_DT_F32, t->ndim, shape, v, err)) goto out;
        rep->tensors++;
        rep->bytes += 4.0 * (double)s->numel;
    }
    if (rt_st_writer_meta(w, "format", "pt", err)) goto out;
    m.f->config(&m.d, &cfg);
    if (tok) {
        if (!(tokjson = rt_tok_hf_json_text(tok, &toklen, err))) goto out;
        bput(&tcfg, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"model_max_length\": %lld,\n"
                    "  \"clean_up_tokenization_spaces\": false\n}\n", (long long)m.d.ctx);
    }
    if (cfg.oom || tcfg.oom) {
        stg_errf(err, "out of memory");
        goto out;
    }
    // Everything is checked: from here on a failure is a failed write.
    rc = -1;
    {
        size_t k = strlen(dir);
        while (k > 1 && dir[k - 1] == '/') k--; // "out/" -> "out.tmp.PID"
        snprintf(tmp, sizeof tmp, "%.*s.tmp.%ld", (int)k, dir, (long)getpid());
    }
    remove_tmp_dir(tmp); // a stale one of this pid
    if (mkdir(tmp, 0777) != 0) {
        stg_errf(err, "%s: cannot create: %s", tmp, strerror(errno));
        tmp[0] = 0;
        goto out;
    }
    char path[4400];
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    if (rt_st_writer_write(w, path, err)) goto out;
    snprintf(path, sizeof path, "%s/config.json", tmp);
    if (stg_afile_write_all(path, cfg.p, cfg.n, err)) goto out;
    if (tok) {
        snprintf(path, sizeof path, "%s/tokenizer.json", tmp);
        if (stg_afile_write_all(path, tokjson, toklen, err)) goto out;
        snprintf(path, sizeof path, "%s/tokenizer_config.json", tmp);
        if (stg_afile_write_all(path, tcfg.p, tcfg.n, err)) goto out;
    }
    if (rename(tmp, dir) != 0) {
        stg_errf(err, "cannot rename %s to %s: %s", tmp, dir, strerror(errno));
        goto out;
    }
    tmp[0] = 0;
    if (fsync_parent(dir, err)) goto out;
    rc = 0;
out:
    if (tmp[0]) remove_tmp_dir(tmp);
    for (int i = 0; bufs && i < m.n; i++) free(bufs[i]);
    free(bufs);
    free(cfg.p);
    free(tcfg.p);
    free(tokjson);
    rt_st_writer_free(w);
    rt_st_free(st);
    map_free(&m);
    return rc;
}

// ---- import -------------------------------------------------------------------------------------

#define HF_MAX_SHARDS 1024

typedef struct {
    int n;
    char *path[HF_MAX_SHARDS];
    rt_st *st[HF_MAX_SHARDS];
    bool *used[HF_MAX_SHARDS]; // per tensor of each file
} hf_files;

static void files_free(hf_files *f) {
    for (int i = 0; i < f->n; i++) {
        rt_st_free(f->st[i]);
        free(f->path[i]);
        free(f->used[i]);
    }
    memset(f, 0, sizeof *f);
}

static int files_add(hf_files *f, const char *path, stg_err *err) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->path[i], path) == 0) return 0;
    if (f->n == HF_MAX_SHARDS) return stg_errf(err, "more than %d weight files", HF_MAX_SHARDS);
    int i = f->n;
    if (!(f->path[i] = stg_malloc(strlen(path) + 1, err))) return -1;
    strcpy(f->path[i], path);
    f->n++;
    if (rt_require_regular(path, "weights", err) || rt_st_open(path, &f->st[i], err)) return -1;
    size_t nt = rt_st_count(f->st[i]);
    if (!(f->used[i] = stg_calloc(nt + 1, sizeof(bool), err))) return -1;
    return 0;
}

static int read_text(const char *path, char **out, size_t *len, stg_err *err) {
    stg_mmap mm;
    if (rt_require_regular(path, "file", err) || stg_mmap_open(path, &mm, err)) return -1;
    *out = stg_malloc(mm.size + 1, err);
    if (*out) {
        if (mm.size) memcpy(*out, mm.data, mm.size);
        (*out)[mm.size] = 0;
        *len = mm.size;
    }
    stg_mmap_close(&mm);
    return *out ? 0 : -1;
}

static int load_json(const char *path, rt_json **out, stg_err *err) {
    char *text;
    size_t len;
    if (read_text(path, &text, &len, err)) return -1;
    int r = rt_json_parse(text, len, path, out, err);
    free(text);
    return r;
}

// The weight files of dir: model.safetensors, or every shard model.safetensors.index.json names.
static int open_weights(const char *dir, hf_files *f, stg_err *err) {
    char path[4400];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, F_OK) == 0) return files_add(f, path, err);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) != 0) return stg_errf(err, "%s has neither model.safetensors nor model.safetensors.index.json", dir);
    rt_json *idx;
    if (load_json(path, &idx, err)) return -1;
    const rt_json *wm = rt_json_get(idx, "weight_map");
    int rc = 0;
    if (!wm || wm->type != RT_JSON_OBJECT) rc = stg_errf(err, "%s: no \"weight_map\" object", path);
    for (int i = 0; rc == 0 && i < wm->n; i++) {
        const rt_json *v = &wm->items[i];
        if (v->type != RT_JSON_STRING || !*v->str || strchr(v->str, '/') || strcmp(v->str, "..") == 0) {
            rc = stg_errf(err, "%s: weight_map[\"%s\"] is not a file name in the directory", path, wm->keys[i]);
            break;
        }
        char shard[4400];
        snprintf(shard, sizeof shard, "%s/%s", dir, v->str);
        rc = files_add(f, shard, err);
    }
    rt_json_free(idx);
    return rc;
}

// The tensor named `name` in the files (NULL when none); *file and *index say where.
static const rt_st_tensor *files_find(hf_files *f, const char *name, int *file, size_t *index) {
    for (int i = 0; i < f->n; i++) {
        const rt_st_tensor *t = rt_st_find(f->st[i], name);
        if (!t) continue;
        *file = i;
        for (size_t k = 0; k < rt_st_count(f->st[i]); k++)
            if (rt_st_at(f->st[i], k) == t) *index = k;
        return t;
    }
    return NULL;
}

int rt_hf_import(const stg_graph *g, const char *dir, const char *out, const char *const *inputs, const char *const *input_what, int n_inputs,
                 rt_hf_report *rep, stg_err *err) {
    memset(rep, 0, sizeof *rep);
    hf_map m;
    if (map_model(g, &m, err)) return RT_HF_BAD;
    rep->family = m.f->name;
    rep->architecture = m.f->architecture;
    hf_files files;
    memset(&files, 0, sizeof files);
    rt_json *cfg = NULL;
    rt_st_writer *w = NULL;
    float **bufs = stg_calloc((size_t)m.n + 1, sizeof *bufs, err);
    int rc = RT_HF_BAD;
    char path[4400];
    bool tied = false;
    if (!bufs) goto out;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (load_json(path, &cfg, err)) goto out;
    if (cfg->type != RT_JSON_OBJECT) {
        stg_errf(err, "%s: not a JSON object", path);
        goto out;
    }
    const rt_json *arch = rt_json_get(cfg, "architectures");
    bool arch_ok = false;
    for (int i = 0; arch && arch->type == RT_JSON_ARRAY && i < arch->n; i++)
        arch_ok |= arch->items[i].type == RT_JSON_STRING && strcmp(arch->items[i].str, m.f->architecture) == 0;
    if (!arch_ok) {
        stg_errf(err, "%s: \"architectures\" does not name %s (the model %s is exported as one)", path, m.f->architecture, g->name);
        goto out;
    }
    if (m.f->check(cfg, &m.d, path, &tied, err) || open_weights(dir, &files, err)) goto out;
    // the output is none of the inputs, nor of the files read here
    {
        const char *ins[HF_MAX_SHARDS + 40], *whats[HF_MAX_SHARDS + 40];
        int k = 0;
        for (int i = 0; i < n_inputs && k < 32; i++) ins[k] = inputs[i], whats[k++] = input_what[i];
        ins[k] = path, whats[k++] = "config";
        for (int i = 0; i < files.n; i++) ins[k] = files.path[i], whats[k++] = "weight file";
        if (stg_check_output(out, "-o", ins, whats, k, err)) goto out;
    }
    if (!(w = rt_st_writer_new(err))) goto out;
    for (int i = 0; i < m.n; i++) {
        const stg_tensor *t = &g->t[m.param[i]];
        const hf_row *row = &m.f->rows[m.row[i]];
        char hfname[256], ms[96], hs[96];
        expand(row->hf, m.layer[i], hfname, sizeof hfname);
        shape_text(t->ndim, t->shape, ms, sizeof ms);
        int fi = 0;
        size_t ti = 0;
        const rt_st_tensor *s = files_find(&files, hfname, &fi, &ti);
        size_t pl = m.f->hf_prefix ? strlen(m.f->hf_prefix) : 0;
        if (!s && pl && strncmp(hfname, m.f->hf_prefix, pl) == 0) s = files_find(&files, hfname + pl, &fi, &ti); // saved without it
        if (!s && tied && strcmp(hfname, "lm_head.weight") == 0) s = files_find(&files, "model.embed_tokens.weight", &fi, &ti);
        if (!s) {
            stg_errf(err, "%s: no tensor '%s' (the model's '%s', %s)", dir, hfname, t->name, ms);
            goto out;
        }
        files.used[fi][ti] = true;
        int64_t want[STG_MAX_DIMS];
        hf_shape(t, row->xform, want);
        bool shape_ok = s->ndim == t->ndim;
        for (int k = 0; shape_ok && k < t->ndim; k++) shape_ok = s->shape[k] == want[k];
        if (!shape_ok) {
            shape_text(s->ndim, s->shape, hs, sizeof hs);
            shape_text(t->ndim, want, ms, sizeof ms);
            stg_errf(err, "%s: '%s' has shape %s; the model's '%s' is %s%s", files.path[fi], hfname, hs, t->name, ms,
                     row->xform == HF_T ? " there (transposed)" : "");
            goto out;
        }
        char what[600];
        snprintf(what, sizeof what, "%s: '%s'", files.path[fi], hfname);
        const void *v = values(s, row->xform, m.d.head_dim, true, &bufs[i], what, err);
        if (!v) goto out;
        rep->permuted += row->xform == HF_ROPE;
        if (rt_st_writer_add(w, t->name, RT_DT_F32, t->ndim, t->shape, v, err)) goto out;
        rep->tensors++;
        rep->bytes += 4.0 * (double)s->numel;
    }
    for (int i = 0; i < files.n; i++) // every tensor there is a parameter here
        for (size_t k = 0; k < rt_st_count(files.st[i]); k++) {
            const rt_st_tensor *s = rt_st_at(files.st[i], k);
            if (!files.used[i][k] && !(m.f->ignorable && m.f->ignorable(s->name))) {
                stg_errf(err, "%s: tensor '%s' is no parameter of %s (the %s table names none such)", files.path[i], s->name, g->name, m.f->name);
                goto out;
            }
        }
    rep->shards = files.n;
    if (rt_st_writer_meta(w, "format", "stg-import-1", err) || rt_st_writer_meta(w, "source", dir, err) ||
        rt_st_writer_meta(w, "family", m.f->name, err))
        goto out;
    rc = -1;
    if (rt_st_writer_write(w, out, err)) goto out;
    rc = 0;
out:
    for (int i = 0; bufs && i < m.n; i++) free(bufs[i]);
    free(bufs);
    rt_st_writer_free(w);
    files_free(&files);
    rt_json_free(cfg);
    map_free(&m);
    return rc;
}
