// Tensor helpers of the base layer: names of the IR's enums, element counts and bytes, shape
// strings, bf16 conversion. Includes nothing outside ops/base/.
#ifndef STG_BASE_TENSOR_H
#define STG_BASE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/base/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t stg_dtype_size(stg_dtype d);
const char *stg_dtype_name(stg_dtype d);
const char *stg_class_name(stg_tclass c);
const char *stg_precision_name(stg_precision p);
const char *stg_phase_name(stg_phase p);
bool stg_class_persistent(stg_tclass c);
// Whether tensor t of g lives for the whole run (the planner's persistent region): the persistent
// classes, and the parameter gradients of a graph that accumulates them over micro-batches
// (g->grad_accum > 1).
bool stg_tensor_persistent(const stg_graph *g, int t);

int64_t stg_numel(const stg_tensor *t);
int64_t stg_bytes(const stg_tensor *t);
int64_t stg_rows(const stg_tensor *t); // product of all dims but the last (1 for a scalar)
int64_t stg_last(const stg_tensor *t); // the last dim (1 for a scalar)
bool stg_same_shape(const stg_tensor *a, const stg_tensor *b);
// "[4, 256, 768]" into buf.
const char *stg_shape_str(const stg_tensor *t, char *buf, size_t n);

// bf16 <-> f32 on the host: round to nearest even, NaN kept.
uint16_t stg_f32_to_bf16(float f);
float stg_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif
