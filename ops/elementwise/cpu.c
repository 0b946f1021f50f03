// The elementwise family on the CPU backend: runners for silu, silu_bwd, relu, relu_bwd, swiglu, swiglu_bwd, mul, add, scale, reading the op's tensors and
// attributes and calling the float or double kernels (ops/elementwise/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/elementwise/kernels.h"

// The elementwise ops: all inputs and outputs have n = numel(input 0) elements.
#define CPU_ELEMENTWISE_1_1(runner, kernel)                                                           \
    static int runner(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,         \
                      size_t scratch_bytes, int f64, stg_err *err) {                                  \
        int64_t n = stg_numel(IN(g, op, 0));                                                          \
        if (cpu_same_numel(g, op, n, err)) return -1;                                                 \
        KCALL(f64, kernel, DIN(data, op, 0), DOUT(data, op, 0), n);                                   \
        return 0;                                                                                     \
    }
#define CPU_ELEMENTWISE_2_1(runner, kernel)                                                           \
    static int runner(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,         \
                      size_t scratch_bytes, int f64, stg_err *err) {                                  \
        int64_t n = stg_numel(IN(g, op, 0));                                                          \
        if (cpu_same_numel(g, op, n, err)) return -1;                                                 \
        KCALL(f64, kernel, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0), n);                 \
        return 0;                                                                                     \
    }

CPU_ELEMENTWISE_1_1(run_silu, cpu_silu_fwd)       // x -> y
CPU_ELEMENTWISE_2_1(run_silu_bwd, cpu_silu_bwd)   // x, dy -> dx
CPU_ELEMENTWISE_1_1(run_relu, cpu_relu_fwd)       // x -> y
CPU_ELEMENTWISE_2_1(run_relu_bwd, cpu_relu_bwd)   // y, dy -> dx
CPU_ELEMENTWISE_1_1(run_gelu, cpu_gelu_fwd)       // x -> y
CPU_ELEMENTWISE_2_1(run_gelu_bwd, cpu_gelu_bwd)   // x, dy -> dx
CPU_ELEMENTWISE_2_1(run_swiglu, cpu_swiglu_fwd)   // a, b -> y
CPU_ELEMENTWISE_2_1(run_mul, cpu_mul)             // a, b -> y


// a, b, dy -> da, db
static int run_swiglu_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                          size_t scratch_bytes, int f64, stg_err *err) {
    int64_t n = stg_numel(IN(g, op, 0));
    if (cpu_same_numel(g, op, n, err)) return -1;
    KCALL(f64, cpu_swiglu_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DOUT(data, op, 0),
          DOUT(data, op, 1), n);
    return 0;
}

// a, b -> y = a + b, or y += a + b (gradient accumulation: op->accum)
static int run_add(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                   size_t scratch_bytes, int f64, stg_err *err) {
    int64_t n = stg_numel(IN(g, op, 0));
    if (cpu_same_numel(g, op, n, err)) return -1;
    if (op->accum & 1u) KCALL(f64, cpu_add_acc, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0), n);
    else KCALL(f64, cpu_add, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0), n);
    return 0;
}

// x -> y = factor x, or y += factor x (gradient accumulation: op->accum)
static int run_scale(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                     size_t scratch_bytes, int f64, stg_err *err) {
    int64_t n = stg_numel(IN(g, op, 0));
    if (cpu_same_numel(g, op, n, err)) return -1;
    if (op->accum & 1u) KCALL(f64, cpu_scale_acc, DIN(data, op, 0), DOUT(data, op, 0), n, op->a.scale.factor);
    else KCALL(f64, cpu_scale, DIN(data, op, 0), DOUT(data, op, 0), n, op->a.scale.factor);
    return 0;
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_silu = {run_silu, NULL, 0};
const stg_cpu_rec stg_cpu_silu_bwd = {run_silu_bwd, NULL, 0};
const stg_cpu_rec stg_cpu_relu = {run_relu, NULL, 0};
const stg_cpu_rec stg_cpu_relu_bwd = {run_relu_bwd, NULL, 0};
const stg_cpu_rec stg_cpu_gelu = {run_gelu, NULL, 0};
const stg_cpu_rec stg_cpu_gelu_bwd = {run_gelu_bwd, NULL, 0};
const stg_cpu_rec stg_cpu_swiglu = {run_swiglu, NULL, 0};
const stg_cpu_rec stg_cpu_swiglu_bwd = {run_swiglu_bwd, NULL, 0};
const stg_cpu_rec stg_cpu_mul = {run_mul, NULL, 0};
const stg_cpu_rec stg_cpu_add = {run_add, NULL, 0};
const stg_cpu_rec stg_cpu_scale = {run_scale, NULL, 0};
