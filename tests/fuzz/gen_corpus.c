// Writes the binary seed files of the fuzz corpora with the library's own writers:
//   corpus/npy/          .npy arrays of every numpy dtype, 0-D to 3-D, format 1.0 and 2.0
//   corpus/safetensors/  small files shaped like stg checkpoints (parameters, AdamW state, metadata)
//   corpus/tokens/       token files: a 3-byte prefix (layout, vocab - 1; see fuzz_entry.h) + the file
//   corpus/expr/         dim expressions followed by --set lines
// Usage: fuzz_gen_corpus CORPUS_DIR   (run by tests/fuzz/run.sh when a corpus folder is missing)
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/npy.h"
#include "runtime/safetensors.h"

static const char *root;

static void die(const char *what, const stg_err *e) {
    fprintf(stderr, "fuzz_gen_corpus: %s: %s\n", what, e ? e->msg : strerror(errno));
    exit(1);
}

static const char *path(const char *dir, const char *name) {
    static char p[4096];
    snprintf(p, sizeof p, "%s/%s", root, dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/%s", root, dir, name);
    return p;
}

static void put(const char *dir, const char *name, const void *a, size_t na, const void *b, size_t nb) {
    FILE *f = fopen(path(dir, name), "wb");
    if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb) || fclose(f)) die(name, NULL);
}

static void npy_seeds(void) {
    stg_err e;
    unsigned char data[256];
    for (int i = 0; i < 256; i++) data[i] = (unsigned char)(i * 37 + 11);
    // Finite little-endian floats for the float types (the reader does not care; the round trip does).
    float f32[6] = {0.5f, -1.25f, 3.0f, 1e-3f, -7.5f, 42.0f};
    double f64[4] = {0.25, -2.0, 1e10, 3.5};
    struct { rt_dtype dt; int ndim; int64_t shape[3]; const void *p; const char *name; } s[] = {
        {RT_DT_F32, 2, {2, 3}, f32, "f32_2x3.npy"},   {RT_DT_F64, 1, {4}, f64, "f64_4.npy"},
        {RT_DT_F32, 0, {0}, f32, "f32_scalar.npy"},   {RT_DT_U8, 3, {2, 2, 2}, data, "u8_2x2x2.npy"},
        {RT_DT_U16, 1, {5}, data, "u16_5.npy"},       {RT_DT_I32, 2, {1, 3}, data, "i32_1x3.npy"},
        {RT_DT_I64, 1, {2}, data, "i64_2.npy"},       {RT_DT_F16, 2, {2, 2}, data, "f16_2x2.npy"},
        {RT_DT_F32, 2, {0, 3}, f32, "f32_0x3.npy"},
    };
    for (size_t i = 0; i < sizeof s / sizeof *s; i++)
        if (rt_npy_write(path("npy", s[i].name), s[i].dt, s[i].ndim, s[i].shape, s[i].p, &e)) die(s[i].name, &e);
    // Format 2.0 (u32 header length).
    char *h;
    size_t hl;
    int64_t sh[1] = {3};
    if (rt_npy_header(RT_DT_I32, 1, sh, 2, &h, &hl, &e)) die("v2 header", &e);
    put("npy", "i32_3_v2.npy", h, hl, data, 12);
    free(h);
}

static void st_seeds(void) {
    stg_err e;
    float w[12];
    for (int i = 0; i < 12; i++) w[i] = (float)i * 0.125f - 0.5f;
    double d[3] = {1, 2, 3};
    uint16_t bf[4] = {0x3f80, 0x4000, 0xbf80, 0x0000};
    int64_t s_w[2] = {3, 4}, s_g[1] = {4}, s_d[1] = {3}, s_bf[2] = {2, 2}, s_0[1] = {0};

    // Like a checkpoint of a tiny model: parameters, AdamW m and v, metadata.
    rt_st_writer *wr = rt_st_writer_new(&e);
    if (!wr || rt_st_writer_add(wr, "blocks.0.wq", RT_DT_F32, 2, s_w, w, &e) ||
        rt_st_writer_add(wr, "blocks.0.wq.adam_m", RT_DT_F32, 2, s_w, w, &e) ||
        rt_st_writer_add(wr, "blocks.0.wq.adam_v", RT_DT_F32, 2, s_w, w, &e) ||
        rt_st_writer_add(wr, "blocks.0.ln1", RT_DT_F32, 1, s_g, w, &e) ||
        rt_st_writer_meta(wr, "format", "stg-checkpoint-1", &e) || rt_st_writer_meta(wr, "model", "tiny-lm", &e) ||
        rt_st_writer_meta(wr, "precision", "fp32", &e) || rt_st_writer_meta(wr, "step", "12", &e) ||
        rt_st_writer_meta(wr, "dims", "vocab=256,d_model=4,n_layers=1", &e) ||
        rt_st_writer_write(wr, path("safetensors", "ckpt_like.safetensors"), &e))
        die("ckpt_like", &e);
    rt_st_writer_free(wr);

    // Mixed dtypes, a scalar, an empty tensor, a name with escapes and non-ASCII UTF-8.
    wr = rt_st_writer_new(&e);
    if (!wr || rt_st_writer_add(wr, "f64", RT_DT_F64, 1, s_d, d, &e) ||
        rt_st_writer_add(wr, "w\"q\\\xc3\xa9\xe2\x82\xac", RT_DT_F32, 2, s_w, w, &e) ||
        rt_st_writer_add(wr, "bf16", RT_DT_BF16, 2, s_bf, bf, &e) || rt_st_writer_add(wr, "scalar", RT_DT_I64, 0, NULL, d, &e) ||
        rt_st_writer_add(wr, "empty", RT_DT_U8, 1, s_0, NULL, &e) ||
        rt_st_writer_add(wr, "ids", RT_DT_I32, 1, s_g, w, &e) || rt_st_writer_add(wr, "u16", RT_DT_U16, 1, s_g, w, &e) ||
        rt_st_writer_add(wr, "f16", RT_DT_F16, 1, s_g, w, &e) ||
        rt_st_writer_write(wr, path("safetensors", "mixed.safetensors"), &e))
        die("mixed", &e);
    rt_st_writer_free(wr);

    // No tensors, only metadata.
    wr = rt_st_writer_new(&e);
    if (!wr || rt_st_writer_meta(wr, "note", "tab\there\nnewline \\u0041", &e) ||
        rt_st_writer_write(wr, path("safetensors", "meta_only.safetensors"), &e))
        die("meta_only", &e);
    rt_st_writer_free(wr);

    // A hand-written header (as another writer might lay it out: no padding, keys reordered).
    const char *j = "{\"b\":{\"data_offsets\":[0,8],\"shape\":[2],\"dtype\":\"F32\"},\"__metadata__\":{\"k\":\"v\"}}";
    unsigned char hdr[8];
    uint64_t n = strlen(j);
    for (int i = 0; i < 8; i++) hdr[i] = (unsigned char)(n >> (8 * i));
    char body[512];
    memcpy(body, j, n);
    memcpy(body + n, w, 8);
    put("safetensors", "handwritten.safetensors", hdr, 8, body, n + 8);
}

static void tok_seeds(void) {
    stg_err e;
    // .bin: raw uint16 tokens.
    uint16_t t[64];
    for (int i = 0; i < 64; i++) t[i] = (uint16_t)((i * 7) % 50);
    unsigned char pre[3] = {0, 49, 0}; // .bin, vocab 50
    put("tokens", "bin_vocab50", pre, 3, t, sizeof t);
    unsigned char pre2[3] = {0, 255, 255}; // .bin, vocab 65536
    put("tokens", "bin_vocab65536", pre2, 3, t, 4);
    // .npy: uint16 and int32 1-D arrays, written by rt_npy_write and prefixed.
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path("tokens", ".tmp.npy"));
    int32_t i32[10];
    for (int i = 0; i < 10; i++) i32[i] = i;
    int64_t n16 = 64, n32 = 10;
    struct { rt_dtype dt; int64_t *n; const void *p; unsigned char pre[3]; const char *name; } s[] = {
        {RT_DT_U16, &n16, t, {1, 49, 0}, "npy_u2_vocab50"},
        {RT_DT_I32, &n32, i32, {1, 9, 0}, "npy_i4_vocab10"},
    };
    for (size_t i = 0; i < sizeof s / sizeof *s; i++) {
        if (rt_npy_write(tmp, s[i].dt, 1, s[i].n, s[i].p, &e)) die(s[i].name, &e);
        FILE *f = fopen(tmp, "rb");
        char buf[4096];
        size_t k = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (!f || k == 0) die(s[i].name, NULL);
        fclose(f);
        put("tokens", s[i].name, s[i].pre, 3, buf, k);
    }
    remove(tmp);
}

static void expr_seeds(void) {
    static const char *s[][2] = {
        {"d_model_div", "d_model / n_heads\nbatch=2\nctx=16"},
        {"mul", "4 * d_model\nd_model=64\nn_heads=4\nd_ff=4 * d_model"},
        {"nested", "((d_model + 1) * 2 - -3) % 7\nn_layers=2\nvocab=256"},
        {"float", "1 / sqrt(d_model / n_heads)\nattention=naive\nn_layers=1"},
        {"inf", "-inf\nattention=flash\nhead_dim=d_model / n_heads"},
        {"overflow", "big * 2\nctx = 1024\nbatch=1"},
        {"float_exp", "1.5e-5 + 0.25\nn_heads=3"},
    };
    for (size_t i = 0; i < sizeof s / sizeof *s; i++) put("expr", s[i][0], s[i][1], strlen(s[i][1]), NULL, 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_gen_corpus CORPUS_DIR\n");
        return 2;
    }
    root = argv[1];
    mkdir(root, 0755);
    npy_seeds();
    st_seeds();
    tok_seeds();
    expr_seeds();
    return 0;
}
