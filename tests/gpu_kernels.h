// The kernel-level GPU tests' bench (test_gpu_ops, test_gpu_head, test_gpu_mm_attn): a small graph
// the test builds, its tensors in device buffers of their own (or aliased, for in place), host
// values as fp32 converted to and from each tensor's dtype, outputs poisoned with 0xFF bytes (NaN)
// before a run, the schedule run op by op through cuda_op_run eagerly or captured into a CUDA Graph
// and replayed, the bytes a run wrote for bitwise comparisons, and the CPU reference op by op.
// Header only (static); include after <cmocka.h>, inside the program's `#ifdef STG_HAVE_CUDA`
// (tests/gpu.h frames the program).
#ifndef STG_TEST_GPU_KERNELS_H
#define STG_TEST_GPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "graph/graph.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "ops/registry.h"
#include "tests/gpu.h"
#include "tests/testutil.h"

static stg_cuda *ctx; // the kernel context every case runs on (gk_setup)

// A CUDA runtime call that must succeed, or the test fails with where and why.
#define CK(call)                                                                                                   \
    do {                                                                                                           \
        cudaError_t e_ = (call);                                                                                   \
        if (e_ != cudaSuccess) fail_msg("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));       \
    } while (0)

// f rounded to bf16 and back (round to nearest even).
static inline float gk_round_bf(float f) { return stg_bf16_to_f32(stg_f32_to_bf16(f)); }

// Host values of tensor t (fp32; i32 tensors hold their integers' bytes) to device bytes of its
// dtype, and back.
static inline void gk_to_dev(const stg_tensor *t, const float *src, void *dst) {
    int64_t n = stg_numel(t);
    if (t->dtype == STG_BF16)
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = stg_f32_to_bf16(src[i]);
    else
        memcpy(dst, src, (size_t)n * 4); // F32 and I32
}

static inline void gk_from_dev(const stg_tensor *t, const void *src, float *dst) {
    int64_t n = stg_numel(t);
    if (t->dtype == STG_BF16)
        for (int64_t i = 0; i < n; i++) dst[i] = stg_bf16_to_f32(((const uint16_t *)src)[i]);
    else
        memcpy(dst, src, (size_t)n * 4);
}

// Host values of tensor t (fp32) into its device buffer d, and back (out may be NULL); gk_read
// returns the device bytes it read (malloc'ed) for bitwise comparisons.
static inline void gk_upload(const stg_tensor *t, const float *src, void *d) {
    size_t bytes = (size_t)stg_bytes(t);
    void *raw = malloc(bytes ? bytes : 1);
    assert_non_null(raw);
    gk_to_dev(t, src, raw);
    CK(cudaMemcpy(d, raw, bytes, cudaMemcpyHostToDevice));
    free(raw);
}

static inline void *gk_read(const stg_tensor *t, const void *d, float *out) {
    size_t bytes = (size_t)stg_bytes(t);
    void *raw = malloc(bytes ? bytes : 1);
    assert_non_null(raw);
    CK(cudaMemcpy(raw, d, bytes, cudaMemcpyDeviceToHost));
    if (out) gk_from_dev(t, raw, out);
    return raw;
}

// Every tensor of a graph on the device, with its host values.
typedef struct gk_dev {
    int nt;
    void **dptr;  // device pointers (aliased where in place)
    float **host; // fp32 host values (inputs rounded to the device dtype)
    int *owned;   // dptr[t] was allocated for t
} gk_dev;

// Allocates device memory and zeroed host values for every tensor of g; alias_in >= 0 gives op's
// output 0 the address of that input (in place).
static inline void gk_dev_alloc(const stg_graph *g, int op, int alias_in, gk_dev *d) {
    d->nt = g->nt;
    d->dptr = calloc((size_t)g->nt, sizeof(void *));
    d->host = calloc((size_t)g->nt, sizeof(float *));
    d->owned = calloc((size_t)g->nt, sizeof(int));
    assert_true(d->dptr && d->host && d->owned);
    for (int t = 0; t < g->nt; t++) {
        int64_t n = stg_numel(&g->t[t]);
        d->host[t] = calloc((size_t)(n ? n : 1), sizeof(float));
        assert_non_null(d->host[t]);
        if (alias_in >= 0 && t == g->ops[op].out[0]) continue;
        CK(cudaMalloc(&d->dptr[t], (size_t)(stg_bytes(&g->t[t]) ? stg_bytes(&g->t[t]) : 4)));
        d->owned[t] = 1;
    }
    if (alias_in >= 0) d->dptr[g->ops[op].out[0]] = d->dptr[g->ops[op].in[alias_in]];
}

static inline void gk_dev_free(gk_dev *d) {
    for (int t = 0; t < d->nt; t++) {
        if (d->owned[t]) cudaFree(d->dptr[t]);
        free(d->host[t]);
    }
    free(d->dptr);
    free(d->host);
    free(d->owned);
}

// Uploads every tensor no op writes (the inputs) from its host values, and poisons every output that
// is not aliased to an input.
static inline void gk_upload_and_poison(const stg_graph *g, gk_dev *d) {
    for (int t = 0; t < g->nt; t++) {
        if (!d->dptr[t] || !d->owned[t]) continue;
        if (g->t[t].producer >= 0) CK(cudaMemset(d->dptr[t], 0xFF, (size_t)stg_bytes(&g->t[t])));
        else gk_upload(&g->t[t], d->host[t], d->dptr[t]);
    }
    CK(cudaDeviceSynchronize());
}

// Runs g's schedule on the device buffers ptr: eagerly, or captured into a CUDA Graph and replayed.
static inline void gk_run(const stg_graph *g, void **ptr, bool capture) {
    stg_err err = {{0}};
    cudaStream_t st = (cudaStream_t)cuda_stream(ctx);
    cudaGraph_t cg = NULL;
    if (capture) CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int s = 0; s < g->nsched; s++)
        if (cuda_op_run(ctx, g, g->schedule[s], ptr, &err)) {
            if (capture) cudaStreamEndCapture(st, &cg);
            fail_msg("cuda_op_run: %s", err.msg);
        }
    if (capture) {
        cudaGraphExec_t ex = NULL;
        CK(cudaStreamEndCapture(st, &cg));
        CK(cudaGraphInstantiateWithFlags(&ex, cg, 0));
        CK(cudaGraphLaunch(ex, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaGraphExecDestroy(ex));
        CK(cudaGraphDestroy(cg));
    }
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
}

// Whether the schedule writes tensor t (an op's output, or an input an op mutates).
static inline bool gk_written(const stg_graph *g, int t) {
    if (g->t[t].producer >= 0) return true;
    for (int s = 0; s < g->nsched; s++) {
        const stg_op *o = &g->ops[g->schedule[s]];
        for (int i = 0; i < o->n_in; i++)
            if (o->in[i] == t && ops_bit(ops_def(o->kind)->mutates_in, i)) return true;
    }
    return false;
}

// The device bytes of every tensor the schedule writes, concatenated (malloc'ed into *out).
static inline size_t gk_snapshot(const stg_graph *g, const gk_dev *d, unsigned char **out) {
    size_t total = 0;
    for (int t = 0; t < g->nt; t++)
        if (d->dptr[t] && gk_written(g, t)) total += (size_t)stg_bytes(&g->t[t]);
    unsigned char *buf = malloc(total ? total : 1), *p = buf;
    assert_non_null(buf);
    for (int t = 0; t < g->nt; t++)
        if (d->dptr[t] && gk_written(g, t)) {
            size_t b = (size_t)stg_bytes(&g->t[t]);
            CK(cudaMemcpy(p, d->dptr[t], b, cudaMemcpyDeviceToHost));
            p += b;
        }
    *out = buf;
    return total;
}

// After a first eager run of g's schedule: the bytes it wrote, a second eager run's and a captured
// graph's replay's (inputs uploaded again and outputs poisoned before each) must all be equal, or
// the test fails naming `what`.
static inline void gk_expect_repeatable(const stg_graph *g, gk_dev *d, const char *what) {
    unsigned char *s1, *s2, *s3;
    size_t n1 = gk_snapshot(g, d, &s1);
    gk_upload_and_poison(g, d);
    gk_run(g, d->dptr, false);
    size_t n2 = gk_snapshot(g, d, &s2);
    gk_upload_and_poison(g, d);
    gk_run(g, d->dptr, true);
    size_t n3 = gk_snapshot(g, d, &s3);
    assert_true(n1 == n2 && n1 == n3);
    if (memcmp(s1, s2, n1)) fail_msg("%s: a second run differs from the first", what);
    if (memcmp(s1, s3, n1)) fail_msg("%s: the CUDA Graph replay differs from eager launch", what);
    free(s1);
    free(s2);
    free(s3);
}

// The CPU reference of op on host buffers data (one per tensor), with the scratch the op asks for.
static inline int gk_cpu_run(const stg_graph *g, int op, void *const *data, stg_err *err) {
    size_t sb = cpu_op_scratch_bytes(g, op);
    void *scratch = sb ? malloc(sb) : NULL;
    int rc = cpu_op_run(g, op, data, scratch, sb, err);
    free(scratch);
    return rc;
}

// Per-tensor fp32 host buffers for the CPU reference of g: the inputs' values from vals (the
// device's, so both sides see the same rounded numbers), every output poisoned (NaN).
static inline float **gk_ref_alloc(const stg_graph *g, float *const *vals) {
    float **ref = calloc((size_t)g->nt, sizeof(float *));
    assert_non_null(ref);
    for (int t = 0; t < g->nt; t++) {
        int64_t n = stg_numel(&g->t[t]);
        size_t bytes = sizeof(float) * (size_t)(n ? n : 1);
        ref[t] = malloc(bytes);
        assert_non_null(ref[t]);
        if (g->t[t].producer >= 0 || !vals) memset(ref[t], 0xFF, bytes);
        else memcpy(ref[t], vals[t], bytes);
    }
    return ref;
}

static inline void gk_ref_free(const stg_graph *g, float **ref) {
    for (int t = 0; t < g->nt; t++) free(ref[t]);
    free(ref);
}

// cmocka group fixtures: the kernel context on device 0.
static inline int gk_setup(void **state) {
    (void)state;
    stg_err err = {{0}};
    stg_cuda_opts o = {.device = 0};
    if (cuda_new(&o, &ctx, &err)) {
        fprintf(stderr, "cuda_new: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static inline int gk_teardown(void **state) {
    (void)state;
    cuda_free(ctx);
    return 0;
}

// The cmocka group `tests` (an array) on the kernel context where a GPU is present; else skipped.
#define GK_RUN(tests) \
    (rt_cuda_available() ? (GPU_FILTER(), cmocka_run_group_tests(tests, gk_setup, gk_teardown)) : gpu_skipped("no GPU"))

#endif
