// stg export --hf and stg import --hf (runtime/hf.h) on the CPU: export then import gives back every
// parameter bitwise (also through shards and from bf16 weights, rounded as bf16), config.json holds
// the architecture's fields, q_proj and k_proj rows are permuted per head from stg's adjacent RoPE
// pairs to Hugging Face's halves (v_proj and the rest untouched), the tokenizer files; the PyTorch
// check (tools/ref/hf_llama.py, a plain torch Llama; skipped without PyTorch): the exported
// directory reproduces `stg step`'s logits to 1e-4 and `stg eval`'s loss to 1e-5 (fp32); bad input
// (a missing, mismatched, extra or non-finite tensor, a config field that disagrees, an existing
// directory, an output that is an input, a model of no family) ends in exit 2 with nothing written.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ops/base/tensor.h"
#include "runtime/json.h"
#include "runtime/npy.h"
#include "runtime/safetensors.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_json_entry.h"
#include "tests/testutil.h"

#define STG "'" STG_BINARY "'"
// 2 layers, 4 heads of 8: q and k rows permuted within each head
#define TINY "'" STG_SOURCE_DIR "/models/tiny.yaml' --set n_layers=2 --set d_model=32 --set d_ff=64 --set n_heads=4 --set ctx=16"

static char dir[64], ckpt[128], hf[128], data[128];

static int sh(char *out, size_t n, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    char sink[8192];
    return tu_run(cmd, out ? out : sink, out ? n : sizeof sink);
}

static int setup(void **s) {
    if (tu_mkdtemp(dir, sizeof dir, "hf")) return -1;
    snprintf(ckpt, sizeof ckpt, "%s/ck/ckpt.safetensors", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(data, sizeof data, "%s/docs.bin", dir);
    char out[8192];
    if (sh(out, sizeof out, STG " tokens '" STG_SOURCE_DIR "/docs/ARCHITECTURE.md' -o %s && " STG " train " TINY
                                " --device cpu --data %s --steps 6 --lr 1e-2 --ckpt %s/ck && " STG " export " TINY " --init %s --hf %s",
           data, data, dir, ckpt, hf)) {
        fprintf(stderr, "%s\n", out);
        return -1;
    }
    return 0;
}

static int teardown(void **s) { return tu_rmtree(dir); }

static rt_st *open_st(const char *path) {
    rt_st *st;
    stg_err err;
    if (rt_st_open(path, &st, &err)) fail_msg("%s", err.msg);
    return st;
}

static const char *const layer_names[] = {"ln1", "wq", "wk", "wv", "wo", "ln2", "w1", "w2", "w3"};

// Every parameter of a (an stg file) equals b's bitwise.
static void same_params(const char *a, const char *b) {
    rt_st *x = open_st(a), *y = open_st(b);
    int n = 0;
    for (size_t i = 0; i < rt_st_count(x); i++) {
        const rt_st_tensor *t = rt_st_at(x, i);
        if (strstr(t->name, ".adam_")) continue;
        const rt_st_tensor *u = rt_st_find(y, t->name);
        if (!u) fail_msg("%s has no %s", b, t->name);
        assert_int_equal(u->dtype, RT_DT_F32);
        assert_int_equal(t->nbytes, u->nbytes);
        if (memcmp(t->data, u->data, t->nbytes) != 0) fail_msg("%s differs", t->name);
        n++;
    }
    assert_int_equal(n, 3 + 2 * 9);
    assert_int_equal(rt_st_count(y), (size_t)n);
    rt_st_free(x);
    rt_st_free(y);
}

static void test_round_trip(void **s) {
    char out[8192], imp[160], hf2[160];
    snprintf(imp, sizeof imp, "%s/imp.safetensors", dir);
    snprintf(hf2, sizeof hf2, "%s/hf2", dir);
    if (sh(out, sizeof out, STG " import " TINY " --hf %s -o %s", hf, imp)) fail_msg("%s", out);
    assert_non_null(strstr(out, "21 tensors (4 with their rows permuted back"));
    same_params(ckpt, imp);
    // and export again: the same model.safetensors, byte for byte
    if (sh(out, sizeof out, STG " export " TINY " --init %s --hf %s", imp, hf2)) fail_msg("%s", out);
    if (sh(out, sizeof out, "cmp %s/model.safetensors %s/model.safetensors && cmp %s/config.json %s/config.json", hf, hf2, hf, hf2))
        fail_msg("%s", out);
    // training from the imported file starts where the checkpoint left off: its first loss is the
    // checkpoint's evaluation of the same batch
    if (sh(out, sizeof out, STG " eval " TINY " --device cpu --init %s --data %s --json > %s/a.json && " STG " eval " TINY
                            " --device cpu --init %s --data %s --json > %s/b.json && cmp %s/a.json %s/b.json",
           ckpt, data, dir, imp, data, dir, dir, dir))
        fail_msg("%s", out);
}

static void test_config(void **s) {
    char path[200];
    snprintf(path, sizeof path, "%s/config.json", hf);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t len = 0;
    char *text = tu_read_all(f, &len);
    fclose(f);
    rt_json *c;
    stg_err err;
    if (rt_json_parse(text, len, path, &c, &err)) fail_msg("%s", err.msg);
    struct {
        const char *key;
        double v;
    } nums[] = {{"vocab_size", 256}, {"hidden_size", 32},   {"intermediate_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                {"num_key_value_heads", 4}, {"head_dim", 8}, {"max_position_embeddings", 16}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000}};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        const rt_json *v = rt_json_get(c, nums[i].key);
        if (!v || v->type != RT_JSON_NUMBER || v->num != nums[i].v) fail_msg("%s: %s", nums[i].key, text);
    }
    const rt_json *a = rt_json_get(c, "architectures");
    assert_true(a && a->type == RT_JSON_ARRAY && a->n == 1 && strcmp(a->items[0].str, "LlamaForCausalLM") == 0);
    assert_string_equal(rt_json_get(c, "model_type")->str, "llama");
    assert_string_equal(rt_json_get(c, "hidden_act")->str, "silu");
    assert_false(rt_json_get(c, "tie_word_embeddings")->b);
    assert_false(rt_json_get(c, "attention_bias")->b);
    rt_json_free(c);
    free(text);
}

// q_proj row h*8 + j is stg's wq row h*8 + 2j (j < 4) or h*8 + 2(j - 4) + 1; other weights are copies.
static void test_permutation(void **s) {
    char path[200];
    snprintf(path, sizeof path, "%s/model.safetensors", hf);
    rt_st *x = open_st(ckpt), *y = open_st(path);
    assert_string_equal(rt_st_meta_get(y, "format"), "pt");
    for (int l = 0; l < 2; l++)
        for (size_t k = 0; k < sizeof layer_names / sizeof *layer_names; k++) {
            char sn[64], hn[128];
            snprintf(sn, sizeof sn, "blocks.%d.%s", l, layer_names[k]);
            const char *h[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                               "post_attention_layernorm", "mlp.gate_proj", "mlp.down_proj", "mlp.up_proj"};
            snprintf(hn, sizeof hn, "model.layers.%d.%s.weight", l, h[k]);
            const rt_st_tensor *a = rt_st_find(x, sn), *b = rt_st_find(y, hn);
            assert_non_null(a);
            assert_non_null(b);
            assert_int_equal(a->nbytes, b->nbytes);
            if (k != 1 && k != 2) {
                assert_memory_equal(a->data, b->data, a->nbytes);
                continue;
            }
            size_t row = 4 * (size_t)a->shape[1];
            int moved = 0;
            for (int r = 0; r < a->shape[0]; r++) {
                int hd = r / 8, j = r % 8, src = hd * 8 + (j < 4 ? 2 * j : 2 * (j - 4) + 1);
                assert_memory_equal((const char *)b->data + row * (size_t)r, (const char *)a->data + row * (size_t)src, row);
                moved += src != r;
            }
            assert_int_equal(moved, 4 * 6); // rows 0 and 7 of each head stay
        }
    const char *pairs[][2] = {{"tok_emb", "model.embed_tokens.weight"}, {"ln_f", "model.norm.weight"}, {"lm_head", "lm_head.weight"}};
    for (int i = 0; i < 3; i++) {
        const rt_st_tensor *a = rt_st_find(x, pairs[i][0]), *b = rt_st_find(y, pairs[i][1]);
        assert_true(a && b && a->nbytes == b->nbytes);
        assert_memory_equal(a->data, b->data, a->nbytes);
    }
    assert_int_equal(rt_st_count(y), 21);
    rt_st_free(x);
    rt_st_free(y);
}

// A copy of src without tensor `drop`, with tensor `alter` changed by f (may be NULL), and an extra
// tensor `extra` (may be NULL), in dtype `dt` (F32 or BF16 for every tensor).
typedef void (*alter_fn)(rt_st_tensor *t, float *v);
static void rewrite(const char *src, const char *dst, const char *drop, const char *alter, alter_fn f, const char *extra, rt_dtype dt) {
    rt_st *x = open_st(src);
    rt_st_writer *w;
    stg_err err;
    assert_non_null(w = rt_st_writer_new(&err));
    void *bufs[64] = {0};
    int nb = 0;
    for (size_t i = 0; i < rt_st_count(x); i++) {
        rt_st_tensor t = *rt_st_at(x, i);
        if (drop && strcmp(t.name, drop) == 0) continue;
        float *v = malloc(t.nbytes + 8);
        assert_non_null(v);
        memcpy(v, t.data, t.nbytes);
        if (alter && strcmp(t.name, alter) == 0) f(&t, v);
        void *out = v;
        if (dt == RT_DT_BF16) {
            uint16_t *h = malloc(2 * (size_t)t.numel + 2);
            for (int64_t k = 0; k < t.numel; k++) h[k] = stg_f32_to_bf16(v[k]);
            free(v);
            out = h;
        }
        bufs[nb++] = out;
        if (rt_st_writer_add(w, t.name, dt, t.ndim, t.shape, out, &err)) fail_msg("%s", err.msg);
    }
    float one[2] = {1, 2};
    int64_t two = 2;
    if (extra && rt_st_writer_add(w, extra, RT_DT_F32, 1, &two, one, &err)) fail_msg("%s", err.msg);
    if (rt_st_writer_write(w, dst, &err)) fail_msg("%s", err.msg);
    rt_st_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    rt_st_free(x);
}

static void fewer_rows(rt_st_tensor *t, float *v) { t->shape[0] -= 1; }
static void a_nan(rt_st_tensor *t, float *v) { v[3] = NAN; }

// A Hugging Face directory: hf's config.json (with `sed` applied when non-NULL) and the weights given.
static void make_dir(const char *d, const char *sed) {
    char out[4096];
    if (sh(out, sizeof out, "rm -rf %s && mkdir -p %s && cp %s/config.json %s/", d, d, hf, d)) fail_msg("%s", out);
    if (sed && sh(out, sizeof out, "sed -i '%s' %s/config.json", sed, d)) fail_msg("%s", out);
}

// Shards with an index, and bf16 weights.
static void test_shards_and_bf16(void **s) {
    char d[160], out[8192], imp[200], path[200], a[200], b[200];
    snprintf(d, sizeof d, "%s/sharded", dir);
    make_dir(d, NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", hf);
    snprintf(a, sizeof a, "%s/model-00001-of-00002.safetensors", d);
    snprintf(b, sizeof b, "%s/model-00002-of-00002.safetensors", d);
    // shard 1: everything of layer 0 and the embedding; shard 2: the rest
    rt_st *x = open_st(path);
    rt_st_writer *w1, *w2;
    stg_err err;
    assert_non_null(w1 = rt_st_writer_new(&err));
    assert_non_null(w2 = rt_st_writer_new(&err));
    FILE *idx;
    char ip[200];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", d);
    assert_non_null(idx = fopen(ip, "w"));
    fprintf(idx, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (size_t i = 0; i < rt_st_count(x); i++) {
        const rt_st_tensor *t = rt_st_at(x, i);
        bool first = strstr(t->name, "layers.0.") || strstr(t->name, "embed");
        if (rt_st_writer_add(first ? w1 : w2, t->name, t->dtype, t->ndim, t->shape, t->data, &err)) fail_msg("%s", err.msg);
        fprintf(idx, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", t->name, first ? 1 : 2);
    }
    fprintf(idx, "}}\n");
    fclose(idx);
    if (rt_st_writer_write(w1, a, &err) || rt_st_writer_write(w2, b, &err)) fail_msg("%s", err.msg);
    rt_st_writer_free(w1);
    rt_st_writer_free(w2);
    rt_st_free(x);
    snprintf(imp, sizeof imp, "%s/imp-sharded.safetensors", dir);
    if (sh(out, sizeof out, STG " import " TINY " --hf %s -o %s", d, imp)) fail_msg("%s", out);
    assert_non_null(strstr(out, "from 2 weight files"));
    same_params(ckpt, imp);
    // bf16: every value the bf16 rounding of the checkpoint's
    snprintf(d, sizeof d, "%s/bf16", dir);
    make_dir(d, NULL);
    snprintf(a, sizeof a, "%s/model.safetensors", d);
    rewrite(path, a, NULL, NULL, NULL, NULL, RT_DT_BF16);
    snprintf(imp, sizeof imp, "%s/imp-bf16.safetensors", dir);
    if (sh(out, sizeof out, STG " import " TINY " --hf %s -o %s", d, imp)) fail_msg("%s", out);
    rt_st *c = open_st(ckpt), *y = open_st(imp);
    const rt_st_tensor *t = rt_st_find(c, "blocks.1.w2"), *u = rt_st_find(y, "blocks.1.w2");
    for (int64_t k = 0; k < t->numel; k++) {
        float v, r;
        memcpy(&v, (const char *)t->data + 4 * k, 4);
        memcpy(&r, (const char *)u->data + 4 * k, 4);
        assert_true(r == stg_bf16_to_f32(stg_f32_to_bf16(v)));
    }
    rt_st_free(c);
    rt_st_free(y);
}

static void test_tokenizer_files(void **s) {
    char out[8192], tok[160], d[160], path[200];
    snprintf(tok, sizeof tok, "%s/tok.json", dir);
    snprintf(d, sizeof d, "%s/hf-tok", dir);
    if (sh(out, sizeof out, STG " tokenizer train '" STG_SOURCE_DIR "/docs/ARCHITECTURE.md' --vocab 300 -o %s && " STG " train " TINY
                            " --device cpu --tokenizer %s --steps 1 --ckpt %s/ck300 && " STG " export " TINY " --tokenizer %s --init %s/ck300/ckpt.safetensors --hf %s",
           tok, tok, dir, tok, dir, d))
        fail_msg("%s", out);
    rt_tok *t;
    stg_err err;
    if (rt_tok_load(tok, &t, &err)) fail_msg("%s", err.msg);
    size_t len;
    char *want = rt_tok_hf_json_text(t, &len, &err);
    assert_non_null(want);
    snprintf(path, sizeof path, "%s/tokenizer.json", d);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = 0;
    char *got = tu_read_all(f, &n);
    fclose(f);
    assert_non_null(got);
    assert_int_equal(n, len);
    assert_memory_equal(got, want, len);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", d);
    assert_int_equal(access(path, R_OK), 0);
    snprintf(path, sizeof path, "%s/config.json", d);
    f = fopen(path, "rb");
    char *cfg = tu_read_all(f, NULL);
    fclose(f);
    assert_non_null(strstr(cfg, "\"vocab_size\": 300"));
    free(cfg);
    free(got);
    free(want);
    rt_tok_free(t);
}

// The Python used for the PyTorch check: $STG_PYTHON, else python3, else /usr/bin/python3, the first
// that imports torch and numpy.
static const char *torch_python(void) {
    static char py[512];
    const char *cands[] = {getenv("STG_PYTHON"), "python3", "/usr/bin/python3"};
    for (int i = 0; i < 3; i++) {
        if (!cands[i] || !*cands[i]) continue;
        char out[256];
        if (sh(out, sizeof out, "'%s' -c 'import torch, numpy'", cands[i]) == 0) {
            snprintf(py, sizeof py, "%s", cands[i]);
            return py;
        }
    }
    return NULL;
}

static void test_torch(void **s) {
    const char *py = torch_python();
    if (!py) {
        print_message("skipped: no Python with torch and numpy (set STG_PYTHON, or apt-get install python3-torch)\n");
        skip();
    }
    char out[8192], batch[160], dump[160];
    snprintf(batch, sizeof batch, "%s/batch.npy", dir);
    snprintf(dump, sizeof dump, "%s/dump.safetensors", dir);
    int32_t b[2 * 4 * 16];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 2 * 4 * 16; i++) { // xorshift ids in [0, 256)
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (int32_t)(x % 256);
    }
    int64_t shape[3] = {2, 4, 16};
    stg_err err;
    if (rt_npy_write(batch, RT_DT_I32, 3, shape, b, &err)) fail_msg("%s", err.msg);
    if (sh(out, sizeof out, STG " step " TINY " --set batch=4 --device cpu --init %s --batch %s --dump %s", ckpt, batch, dump))
        fail_msg("%s", out);
    if (sh(out, sizeof out, "'%s' '" STG_SOURCE_DIR "/tools/ref/hf_llama.py' logits --hf %s --batch %s --dump %s --tol 1e-4", py, hf, batch, dump))
        fail_msg("logits: %s", out);
    print_message("logits: %s", out);
    // stg eval on the checkpoint against the PyTorch evaluation of the export, on the same tokens
    if (sh(out, sizeof out, STG " eval " TINY " --device cpu --init %s --data %s --json", ckpt, data)) fail_msg("%s", out);
    const char *p = strstr(out, "\"loss\": ");
    assert_non_null(p);
    double loss = strtod(p + 8, NULL);
    if (sh(out, sizeof out, "'%s' '" STG_SOURCE_DIR "/tools/ref/hf_llama.py' eval --hf %s --data %s --ctx 16 --expect %.17g --tol 1e-5", py, hf,
           data, loss))
        fail_msg("eval: %s", out);
    print_message("eval: stg %.9f; %s", loss, out);
}

// Bad input: exit 2, a message, nothing written.
static void test_refusals(void **s) {
    char d[160], imp[200], path[200], out[8192], src[200];
    snprintf(d, sizeof d, "%s/bad", dir);
    snprintf(imp, sizeof imp, "%s/never.safetensors", dir);
    snprintf(src, sizeof src, "%s/model.safetensors", hf);
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    struct {
        const char *drop, *alter;
        alter_fn f;
        const char *extra, *sed, *want;
    } rows[] = {
        {"model.layers.1.self_attn.k_proj.weight", NULL, NULL, NULL, NULL,
         "no tensor 'model.layers.1.self_attn.k_proj.weight' (the model's 'blocks.1.wk', [32, 32])"},
        {NULL, "model.layers.0.mlp.up_proj.weight", fewer_rows, NULL, NULL, "'model.layers.0.mlp.up_proj.weight' has shape [63, 32]; the model's 'blocks.0.w3' is [64, 32]"},
        {NULL, "model.norm.weight", a_nan, NULL, NULL, "'model.norm.weight': element 3 is nan"},
        {NULL, NULL, NULL, "model.layers.0.self_attn.q_proj.bias", NULL, "tensor 'model.layers.0.self_attn.q_proj.bias' is no parameter"},
        {NULL, NULL, NULL, NULL, "s/\"hidden_size\": 32/\"hidden_size\": 48/", "\"hidden_size\" is 48 but the model's is 32"},
        {NULL, NULL, NULL, NULL, "s/\"rope_theta\": 10000/\"rope_theta\": 500000/", "\"rope_theta\" is 500000 but the model's is 10000"},
        {NULL, NULL, NULL, NULL, "s/\"num_key_value_heads\": 4/\"num_key_value_heads\": 2/", "\"num_key_value_heads\" is 2 but the model's is 4"},
        {NULL, NULL, NULL, NULL, "s/\"attention_bias\": false/\"attention_bias\": true/", "\"attention_bias\" is set"},
        {NULL, NULL, NULL, NULL, "s/LlamaForCausalLM/GPT2LMHeadModel/", "\"architectures\" does not name LlamaForCausalLM"},
        {NULL, NULL, NULL, NULL, "s/\"vocab_size\": 256,/\"vocab_size\": 256/", "expected ',' or '}'"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        make_dir(d, rows[i].sed);
        rewrite(src, path, rows[i].drop, rows[i].alter, rows[i].f, rows[i].extra, RT_DT_F32);
        int rc = sh(out, sizeof out, STG " import " TINY " --hf %s -o %s", d, imp);
        if (rc != 2 || !strstr(out, rows[i].want) || !strstr(out, "nothing written"))
            fail_msg("row %zu: exit %d (want 2), '%s' not in\n%s", i, rc, rows[i].want, out);
        assert_int_equal(access(imp, F_OK), -1);
    }
    // no weights, no config
    make_dir(d, NULL);
    assert_int_equal(sh(out, sizeof out, STG " import " TINY " --hf %s -o %s", d, imp), 2);
    assert_non_null(strstr(out, "has neither model.safetensors nor model.safetensors.index.json"));
    assert_int_equal(sh(out, sizeof out, STG " import " TINY " --hf %s/nowhere -o %s", dir, imp), 2);
    assert_non_null(strstr(out, "config.json"));
    // the output is an input
    assert_int_equal(sh(out, sizeof out, STG " import " TINY " --hf %s -o %s/model.safetensors", hf, hf), 2);
    assert_non_null(strstr(out, "is the same file as the weight file"));
    assert_int_equal(sh(out, sizeof out, STG " import " TINY " --hf %s -o '" STG_SOURCE_DIR "/models/tiny.yaml'", hf), 2);
    assert_int_equal(sh(out, sizeof out, STG " import " TINY " --precision bf16 --hf %s -o %s", hf, imp), 2);
    assert_non_null(strstr(out, "--precision: the parameters are read and written as float32"));
    // export: a directory that exists and is not empty is left as it is
    assert_int_equal(sh(out, sizeof out, STG " export " TINY " --init %s --hf %s", ckpt, hf), 2);
    assert_non_null(strstr(out, "exists and is not empty"));
    // export: parameters of another model (3 layers' names and shapes)
    char never[160];
    snprintf(never, sizeof never, "%s/never-hf", dir);
    assert_int_equal(sh(out, sizeof out, STG " export " TINY " --set n_layers=3 --init %s --hf %s", ckpt, never), 2);
    assert_non_null(strstr(out, "has no tensor 'blocks.2.ln1'"));
    assert_int_equal(sh(out, sizeof out, STG " export " TINY " --set d_ff=48 --init %s --hf %s", ckpt, never), 2);
    assert_non_null(strstr(out, "'blocks.0.w1' has shape [64, 32]; the model's is [48, 32]"));
    // a corrupted checkpoint: its checksum fails
    char bad[200];
    snprintf(bad, sizeof bad, "%s/corrupt.safetensors", dir);
    if (sh(out, sizeof out, "cp %s %s && printf '\\377\\377\\377\\377' | dd of=%s bs=1 seek=$(( $(stat -c %%s %s) - 64 )) conv=notrunc", ckpt, bad, bad, bad))
        fail_msg("%s", out);
    assert_int_equal(sh(out, sizeof out, STG " export " TINY " --init %s --hf %s", bad, never), 2);
    assert_non_null(strstr(out, "CRC"));
    // a model that is no family's
    assert_int_equal(sh(out, sizeof out, STG " export '" STG_SOURCE_DIR "/models/toy.yaml' --init %s --hf %s", ckpt, never), 2);
    assert_non_null(strstr(out, "is no model family stg exports"));
    assert_int_equal(access(never, F_OK), -1);
    // nothing temporary left beside the directories
    assert_int_equal(sh(out, sizeof out, "test -z \"$(ls -a %s | grep tmp)\"", dir), 0);
}

// Another family end to end (models/llama3, models/gpt2; skipped where the tree has no such file):
// train a few steps, export, import: every parameter back bitwise; the config's fields; with PyTorch,
// the logits of `stg step` and the loss of `stg eval` from the exported directory.
typedef struct {
    const char *model, *sets, *name;
    const char *config[8]; // substrings config.json must hold
    int tensors, permuted;
} family_case;

static void family_round_trip(const family_case *c) {
    char path[512], out[8192], d[200], ck[200], imp[200], cfgp[240];
    snprintf(path, sizeof path, STG_SOURCE_DIR "/models/%s", c->model);
    if (access(path, R_OK) != 0) {
        print_message("skipped: no %s in this tree (branch fam)\n", c->model);
        skip();
    }
    snprintf(d, sizeof d, "%s/hf-%s", dir, c->name);
    snprintf(ck, sizeof ck, "%s/ck-%s", dir, c->name);
    snprintf(imp, sizeof imp, "%s/imp-%s.safetensors", dir, c->name);
    if (sh(out, sizeof out, STG " train '%s' %s --device cpu --data %s --steps 3 --lr 1e-2 --ckpt %s && " STG " export '%s' %s --init %s/ckpt.safetensors --hf %s && " STG
                            " import '%s' %s --hf %s -o %s",
           path, c->sets, data, ck, path, c->sets, ck, d, path, c->sets, d, imp))
        fail_msg("%s", out);
    char want[128];
    snprintf(want, sizeof want, "%d tensors (%d with their rows permuted back", c->tensors, c->permuted);
    if (!strstr(out, want)) fail_msg("'%s' not in %s", want, out);
    // every parameter of the checkpoint, bitwise
    char ckf[240];
    snprintf(ckf, sizeof ckf, "%s/ckpt.safetensors", ck);
    rt_st *x = open_st(ckf), *y = open_st(imp);
    int n = 0;
    for (size_t i = 0; i < rt_st_count(x); i++) {
        const rt_st_tensor *t = rt_st_at(x, i), *u;
        if (strstr(t->name, ".adam_")) continue;
        if (!(u = rt_st_find(y, t->name)) || u->nbytes != t->nbytes || memcmp(u->data, t->data, t->nbytes)) fail_msg("%s differs", t->name);
        n++;
    }
    assert_int_equal(n, c->tensors);
    assert_int_equal(rt_st_count(y), (size_t)n);
    rt_st_free(x);
    rt_st_free(y);
    snprintf(cfgp, sizeof cfgp, "%s/config.json", d);
    FILE *f = fopen(cfgp, "r");
    assert_non_null(f);
    char *cfg = tu_read_all(f, NULL);
    fclose(f);
    for (int i = 0; i < 8 && c->config[i]; i++)
        if (!strstr(cfg, c->config[i])) fail_msg("'%s' not in %s", c->config[i], cfg);
    free(cfg);
    const char *py = torch_python();
    if (!py) {
        print_message("PyTorch check skipped: no Python with torch and numpy\n");
        return;
    }
    char batch[200], dump[200];
    snprintf(batch, sizeof batch, "%s/batch-%s.npy", dir, c->name);
    snprintf(dump, sizeof dump, "%s/dump-%s.safetensors", dir, c->name);
    int32_t b[2 * 2 * 16];
    for (int i = 0; i < 2 * 2 * 16; i++) b[i] = (int32_t)((i * 2654435761u) >> 8) % 256;
    int64_t shape[3] = {2, 2, 16};
    stg_err err;
    if (rt_npy_write(batch, RT_DT_I32, 3, shape, b, &err)) fail_msg("%s", err.msg);
    if (sh(out, sizeof out, STG " step '%s' %s --device cpu --init %s --batch %s --dump %s", path, c->sets, ckf, batch, dump)) fail_msg("%s", out);
    if (sh(out, sizeof out, "'%s' '" STG_SOURCE_DIR "/tools/ref/hf_llama.py' logits --hf %s --batch %s --dump %s --tol 1e-4", py, d, batch, dump))
        fail_msg("logits: %s", out);
    print_message("%s logits: %s", c->name, out);
    if (sh(out, sizeof out, STG " eval '%s' %s --device cpu --init %s --data %s --json", path, c->sets, ckf, data)) fail_msg("%s", out);
    const char *p = strstr(out, "\"loss\": ");
    assert_non_null(p);
    double loss = strtod(p + 8, NULL);
    if (sh(out, sizeof out, "'%s' '" STG_SOURCE_DIR "/tools/ref/hf_llama.py' eval --hf %s --data %s --ctx 16 --expect %.17g --tol 1e-5", py, d, data,
           loss))
        fail_msg("eval: %s", out);
    print_message("%s eval: stg %.9f; %s", c->name, loss, out);
}

#define LLAMA_SETS "--set vocab=256 --set d_model=32 --set n_heads=4 --set n_kv_heads=2 --set d_ff=64 --set n_layers=2 --set ctx=16 --set batch=2 --set fused_head=off"

static void test_llama3(void **s) {
    family_case c = {"llama3/llama3.yaml", LLAMA_SETS, "llama3",
                     {"\"num_key_value_heads\": 2", "\"rope_theta\": 500000", "\"tie_word_embeddings\": false", "\"head_dim\": 8"},
                     2 * 9 + 3, 4};
    family_round_trip(&c);
}

static void test_llama3_tied(void **s) {
    family_case c = {"llama3/llama3.yaml", LLAMA_SETS " --set tie_embeddings=on", "llama3-tied", {"\"tie_word_embeddings\": true"}, 2 * 9 + 2, 4};
    family_round_trip(&c);
}

static void test_gpt2(void **s) {
    family_case c = {"gpt2/gpt2.yaml",
                     "--set vocab=256 --set d_model=32 --set n_heads=4 --set n_layers=2 --set ctx=16 --set n_positions=16 --set batch=2 "
                     "--set fused_head=off",
                     "gpt2",
                     {"\"architectures\": [\"GPT2LMHeadModel\"]", "\"n_embd\": 32", "\"n_inner\": 128", "\"activation_function\": \"gelu_new\""},
                     2 * 12 + 4, 0};
    family_round_trip(&c);
}

// The JSON reader config.json goes through: values, escapes, and what it refuses.
static void test_json(void **s) {
    rt_json *v;
    stg_err err;
    const char *good = " {\"a\": [1, -2.5e3, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\"], \"b\": {}, \"c\": []} ";
    if (rt_json_parse(good, strlen(good), "t", &v, &err)) fail_msg("%s", err.msg);
    const rt_json *a = rt_json_get(v, "a");
    assert_true(a && a->type == RT_JSON_ARRAY && a->n == 6);
    assert_true(a->items[0].num == 1 && a->items[1].num == -2500 && a->items[2].b && !a->items[3].b && a->items[4].type == RT_JSON_NULL);
    assert_string_equal(a->items[5].str, "x\xc3\xa9\xf0\x9f\x98\x80\n");
    assert_int_equal(rt_json_get(v, "b")->type, RT_JSON_OBJECT);
    assert_null(rt_json_get(v, "d"));
    rt_json_free(v);
    const char *bad[][2] = {
        {"", "a value is missing"}, {"{", "an object member must start"}, {"[1,]", "expected a value"}, {"{\"a\":1,}", "must start with a string key"},
        {"{\"a\":1 \"b\":2}", "expected ',' or '}'"}, {"{\"a\":1,\"a\":2}", "a duplicate key"}, {"\"abc", "not closed"},
        {"\"\\x\"", "an unknown escape"}, {"\"\\ud800\"", "a lone high surrogate"}, {"\"\\udc00\"", "a lone low surrogate"},
        {"\"\\u0000\"", "\\u0000"}, {"\"\\u12\"", "4 hex digits"}, {"\"\xff\"", "invalid UTF-8"}, {"\"\xc0\xaf\"", "invalid UTF-8"},
        {"\"a\nb\"", "a control character"}, {"01", "text after the value"}, {"1.", "a digit must follow"}, {"1e", "an exponent needs"},
        {"-", "a number needs a digit"}, {"1e999", "out of the range"}, {"tru", "expected a value"}, {"[] []", "text after the value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (rt_json_parse(bad[i][0], strlen(bad[i][0]), "t", &v, &err) == 0) fail_msg("'%s' accepted", bad[i][0]);
        if (!strstr(err.msg, bad[i][1])) fail_msg("'%s': '%s' not in '%s'", bad[i][0], bad[i][1], err.msg);
    }
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    assert_int_equal(rt_json_parse(deep, 200, "t", &v, &err), -1);
    assert_non_null(strstr(err.msg, "nested more than 64 deep"));
    assert_int_equal(rt_json_parse(deep + 36, 128, "t", &v, &err), 0); // 64 deep is fine
    rt_json_free(v);
}

// The fuzz target's seeds and saved findings through its entry (parse, write back, parse again).
static void test_json_corpus(void **s) {
    const char *dirs[] = {STG_SOURCE_DIR "/tests/fuzz/corpus/json", STG_SOURCE_DIR "/tests/fuzz/regressions/json"};
    int n = 0;
    for (int k = 0; k < 2; k++) n += tu_replay(dirs[k], stg_fuzz_json, 0); // no findings saved yet: none
    assert_true(n >= 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_config), cmocka_unit_test(test_permutation), cmocka_unit_test(test_shards_and_bf16),
        cmocka_unit_test(test_tokenizer_files), cmocka_unit_test(test_torch), cmocka_unit_test(test_refusals), cmocka_unit_test(test_json), cmocka_unit_test(test_json_corpus),
        cmocka_unit_test(test_llama3), cmocka_unit_test(test_llama3_tied), cmocka_unit_test(test_gpt2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
