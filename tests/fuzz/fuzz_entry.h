// The entry points of the fuzz targets, shared by the libFuzzer targets (tests/fuzz/fuzz_*.c) and
// the regression test that replays every saved crash input (tests/test_fuzz_regressions.c), so a
// regression input runs through exactly the code the fuzzer ran.
//
// Each function takes one input and returns 0. It aborts (a crash the fuzzer reports) only when the
// library breaks one of its own promises: a parse that succeeds with fields pointing outside the
// input, a graph the loader accepts that fails validation, a plan that fails its own verification.
// Every "this input is bad" path must end in an error message, never a crash.
//
// Needs STG_SOURCE_DIR (the repository root) for the model files the loaders include.
#ifndef STG_FUZZ_ENTRY_H
#define STG_FUZZ_ENTRY_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/expr.h"
#include "graph/graph.h"
#include "graph/loader.h"
#include "planner/plan.h"
#include "runtime/data.h"
#include "runtime/npy.h"
#include "runtime/rng.h"
#include "runtime/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

#ifndef STG_SOURCE_DIR
#error "STG_SOURCE_DIR must name the repository root"
#endif

// Sums every byte of [p, p+n) so that ASan sees a read of the whole range.
static inline unsigned stg_fuzz_touch(const void *p, size_t n) {
    const volatile unsigned char *q = p;
    unsigned s = 0;
    for (size_t i = 0; i < n; i++) s += q[i];
    return s;
}

// The error message must be a NUL-terminated string (it is printed by tools/).
static inline void stg_fuzz_check_err(const stg_err *e) {
    STG_FUZZ_CHECK(memchr(e->msg, 0, sizeof e->msg) != NULL);
    STG_FUZZ_CHECK(e->msg[0] != 0);
}

#define STG_FUZZ_PLAN_MAX 3000

// ---- model: YAML text -> load -> autodiff -> schedule -> validate -> plan -> verify ------------
//
// The text is loaded as if it were the file models/fuzz.yaml, so `include: cs336/lm.yaml` (and any
// other relative include) resolves inside models/. The precision follows the input length's parity
// (fp32 or bf16: bf16 adds master weights to the plan).
static inline int stg_fuzz_model(const uint8_t *data, size_t size) {
    stg_load_opts o = {size % 2 ? STG_PREC_BF16 : STG_PREC_FP32, NULL, 0};
    stg_err err;
    err.msg[0] = 0;
    stg_graph *g = NULL;
    if (graph_load_string((const char *)data, size, STG_SOURCE_DIR "/models/fuzz.yaml", &o, &g, &err)) {
        stg_fuzz_check_err(&err);
        return 0;
    }
    STG_FUZZ_CHECK(g && g->loss >= 0 && g->loss < g->nt);
    if (graph_validate(g, &err)) {
        fprintf(stderr, "loaded graph fails validation: %s\n", err.msg);
        abort();
    }
    stg_optim_config oc = graph_optim_defaults();
    if (graph_autodiff(g, &oc, &err) || graph_schedule(g, &err)) {
        // A model with no parameter, say, has nothing to train: an error, not a crash.
        stg_fuzz_check_err(&err);
        graph_free(g);
        return 0;
    }
    if (graph_validate(g, &err)) {
        fprintf(stderr, "graph fails validation after autodiff: %s\n", err.msg);
        abort();
    }
    (void)graph_phase_flops(g, STG_PHASE_FORWARD);
    (void)graph_param_count(g);
    // The planner's best fit is quadratic in the number of storages, by design (a few thousand in
    // the largest real models): planning 10^4 tensors under ASan takes seconds, so only graphs of
    // up to STG_FUZZ_PLAN_MAX tensors are planned here.
    stg_plan *p = NULL;
    if (g->nt > STG_FUZZ_PLAN_MAX) {
        graph_free(g);
        return 0;
    }
    if (plan_build(g, NULL, &p, &err)) {
        stg_fuzz_check_err(&err);
    } else {
        if (plan_verify(g, p, &err)) {
            fprintf(stderr, "plan fails verification: %s\n", err.msg);
            abort();
        }
        STG_FUZZ_CHECK(p->peak_bytes >= p->lower_bound_bytes && p->lower_bound_bytes >= p->persistent_bytes);
        plan_free(p);
    }
    graph_free(g);
    return 0;
}

// ---- dim expressions and --set overrides --------------------------------------------------------
//
// Input: the first line is an expression, evaluated as an integer dim expression and as a float
// attribute expression over a few known names; every following line (at most 16) is a --set
// override applied to the CS336 LM (models/cs336/lm.yaml), which is then loaded and validated.

static int stg_fuzz_lookup(void *ctx, const char *name, int64_t *val, stg_err *err) {
    (void)ctx;
    static const struct { const char *n; int64_t v; } known[] = {
        {"d_model", 768}, {"n_heads", 12}, {"vocab", 10000}, {"ctx", 256}, {"big", INT64_MAX}, {"neg", -1}, {"zero", 0},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strcmp(known[i].n, name) == 0) {
            *val = known[i].v;
            return 0;
        }
    if (strcmp(name, "cycle") == 0) return stg_errf(err, "dim 'cycle' depends on itself");
    return 1;
}

static char *stg_fuzz_lm_text;
static size_t stg_fuzz_lm_len;

static inline int stg_fuzz_expr(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    const char *nl = memchr(s, '\n', size);
    size_t elen = nl ? (size_t)(nl - s) : size;
    stg_loc loc = {"fuzz", 1, 1};
    stg_err err;
    int64_t iv;
    double fv;
    if (expr_eval_int(s, elen, stg_fuzz_lookup, NULL, loc, &iv, &err)) stg_fuzz_check_err(&err);
    if (expr_eval_float(s, elen, stg_fuzz_lookup, NULL, loc, &fv, &err)) stg_fuzz_check_err(&err);
    if (!nl) return 0;

    if (!stg_fuzz_lm_text) {
        FILE *f = fopen(STG_SOURCE_DIR "/models/cs336/lm.yaml", "rb");
        STG_FUZZ_CHECK(f != NULL);
        stg_fuzz_lm_text = malloc(1 << 16);
        STG_FUZZ_CHECK(stg_fuzz_lm_text != NULL);
        stg_fuzz_lm_len = fread(stg_fuzz_lm_text, 1, 1 << 16, f);
        fclose(f);
    }
    // The --set strings: NUL-terminated copies of the remaining lines.
    size_t rest = size - elen - 1;
    char *buf = malloc(rest + 1);
    STG_FUZZ_CHECK(buf != NULL);
    memcpy(buf, nl + 1, rest);
    buf[rest] = 0;
    const char *sets[16];
    int n = 0;
    for (char *p = buf; n < 16;) {
        sets[n++] = p;
        char *e = strchr(p, '\n');
        if (!e) break;
        *e = 0;
        p = e + 1;
    }
    stg_load_opts o = {STG_PREC_FP32, sets, n};
    stg_graph *g = NULL;
    if (graph_load_string(stg_fuzz_lm_text, stg_fuzz_lm_len, STG_SOURCE_DIR "/models/cs336/lm.yaml", &o, &g, &err)) {
        stg_fuzz_check_err(&err);
    } else {
        if (graph_validate(g, &err)) {
            fprintf(stderr, "loaded graph fails validation: %s\n", err.msg);
            abort();
        }
        graph_free(g);
    }
    free(buf);
    return 0;
}

// ---- .npy ---------------------------------------------------------------------------------------

static inline int stg_fuzz_npy(const uint8_t *data, size_t size) {
    // An exact-size heap copy: ASan flags any read past the end.
    uint8_t *buf = malloc(size ? size : 1);
    STG_FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    rt_npy_info info;
    stg_err err;
    if (rt_npy_parse(buf, size, &info, &err)) {
        stg_fuzz_check_err(&err);
        free(buf);
        return 0;
    }
    size_t es = rt_dtype_size(info.dtype);
    STG_FUZZ_CHECK(es > 0 && info.ndim >= 0 && info.ndim <= RT_NPY_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < info.ndim; i++) {
        STG_FUZZ_CHECK(info.shape[i] >= 0);
        STG_FUZZ_CHECK(!__builtin_mul_overflow(numel, info.shape[i], &numel));
    }
    STG_FUZZ_CHECK(numel == info.numel);
    STG_FUZZ_CHECK(info.nbytes == (size_t)numel * es);
    STG_FUZZ_CHECK(info.data_offset <= size && info.nbytes == size - info.data_offset);
    if (info.nbytes) {
        STG_FUZZ_CHECK((const uint8_t *)info.data == buf + info.data_offset);
        (void)stg_fuzz_touch(info.data, info.nbytes);
    }
    // Round trip: the header the writer makes for this dtype and shape parses back to the same array.
    if (info.dtype != RT_DT_BF16 && info.nbytes <= (1u << 20)) {
        char *h = NULL;
        size_t hl = 0;
        if (rt_npy_header(info.dtype, info.ndim, info.shape, 0, &h, &hl, &err) == 0) {
            uint8_t *b2 = malloc(hl + info.nbytes);
            STG_FUZZ_CHECK(b2 != NULL);
            memcpy(b2, h, hl);
            if (info.nbytes) memcpy(b2 + hl, info.data, info.nbytes);
            rt_npy_info i2;
            if (rt_npy_parse(b2, hl + info.nbytes, &i2, &err)) {
                fprintf(stderr, "written header does not parse: %s\n", err.msg);
                abort();
            }
            STG_FUZZ_CHECK(i2.dtype == info.dtype && i2.ndim == info.ndim && i2.numel == info.numel);
            for (int i = 0; i < info.ndim; i++) STG_FUZZ_CHECK(i2.shape[i] == info.shape[i]);
            free(b2);
            free(h);
        } else {
            stg_fuzz_check_err(&err);
        }
    }
    free(buf);
    return 0;
}

// ---- safetensors ----------------------------------------------------------------------------------

static inline int stg_fuzz_safetensors(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1); // malloc is 16-byte aligned, as a mapping would be
    STG_FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    rt_st *st = NULL;
    stg_err err;
    if (rt_st_parse(buf, size, &st, &err)) {
        stg_fuzz_check_err(&err);
        free(buf);
        return 0;
    }
    size_t n = rt_st_count(st);
    STG_FUZZ_CHECK(n <= RT_ST_MAX_TENSORS);
    for (size_t i = 0; i < n; i++) {
        const rt_st_tensor *t = rt_st_at(st, i);
        STG_FUZZ_CHECK(t && t->name && t->ndim >= 0 && t->ndim <= RT_ST_MAX_DIMS);
        STG_FUZZ_CHECK(t->begin <= t->end && t->end - t->begin == t->nbytes);
        STG_FUZZ_CHECK(t->nbytes == (size_t)t->numel * rt_dtype_size(t->dtype));
        if (t->nbytes) {
            STG_FUZZ_CHECK((const uint8_t *)t->data >= buf && (const uint8_t *)t->data + t->nbytes <= buf + size);
            (void)stg_fuzz_touch(t->data, t->nbytes);
        }
        (void)stg_fuzz_touch(t->name, strlen(t->name));
        STG_FUZZ_CHECK(rt_st_find(st, t->name) == t);
    }
    for (size_t i = 0; i < rt_st_meta_count(st); i++) {
        const char *k, *v;
        rt_st_meta_at(st, i, &k, &v);
        STG_FUZZ_CHECK(k && v);
        STG_FUZZ_CHECK(rt_st_meta_get(st, k) == v);
    }
    rt_st_free(st);
    free(buf);
    return 0;
}

// ---- token files ----------------------------------------------------------------------------------
//
// Input: byte 0 picks the layout (bit 0: ".npy", else a raw ".bin"), bytes 1-2 the vocab - 1
// (little-endian u16, so vocab is 1 to 65536); the rest is the file, written to a temporary file
// (rt_tokens_open takes a path) and opened, validated, and sampled.

static char stg_fuzz_tmpdir[256];

static void stg_fuzz_tmp_cleanup(void) {
    char p[300];
    snprintf(p, sizeof p, "%s/t.bin", stg_fuzz_tmpdir);
    unlink(p);
    snprintf(p, sizeof p, "%s/t.npy", stg_fuzz_tmpdir);
    unlink(p);
    rmdir(stg_fuzz_tmpdir);
}

static inline int stg_fuzz_tokens(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    if (!stg_fuzz_tmpdir[0]) { // TMPDIR, else memory (/dev/shm) where there is one, else /tmp
        const char *t = getenv("TMPDIR");
        if (!t || !*t) t = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(stg_fuzz_tmpdir, sizeof stg_fuzz_tmpdir, "%s/stg-fuzz-XXXXXX", t);
        STG_FUZZ_CHECK(mkdtemp(stg_fuzz_tmpdir) != NULL);
        atexit(stg_fuzz_tmp_cleanup);
    }
    bool npy = data[0] & 1;
    int64_t vocab = (int64_t)(data[1] | data[2] << 8) + 1;
    char path[300];
    snprintf(path, sizeof path, "%s/t.%s", stg_fuzz_tmpdir, npy ? "npy" : "bin");
    // A new file each input, not the last one truncated (ext4 starts writing back a file truncated
    // to zero, auto_da_alloc): the truncating open once took over 2 s in CI beside nine other
    // fuzzers, a libFuzzer timeout inside open(2). Memory-backed /dev/shm is the default directory.
    STG_FUZZ_CHECK(unlink(path) == 0 || errno == ENOENT);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    STG_FUZZ_CHECK(fd >= 0);
    size_t off = 3;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        STG_FUZZ_CHECK(w > 0);
        off += (size_t)w;
    }
    STG_FUZZ_CHECK(close(fd) == 0);
    rt_tokens *tk = NULL;
    stg_err err;
    if (rt_tokens_open(path, vocab, &tk, &err)) {
        stg_fuzz_check_err(&err);
        return 0;
    }
    int64_t n = rt_tokens_count(tk);
    STG_FUZZ_CHECK(n >= 1);
    STG_FUZZ_CHECK(rt_tokens_at(tk, -1) == -1 && rt_tokens_at(tk, n) == -1);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = rt_tokens_at(tk, i);
        STG_FUZZ_CHECK(v >= 0 && v < vocab);
    }
    rt_rng rng;
    rt_rng_seed(&rng, (uint64_t)size);
    int32_t tok[2 * 8], tgt[2 * 8];
    int64_t ctx = n - 1 < 8 ? n - 1 : 8;
    if (ctx >= 1) {
        STG_FUZZ_CHECK(rt_tokens_batch(tk, &rng, 2, ctx, tok, tgt, &err) == 0);
        for (int64_t i = 0; i < 2 * ctx; i++) STG_FUZZ_CHECK(tok[i] >= 0 && tok[i] < vocab && tgt[i] >= 0 && tgt[i] < vocab);
    }
    // One more than the file holds: an error, not a read past the end.
    int32_t big_tok[16], big_tgt[16];
    if (n <= 16 && rt_tokens_batch(tk, &rng, 1, n, big_tok, big_tgt, &err) == 0) abort();
    rt_tokens_free(tk);
    return 0;
}

#endif
