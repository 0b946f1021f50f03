// The comm family on the CPU backend: runners for allreduce, broadcast, reading the op's tensors and
// attributes and calling the float or double kernels (ops/comm/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"

// Data-parallel all-reduce: the kernel table has no way to reach other processes; the CPU backend
// (runtime/backend_cpu.c) runs this op with its communicator before it would get here.
static int run_allreduce(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes,
                         int f64, stg_err *err) {
    return stg_errf(err, "allreduce needs a communicator: run it through a backend made for data parallelism");
}

static int run_broadcast(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes,
                         int f64, stg_err *err) {
    return run_allreduce(g, op, data, scratch, scratch_bytes, f64, err);
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_allreduce = {run_allreduce, NULL, 0};
const stg_cpu_rec stg_cpu_broadcast = {run_broadcast, NULL, 0};
