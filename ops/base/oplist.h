// The one list of op kinds and their typed attributes. The enum, the names, the YAML lookup, the
// registry's table of rules and every backend's table of records are generated from it: each
// X(ENUM, name, family, attribute-struct) row names the op-family folder ops/<family>/ that defines
// `stg_rule_<name>` (rules.c), `stg_cpu_<name>` (cpu.c) and `stg_cuda_<name>` (cuda.cu); a missing
// one does not link. Adding an op kind: one row here, plus its family's files.
#ifndef STG_OPLIST_H
#define STG_OPLIST_H

#include <stdint.h>

#define STG_MAX_DIMS 6

// Typed op parameters: each op kind names its struct in its row below.
typedef struct { int unused; } stg_no_attrs;
typedef struct { int64_t vocab; } stg_embedding_bwd_attrs;          // rows of the weight
// bias: input 2 is a bias (d_out) added to every row (set by the loader for linear(x, w, b)); a
// folded addend (graph_fold_add) then comes after it
typedef struct { int bias; } stg_linear_attrs;
typedef struct { int grad_out; } stg_sum_rows_attrs;               // output in the graph's grad dtype
typedef struct { int64_t positions; int grad_out; } stg_pos_embedding_bwd_attrs; // rows of the table
typedef struct { int ta, tb, grad_out; } stg_matmul_attrs;          // op(A) op(B), op = transpose if set;
                                                                    // grad_out: output in the graph's grad dtype
                                                                    // (1), or a parameter gradient kept in the
                                                                    // activation dtype (2: bf16_grads)
typedef struct { double eps; } stg_norm_attrs;
typedef struct { double theta; int inverse; } stg_rope_attrs;       // inverse: rotate by -angle (the backward)
typedef struct { double fill; } stg_mask_attrs;                     // value written above the diagonal
typedef struct { double scale; } stg_attention_attrs;               // 0 means 1/sqrt(head_dim)
typedef struct { double factor; } stg_scale_attrs;                  // cross_entropy_bwd: the loss gradient (0 means 1)
typedef struct { int ndim; int64_t shape[STG_MAX_DIMS]; } stg_reshape_attrs;
typedef struct { int d0, d1; } stg_transpose_attrs;                 // swaps two dims (a copy)
typedef struct { int64_t n; } stg_repeat_kv_attrs;                  // each head repeated n times
// slot > 0: the optimizer-in-backward form: the op's last input is the per-parameter slots of the
// squared gradient norms (WORKSPACE), and the op writes the sum of squares of its (unclipped)
// gradient into element slot - 1; input 4 (the clipping norm) is then the previous step's norm.
typedef struct { double beta1, beta2, eps, weight_decay, max_norm; int slot; } stg_adamw_attrs;
// The learning-rate schedule, advanced on the device: step += 1, lr = f(step - 1), f in
// ops/optim/schedule.h. Linear warm-up from 0 over `warmup` steps, then by kind: STG_LR_COSINE
// (CS336's cosine down to min_lr at step cosine_steps; the zero value), STG_LR_CONSTANT (lr),
// STG_LR_LINEAR (straight down to min_lr at cosine_steps), STG_LR_WSD (warm-up, stable at lr, then
// a decay of shape wsd_shape (STG_WSD_*) to min_lr over the last round(wsd_decay_frac x cosine_steps)
// steps before cosine_steps). cosine_steps 0: constant lr after the warm-up, whatever the kind.
enum { STG_LR_COSINE = 0, STG_LR_CONSTANT, STG_LR_LINEAR, STG_LR_WSD, STG_LR_KINDS };
enum { STG_WSD_LINEAR = 0, STG_WSD_COSINE, STG_WSD_SQRT, STG_WSD_SHAPES };
typedef struct { double lr, min_lr; int64_t warmup, cosine_steps; int kind, wsd_shape; double wsd_decay_frac; } stg_lr_attrs;
typedef struct { int64_t root; } stg_comm_attrs; // broadcast: the rank whose values everyone gets
typedef struct { int64_t chunk; double grad_scale; int64_t late_dw; } stg_lce_attrs; // linear_cross_entropy: rows per chunk (0:
                                                                   // chosen by the op); backward: the loss gradient (1 / micro-batches;
                                                                   // set by its rule); late_dw 1: dW made late, by an op of its own
// Decoding (ops/decode): attention over a KV cache at the position held on the device. scale 0
// means 1/sqrt(head_dim); rope_theta > 0: q and k are rotated (RoPE) at that position first.
typedef struct { double scale, rope_theta; } stg_attention_cached_attrs;
// The next token from the last row of logits: greedy when temperature is 0, else drawn with
// top_k (0: off) and top_p (1: off) from the counter-based uniform of (seed, position); the
// position advances by `advance`.
typedef struct { double temperature, top_p; int64_t top_k, seed, advance; } stg_sample_attrs;

typedef union stg_attrs {
    stg_no_attrs none;
    stg_embedding_bwd_attrs embedding_bwd;
    stg_linear_attrs linear;
    stg_sum_rows_attrs sum_rows;
    stg_pos_embedding_bwd_attrs pos_embedding_bwd;
    stg_matmul_attrs matmul;
    stg_norm_attrs norm;
    stg_rope_attrs rope;
    stg_mask_attrs mask;
    stg_attention_attrs attention;
    stg_scale_attrs scale;
    stg_reshape_attrs reshape;
    stg_transpose_attrs transpose;
    stg_repeat_kv_attrs repeat_kv;
    stg_adamw_attrs adamw;
    stg_lr_attrs lr;
    stg_comm_attrs comm;
    stg_lce_attrs lce;
    stg_attention_cached_attrs attention_cached;
    stg_sample_attrs sample;
} stg_attrs;

#define STG_OP_LIST(X)                                                  \
    X(EMBEDDING, embedding, embedding, stg_no_attrs)                    \
    X(EMBEDDING_BWD, embedding_bwd, embedding, stg_embedding_bwd_attrs) \
    X(LINEAR, linear, matmul, stg_linear_attrs)                         \
    X(MATMUL, matmul, matmul, stg_matmul_attrs)                         \
    X(RMSNORM, rmsnorm, norm, stg_norm_attrs)                           \
    X(RMSNORM_BWD, rmsnorm_bwd, norm, stg_norm_attrs)                   \
    X(LAYERNORM, layernorm, norm, stg_norm_attrs)                       \
    X(LAYERNORM_BWD, layernorm_bwd, norm, stg_norm_attrs)               \
    X(ROPE, rope, rope, stg_rope_attrs)                                 \
    X(CAUSAL_MASK, causal_mask, softmax, stg_mask_attrs)                \
    X(SOFTMAX, softmax, softmax, stg_no_attrs)                          \
    X(SOFTMAX_BWD, softmax_bwd, softmax, stg_no_attrs)                  \
    X(ATTENTION, attention, attention, stg_attention_attrs)             \
    X(ATTENTION_BWD, attention_bwd, attention, stg_attention_attrs)     \
    X(SILU, silu, elementwise, stg_no_attrs)                            \
    X(SILU_BWD, silu_bwd, elementwise, stg_no_attrs)                    \
    X(RELU, relu, elementwise, stg_no_attrs)                            \
    X(RELU_BWD, relu_bwd, elementwise, stg_no_attrs)                    \
    X(GELU, gelu, elementwise, stg_no_attrs)                            \
    X(GELU_BWD, gelu_bwd, elementwise, stg_no_attrs)                    \
    X(SWIGLU, swiglu, elementwise, stg_no_attrs)                        \
    X(SWIGLU_BWD, swiglu_bwd, elementwise, stg_no_attrs)                \
    X(MUL, mul, elementwise, stg_no_attrs)                              \
    X(ADD, add, elementwise, stg_no_attrs)                              \
    X(SCALE, scale, elementwise, stg_scale_attrs)                       \
    X(RESHAPE, reshape, layout, stg_reshape_attrs)                      \
    X(TRANSPOSE, transpose, layout, stg_transpose_attrs)                \
    X(REPEAT_KV, repeat_kv, layout, stg_repeat_kv_attrs)                \
    X(REPEAT_KV_BWD, repeat_kv_bwd, layout, stg_repeat_kv_attrs)        \
    X(CROSS_ENTROPY, cross_entropy, loss, stg_no_attrs)                 \
    X(CROSS_ENTROPY_BWD, cross_entropy_bwd, loss, stg_scale_attrs)      \
    X(GLOBAL_NORM, global_norm, optim, stg_no_attrs)                    \
    X(LR_SCHEDULE, lr_schedule, optim, stg_lr_attrs)                    \
    X(ADAMW, adamw, optim, stg_adamw_attrs)                             \
    X(SLOT_NORM, slot_norm, optim, stg_no_attrs)                        \
    X(ALLREDUCE, allreduce, comm, stg_no_attrs)                         \
    X(BROADCAST, broadcast, comm, stg_comm_attrs)                       \
    X(MATMUL_GROUP, matmul_group, matmul, stg_matmul_attrs)             \
    X(SUM_ROWS, sum_rows, matmul, stg_sum_rows_attrs)                   \
    X(POS_EMBEDDING, pos_embedding, embedding, stg_no_attrs)            \
    X(POS_EMBEDDING_BWD, pos_embedding_bwd, embedding, stg_pos_embedding_bwd_attrs) \
    X(SPLIT, split, layout, stg_no_attrs)                               \
    X(CONCAT, concat, layout, stg_no_attrs)                             \
    X(LINEAR_CROSS_ENTROPY, linear_cross_entropy, loss, stg_lce_attrs)  \
    X(LINEAR_CROSS_ENTROPY_BWD, linear_cross_entropy_bwd, loss, stg_lce_attrs) \
    X(LINEAR_CROSS_ENTROPY_DX, linear_cross_entropy_dx, loss, stg_lce_attrs) \
    X(LINEAR_CROSS_ENTROPY_DW, linear_cross_entropy_dw, loss, stg_lce_attrs) \
    X(ATTENTION_CACHED, attention_cached, decode, stg_attention_cached_attrs) \
    X(KV_WRITE, kv_write, decode, stg_no_attrs)                         \
    X(SAMPLE, sample, decode, stg_sample_attrs)

typedef enum stg_op_kind {
#define STG_X_ENUM(e, n, f, a) STG_OP_##e,
    STG_OP_LIST(STG_X_ENUM)
#undef STG_X_ENUM
    STG_OP_COUNT
} stg_op_kind;

#endif
