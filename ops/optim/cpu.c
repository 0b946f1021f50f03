// The optim family on the CPU backend: runners for global_norm, lr_schedule, adamw, slot_norm, reading the op's tensors and
// attributes and calling the float or double kernels (ops/optim/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/optim/kernels.h"
#include "ops/registry.h" // ops_lr_at

// g1, ..., gn -> norm () = sqrt(sum of all squares)
static int run_global_norm(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    if (op->n_out < 1) return stg_errf(err, "global_norm has no output");
    if (cpu_need_numel(OUT(g, op, 0), 1, err)) return -1;
    double ss = 0.0;
    for (int i = 0; i < op->n_in; i++)
        ss += KCALL(f64, cpu_sumsq, DIN(data, op, i), stg_numel(IN(g, op, i)));
    if (f64)
        *(double *)DOUT(data, op, 0) = sqrt(ss);
    else
        *(float *)DOUT(data, op, 0) = (float)sqrt(ss);
    return 0;
}

// Writes element i of a float tensor by its dtype.
static void cpu_write_scalar(const stg_tensor *t, void *p, int64_t i, double v) {
    if (t->dtype == STG_F64)
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

// param, grad, m, v, norm (), sched (2) = [step, lr] [, slots (k) when attribute slot > 0]: param,
// m, v updated in place; with a slot, slots[slot - 1] = the sum of squares of grad (before the update).
static int run_adamw(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                     size_t scratch_bytes, int f64, stg_err *err) {
    int slot = op->a.adamw.slot;
    if (op->n_in != 6 + (slot > 0))
        return stg_errf(err, "%s has %d inputs; the form with master weights (bf16 "
                        "training) is CUDA-only, the CPU backend takes param, grad, m, v, norm, sched%s",
                        IN(g, op, 0)->name, op->n_in, slot > 0 ? ", slots" : "");
    int64_t n = stg_numel(IN(g, op, 0));
    for (int i = 1; i < 4; i++)
        if (stg_numel(IN(g, op, i)) != n)
            return stg_errf(err, "%s has %lld elements, its parameter %s has %lld",
                            IN(g, op, i)->name, (long long)stg_numel(IN(g, op, i)), IN(g, op, 0)->name,
                            (long long)n);
    const stg_tensor *tn = IN(g, op, 4), *ts = IN(g, op, 5);
    if (stg_numel(ts) < 2)
        return stg_errf(err, "schedule state %s must hold [step, lr]", ts->name);
    double norm = cpu_read_scalar(tn, DIN(data, op, 4), 0);
    double step = cpu_read_scalar(ts, DIN(data, op, 5), 0);
    double lr = cpu_read_scalar(ts, DIN(data, op, 5), 1);
    if (!(step >= 1.0))
        return stg_errf(err, "step %g in %s must be >= 1", step, ts->name);
    if (slot > 0) {
        const stg_tensor *sl = IN(g, op, 6);
        if (sl->dtype != STG_F32 && sl->dtype != STG_F64) return stg_errf(err, "slots %s must be f32 or f64", sl->name);
        if (slot > stg_numel(sl)) return stg_errf(err, "slot %d is past the %lld slots of %s", slot, (long long)stg_numel(sl), sl->name);
        cpu_write_scalar(sl, DIN(data, op, 6), slot - 1, KCALL(f64, cpu_sumsq, DIN(data, op, 1), n));
    }
    KCALL(f64, cpu_adamw, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3), n, norm,
          step, lr, &op->a.adamw);
    return 0;
}

// sched (2) = [steps done, lr]: steps done += 1, lr = the schedule at the new step - 1
static int run_lr_schedule(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *ts = IN(g, op, 0);
    if (stg_numel(ts) != 2) return stg_errf(err, "schedule state %s must hold [steps done, lr]", ts->name);
    double done = cpu_read_scalar(ts, DIN(data, op, 0), 0) + 1.0;
    double lr = ops_lr_at(&op->a.lr, (int64_t)done - 1);
    if (ts->dtype == STG_F64) {
        ((double *)DIN(data, op, 0))[0] = done;
        ((double *)DIN(data, op, 0))[1] = lr;
    } else {
        ((float *)DIN(data, op, 0))[0] = (float)done;
        ((float *)DIN(data, op, 0))[1] = (float)lr;
    }
    return 0;
}

// slots (k), norm (): norm = sqrt(slots[0] + ... + slots[k-1]) summed in order, in place
static int run_slot_norm(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *sl = IN(g, op, 0), *tn = IN(g, op, 1);
    if (cpu_need_numel(tn, 1, err)) return -1;
    if (tn->dtype != STG_F32 && tn->dtype != STG_F64) return stg_errf(err, "norm %s must be f32 or f64", tn->name);
    double ss = 0.0;
    for (int64_t i = 0; i < stg_numel(sl); i++) ss += cpu_read_scalar(sl, DIN(data, op, 0), i);
    cpu_write_scalar(tn, DIN(data, op, 1), 0, sqrt(ss));
    return 0;
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_global_norm = {run_global_norm, NULL, 0};
const stg_cpu_rec stg_cpu_lr_schedule = {run_lr_schedule, NULL, 0};
const stg_cpu_rec stg_cpu_adamw = {run_adamw, NULL, (1u << 4) | (1u << 5) | (1u << 6)};
const stg_cpu_rec stg_cpu_slot_norm = {run_slot_norm, NULL, 0};
