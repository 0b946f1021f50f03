#include "planner/formula.h"

#include "ops/registry.h" // ops_lce_chunk: the fused head's chunk

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void add_term(stg_formula *f, const char *name, int64_t bytes, const char *fmt, ...) STG_PRINTF(4, 5);

static void add_term(stg_formula *f, const char *name, int64_t bytes, const char *fmt, ...) {
    if (f->nterms >= STG_FORMULA_MAX_TERMS) return;
    stg_formula_term *t = &f->terms[f->nterms++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->bytes = bytes;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->how, sizeof t->how, fmt, ap);
    va_end(ap);
}

static int64_t max3(int64_t a, int64_t b, int64_t c) {
    int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

int formula_compute(const stg_graph *g, bool train, stg_formula *f, stg_err *err) {
    memset(f, 0, sizeof *f);
    f->train = train;
    if (!g) return stg_errf(err, "formula: no graph");
    f->precision = g->precision;
    // batch, ctx and vocab by their roles; the architecture's own sizes (the closed form's D, F, L, H)
    // by the names the CS336, Llama 3 and GPT-2 files give them: the formula is of those families.
    static const char *const names[7] = {NULL, "d_model", "d_ff", "n_layers", "n_heads", NULL, NULL};
    static const int roles[7] = {STG_DIM_VOCAB, -1, -1, -1, -1, STG_DIM_BATCH, STG_DIM_CTX};
    int64_t v[7];
    for (int i = 0; i < 7; i++) {
        bool found = false;
        const char *what = names[i] ? names[i] : graph_role_key((stg_dim_role)roles[i]);
        v[i] = names[i] ? graph_dim(g, names[i], &found) : graph_role_value(g, (stg_dim_role)roles[i], &found);
        if (!found) { // not an error: a model of another kind (an MLP has no vocab) has no formula
            snprintf(f->reason, sizeof f->reason, "the model has no dim '%s'; the formula covers the CS336 LM, Llama 3 and GPT-2", what);
            return 0;
        }
        if (v[i] <= 0) return stg_errf(err, "formula: dim '%s' is %lld; it must be positive", what, (long long)v[i]);
    }
    const char *att = graph_option(g, "attention");
    if (!att) {
        snprintf(f->reason, sizeof f->reason, "the model has no 'attention' option (naive or flash)");
        return 0;
    }
    bool flash;
    if (strcmp(att, "flash") == 0)
        flash = true;
    else if (strcmp(att, "naive") == 0)
        flash = false;
    else
        return stg_errf(err, "formula: attention is '%s'; expected naive or flash", att);
    snprintf(f->attention, sizeof f->attention, "%s", att);
    const char *fh = graph_option(g, "fused_head"); // absent: the plain head
    if (fh && strcmp(fh, "on") != 0 && strcmp(fh, "off") != 0 && strcmp(fh, "late") != 0)
        return stg_errf(err, "formula: fused_head is '%s'; expected on, off or late", fh);
    f->fused_head = fh && strcmp(fh, "off") != 0; // late: the fused head with its weight gradient made late (the same terms)

    const int64_t V = v[0], D = v[1], F = v[2], L = v[3], H = v[4], B = v[5], S = v[6], N = B * S;
    f->vocab = V, f->d_model = D, f->d_ff = F, f->n_layers = L, f->n_heads = H, f->batch = B, f->ctx = S;
    int64_t a, s; // activation and statistics bytes
    switch (g->precision) {
    case STG_PREC_BF16: a = 2, s = 4; break;
    case STG_PREC_FP64: a = 8, s = 8; break;
    default: a = 4, s = 4; break;
    }
    // The family (models/cs336, models/llama3, models/gpt2): GPT-2 when the model has the dim
    // n_positions (learned positions, LayerNorm with bias, biased linears, a GELU MLP, the head tied
    // to wte); else the CS336 / Llama 3 form (RMSNorm, SwiGLU, RoPE) with n_kv_heads kv heads
    // (grouped-query attention; n_heads when the model has no such dim) and, under the option
    // tie_embeddings=on, the head tied to the embedding.
    bool found = false;
    const int64_t Pn = graph_dim(g, "n_positions", &found);
    const bool gpt2 = found;
    int64_t Hkv = graph_dim(g, "n_kv_heads", &found);
    if (!found) Hkv = H;
    const char *tie = graph_option(g, "tie_embeddings");
    const bool tied = gpt2 || (tie && strcmp(tie, "on") == 0);
    if (D % H || Hkv <= 0 || H % Hkv || (gpt2 && Pn <= 0)) {
        snprintf(f->reason, sizeof f->reason, "d_model, n_heads%s do not divide as the formula needs", gpt2 ? " or n_positions" : ", n_kv_heads");
        return 0;
    }
    const int64_t Dkv = Hkv * (D / H); // the width of k and of v
    f->gpt2 = gpt2, f->tied = tied, f->n_kv_heads = Hkv, f->n_positions = gpt2 ? Pn : 0;
    const int64_t P = gpt2 ? V * D + Pn * D + L * (4 * D * D + 2 * D * F + 9 * D + F) + 2 * D
                           : (tied ? 1 : 2) * V * D + L * (2 * D * D + 2 * D * Dkv + 3 * D * F + 2 * D) + D;
    f->params = P;
    // A model of other shapes (its declared parameters are not P) is not described.
    const int64_t declared = graph_param_count(g);
    if (declared > 0 && declared != P) {
        snprintf(f->reason, sizeof f->reason,
                 "the model's %lld parameters are not the closed form's %lld: the formula covers the CS336 LM, Llama 3 and GPT-2 "
                 "as models/ declares them",
                 (long long)declared, (long long)P);
        return 0;
    }
    f->available = true;

    // Parameters, gradients, optimizer state.
    if (g->precision == STG_PREC_BF16) {
        f->param = 2 * P;
        add_term(f, "param", f->param, "2 B x P = 2 x %lld (bf16 working weights)", (long long)P);
        if (train && g->bf16_grads) {
            // the products' weights (every linear of the blocks; the head too when it is a plain
            // untied linear) have bf16 gradients, the rest (embeddings, norms, biases, the fused or
            // tied head) fp32
            const int64_t Pw = (gpt2 ? L * (4 * D * D + 2 * D * F) : L * (2 * D * D + 2 * D * Dkv + 3 * D * F)) +
                               (!tied && !f->fused_head ? V * D : 0);
            f->grad = 2 * Pw + 4 * (P - Pw);
            f->optimizer = 12 * P;
            add_term(f, "grad", f->grad, "2 B x %lld (bf16: the products' weights) + 4 B x %lld (fp32: the rest)", (long long)Pw,
                     (long long)(P - Pw));
            add_term(f, "optimizer", f->optimizer, "12 B x P = 12 x %lld (fp32 master weights, AdamW m and v)", (long long)P);
        } else if (train) {
            f->grad = 4 * P;
            f->optimizer = 12 * P;
            add_term(f, "grad", f->grad, "4 B x P = 4 x %lld (fp32 gradients)", (long long)P);
            add_term(f, "optimizer", f->optimizer, "12 B x P = 12 x %lld (fp32 master weights, AdamW m and v)", (long long)P);
        }
    } else {
        f->param = a * P;
        add_term(f, "param", f->param, "%lld B x P = %lld x %lld", (long long)a, (long long)a, (long long)P);
        if (train) {
            f->grad = a * P;
            f->optimizer = 2 * a * P;
            add_term(f, "grad", f->grad, "%lld B x P = %lld x %lld", (long long)a, (long long)a, (long long)P);
            add_term(f, "optimizer", f->optimizer, "2 x %lld B x P (AdamW m and v) = %lld x %lld", (long long)a,
                     (long long)(2 * a), (long long)P);
        }
    }
    f->input = 2 * N * 4;
    add_term(f, "input", f->input, "tokens and targets: 2 x N x 4 = 2 x %lld x 4", (long long)N);

    const int64_t logits = N * V * a, lse = N * s;
    // the fused head's backward scratch: the chunk's logits (and in bf16 an fp32 (N, D) accumulator of
    // dx), no smaller than the forward's (chunk, V) logits; the two are never live together
    const bool acc = g->precision == STG_PREC_BF16;
    const int64_t chunk = ops_lce_chunk(N, V, 0), chunk_bytes = ops_lce_bwd_scratch(N, D, V, 0, acc) * a;
    f->lce_chunk = f->fused_head ? chunk : 0;
    if (train) {
        int64_t layer;
        if (gpt2) {
            // x, h, q, k, v, o (or q^T, k^T, v^T, o), x2, h2; c_fc out, gelu out; 2 LayerNorm stats of 2 a row
            layer = (8 * N * D + 2 * N * F) * a + (flash ? (4 * N + B * H * S) * s : B * H * S * S * a + 4 * N * s);
            if (flash)
                add_term(f, "activation per layer", layer,
                         "(8ND + 2NF) x %lld + (4N + BHS) x %lld with N=%lld D=%lld F=%lld B=%lld H=%lld S=%lld "
                         "[x, h, q, k, v, o, x2, h2; c_fc, gelu outs; 2 LayerNorm stats (mean, rstd); lse]",
                         (long long)a, (long long)s, (long long)N, (long long)D, (long long)F, (long long)B, (long long)H,
                         (long long)S);
            else
                add_term(f, "activation per layer", layer,
                         "(8ND + 2NF) x %lld + BHS^2 x %lld + 4N x %lld with N=%lld D=%lld F=%lld B=%lld H=%lld S=%lld "
                         "[x, h, q^T, k^T, v^T, o, x2, h2; c_fc, gelu outs; softmax probs; 2 LayerNorm stats]",
                         (long long)a, (long long)a, (long long)s, (long long)N, (long long)D, (long long)F, (long long)B,
                         (long long)H, (long long)S);
        } else if (flash && Hkv != H) {
            layer = (6 * N * D + 2 * N * Dkv + 3 * N * F) * a + (2 * N + B * H * S) * s;
            add_term(f, "activation per layer", layer,
                     "(6ND + 2N Dkv + 3NF) x %lld + (2N + BHS) x %lld with N=%lld D=%lld Dkv=%lld (%lld kv heads) F=%lld B=%lld "
                     "H=%lld S=%lld [x, h, q, o, x2, h2; k, v; w1, w3, swiglu outs; 2 rstd; lse]",
                     (long long)a, (long long)s, (long long)N, (long long)D, (long long)Dkv, (long long)Hkv, (long long)F,
                     (long long)B, (long long)H, (long long)S);
        } else if (flash) {
            layer = (8 * N * D + 3 * N * F) * a + (2 * N + B * H * S) * s;
            add_term(f, "activation per layer", layer,
                     "(8ND + 3NF) x %lld + (2N + BHS) x %lld with N=%lld D=%lld F=%lld B=%lld H=%lld S=%lld "
                     "[x, h, q, k, v, o, x2, h2; w1, w3, swiglu outs; 2 rstd; lse]",
                     (long long)a, (long long)s, (long long)N, (long long)D, (long long)F, (long long)B, (long long)H,
                     (long long)S);
        } else {
            layer = (8 * N * D + 3 * N * F) * a + B * H * S * S * a + 2 * N * s;
            add_term(f, "activation per layer", layer,
                     "(8ND + 3NF) x %lld + BHS^2 x %lld + 2N x %lld with N=%lld D=%lld F=%lld B=%lld H=%lld S=%lld "
                     "[x, h, q^T, k^T, v^T, o, x2, h2; w1, w3, swiglu outs; softmax probs; 2 rstd]",
                     (long long)a, (long long)a, (long long)s, (long long)N, (long long)D, (long long)F, (long long)B,
                     (long long)H, (long long)S);
        }
        f->activation_per_layer = layer;
        add_term(f, "activation, all layers", L * layer, "L x per layer = %lld x %lld", (long long)L, (long long)layer);
        int64_t fin = 2 * N * D * a + (gpt2 ? 2 : 1) * N * s;
        if (gpt2)
            add_term(f, "final norm", fin, "x and ln_f out 2ND x %lld + stats 2N x %lld", (long long)a, (long long)s);
        else
            add_term(f, "final norm", fin, "x and rmsnorm_f out 2ND x %lld + rstd N x %lld", (long long)a, (long long)s);
        if (f->fused_head) {
            add_term(f, "logits (fused head)", 0,
                     "none kept; the plain head keeps N x V x %lld = %lld x %lld x %lld = %lld B for backward and writes their "
                     "gradient over them",
                     (long long)a, (long long)N, (long long)V, (long long)a, (long long)logits);
            if (acc)
                add_term(f, "fused head chunk", chunk_bytes,
                         "chunk x V x %lld + N x D x 4 = %lld x %lld x %lld + %lld x %lld x 4 (the backward's scratch: logits of "
                         "chunk %lld of N rows, an fp32 dx accumulator)",
                         (long long)a, (long long)chunk, (long long)V, (long long)a, (long long)N, (long long)D, (long long)chunk);
            else
                add_term(f, "fused head chunk", chunk_bytes, "chunk x V x %lld = %lld x %lld x %lld (logits of chunk %lld of N %lld rows)",
                         (long long)a, (long long)chunk, (long long)V, (long long)a, (long long)chunk, (long long)N);
            add_term(f, "cross-entropy lse", lse, "N x %lld", (long long)s);
            f->activation = L * layer + fin + chunk_bytes + lse;
        } else {
            add_term(f, "logits", logits, "N x V x %lld = %lld x %lld x %lld", (long long)a, (long long)N, (long long)V,
                     (long long)a);
            add_term(f, "cross-entropy lse", lse, "N x %lld", (long long)s);
            f->activation = L * layer + fin + logits + lse;
        }
    } else {
        // GPT-2: the fused qkv and its three parts meet at the split (x, qkv, q, k, v); its MLP keeps
        // c_fc's and gelu's outputs; two LayerNorm statistics a row. GQA: k and v are N Dkv each.
        const int64_t st = gpt2 ? 2 : 1;
        int64_t attn = gpt2 ? (flash ? 7 * N * D * a + B * H * S * s + st * N * s : 4 * N * D * a + 2 * B * H * S * S * a + st * N * s)
                            : flash ? (3 * N * D + 2 * N * Dkv) * a + B * H * S * s + N * s
                                    : 4 * N * D * a + 2 * B * H * S * S * a + N * s;
        int64_t mlp = 2 * N * D * a + (gpt2 ? 2 : 3) * N * F * a + st * N * s;
        int64_t work = max3(attn, mlp, 0);
        f->activation_per_layer = work;
        add_term(f, "largest layer working set", work,
                 "max(attention %lld [%s], MLP %lld [2ND + %lldNF] x %lld + %lldN x %lld); nothing is saved in forward mode",
                 (long long)attn,
                 gpt2 ? (flash ? "7ND a + BHS s + 2N s" : "4ND a + 2BHS^2 a + 2N s")
                      : flash ? (Hkv != H ? "(3ND + 2N Dkv) a + BHS s + N s" : "5ND a + BHS s + N s") : "4ND a + 2BHS^2 a + N s",
                 (long long)mlp, (long long)(gpt2 ? 2 : 3), (long long)a, (long long)st, (long long)s);
        if (f->fused_head) {
            add_term(f, "fused head chunk", chunk * V * a + lse,
                     "chunk x V x %lld + lse N x %lld = %lld x %lld x %lld + %lld x %lld (no logits kept)", (long long)a,
                     (long long)s, (long long)chunk, (long long)V, (long long)a, (long long)N, (long long)s);
            f->activation = work + chunk * V * a + lse;
        } else {
            add_term(f, "logits", logits + lse, "N x V x %lld + lse N x %lld = %lld x %lld x %lld + %lld x %lld", (long long)a,
                     (long long)s, (long long)N, (long long)V, (long long)a, (long long)N, (long long)s);
            f->activation = work + logits + lse;
        }
    }
    f->total = f->param + f->grad + f->optimizer + f->activation + f->input;
    return 0;
}
