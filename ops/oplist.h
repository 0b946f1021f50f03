// The one list of op kinds. The enum, the names, the YAML lookup, the registry table and every
// backend's kernel table are generated from it or checked against it (tests/test_registry.c).
//
// X(ENUM, name, attribute-struct) — the attribute struct is the op's typed parameters (graph.h).
#ifndef STG_OPLIST_H
#define STG_OPLIST_H

#define STG_OP_LIST(X)                                  \
    X(EMBEDDING, embedding, stg_no_attrs)               \
    X(EMBEDDING_BWD, embedding_bwd, stg_embedding_bwd_attrs) \
    X(LINEAR, linear, stg_no_attrs)                     \
    X(MATMUL, matmul, stg_matmul_attrs)                 \
    X(RMSNORM, rmsnorm, stg_norm_attrs)                 \
    X(RMSNORM_BWD, rmsnorm_bwd, stg_norm_attrs)         \
    X(LAYERNORM, layernorm, stg_norm_attrs)             \
    X(LAYERNORM_BWD, layernorm_bwd, stg_norm_attrs)     \
    X(ROPE, rope, stg_rope_attrs)                       \
    X(CAUSAL_MASK, causal_mask, stg_mask_attrs)         \
    X(SOFTMAX, softmax, stg_no_attrs)                   \
    X(SOFTMAX_BWD, softmax_bwd, stg_no_attrs)           \
    X(ATTENTION, attention, stg_attention_attrs)        \
    X(ATTENTION_BWD, attention_bwd, stg_attention_attrs) \
    X(SILU, silu, stg_no_attrs)                         \
    X(SILU_BWD, silu_bwd, stg_no_attrs)                 \
    X(RELU, relu, stg_no_attrs)                         \
    X(RELU_BWD, relu_bwd, stg_no_attrs)                 \
    X(SWIGLU, swiglu, stg_no_attrs)                     \
    X(SWIGLU_BWD, swiglu_bwd, stg_no_attrs)             \
    X(MUL, mul, stg_no_attrs)                           \
    X(ADD, add, stg_no_attrs)                           \
    X(SCALE, scale, stg_scale_attrs)                    \
    X(RESHAPE, reshape, stg_reshape_attrs)              \
    X(TRANSPOSE, transpose, stg_transpose_attrs)        \
    X(CROSS_ENTROPY, cross_entropy, stg_no_attrs)       \
    X(CROSS_ENTROPY_BWD, cross_entropy_bwd, stg_no_attrs) \
    X(GLOBAL_NORM, global_norm, stg_no_attrs)           \
    X(LR_SCHEDULE, lr_schedule, stg_lr_attrs)           \
    X(ADAMW, adamw, stg_adamw_attrs)                   \
    X(SLOT_NORM, slot_norm, stg_no_attrs)             \
    X(ALLREDUCE, allreduce, stg_no_attrs)             \
    X(BROADCAST, broadcast, stg_comm_attrs)           \
    X(MATMUL_GROUP, matmul_group, stg_matmul_attrs)

typedef enum stg_op_kind {
#define STG_X_ENUM(e, n, a) STG_OP_##e,
    STG_OP_LIST(STG_X_ENUM)
#undef STG_X_ENUM
    STG_OP_COUNT
} stg_op_kind;

#endif
