// The CUDA backend: device memory, one stream, ops/cuda kernels, CUDA Graph capture and replay.
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <nvtx3/nvToolsExt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef STG_HAVE_NCCL
#include <nccl.h>
#endif

#include "ops/cuda/cuda.h"
#include "runtime/cuda/backend_cuda.h"

typedef struct {
    stg_cuda *c;
    cudaStream_t stream;
    cudaEvent_t ev[2];
    cudaEvent_t timer[2];
    bool in_range;
    cudaEvent_t *prof;
    int nprof;
    cudaEvent_t *evs; // events ordering the streams of a captured run
    int nevs;
    void *nccl;       // ncclComm_t of a data-parallel run (rt_backend_cuda_join), else NULL
    double timeout_s; // how long a wait may see no progress before the communicator is aborted
    int rank;
    cudaEvent_t sync_ev;
    int64_t nccl_bytes; // device bytes NCCL's communicator took (measured around its creation)
    int device;
} cuda_impl;

#define CK(err, call)                                                                                     \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) return stg_errf((err), "cuda backend: %s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

static cuda_impl *impl(rt_backend *b) { return (cuda_impl *)b->impl; }

static int cb_alloc(rt_backend *b, size_t n, void **out, stg_err *err) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n ? n : 256);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return stg_errf(err, "cuda backend: cannot allocate %.2f GiB of device memory (%.2f GiB free): %s", (double)n / (1 << 30),
                        (double)fr / (1 << 30), cudaGetErrorString(e));
    }
    *out = p;
    return 0;
}

static void cb_release(rt_backend *b, void *p) { cudaFree(p); }

static int cb_alloc_host(rt_backend *b, size_t n, void **out, stg_err *err) {
    CK(err, cudaMallocHost(out, n ? n : 64));
    return 0;
}

static void cb_release_host(rt_backend *b, void *p) { cudaFreeHost(p); }

static int cb_upload(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err) {
    return cuda_upload(impl(b)->c, dst, src, n, err);
}

static int cb_download(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err) {
    CK(err, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, impl(b)->stream));
    return 0;
}

static int cb_fill(rt_backend *b, void *dst, int v, size_t n, stg_err *err) {
    CK(err, cudaMemsetAsync(dst, v, n, impl(b)->stream));
    return 0;
}

static int cb_poison_shared(rt_backend *b, stg_err *err) { return cuda_poison_shared(impl(b)->c, err); }

static int cb_prepare(rt_backend *b, const stg_graph *g, void *const *ptr, stg_err *err) {
    if (cuda_prepare(impl(b)->c, g, ptr, err)) return -1;
    CK(err, cudaStreamSynchronize(impl(b)->stream));
    return 0;
}

static int cb_run(rt_backend *b, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cuda_op_run(impl(b)->c, g, op, ptr, err);
}

static void cb_set_accumulate(rt_backend *b, bool on) { cuda_set_accumulate(impl(b)->c, on); }

static int cb_streams(rt_backend *b) { return cuda_stream_count(impl(b)->c); }

static int cb_op_lane(rt_backend *b, const stg_graph *g, int op) {
    switch (cuda_op_lane(g, op)) {
    case CUDA_LANE_ANY: return RT_LANE_ANY;
    case CUDA_LANE_BARRIER: return RT_LANE_BARRIER;
    case CUDA_LANE_COMM: return RT_LANE_COMM;
    default: return RT_LANE_MAIN;
    }
}

static int cb_run_on(rt_backend *b, int s, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cuda_op_run_on(impl(b)->c, s, g, op, ptr, err);
}

static int cb_events(rt_backend *b, int n, stg_err *err) {
    cuda_impl *im = impl(b);
    if (n <= im->nevs) return 0;
    cudaEvent_t *ev = realloc(im->evs, sizeof *ev * (size_t)n);
    if (!ev) return stg_errf(err, "cuda backend: out of host memory for %d events", n);
    im->evs = ev;
    for (; im->nevs < n; im->nevs++) CK(err, cudaEventCreateWithFlags(&im->evs[im->nevs], cudaEventDisableTiming));
    return 0;
}

static int cb_event_record(rt_backend *b, int s, int ev, stg_err *err) {
    cuda_impl *im = impl(b);
    if (ev < 0 || ev >= im->nevs) return stg_errf(err, "cuda backend: event %d of %d", ev, im->nevs);
    CK(err, cudaEventRecord(im->evs[ev], (cudaStream_t)cuda_stream_at(im->c, s)));
    return 0;
}

static int cb_event_wait(rt_backend *b, int s, int ev, stg_err *err) {
    cuda_impl *im = impl(b);
    if (ev < 0 || ev >= im->nevs) return stg_errf(err, "cuda backend: event %d of %d", ev, im->nevs);
    CK(err, cudaStreamWaitEvent((cudaStream_t)cuda_stream_at(im->c, s), im->evs[ev], 0));
    return 0;
}

static int cb_record(rt_backend *b, int slot, stg_err *err) {
    CK(err, cudaEventRecord(impl(b)->ev[slot & 1], impl(b)->stream));
    return 0;
}

#ifdef STG_HAVE_NCCL
static double cb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif

// Waits for ev. In a data-parallel run the wait polls, so that a rank that died or hangs (NCCL's
// asynchronous error, or no progress for timeout_s) ends the wait with a message and the
// communicator aborted instead of hanging forever.
static int cb_wait_event(cuda_impl *im, cudaEvent_t ev, stg_err *err) {
    if (!im->nccl) {
        CK(err, cudaEventSynchronize(ev));
        return 0;
    }
#ifdef STG_HAVE_NCCL
    double t0 = cb_now();
    for (unsigned spin = 0;; spin++) {
        cudaError_t q = cudaEventQuery(ev);
        if (q == cudaSuccess) return 0;
        if (q != cudaErrorNotReady) return stg_errf(err, "cuda backend: waiting for the step: %s", cudaGetErrorString(q));
        ncclResult_t ar = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError((ncclComm_t)im->nccl, &ar);
        if (r != ncclSuccess || ar != ncclSuccess) {
            ncclCommAbort((ncclComm_t)im->nccl);
            im->nccl = NULL;
            return stg_errf(err, "rank %d: NCCL reported an error (%s): another rank failed; communicator aborted", im->rank,
                            ncclGetErrorString(r != ncclSuccess ? r : ar));
        }
        if (cb_now() - t0 > im->timeout_s) {
            ncclCommAbort((ncclComm_t)im->nccl);
            im->nccl = NULL;
            return stg_errf(err, "rank %d: the step made no progress for %.0f s (STG_DIST_TIMEOUT): another rank died or hangs; "
                            "communicator aborted", im->rank, im->timeout_s);
        }
        if (spin > 1000) usleep(100);
    }
#else
    return stg_errf(err, "cuda backend: built without NCCL");
#endif
}

static int cb_wait(rt_backend *b, int slot, stg_err *err) { return cb_wait_event(impl(b), impl(b)->ev[slot & 1], err); }

static int cb_sync(rt_backend *b, stg_err *err) {
    cuda_impl *im = impl(b);
    if (im->nccl) {
        CK(err, cudaEventRecord(im->sync_ev, im->stream));
        return cb_wait_event(im, im->sync_ev, err);
    }
    CK(err, cudaStreamSynchronize(im->stream));
    return 0;
}

static int cb_capture_begin(rt_backend *b, stg_err *err) {
    CK(err, cudaStreamBeginCapture(impl(b)->stream, cudaStreamCaptureModeThreadLocal));
    return 0;
}

// STG_GRAPH_DUMP=PREFIX (a debugging aid): every captured graph's nodes, in the order they were captured, with
// each node's kind (cudaGraphNodeType; a kernel's function name where the runtime knows it; a kernel's priority as pN; a memset's address, value and bytes as ms:A:V:N) and the nodes it depends on, each edge's type and port
// (programmatic edges: "prog", ports "trig" and "prog"), into PREFIX.N.txt (N counting the graphs of the
// run from 0). A file that exists is never overwritten: the dump fails instead.
static int graph_dump(cudaGraph_t graph, const char *prefix, stg_err *err) {
    static int count;
    char path[4096];
    if (snprintf(path, sizeof path, "%s.%d.txt", prefix, count++) >= (int)sizeof path) return stg_errf(err, "STG_GRAPH_DUMP: the path is too long");
    size_t n = 0;
    CK(err, cudaGraphGetNodes(graph, NULL, &n));
    cudaGraphNode_t *nodes = calloc(n ? n : 1, sizeof *nodes), *dep = NULL;
    cudaGraphEdgeData *ed = NULL;
    FILE *f = NULL;
    const char *what = "";
    int rc = -1;
    if (!nodes) {
        stg_errf(err, "STG_GRAPH_DUMP: out of host memory");
        goto out;
    }
    cudaError_t e = cudaGraphGetNodes(graph, nodes, &n);
    if (e != cudaSuccess) {
        stg_errf(err, "STG_GRAPH_DUMP: cudaGraphGetNodes: %s", cudaGetErrorString(e));
        goto out;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        stg_errf(err, "STG_GRAPH_DUMP: %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        goto out;
    }
    fprintf(f, "# %zu nodes; per node: index, kind, name, a kernel's priority (pN) or a memset's ms:address:value:bytes, then the dependencies as index:type:port\n", n);
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType t;
        const char *name = "-";
        what = "cudaGraphNodeGetType";
        if ((e = cudaGraphNodeGetType(nodes[i], &t)) != cudaSuccess) break;
        if (t == cudaGraphNodeTypeKernel) { // the name of a kernel of this program; "?" for a library's (cuBLAS)
            struct cudaKernelNodeParams kp;
            if (cudaGraphKernelNodeGetParams(nodes[i], &kp) != cudaSuccess || cudaFuncGetName(&name, kp.func) != cudaSuccess) {
                (void)cudaGetLastError();
                name = "?";
            }
        }
        size_t nd = 0;
        what = "cudaGraphNodeGetDependencies (their count)";
        if ((e = cudaGraphNodeGetDependencies(nodes[i], NULL, NULL, &nd)) != cudaSuccess) break;
        free(dep), free(ed);
        dep = calloc(nd ? nd : 1, sizeof *dep), ed = calloc(nd ? nd : 1, sizeof *ed);
        if (!dep || !ed) {
            stg_errf(err, "STG_GRAPH_DUMP: out of host memory");
            goto out;
        }
        what = "cudaGraphNodeGetDependencies";
        if (nd > 0 && (e = cudaGraphNodeGetDependencies(nodes[i], dep, ed, &nd)) != cudaSuccess) break; // (0 and arrays: invalid)
        fprintf(f, "%zu %d %.60s", i, (int)t, name);
        if (t == cudaGraphNodeTypeKernel) { // the node's scheduling priority (captured from its stream's, where it is)
            cudaLaunchAttributeValue pv;
            memset(&pv, 0, sizeof pv);
            what = "cudaGraphKernelNodeGetAttribute (priority)";
            if ((e = cudaGraphKernelNodeGetAttribute(nodes[i], cudaLaunchAttributePriority, &pv)) != cudaSuccess) break;
            fprintf(f, " p%d", pv.priority);
        } else if (t == cudaGraphNodeTypeMemset) { // where, what and how much: ms:ADDRESS:VALUE:BYTES
            struct cudaMemsetParams mp;
            what = "cudaGraphMemsetNodeGetParams";
            if ((e = cudaGraphMemsetNodeGetParams(nodes[i], &mp)) != cudaSuccess) break;
            fprintf(f, " ms:%p:%u:%zu", mp.dst, mp.value, mp.elementSize * mp.width * mp.height);
        }
        for (size_t j = 0; j < nd; j++) {
            size_t k = 0;
            while (k < n && nodes[k] != dep[j]) k++;
            fprintf(f, " %zu:%s:%s", k, ed[j].type == cudaGraphDependencyTypeProgrammatic ? "prog" : "full",
                    ed[j].from_port == cudaGraphKernelNodePortProgrammatic       ? "prog"
                    : ed[j].from_port == cudaGraphKernelNodePortLaunchCompletion ? "trig"
                                                                                 : "end");
        }
        fputc('\n', f);
    }
    if (e != cudaSuccess) {
        stg_errf(err, "STG_GRAPH_DUMP: %s: %s: %s", path, what, cudaGetErrorString(e));
        goto out;
    }
    rc = 0;
out:
    if (f) {
        const int bad = ferror(f);
        if ((fclose(f) || bad) && rc == 0) rc = stg_errf(err, "STG_GRAPH_DUMP: writing %s failed", path);
    }
    free(nodes), free(dep), free(ed);
    return rc;
}

static int cb_capture_end(rt_backend *b, void **out, stg_err *err) {
    cudaGraph_t graph = NULL;
    *out = NULL;
    CK(err, cudaStreamEndCapture(impl(b)->stream, &graph));
    // Memset nodes become kernel nodes (cuda_graph_memsets_to_kernels), unless STG_KEEP_MEMSETS is set to something
    // other than 0 (for A/B runs).
    const char *keep = getenv("STG_KEEP_MEMSETS");
    int converted = 0;
    if (!(keep && *keep && strcmp(keep, "0") != 0) && cuda_graph_memsets_to_kernels(graph, &converted, err)) {
        cudaGraphDestroy(graph);
        return stg_err_prefix(err, "cuda backend: the captured step");
    }
    const char *dump = getenv("STG_GRAPH_DUMP");
    if (dump && *dump && graph_dump(graph, dump, err)) {
        cudaGraphDestroy(graph);
        return -1;
    }
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) return stg_errf(err, "cuda backend: instantiating the step graph: %s", cudaGetErrorString(e));
    *out = exec;
    return 0;
}

static int cb_launch(rt_backend *b, void *graph, stg_err *err) {
    CK(err, cudaGraphLaunch((cudaGraphExec_t)graph, impl(b)->stream));
    return 0;
}

static void cb_graph_destroy(rt_backend *b, void *graph) { cudaGraphExecDestroy((cudaGraphExec_t)graph); }

static int cb_timer_mark(rt_backend *b, int which, stg_err *err) {
    CK(err, cudaEventRecord(impl(b)->timer[which & 1], impl(b)->stream));
    return 0;
}

static int cb_elapsed(rt_backend *b, double *ms, stg_err *err) {
    float f = 0;
    CK(err, cudaEventSynchronize(impl(b)->timer[1]));
    CK(err, cudaEventElapsedTime(&f, impl(b)->timer[0], impl(b)->timer[1]));
    *ms = f;
    return 0;
}

static int cb_prof_begin(rt_backend *b, int n, stg_err *err) {
    cuda_impl *im = impl(b);
    if (n <= im->nprof) return 0;
    cudaEvent_t *ev = realloc(im->prof, sizeof *ev * (size_t)n);
    if (!ev) return stg_errf(err, "cuda backend: out of host memory for %d profiling events", n);
    im->prof = ev;
    for (; im->nprof < n; im->nprof++) CK(err, cudaEventCreate(&im->prof[im->nprof]));
    return 0;
}

static int cb_prof_mark(rt_backend *b, int i, stg_err *err) {
    cuda_impl *im = impl(b);
    if (i < 0 || i >= im->nprof) return stg_errf(err, "cuda backend: profiling mark %d of %d", i, im->nprof);
    CK(err, cudaEventRecord(im->prof[i], im->stream));
    return 0;
}

static int cb_prof_elapsed(rt_backend *b, int i, int j, double *ms, stg_err *err) {
    cuda_impl *im = impl(b);
    float f = 0;
    CK(err, cudaEventSynchronize(im->prof[j]));
    CK(err, cudaEventElapsedTime(&f, im->prof[i], im->prof[j]));
    *ms = f;
    return 0;
}

static void cb_annotate(rt_backend *b, const char *phase) {
    cuda_impl *im = impl(b);
    if (im->in_range) nvtxRangePop();
    im->in_range = phase != NULL;
    if (phase) nvtxRangePushA(phase);
}

static int64_t cb_mem_used(rt_backend *b) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return -1;
    return (int64_t)(tot - fr);
}

// What cuda_prepare allocates beside the plan (the NCCL communicator, made before any plan, is
// reported apart: rt_backend_cuda_comm_bytes).
static int cb_workspaces(rt_backend *b, const char **names, int64_t *bytes, int max) {
    return cuda_workspace_parts(impl(b)->c, names, bytes, max);
}

static int64_t cb_mem_free(rt_backend *b) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return -1;
    return (int64_t)fr;
}

static void cb_destroy(rt_backend *b) {
    cuda_impl *im = impl(b);
    if (im) {
#ifdef STG_HAVE_NCCL
        if (im->nccl) {
            stg_err ignored;
            if (cb_sync(b, &ignored) == 0 && im->nccl) ncclCommDestroy((ncclComm_t)im->nccl);
            else if (im->nccl) ncclCommAbort((ncclComm_t)im->nccl);
            im->nccl = NULL;
        }
#endif
        if (im->sync_ev) cudaEventDestroy(im->sync_ev);
        if (im->stream) cudaStreamSynchronize(im->stream);
        for (int i = 0; i < im->nprof; i++) cudaEventDestroy(im->prof[i]);
        free(im->prof);
        for (int i = 0; i < im->nevs; i++) cudaEventDestroy(im->evs[i]);
        free(im->evs);
        for (int i = 0; i < 2; i++) {
            if (im->ev[i]) cudaEventDestroy(im->ev[i]);
            if (im->timer[i]) cudaEventDestroy(im->timer[i]);
        }
        cuda_free(im->c);
        free(im);
    }
    free(b);
}

static const rt_backend_ops cuda_ops = {
    .name = "cuda",
    .alloc = cb_alloc,
    .release = cb_release,
    .alloc_host = cb_alloc_host,
    .release_host = cb_release_host,
    .upload = cb_upload,
    .download = cb_download,
    .fill = cb_fill,
    .poison_shared = cb_poison_shared,
    .prepare = cb_prepare,
    .run_op = cb_run,
    .set_accumulate = cb_set_accumulate,
    .record = cb_record,
    .wait = cb_wait,
    .sync = cb_sync,
    .capture_begin = cb_capture_begin,
    .capture_end = cb_capture_end,
    .graph_launch = cb_launch,
    .graph_destroy = cb_graph_destroy,
    .timer_mark = cb_timer_mark,
    .elapsed_ms = cb_elapsed,
    .annotate = cb_annotate,
    .prof_begin = cb_prof_begin,
    .prof_mark = cb_prof_mark,
    .prof_elapsed = cb_prof_elapsed,
    .streams = cb_streams,
    .op_lane = cb_op_lane,
    .run_op_on = cb_run_on,
    .events = cb_events,
    .event_record = cb_event_record,
    .event_wait = cb_event_wait,
    .mem_used = cb_mem_used,
    .mem_free = cb_mem_free,
    .workspaces = cb_workspaces,
    .destroy = cb_destroy,
};

int rt_backend_cuda_new(int device, unsigned flags, rt_backend **out, stg_err *err) {
    *out = NULL;
    if (cuda_device_count() <= device) return stg_errf(err, "cuda backend: no CUDA device %d (found %d)", device, cuda_device_count());
    rt_backend *b = stg_calloc(1, sizeof *b, err);
    cuda_impl *im = stg_calloc(1, sizeof *im, err);
    if (!b || !im) {
        free(b);
        free(im);
        return -1;
    }
    b->ops = &cuda_ops;
    b->impl = im;
    im->device = device;
    stg_cuda_opts o = {device, (flags & RT_CUDA_TF32) != 0, (flags & RT_CUDA_GEMM_TUNE) != 0};
    if (cuda_new(&o, &im->c, err)) {
        cb_destroy(b);
        return -1;
    }
    im->stream = (cudaStream_t)cuda_stream(im->c);
    for (int i = 0; i < 2; i++) {
        cudaError_t e = cudaEventCreateWithFlags(&im->ev[i], cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreate(&im->timer[i]);
        if (e != cudaSuccess) {
            cb_destroy(b);
            return stg_errf(err, "cuda backend: cudaEventCreate: %s", cudaGetErrorString(e));
        }
    }
    *out = b;
    return 0;
}

stg_cuda *rt_backend_cuda_context(rt_backend *b) { return impl(b)->c; }

int rt_backend_cuda_allreduce_bench(rt_backend *b, size_t bytes, bool bf16, int warmup, int iters, double *ms, stg_err *err) {
    cuda_impl *im = impl(b);
#ifdef STG_HAVE_NCCL
    if (!im->nccl) return stg_errf(err, "cuda backend: no communicator (rt_backend_cuda_join)");
    if (iters < 1) return stg_errf(err, "cuda backend: iters must be positive");
    void *buf = NULL;
    size_t esz = bf16 ? 2 : 4, n = bytes / esz;
    CK(err, cudaMalloc(&buf, n * esz));
    int rc = 0;
    cudaError_t e = cudaMemsetAsync(buf, 0, n * esz, im->stream);
    for (int i = 0; i < warmup + iters && e == cudaSuccess && !rc; i++) {
        if (i == warmup) e = cudaEventRecord(im->timer[0], im->stream);
        ncclResult_t r = ncclAllReduce(buf, buf, n, bf16 ? ncclBfloat16 : ncclFloat32, ncclSum, (ncclComm_t)im->nccl, im->stream);
        if (r != ncclSuccess) rc = stg_errf(err, "ncclAllReduce of %zu bytes: %s", bytes, ncclGetErrorString(r));
    }
    if (!rc && e == cudaSuccess) e = cudaEventRecord(im->timer[1], im->stream);
    if (!rc && e == cudaSuccess && cb_wait_event(im, im->timer[1], err)) rc = -1;
    float f = 0;
    if (!rc && e == cudaSuccess) e = cudaEventElapsedTime(&f, im->timer[0], im->timer[1]);
    if (!rc && e != cudaSuccess) rc = stg_errf(err, "cuda backend: all-reduce benchmark: %s", cudaGetErrorString(e));
    cudaFree(buf);
    *ms = f / iters;
    return rc;
#else
    (void)im;
    return stg_errf(err, "cuda backend: this stg was built without NCCL");
#endif
}

int64_t rt_backend_cuda_comm_bytes(rt_backend *b) { return impl(b)->nccl ? impl(b)->nccl_bytes : 0; }

int rt_backend_cuda_join(rt_backend *b, rt_dist *d, stg_err *err) {
    cuda_impl *im = impl(b);
#ifdef STG_HAVE_NCCL
    if (im->nccl) return stg_errf(err, "cuda backend: already joined a data-parallel group");
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (d->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return stg_errf(err, "rank 0: ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    // every rank is alive and has its device before NCCL's (blocking) initialisation starts
    if (rt_dist_bcast(d, &id, sizeof id, err) || rt_dist_barrier(d, err)) return stg_err_prefix(err, "NCCL bootstrap");
    CK(err, cudaSetDevice(im->device));
    int64_t before = cb_mem_used(b);
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRank(&comm, d->world, id, d->rank);
    if (r != ncclSuccess) return stg_errf(err, "rank %d: ncclCommInitRank (world %d): %s", d->rank, d->world, ncclGetErrorString(r));
    if (cuda_set_comm(im->c, comm, err)) {
        ncclCommDestroy(comm);
        return -1;
    }
    im->nccl = comm;
    im->rank = d->rank;
    int64_t after = cb_mem_used(b);
    im->nccl_bytes = before >= 0 && after >= before ? after - before : -1;
    im->timeout_s = d->timeout_s;
    CK(err, cudaEventCreateWithFlags(&im->sync_ev, cudaEventDisableTiming));
    return 0;
#else
    (void)im;
    (void)d;
    return stg_errf(err, "cuda backend: this stg was built without NCCL: data-parallel runs on CUDA are unavailable");
#endif
}

bool rt_cuda_available(void) { return cuda_device_count() > 0; }
