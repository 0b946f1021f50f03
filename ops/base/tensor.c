// Tensor helpers of the base layer (ops/base/tensor.h).
#include "ops/base/tensor.h"

#include <stdio.h>
#include <string.h>

size_t stg_dtype_size(stg_dtype d) {
    static const size_t sz[STG_DTYPE_COUNT] = {[STG_F32] = 4, [STG_BF16] = 2, [STG_F64] = 8, [STG_I32] = 4};
    return (unsigned)d < STG_DTYPE_COUNT ? sz[d] : 0;
}

const char *stg_dtype_name(stg_dtype d) {
    static const char *n[STG_DTYPE_COUNT] = {[STG_F32] = "f32", [STG_BF16] = "bf16", [STG_F64] = "f64", [STG_I32] = "i32"};
    return (unsigned)d < STG_DTYPE_COUNT ? n[d] : "?";
}

const char *stg_class_name(stg_tclass c) {
    static const char *n[STG_CLASS_COUNT] = {
        [STG_CLASS_PARAM] = "param",           [STG_CLASS_GRAD] = "grad",
        [STG_CLASS_OPTIMIZER] = "optimizer",   [STG_CLASS_INPUT] = "input",
        [STG_CLASS_ACTIVATION] = "activation", [STG_CLASS_TEMPORARY] = "temporary",
        [STG_CLASS_WORKSPACE] = "workspace",
    };
    return (unsigned)c < STG_CLASS_COUNT ? n[c] : "?";
}

const char *stg_precision_name(stg_precision p) {
    switch (p) {
    case STG_PREC_FP32: return "fp32";
    case STG_PREC_BF16: return "bf16";
    case STG_PREC_FP64: return "fp64";
    }
    return "?";
}

const char *stg_phase_name(stg_phase p) {
    switch (p) {
    case STG_PHASE_FORWARD: return "forward";
    case STG_PHASE_BACKWARD: return "backward";
    case STG_PHASE_OPTIMIZER: return "optimizer";
    }
    return "?";
}

bool stg_class_persistent(stg_tclass c) {
    return c == STG_CLASS_PARAM || c == STG_CLASS_OPTIMIZER || c == STG_CLASS_INPUT || c == STG_CLASS_WORKSPACE;
}

bool stg_tensor_persistent(const stg_graph *g, int t) {
    stg_tclass c = g->t[t].cls;
    return stg_class_persistent(c) || (c == STG_CLASS_GRAD && g->grad_accum > 1);
}

int64_t stg_numel(const stg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int64_t stg_bytes(const stg_tensor *t) { return stg_numel(t) * (int64_t)stg_dtype_size(t->dtype); }

const char *stg_shape_str(const stg_tensor *t, char *buf, size_t n) {
    size_t k = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

int64_t stg_rows(const stg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i + 1 < t->ndim; i++) n *= t->shape[i];
    return n;
}

int64_t stg_last(const stg_tensor *t) { return t->ndim > 0 ? t->shape[t->ndim - 1] : 1; }

bool stg_same_shape(const stg_tensor *a, const stg_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

// Round to nearest even; NaN stays a (quiet) NaN.
uint16_t stg_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float stg_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
