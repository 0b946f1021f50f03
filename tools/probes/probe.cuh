// What the probes share (each probe is one file built on its own; see its first lines): checked
// CUDA / cuBLAS calls that end the probe, and the timing of a captured graph's replays.
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)
#define BK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { printf("cublas %d line %d\n", (int)s_, __LINE__); exit(1); } } while (0)

typedef struct {
    float best, mean; // ms a replay, over the timed ones
} probe_times;

// Ends the capture on st, replays the graph warm times untimed and n times timed (events on st),
// frees it, and returns the best and mean replay.
static probe_times probe_replay(cudaStream_t st, int warm, int n) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; i++) CK(cudaGraphLaunch(ge, st));
    probe_times r = {1e9f, 0};
    for (int i = 0; i < n; i++) {
        float t;
        CK(cudaEventRecord(a, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t, a, b));
        r.mean += t / n;
        if (t < r.best) r.best = t;
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return r;
}
