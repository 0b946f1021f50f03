// A kernel timeline of any CUDA program, graph replays included, without Nsight Systems (the GPU
// machine has none): a library that the CUDA driver loads into the program (CUDA_INJECTION64_PATH)
// and that records every kernel, memcpy and memset through CUPTI's activity API, each with its
// start and end on the device's clock, its stream, and for graph-launched work its graph, node and
// the correlation id of the launch (one per replay). Kernels are recorded as concurrent kernels
// (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), which does not serialise them. tools/timeline.py reads
// the file. Not built by CMake (the probes' way):
//   gcc -O2 -shared -fPIC tools/probes/timeline.c -I$CUDA/include -L$CUDA/lib64 -lcupti -o /tmp/libtimeline.so
//   export LD_LIBRARY_PATH=$CUDA/lib64 STG_TIMELINE_OUT=/tmp/t.tsv CUDA_INJECTION64_PATH=/tmp/libtimeline.so
//   build-gpu/stg bench models/cs336/small.yaml --precision bf16 --iters 5
//   python3 tools/timeline.py /tmp/t.tsv
// The output file must not exist (it is created exclusively: never over another file). Lines, tab-
// separated after a header: kind (kernel, memcpy, memset), start and end (ns), stream, graph id,
// graph node id, correlation id, grid (x*y*z blocks), block (threads), registers a thread, bytes
// (memcpy, memset) and the kernel's (mangled) name. A last line "# dropped N" counts the records
// CUPTI dropped (0 when its buffers kept up). Errors go to standard error, and the library then
// records nothing more: the program it rides in runs on untouched.
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TL_BUF (8u << 20)

static FILE *tl_out;
static unsigned long long tl_dropped, tl_records;
static int tl_failed;

static void tl_fail(const char *what, CUptiResult r) {
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
    fprintf(stderr, "timeline: %s: %s; recording stops\n", what, s);
    tl_failed = 1;
}

static void CUPTIAPI tl_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, TL_BUF);
    *size = *buffer ? TL_BUF : 0;
    *max_records = 0;
    if (!*buffer) fprintf(stderr, "timeline: out of host memory for a %u-byte record buffer\n", TL_BUF);
}

// One line; the name as one field: tabs and line ends (never in a mangled name) become spaces.
static void tl_line(const char *kind, uint64_t start, uint64_t end, uint32_t stream, uint32_t graph, uint64_t node, uint32_t corr,
                    long long grid, int block, unsigned regs, uint64_t bytes, const char *n) {
    fprintf(tl_out, "%s\t%llu\t%llu\t%u\t%u\t%llu\t%u\t%lld\t%d\t%u\t%llu\t", kind, (unsigned long long)start, (unsigned long long)end,
            stream, graph, (unsigned long long)node, corr, grid, block, regs, (unsigned long long)bytes);
    if (!n) n = "?";
    for (; *n; n++) fputc(*n == '\t' || *n == '\n' || *n == '\r' ? ' ' : *n, tl_out);
    fputc('\n', tl_out);
}

static void CUPTIAPI tl_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    CUpti_Activity *rec = NULL;
    while (tl_out && !tl_failed) {
        CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &rec);
        if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
        if (r != CUPTI_SUCCESS) {
            tl_fail("reading an activity record", r);
            break;
        }
        tl_records++;
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            tl_line("kernel", k->start, k->end, k->streamId, k->graphId, k->graphNodeId, k->correlationId,
                    (long long)k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ, k->registersPerThread, 0, k->name);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            tl_line("memcpy", m->start, m->end, m->streamId, m->graphId, m->graphNodeId, m->correlationId, 0, 0, 0, m->bytes, "memcpy");
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            tl_line("memset", m->start, m->end, m->streamId, m->graphId, m->graphNodeId, m->correlationId, 0, 0, 0, m->bytes, "memset");
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) tl_dropped += dropped;
    free(buffer);
}

static void tl_finish(void) {
    if (!tl_out) return;
    if (!tl_failed) {
        CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        if (r != CUPTI_SUCCESS) tl_fail("flushing the last records", r);
    }
    fprintf(tl_out, "# dropped %llu\n", tl_dropped);
    if (ferror(tl_out) | fclose(tl_out))
        fprintf(stderr, "timeline: writing %s failed\n", getenv("STG_TIMELINE_OUT"));
    else
        fprintf(stderr, "timeline: %llu records, %llu dropped, in %s\n", tl_records, tl_dropped, getenv("STG_TIMELINE_OUT"));
    tl_out = NULL;
}

// Called by the driver when it loads this library (CUDA_INJECTION64_PATH); 1: loaded.
int InitializeInjection(void) {
    const char *path = getenv("STG_TIMELINE_OUT");
    if (!path || !*path) {
        fprintf(stderr, "timeline: STG_TIMELINE_OUT names no file; nothing is recorded\n");
        return 1;
    }
    tl_out = fopen(path, "wx");
    if (!tl_out) {
        fprintf(stderr, "timeline: cannot create %s (it must not exist yet); nothing is recorded\n", path);
        return 1;
    }
    fputs("kind\tstart\tend\tstream\tgraph\tnode\tcorrelation\tgrid\tblock\tregisters\tbytes\tname\n", tl_out);
    CUptiResult r = cuptiActivityRegisterCallbacks(tl_requested, tl_completed);
    if (r != CUPTI_SUCCESS) tl_fail("registering the buffer callbacks", r);
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !tl_failed; i++)
        if ((r = cuptiActivityEnable(kinds[i])) != CUPTI_SUCCESS) tl_fail("enabling an activity kind", r);
    if (atexit(tl_finish) != 0) fprintf(stderr, "timeline: atexit failed; the last records may be lost\n");
    return 1;
}
