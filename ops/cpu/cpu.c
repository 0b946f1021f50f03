// The CPU backend's op entry point: reads an op's tensors from the graph, picks the float or
// double kernels by the dtype of its float tensors, and calls the runner of the op kind's record
// (each family's ops/<family>/cpu.c defines `stg_cpu_<name>`; the table is generated from
// ops/base/oplist.h, so a kind without a record does not link).
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "ops/cpu/rec.h"
#include "ops/elementwise/kernels.h" // cpu_add: the addend of matmul and norm backward
#include "ops/registry.h"

#define STG_X_CPU_DECL(e, n, f, a) extern const stg_cpu_rec stg_cpu_##n;
STG_OP_LIST(STG_X_CPU_DECL)
#undef STG_X_CPU_DECL

static const stg_cpu_rec *const cpu_recs[STG_OP_COUNT] = {
#define STG_X_CPU_REC(e, n, f, a) [STG_OP_##e] = &stg_cpu_##n,
    STG_OP_LIST(STG_X_CPU_REC)
#undef STG_X_CPU_REC
};

// The float type of the op's tensors: 0 for f32, 1 for f64, -1 with a message for bf16 or a
// mix. Integer tensors, and inputs whose bit is set in skip_in (scalars read by dtype), are not
// looked at.
static int cpu_real_of(const stg_graph *g, const stg_op *op, uint32_t skip_in, stg_err *err) {
    int first = -1;
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        int id;
        if (i < op->n_in) {
            if (i < 32 && (skip_in >> i & 1u)) continue;
            id = op->in[i];
        } else {
            id = op->out[i - op->n_in];
        }
        const stg_tensor *t = &g->t[id];
        if (t->dtype == STG_I32) continue;
        if (t->dtype == STG_BF16)
            return stg_errf(err, "cpu backend: op %s (tensor %s) is bf16; the CPU backend runs fp32 and fp64",
                            ops_name(op->kind), t->name);
        if (t->dtype != STG_F32 && t->dtype != STG_F64)
            return stg_errf(err, "cpu backend: op %s (tensor %s) has dtype %s", ops_name(op->kind),
                            t->name, stg_dtype_name(t->dtype));
        if (first < 0) {
            first = id;
        } else if (g->t[first].dtype != t->dtype) {
            return stg_errf(err, "cpu backend: op %s mixes %s (tensor %s) and %s (tensor %s)",
                            ops_name(op->kind), stg_dtype_name(g->t[first].dtype), g->t[first].name,
                            stg_dtype_name(t->dtype), t->name);
        }
    }
    if (first < 0) return stg_errf(err, "cpu backend: op %s has no float tensor", ops_name(op->kind));
    return g->t[first].dtype == STG_F64 ? 1 : 0;
}

// ---- helpers the families' runners share (ops/cpu/rec.h) --------------------------------------

int cpu_need_i32(const stg_tensor *t, stg_err *err) {
    if (t->dtype == STG_I32) return 0;
    return stg_errf(err, "tensor %s must be i32, not %s", t->name, stg_dtype_name(t->dtype));
}

// Elementwise ops: every input and output must have n elements.
int cpu_same_numel(const stg_graph *g, const stg_op *op, int64_t n, stg_err *err) {
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        const stg_tensor *t = i < op->n_in ? IN(g, op, i) : OUT(g, op, i - op->n_in);
        if (stg_numel(t) != n)
            return stg_errf(err, "tensor %s has %lld elements, expected %lld", t->name,
                            (long long)stg_numel(t), (long long)n);
    }
    return 0;
}

int cpu_need_numel(const stg_tensor *t, int64_t n, stg_err *err) {
    if (stg_numel(t) == n) return 0;
    return stg_errf(err, "tensor %s has %lld elements, expected %lld", t->name, (long long)stg_numel(t),
                    (long long)n);
}

int cpu_need_ndim(const stg_tensor *t, int min_ndim, stg_err *err) {
    if (t->ndim >= min_ndim) return 0;
    return stg_errf(err, "tensor %s has %d dims, needs at least %d", t->name, t->ndim, min_ndim);
}

double cpu_read_scalar(const stg_tensor *t, const void *p, int64_t i) {
    switch (t->dtype) {
    case STG_F32: return (double)((const float *)p)[i];
    case STG_F64: return ((const double *)p)[i];
    case STG_I32: return (double)((const int32_t *)p)[i];
    case STG_BF16:
    case STG_DTYPE_COUNT: break;
    }
    return NAN;
}

// Output 0 += the op's addend input (stg_op_def.addend_in), when it has one.
void cpu_add_addend(const stg_graph *g, const stg_op *op, void *const *data, int f64) {
    int k = ops_addend_of(op);
    if (k > 0)
        KCALL(f64, cpu_add, DOUT(data, op, 0), DIN(data, op, k), DOUT(data, op, 0), stg_numel(OUT(g, op, 0)));
}

// ---- entry points ----------------------------------------------------------------------------

int cpu_op_supported(stg_op_kind k) { return (int)k >= 0 && k < STG_OP_COUNT && cpu_recs[k]->run != NULL; }

size_t cpu_op_scratch_bytes(const stg_graph *g, int op) {
    if (!g || op < 0 || op >= g->nops) return 0;
    const stg_op *o = &g->ops[op];
    if (!cpu_op_supported(o->kind) || !cpu_recs[o->kind]->scratch) return 0;
    int f64 = cpu_real_of(g, o, cpu_recs[o->kind]->skip_in, NULL);
    if (f64 < 0) return 0;
    return cpu_recs[o->kind]->scratch(g, o, f64);
}

int cpu_op_run(const stg_graph *g, int op, void *const *data, void *scratch, size_t scratch_bytes,
               stg_err *err) {
    return cpu_op_run_accum(g, op, data, scratch, scratch_bytes, 0, err);
}

int cpu_op_run_accum(const stg_graph *g, int op, void *const *data, void *scratch, size_t scratch_bytes,
                     int accumulate, stg_err *err) {
    if (!g || op < 0 || op >= g->nops) return stg_errf(err, "cpu backend: no op %d", op);
    const stg_op *o = &g->ops[op];
    if (!cpu_op_supported(o->kind)) return stg_errf(err, "cpu backend: op kind %d has no kernel", (int)o->kind);
    for (int i = 0; i < o->n_in + o->n_out; i++) {
        int id = i < o->n_in ? o->in[i] : o->out[i - o->n_in];
        if (id < 0 || id >= g->nt || !data[id])
            return stg_errf(err, "cpu backend: op %s: tensor %d has no memory", ops_name(o->kind), id);
    }
    int f64 = cpu_real_of(g, o, cpu_recs[o->kind]->skip_in, err);
    if (f64 < 0) return -1;
    stg_op now = *o; // the runner adds into its outputs k with bit k of now.accum set
    if (!accumulate) now.accum = 0;
    else if (now.accum & ~ops_def(o->kind)->accum_out)
        return stg_errf(err, "cpu backend: op %s cannot add into its outputs (gradient accumulation)", ops_name(o->kind));
    if (cpu_recs[o->kind]->run(g, &now, data, scratch, scratch_bytes, f64, err)) {
        const char *what = o->n_out > 0 ? g->t[o->out[0]].name : g->t[o->in[0]].name;
        return stg_err_prefix(err, "cpu backend: op %s (%s)", ops_name(o->kind), what);
    }
    return 0;
}
