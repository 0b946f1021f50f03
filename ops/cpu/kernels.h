// The raw CPU reference kernels: pointers and explicit sizes, no graph. Each kernel exists twice,
// over float (suffix _f32) and over double (suffix _f64); both are written once, over `real`, in
// ops/cpu/real/*.c. Every reduction accumulates in double. Shapes are PyTorch order, outermost
// first; "rows" is the product of all dims but the last.
//
// Kernels that can fail (a bad index, too little scratch) return 0 or -1 with a message in err;
// the rest return nothing. Unless a comment says an output may alias an input, it may not.
//
// No kernel allocates. The few that need working memory take `scratch` (scratch_bytes long,
// aligned to at least 8 bytes; its contents on entry do not matter) and fail, without touching
// their outputs, when it is smaller than their cpu_*_scratch_* function says. Those sizes count the
// OpenMP threads the kernel may use (omp_get_max_threads() at the call; 1 without OpenMP), so a
// buffer sized for one thread count is too small after the count is raised.
#ifndef STG_OPS_CPU_KERNELS_H
#define STG_OPS_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "graph/graph.h"

#define STG_CPU_KERNELS(T, S)                                                                      \
    /* embedding: tok (n) i32, W (V, D) -> y (n, D). Fails on a token outside [0, V). */          \
    int cpu_embedding_fwd_##S(const int32_t *tok, const T *W, T *y, int64_t n, int64_t V,        \
                              int64_t D, stg_err *err);                                            \
    /* tok (n), dy (n, D) -> dW (V, D): zeroed, then every dy row added to its token's row. */    \
    int cpu_embedding_bwd_##S(const int32_t *tok, const T *dy, T *dW, int64_t n, int64_t V,      \
                              int64_t D, void *scratch, size_t scratch_bytes, stg_err *err);      \
    size_t cpu_embedding_bwd_scratch_##S(int64_t n, int64_t V, int64_t D);                        \
    /* C (batch, m, n) = op(A) op(B). A (batch, m, k), or (batch, k, m) when ta. B (k, n), or */  \
    /* (n, k) when tb; with b_batched one such matrix per batch, else one shared by all. */       \
    int cpu_matmul_##S(const T *A, const T *B, T *C, int64_t batch, int64_t m, int64_t n,        \
                       int64_t k, int ta, int tb, int b_batched, void *scratch,                   \
                       size_t scratch_bytes, stg_err *err);                                        \
    size_t cpu_matmul_scratch_##S(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb, \
                                  int b_batched);                                                  \
    /* x (rows, D), w (D) -> y (rows, D), rstd (rows). */                                          \
    void cpu_rmsnorm_fwd_##S(const T *x, const T *w, T *y, T *rstd, int64_t rows, int64_t D,      \
                             double eps);                                                          \
    /* x (rows, D), w (D), rstd (rows), dy (rows, D) -> dx (rows, D), dw (D). */                   \
    void cpu_rmsnorm_bwd_##S(const T *x, const T *w, const T *rstd, const T *dy, T *dx, T *dw,    \
                             int64_t rows, int64_t D);                                             \
    /* x (rows, D), w (D), b (D) -> y (rows, D), stats (rows, 2) = [mean, rstd]. */                \
    void cpu_layernorm_fwd_##S(const T *x, const T *w, const T *b, T *y, T *stats, int64_t rows,  \
                               int64_t D, double eps);                                             \
    /* x, w, stats, dy -> dx (rows, D), dw (D), db (D). */                                         \
    void cpu_layernorm_bwd_##S(const T *x, const T *w, const T *stats, const T *dy, T *dx, T *dw, \
                               T *db, int64_t rows, int64_t D);                                    \
    /* x (outer, S, H, Dh) -> y, same shape; y may alias x. Dh even. inverse: rotate by -angle. */ \
    void cpu_rope_##S(const T *x, T *y, int64_t outer, int64_t S, int64_t H, int64_t Dh,          \
                      double theta, int inverse);                                                  \
    /* x (outer, Sq, Sk) -> y: fill where j > i + (Sk - Sq), else x. y may alias x. */             \
    void cpu_causal_mask_##S(const T *x, T *y, int64_t outer, int64_t Sq, int64_t Sk, double fill); \
    /* x (rows, N) -> y (rows, N), softmax over N. y may alias x. */                               \
    void cpu_softmax_fwd_##S(const T *x, T *y, int64_t rows, int64_t N);                          \
    /* y, dy (rows, N) -> dx = y (dy - sum(dy y)). dx may alias dy. */                             \
    void cpu_softmax_bwd_##S(const T *y, const T *dy, T *dx, int64_t rows, int64_t N);            \
    /* Causal attention. q, k, v (B, S, H, Dh) -> o (B, S, H, Dh), lse (B, H, S). scale 0 means */ \
    /* 1/sqrt(Dh). */                                                                              \
    int cpu_attention_fwd_##S(const T *q, const T *k, const T *v, T *o, T *lse, int64_t B,        \
                              int64_t S, int64_t H, int64_t Dh, double scale, void *scratch,      \
                              size_t scratch_bytes, stg_err *err);                                 \
    size_t cpu_attention_fwd_scratch_##S(int64_t B, int64_t S, int64_t H, int64_t Dh);            \
    /* q, k, v, o (B, S, H, Dh), lse (B, H, S), dout (B, S, H, Dh) -> dq, dk, dv (B, S, H, Dh). */ \
    int cpu_attention_bwd_##S(const T *q, const T *k, const T *v, const T *o, const T *lse,       \
                              const T *dout, T *dq, T *dk, T *dv, int64_t B, int64_t S,           \
                              int64_t H, int64_t Dh, double scale, void *scratch,                 \
                              size_t scratch_bytes, stg_err *err);                                 \
    size_t cpu_attention_bwd_scratch_##S(int64_t B, int64_t S, int64_t H, int64_t Dh);            \
    /* Elementwise over n elements. Outputs may alias inputs (the element is read first). */      \
    void cpu_silu_fwd_##S(const T *x, T *y, int64_t n);                                           \
    void cpu_silu_bwd_##S(const T *x, const T *dy, T *dx, int64_t n);                             \
    void cpu_relu_fwd_##S(const T *x, T *y, int64_t n);                                           \
    /* reads relu's output y */                                                                    \
    void cpu_relu_bwd_##S(const T *y, const T *dy, T *dx, int64_t n);                             \
    void cpu_swiglu_fwd_##S(const T *a, const T *b, T *y, int64_t n);                             \
    void cpu_swiglu_bwd_##S(const T *a, const T *b, const T *dy, T *da, T *db, int64_t n);        \
    void cpu_mul_##S(const T *a, const T *b, T *y, int64_t n);                                    \
    void cpu_add_##S(const T *a, const T *b, T *y, int64_t n);                                    \
    void cpu_scale_##S(const T *x, T *y, int64_t n, double factor);                               \
    /* reshape: y = x (n elements); nothing when y == x, memmove otherwise. */                    \
    void cpu_copy_##S(const T *x, T *y, int64_t n);                                               \
    /* x (shape[0], ..., shape[ndim-1]) -> y with dims d0 and d1 swapped, contiguous. */          \
    void cpu_transpose_##S(const T *x, T *y, int ndim, const int64_t *shape, int d0, int d1);    \
    /* logits (rows, V), tgt (rows) i32 -> loss (1) = mean(lse - logit[tgt]), lse (rows). */       \
    int cpu_cross_entropy_fwd_##S(const T *logits, const int32_t *tgt, T *loss, T *lse,           \
                                  int64_t rows, int64_t V, stg_err *err);                         \
    /* logits, tgt, lse -> dlogits (rows, V) = (softmax - onehot) / rows; may alias logits. */    \
    int cpu_cross_entropy_bwd_##S(const T *logits, const int32_t *tgt, const T *lse, T *dlogits,  \
                                  int64_t rows, int64_t V, stg_err *err);                         \
    /* Sum of squares of n elements, in double (global_norm adds these over its inputs). */        \
    double cpu_sumsq_##S(const T *x, int64_t n);                                                   \
    /* AdamW on n elements in place: param, m, v updated from grad, clipped by the global */       \
    /* gradient norm; step t >= 1 and lr are the schedule state. */                                \
    void cpu_adamw_##S(T *param, const T *grad, T *m, T *v, int64_t n, double norm, double step,  \
                       double lr, const stg_adamw_attrs *a);

STG_CPU_KERNELS(float, f32)
STG_CPU_KERNELS(double, f64)

// ---- for the kernels in ops/cpu/real/: scratch bookkeeping ------------------------------------

// Per-thread scratch rows are padded to CPU_SCRATCH_PAD doubles (64 bytes), so that two threads
// never write the same cache line.
#define CPU_SCRATCH_PAD 8

static inline size_t cpu_pad(size_t n_doubles) {
    return (n_doubles + CPU_SCRATCH_PAD - 1) / CPU_SCRATCH_PAD * CPU_SCRATCH_PAD;
}

// 0 when `scratch` holds the `need` bytes kernel `kernel` asks for and is aligned to 8 bytes; else
// -1 with a message. threads: the thread count `need` was computed for (0: it does not depend on it).
static inline int cpu_scratch_check(const char *kernel, const void *scratch, size_t have, size_t need,
                                    int threads, stg_err *err) {
    if (need == 0) return 0;
    if (!scratch || have < need)
        return threads > 0
                   ? stg_errf(err, "%s: scratch is %zu bytes, the kernel needs %zu (for %d threads)",
                              kernel, scratch ? have : (size_t)0, need, threads)
                   : stg_errf(err, "%s: scratch is %zu bytes, the kernel needs %zu", kernel,
                              scratch ? have : (size_t)0, need);
    if ((uintptr_t)scratch % 8 != 0)
        return stg_errf(err, "%s: scratch at %p is not aligned to 8 bytes", kernel, scratch);
    return 0;
}

#endif
