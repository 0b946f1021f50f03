// The CUDA backend's context and op entry point: device, streams, cuBLASLt handle, the per-graph
// preparation (each op's record's prepare, the groups of ops sharing one (cuda_group), scratch) and
// the table of records, one per op kind (each family's ops/<family>/cuda.cu defines `stg_cuda_<name>`; the
// table is generated from ops/base/oplist.h, so a kind without a record does not link).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/internal.h"

// ---- shared host helpers ------------------------------------------------------------------------

extern "C" int64_t cuda_numel(const stg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

extern "C" int64_t cuda_rows(const stg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i + 1 < t->ndim; i++) n *= t->shape[i];
    return n;
}

extern "C" int64_t cuda_last(const stg_tensor *t) { return t->ndim > 0 ? t->shape[t->ndim - 1] : 1; }

extern "C" int cuda_is_bf16(const stg_graph *g, const stg_op *op, int t, stg_err *err) {
    stg_dtype d = g->t[t].dtype;
    if (d == STG_F32) return 0;
    if (d == STG_BF16) return 1;
    if (d == STG_F64)
        return stg_errf(err, "tensor %s is f64: f64 graphs run on the CPU backend only", g->t[t].name);
    return stg_errf(err, "tensor %s must be f32 or bf16, not %s", g->t[t].name, stg_dtype_name(d));
}

extern "C" int cuda_same_float(const stg_graph *g, const stg_op *op, int t, int like, stg_err *err) {
    int b = cuda_is_bf16(g, op, t, err);
    if (b < 0) return -1;
    if (g->t[t].dtype != g->t[like].dtype)
        return stg_errf(err, "tensor %s is %s but %s is %s", g->t[t].name, stg_dtype_name(g->t[t].dtype),
                        g->t[like].name, stg_dtype_name(g->t[like].dtype));
    return b;
}

extern "C" unsigned cuda_blocks(const stg_cuda *c, int64_t n, int per_block) {
    int64_t b = (n + per_block - 1) / per_block;
    int64_t cap = (int64_t)(c->sm_count > 0 ? c->sm_count : 132) * 16;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (unsigned)b;
}

// ---- device and context -------------------------------------------------------------------------

extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // no driver or no device: clear the error and report none
        return 0;
    }
    return n;
}

extern "C" int cuda_new(const stg_cuda_opts *o, stg_cuda **out, stg_err *err) {
    *out = NULL;
    int dev = o ? o->device : 0;
    int n = cuda_device_count();
    if (dev < 0 || dev >= n) return stg_errf(err, "cuda: no CUDA device %d (found %d)", dev, n);
    stg_cuda *c = (stg_cuda *)stg_calloc(1, sizeof *c, err);
    if (!c) return -1;
    c->device = dev;
    c->tf32 = o ? o->tf32 : false;
    c->gemm_tune = o ? o->gemm_tune : false;
    cudaError_t e = cudaSetDevice(dev);
    cudaDeviceProp prop;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, dev);
    if (e == cudaSuccess) {
        snprintf(c->name, sizeof c->name, "%s", prop.name);
        c->sm_count = prop.multiProcessorCount;
        const char *nopdl = getenv("STG_NO_PDL");
        c->pdl = prop.major >= 9 && !(nopdl && *nopdl && strcmp(nopdl, "0") != 0);
        for (int i = 0; i <= CUDA_STREAMS && e == cudaSuccess; i++)
            e = cudaStreamCreateWithFlags(&c->streams[i], cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking);
        for (int i = 0; i < 2 && e == cudaSuccess; i++) e = cudaEventCreateWithFlags(&c->side_ev[i], cudaEventDisableTiming);
        c->stream = c->streams[0];
    }
    if (e != cudaSuccess) {
        stg_errf(err, "cuda: device %d: %s", dev, cudaGetErrorString(e));
        cuda_free(c);
        return -1;
    }
    cublasStatus_t s = cublasLtCreate(&c->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        c->lt = NULL;
        stg_errf(err, "cuda: cublasLtCreate: cuBLAS status %d", (int)s);
        cuda_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

// Every block fills all of its dynamic shared memory with 0xff bytes (NaN as fp32 and bf16).
__global__ void poison_shared_kernel(int words) {
    extern __shared__ uint32_t sm_poison[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) sm_poison[i] = 0xffffffffu;
    __syncthreads();
}

extern "C" int cuda_poison_shared(stg_cuda *c, stg_err *err) {
    int most = 0, per_sm = 0;
    CUDA_CHECK(err, cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device));
    CUDA_CHECK(err, cudaFuncSetAttribute(poison_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    CUDA_CHECK(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, poison_shared_kernel, 1024, (size_t)most));
    if (per_sm < 1) per_sm = 1;
    poison_shared_kernel<<<(unsigned)(per_sm * (c->sm_count > 0 ? c->sm_count : 1)), 1024, (size_t)most, c->stream>>>(most / 4);
    CUDA_LAUNCH_CHECK(err, "poison_shared_kernel");
    return 0;
}

// n bytes from src to dst, 16 bytes a thread where both are 16-byte aligned, else a byte a thread.
__global__ void upload_kernel(unsigned char *dst, const unsigned char *src, size_t n) {
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if ((((uintptr_t)dst | (uintptr_t)src) & 15u) == 0) {
        const size_t nv = n / 16;
        for (size_t i = i0; i < nv; i += stride) ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
        done = nv * 16;
    }
    for (size_t i = done + i0; i < n; i += stride) dst[i] = src[i];
}

extern "C" int cuda_upload(stg_cuda *c, void *dst, const void *src, size_t n, stg_err *err) {
    if (n == 0) return 0;
    cudaPointerAttributes at;
    CUDA_CHECK(err, cudaPointerGetAttributes(&at, src));
    if (at.type != cudaMemoryTypeHost || !at.devicePointer) { // pageable host memory: the copy engine stages it
        CUDA_CHECK(err, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream));
        return 0;
    }
    const size_t per = 256 * 16, blocks = (n + per - 1) / per;
    upload_kernel<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, c->stream>>>((unsigned char *)dst, (const unsigned char *)at.devicePointer, n);
    CUDA_LAUNCH_CHECK(err, "upload_kernel");
    return 0;
}

// A memset node's work as a kernel: height rows of width elements of es bytes (1, 2 or 4), rows pitch
// bytes apart, each element the low es bytes of value. Contiguous rows are one run of bytes, stored 16 at a
// time between a head and a tail of single bytes: the element's bytes repeated to 32 bits (pat; es divides 4),
// byte j of the run being byte j % 4 of pat, since the head's length is a multiple of es (dst is es-aligned).
__global__ void memset_node_kernel(unsigned char *dst, size_t pitch, unsigned value, unsigned es, size_t width, size_t height) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t pat = es == 1 ? (value & 0xffu) * 0x01010101u : es == 2 ? (value & 0xffffu) * 0x00010001u : value;
    if (height == 1 || pitch == width * es) {
        const size_t nb = width * height * es, head = min(nb, (size_t)((16u - (unsigned)((uintptr_t)dst % 16u)) % 16u));
        const size_t nv = (nb - head) / 16, tail = head + 16 * nv;
        for (size_t i = i0; i < nv; i += stride) ((uint4 *)(dst + head))[i] = make_uint4(pat, pat, pat, pat);
        for (size_t i = i0; i < head + (nb - tail); i += stride) {
            const size_t j = i < head ? i : tail + (i - head);
            dst[j] = (unsigned char)(pat >> (8 * (j % 4)));
        }
        return;
    }
    for (size_t i = i0; i < width * height; i += stride) {
        unsigned char *p = dst + (i / width) * pitch + (i % width) * es;
        if (es == 4) *(uint32_t *)p = value;
        else if (es == 2) *(uint16_t *)p = (uint16_t)value;
        else *p = (unsigned char)value;
    }
}

extern "C" int cuda_graph_memsets_to_kernels(void *graph, int *converted, stg_err *err) {
    cudaGraph_t g = (cudaGraph_t)graph;
    *converted = 0;
    size_t n = 0;
    CUDA_CHECK(err, cudaGraphGetNodes(g, NULL, &n));
    if (n == 0) return 0;
    cudaGraphNode_t *nodes = (cudaGraphNode_t *)calloc(n, sizeof *nodes), *par = NULL, *kid = NULL;
    cudaGraphEdgeData *pe = NULL, *ke = NULL;
    int rc = -1;
    cudaError_t e = cudaSuccess;
    const char *what = "cudaGraphGetNodes";
    if (!nodes) {
        stg_errf(err, "graph memsets: out of host memory for %zu nodes", n);
        goto out;
    }
    if ((e = cudaGraphGetNodes(g, nodes, &n)) != cudaSuccess) goto fail;
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType t;
        what = "cudaGraphNodeGetType";
        if ((e = cudaGraphNodeGetType(nodes[i], &t)) != cudaSuccess) goto fail;
        if (t != cudaGraphNodeTypeMemset) continue;
        struct cudaMemsetParams mp;
        what = "cudaGraphMemsetNodeGetParams";
        if ((e = cudaGraphMemsetNodeGetParams(nodes[i], &mp)) != cudaSuccess) goto fail;
        if (mp.elementSize != 1 && mp.elementSize != 2 && mp.elementSize != 4) continue; // not a memset's shape: left as it is
        size_t np = 0, nk = 0;
        what = "cudaGraphNodeGetDependencies";
        if ((e = cudaGraphNodeGetDependencies(nodes[i], NULL, NULL, &np)) != cudaSuccess) goto fail;
        what = "cudaGraphNodeGetDependentNodes";
        if ((e = cudaGraphNodeGetDependentNodes(nodes[i], NULL, NULL, &nk)) != cudaSuccess) goto fail;
        free(par), free(pe), free(kid), free(ke);
        par = (cudaGraphNode_t *)calloc(np + 1, sizeof *par), pe = (cudaGraphEdgeData *)calloc(np + 1, sizeof *pe);
        kid = (cudaGraphNode_t *)calloc(nk + 1, sizeof *kid), ke = (cudaGraphEdgeData *)calloc(nk + 1, sizeof *ke);
        if (!par || !pe || !kid || !ke) {
            stg_errf(err, "graph memsets: out of host memory");
            goto out;
        }
        what = "cudaGraphNodeGetDependencies";
        if (np && (e = cudaGraphNodeGetDependencies(nodes[i], par, pe, &np)) != cudaSuccess) goto fail;
        what = "cudaGraphNodeGetDependentNodes";
        if (nk && (e = cudaGraphNodeGetDependentNodes(nodes[i], kid, ke, &nk)) != cudaSuccess) goto fail;
        const size_t total = mp.width * mp.height * mp.elementSize, per = 256 * 16;
        const unsigned blocks = (unsigned)(total / per + 1 < 1024 ? total / per + 1 : 1024);
        unsigned char *dst = (unsigned char *)mp.dst;
        size_t pitch = mp.height > 1 ? mp.pitch : 0, width = mp.width, height = mp.height;
        unsigned value = mp.value, es = mp.elementSize;
        void *args[6] = {&dst, &pitch, &value, &es, &width, &height};
        struct cudaKernelNodeParams kp;
        memset(&kp, 0, sizeof kp);
        kp.func = (void *)memset_node_kernel;
        kp.gridDim = dim3(blocks);
        kp.blockDim = dim3(256);
        kp.kernelParams = args;
        cudaGraphNode_t k = NULL;
        // The kernel takes the memset's place: full edges from its parents and to its children (a memset node has
        // no others), and the memset goes.
        what = "cudaGraphAddKernelNode";
        if ((e = cudaGraphAddKernelNode(&k, g, NULL, 0, &kp)) != cudaSuccess) goto fail;
        what = "cudaGraphAddDependencies";
        for (size_t j = 0; j < np; j++)
            if ((e = cudaGraphAddDependencies(g, &par[j], &k, NULL, 1)) != cudaSuccess) goto fail;
        for (size_t j = 0; j < nk; j++)
            if ((e = cudaGraphAddDependencies(g, &k, &kid[j], NULL, 1)) != cudaSuccess) goto fail;
        what = "cudaGraphDestroyNode";
        if ((e = cudaGraphDestroyNode(nodes[i])) != cudaSuccess) goto fail;
        (*converted)++;
    }
    rc = 0;
    goto out;
fail:
    stg_errf(err, "graph memsets: %s: %s", what, cudaGetErrorString(e));
out:
    free(nodes), free(par), free(pe), free(kid), free(ke);
    return rc;
}

// Frees what cuda_prepare made (plans, tables, workspace); keeps the device, stream and handle.
static void cuda_release_prepared(stg_cuda *c) {
    for (int i = 0; c->state && i < c->nops; i++)
        if (c->state[i] && c->state_free[i]) c->state_free[i](c->state[i]);
    free(c->state);
    free(c->state_free);
    free(c->folded);
    c->state = NULL;
    c->state_free = NULL;
    c->folded = NULL;
    c->nops = 0;
    c->side_ws_need = 0;
    if (c->lt_workspace) cudaFree(c->lt_workspace);
    c->lt_workspace = NULL;
    c->lt_workspace_bytes = 0;
    for (int i = 0; i < CUDA_STREAMS; i++) {
        if (c->side_ws[i]) cudaFree(c->side_ws[i]);
        c->side_ws[i] = NULL;
    }
    c->side_ws_bytes = 0;
    if (c->scratch) cudaFree(c->scratch);
    c->scratch = NULL;
    c->scratch_bytes = 0;
    if (c->op_tab) cudaFree(c->op_tab);
    c->op_tab = NULL;
    c->op_tab_bytes = 0;
    c->work = NULL;
    c->work_bytes = 0;
    for (int i = 0; i < c->ngroups; i++)
        if (c->groups[i].state && c->groups[i].group->free_state) c->groups[i].group->free_state(c->groups[i].state);
    free(c->groups);
    c->groups = NULL;
    c->ngroups = 0;
}

extern "C" void cuda_free(stg_cuda *c) {
    if (!c) return;
    cudaSetDevice(c->device);
    for (int i = 0; i <= CUDA_STREAMS; i++)
        if (c->streams[i]) cudaStreamSynchronize(c->streams[i]);
    if (c->side) cudaStreamSynchronize(c->side);
    cuda_release_prepared(c);
    if (c->lt) cublasLtDestroy(c->lt);
    for (int i = 0; i <= CUDA_STREAMS; i++)
        if (c->streams[i]) cudaStreamDestroy(c->streams[i]);
    if (c->side) cudaStreamDestroy(c->side);
    for (int i = 0; i < 2; i++)
        if (c->side_ev[i]) cudaEventDestroy(c->side_ev[i]);
    free(c);
}

extern "C" void *cuda_stream(stg_cuda *c) { return (void *)c->stream; }

extern "C" const char *cuda_device_name(const stg_cuda *c) { return c->name; }

// Dense peak TFLOP/s by device name: bf16 tensor cores, fp32 without tensor cores.
typedef struct {
    const char *has, *and_has; // substrings of the device name (and_has NULL: none)
    double bf16, fp32;
} cuda_peak_row;

static const cuda_peak_row cuda_peaks[] = {
    {"H200", NULL, 989.0, 67.0},
    {"H100", "PCIe", 756.0, 51.0},
    {"H100", NULL, 989.0, 67.0}, // SXM (HBM3)
};

extern "C" double cuda_peak_tflops(const stg_cuda *c, stg_precision p) {
    for (size_t i = 0; i < sizeof cuda_peaks / sizeof cuda_peaks[0]; i++) {
        const cuda_peak_row *r = &cuda_peaks[i];
        if (!strstr(c->name, r->has) || (r->and_has && !strstr(c->name, r->and_has))) continue;
        if (p == STG_PREC_BF16) return r->bf16;
        if (p == STG_PREC_FP32) return r->fp32;
        return 0.0;
    }
    return 0.0;
}

extern "C" size_t cuda_workspace_bytes(const stg_cuda *c) {
    return c->lt_workspace_bytes + c->scratch_bytes + c->op_tab_bytes + (CUDA_STREAMS - 1) * c->side_ws_bytes;
}

// The cuBLASLt workspaces, each group's table, and the rest of the scratch with the ops' tables;
// groups past max - 3 stay in the last part, so the parts always add up to cuda_workspace_bytes.
extern "C" int cuda_workspace_parts(const stg_cuda *c, const char **names, int64_t *bytes, int max) {
    const char *nm[2] = {"cuBLASLt workspace, stream 0", "cuBLASLt workspaces, the other streams"};
    int64_t by[2] = {(int64_t)c->lt_workspace_bytes, (int64_t)((CUDA_STREAMS - 1) * c->side_ws_bytes)};
    int n = 0;
    for (int i = 0; i < 2 && n < max; i++) {
        names[n] = nm[i];
        bytes[n++] = by[i];
    }
    int64_t rest = (int64_t)(c->scratch_bytes + c->op_tab_bytes);
    for (int i = 0; i < c->ngroups && n + 1 < max; i++) {
        if (!c->groups[i].table_bytes) continue;
        names[n] = c->groups[i].group->name;
        bytes[n++] = (int64_t)c->groups[i].table_bytes;
        rest -= (int64_t)c->groups[i].table_bytes;
    }
    if (n < max) {
        names[n] = "kernel scratch and the ops' tables";
        bytes[n++] = rest;
    }
    return n;
}

// ---- preparation --------------------------------------------------------------------------------

static size_t cuda_align256(size_t n) { return (n + 255) & ~(size_t)255; }

#define CUDA_X_REC(e, n, f, a) &stg_cuda_##n,
static const cuda_rec *const cuda_recs[STG_OP_COUNT] = {STG_OP_LIST(CUDA_X_REC)};
#undef CUDA_X_REC

static const cuda_rec *cuda_rec_of(stg_op_kind k) { return (int)k >= 0 && k < STG_OP_COUNT ? cuda_recs[k] : NULL; }

// The slot of group gr among those prepared so far, NULL when it has none.
static const cuda_group_slot *cuda_group_of(const stg_cuda *c, const cuda_group *gr) {
    for (int i = 0; i < c->ngroups; i++)
        if (c->groups[i].group == gr) return &c->groups[i];
    return NULL;
}

extern "C" void *cuda_group_state(const stg_cuda *c, const cuda_group *gr) {
    const cuda_group_slot *sl = cuda_group_of(c, gr);
    return sl ? sl->state : NULL;
}

extern "C" int cuda_prepare(stg_cuda *c, const stg_graph *g, void *const *ptr, stg_err *err) {
    if (g->precision == STG_PREC_FP64)
        return stg_errf(err, "cuda: graph %s is f64: f64 graphs run on the CPU backend only", g->name);
    CUDA_CHECK(err, cudaSetDevice(c->device));
    CUDA_CHECK(err, cudaStreamSynchronize(c->stream));
    cuda_release_prepared(c);

    int n = g->nops > 0 ? g->nops : 1;
    c->state = (void **)stg_calloc((size_t)n, sizeof *c->state, err);
    c->state_free = (void (**)(void *))stg_calloc((size_t)n, sizeof *c->state_free, err);
    c->folded = (unsigned char *)stg_calloc((size_t)n, 1, err);
    if (!c->state || !c->state_free || !c->folded) return -1;
    c->nops = g->nops;

    // The ops' device tables, in one allocation, op after op.
    size_t tab = 0;
    for (int i = 0; i < g->nops; i++) {
        const cuda_rec *r = cuda_rec_of(g->ops[i].kind);
        if (!r || !r->run || (!r->lane && !r->lane_of))
            return stg_errf(err, "cuda: op kind %s has no complete record (run function and lane)",
                            ops_name(g->ops[i].kind));
        if (g->ops[i].accum & ~ops_def(g->ops[i].kind)->accum_out)
            return stg_errf(err, "cuda: op %s cannot add into its outputs (gradient accumulation)", ops_name(g->ops[i].kind));
        if (r->table_bytes) tab += r->table_bytes(g, i);
    }
    if (tab) {
        CUDA_CHECK(err, cudaMalloc(&c->op_tab, tab));
        c->op_tab_bytes = tab;
    }

    size_t work = 0, at = 0;
    for (int i = 0; i < g->nops; i++) {
        const stg_op *op = &g->ops[i];
        for (int k = 0; k < op->n_in + op->n_out; k++) {
            int t = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
            if (g->t[t].dtype == STG_F64)
                return stg_errf(err, "cuda: op %s (tensor %s) is f64: f64 graphs run on the CPU backend only",
                                ops_name(op->kind), g->t[t].name);
        }
        const cuda_rec *r = cuda_rec_of(op->kind);
        size_t tb = r->table_bytes ? r->table_bytes(g, i) : 0;
        void *table = tb ? (char *)c->op_tab + at : NULL;
        at += tb;
        size_t need = 0;
        if (r->prepare) {
            void *st = NULL;
            int rc = r->prepare(c, g, i, ptr, table, &st, &need, err);
            if (st) {
                c->state[i] = st;
                c->state_free[i] = r->free_state;
            }
            if (rc)
                return stg_err_prefix(err, "cuda: preparing %s (%s)", ops_name(op->kind),
                                      op->n_out ? g->t[op->out[0]].name : g->t[op->in[0]].name);
        }
        if (need > work) work = need;
    }

    // The other streams' cuBLASLt workspaces: as large as the largest algorithm chosen needs (each
    // algorithm was chosen for the main workspace, so every one of them fits).
    size_t side = c->side_ws_need;
    if (side) {
        side = cuda_align256(side);
        for (int i = 1; i < CUDA_STREAMS; i++) CUDA_CHECK(err, cudaMalloc(&c->side_ws[i], side));
        c->side_ws_bytes = side;
    }

    // The groups, in the order of their first op: host side first, then their tables in scratch.
    c->groups = (cuda_group_slot *)stg_calloc(STG_OP_COUNT, sizeof *c->groups, err);
    if (!c->groups) return -1;
    for (int i = 0; i < g->nops; i++) {
        const cuda_group *gr = cuda_rec_of(g->ops[i].kind)->group;
        if (!gr || cuda_group_of(c, gr)) continue;
        if (!gr->plan || !gr->name)
            return stg_errf(err, "cuda: op kind %s has an incomplete group (plan and name)", ops_name(g->ops[i].kind));
        cuda_group_slot *sl = &c->groups[c->ngroups++];
        sl->group = gr;
        size_t need = 0, tb = 0;
        int rc = gr->plan(c, g, ptr, &sl->state, &tb, &need, err);
        if (rc) return stg_err_prefix(err, "cuda: preparing the %s", gr->name);
        sl->table_bytes = cuda_align256(tb);
        if (need > work) work = need;
    }
    size_t total = cuda_align256(work);
    for (int i = 0; i < c->ngroups; i++) total += c->groups[i].table_bytes;
    if (total) {
        CUDA_CHECK(err, cudaMalloc(&c->scratch, total));
        c->scratch_bytes = total;
    }
    char *base = (char *)c->scratch;
    for (int i = 0; i < c->ngroups; i++) {
        const cuda_group_slot *sl = &c->groups[i];
        if (sl->group->fill && sl->group->fill(c, sl->state, sl->table_bytes ? base : NULL, err))
            return stg_err_prefix(err, "cuda: preparing the %s", sl->group->name);
        base += sl->table_bytes;
    }
    c->work = work ? base : NULL;
    c->work_bytes = work;
    return 0;
}

// ---- dispatch -----------------------------------------------------------------------------------

extern "C" void cuda_set_accumulate(stg_cuda *c, bool on) { c->accumulate = on; }

extern "C" int cuda_op_supported(stg_op_kind k) {
    const cuda_rec *r = cuda_rec_of(k);
    return r && r->run && (r->lane || r->lane_of);
}

extern "C" int cuda_op_folded(const stg_cuda *c, int op) {
    return c && c->folded && op >= 0 && op < c->nops ? c->folded[op] : 0;
}

extern "C" int cuda_op_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    if (!g || op < 0 || op >= g->nops) return stg_errf(err, "cuda: no op %d", op);
    const stg_op *o = &g->ops[op];
    if (!cuda_op_supported(o->kind)) return stg_errf(err, "cuda: op kind %d has no kernel", (int)o->kind);
    if (c->nops != g->nops || !c->state)
        return stg_errf(err, "cuda: op %s: cuda_prepare was not called for this graph", ops_name(o->kind));
    for (int i = 0; i < o->n_in + o->n_out; i++) {
        int id = i < o->n_in ? o->in[i] : o->out[i - o->n_in];
        if (id < 0 || id >= g->nt || !ptr[id])
            return stg_errf(err, "cuda: op %s: tensor %d has no device memory", ops_name(o->kind), id);
        if (g->t[id].dtype == STG_F64)
            return stg_errf(err, "cuda: op %s (tensor %s) is f64: f64 graphs run on the CPU backend only",
                            ops_name(o->kind), g->t[id].name);
    }
    if (c->folded[op]) return 0; // the op before it wrote its output
    if (cuda_recs[o->kind]->run(c, g, op, ptr, err)) {
        const char *what = o->n_out > 0 ? g->t[o->out[0]].name : g->t[o->in[0]].name;
        return stg_err_prefix(err, "cuda: op %s (%s)", ops_name(o->kind), what);
    }
    return 0;
}

// ---- concurrency ----------------------------------------------------------------------------------

extern "C" int cuda_stream_count(const stg_cuda *c) { return CUDA_STREAMS; }

extern "C" void *cuda_stream_at(stg_cuda *c, int s) { return (void *)c->streams[s >= 0 && s <= CUDA_STREAMS ? s : 0]; }

extern "C" int cuda_op_lane(const stg_graph *g, int op) {
    const cuda_rec *r = cuda_rec_of(g->ops[op].kind);
    if (!r) return CUDA_LANE_MAIN;
    int lane = r->lane_of ? r->lane_of(g, op) : r->lane;
    return lane > 0 ? lane - 1 : CUDA_LANE_MAIN; // a record without a lane fails cuda_prepare first
}

extern "C" int cuda_op_run_on(stg_cuda *c, int s, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    if (s == 0) return cuda_op_run(c, g, op, ptr, err);
    if (s < 0 || s > CUDA_STREAMS) return stg_errf(err, "cuda: no stream %d", s);
    if (op < 0 || op >= g->nops) return stg_errf(err, "cuda: no op %d", op);
    int lane = cuda_op_lane(g, op);
    if (s == CUDA_STREAMS ? lane != CUDA_LANE_COMM : lane != CUDA_LANE_ANY)
        return stg_errf(err, "cuda: op %s cannot run on stream %d", ops_name(g->ops[op].kind), s);
    cudaStream_t main = c->stream;
    void *ws = c->lt_workspace;
    size_t wsb = c->lt_workspace_bytes;
    c->stream = c->streams[s];
    if (s < CUDA_STREAMS) {
        c->lt_workspace = c->side_ws[s];
        c->lt_workspace_bytes = c->side_ws_bytes;
    }
    int r = cuda_op_run(c, g, op, ptr, err);
    c->stream = main;
    c->lt_workspace = ws;
    c->lt_workspace_bytes = wsb;
    return r;
}
