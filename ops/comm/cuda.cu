// Data-parallel communication: the allreduce op (mean over ranks, in place) through NCCL on the
// context's stream, capturable into the step's CUDA Graph. Built without NCCL, the op fails with a
// message saying so.
#include "ops/cuda/internal.h"

#ifdef STG_HAVE_NCCL
#include <nccl.h>
#endif

extern "C" int cuda_have_nccl(void) {
#ifdef STG_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}

extern "C" int cuda_set_comm(stg_cuda *c, void *nccl_comm, stg_err *err) {
#ifdef STG_HAVE_NCCL
    c->nccl = nccl_comm;
    return 0;
#else
    return stg_errf(err, "cuda: this stg was built without NCCL (nccl.h and libnccl were not found)");
#endif
}

// The tensors of one allreduce are one contiguous block (a planner group, or one tensor): the op
// reduces the bytes from the lowest address to the highest end, padding between members included.
extern "C" int cuda_run_allreduce(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    int64_t named = 0;
    for (int i = 0; i < o->n_in; i++) {
        uintptr_t a = (uintptr_t)ptr[o->in[i]], e = a + (uintptr_t)(cuda_numel(&g->t[o->in[i]]) * (int64_t)stg_dtype_size(g->t[o->in[i]].dtype));
        if (a < lo) lo = a;
        if (e > hi) hi = e;
        named += (int64_t)(e - a);
    }
    int bf16 = cuda_is_bf16(g, o, o->in[0], err);
    if (bf16 < 0) return -1;
    size_t esz = bf16 ? 2 : 4;
    if ((hi - lo) % esz) return stg_errf(err, "allreduce: the bucket of %s is not a whole number of elements", g->t[o->in[0]].name);
    if ((int64_t)(hi - lo) > named + (int64_t)o->n_in * 4096)
        return stg_errf(err, "allreduce: the tensors of %s's bucket are not contiguous (%lld bytes named, %lld spanned)",
                        g->t[o->in[0]].name, (long long)named, (long long)(hi - lo));
#ifdef STG_HAVE_NCCL
    if (!c->nccl) return stg_errf(err, "allreduce: no NCCL communicator (not a data-parallel run)");
    ncclResult_t r = ncclAllReduce((const void *)lo, (void *)lo, (size_t)(hi - lo) / esz, bf16 ? ncclBfloat16 : ncclFloat32, ncclAvg,
                                   (ncclComm_t)c->nccl, c->stream);
    if (r != ncclSuccess) return stg_errf(err, "ncclAllReduce: %s", ncclGetErrorString(r));
    return 0;
#else
    return stg_errf(err, "allreduce: this stg was built without NCCL");
#endif
}

// A parameter from its ZeRO-1 owner to every rank, in place.
extern "C" int cuda_run_broadcast(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int bf16 = cuda_is_bf16(g, o, o->in[0], err);
    if (bf16 < 0) return -1;
#ifdef STG_HAVE_NCCL
    if (!c->nccl) return stg_errf(err, "broadcast: no NCCL communicator (not a data-parallel run)");
    ncclResult_t r = ncclBroadcast(ptr[o->in[0]], ptr[o->in[0]], (size_t)cuda_numel(&g->t[o->in[0]]), bf16 ? ncclBfloat16 : ncclFloat32,
                                   (int)o->a.comm.root, (ncclComm_t)c->nccl, c->stream);
    if (r != ncclSuccess) return stg_errf(err, "ncclBroadcast: %s", ncclGetErrorString(r));
    return 0;
#else
    return stg_errf(err, "broadcast: this stg was built without NCCL");
#endif
}

// ---- records ------------------------------------------------------------------------------------

const cuda_rec stg_cuda_allreduce = {cuda_run_allreduce, NULL, NULL, NULL, CUDA_REC_COMM, NULL};
const cuda_rec stg_cuda_broadcast = {cuda_run_broadcast, NULL, NULL, NULL, CUDA_REC_COMM, NULL};
