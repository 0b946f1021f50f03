// Grouped-query rows and packed documents, shared by the attention kernels (cuda.cu, sm90a/).
//
// Grouped-query attention: q, o, do, dq (B, S, H, D) and k, v, dk, dv (B, S, Hkv, D), H = G Hkv; query
// head h reads kv head h / G. The kernels see the G query heads of kv head hk as S G rows: row R is
// position R / G of query head hk G + R % G (for a position, the group's heads are adjacent in memory).
// A block takes a tile of these rows, so one K/V tile load serves every query head of the group, and
// the backward's kv-tile blocks sum dk, dv over the whole group in registers (no atomics). G = 1 is
// plain multi-head attention with R the position.
//
// Packed documents: docs (B, S) i32, or NULL: docs[b][p] is the first position of p's document, so
// query p sees keys docs[b][p] .. p. The kernels rely on what a packing makes: docs[b][0] = 0 and
// docs[b][p] is p or docs[b][p - 1] (non-decreasing), so the first visible key of a tile of rows is
// the document start of its first position, and the queries that see a key tile end where the
// document of its last key ends.
#ifndef STG_OPS_ATTENTION_ROWS_CUH
#define STG_OPS_ATTENTION_ROWS_CUH

#include <limits.h>
#include <stdint.h>

// Offset (elements) of row R from row 0 of a group: position R / G, head R % G; stride = H D.
__device__ __forceinline__ int64_t att_row_off(int R, int G, int64_t stride, int D) {
    return G == 1 ? (int64_t)R * stride : (int64_t)(R / G) * stride + (int64_t)(R % G) * D;
}

// Index into lse or Dsum (B, H, S) of row R of kv head hk, batch b.
__device__ __forceinline__ int64_t att_stat_idx(int R, int G, int b, int H, int hk, int S) {
    return ((int64_t)b * H + (int64_t)hk * G + R % G) * S + R / G;
}

// The group size G with its reciprocal, for the hot loops: R / G and R % G there compiled to ~25
// dependent instructions each (I2F, MUFU.RCP, F2I and corrections; the attention backward's key-tile
// blocks spent most of their issue slots and latency on them, docs/perf/LOG.md twelfth session). With
// m = floor((2^32 - 1) / G), q = umulhi(R, m) is floor(R / G) or one less for every 0 <= R < 2^32:
// G m > 2^32 - 1 - G, so R / G - R m / 2^32 < R / 2^32 < 1; one correction step makes it exact.
struct att_grp {
    int g;
    unsigned m;
};
__host__ __device__ __forceinline__ att_grp att_grp_of(int G) { return att_grp{G, 0xFFFFFFFFu / (unsigned)G}; }
// R / G (returned) and R % G (in rem), R >= 0.
__device__ __forceinline__ int att_divmod(att_grp gr, int R, int &rem) {
    int q = (int)__umulhi((unsigned)R, gr.m), r = R - q * gr.g;
    if (r >= gr.g) {
        q++;
        r -= gr.g;
    }
    rem = r;
    return q;
}
__device__ __forceinline__ int att_div(att_grp gr, int R) {
    int rem;
    return att_divmod(gr, R, rem);
}
__device__ __forceinline__ int64_t att_row_off(int R, att_grp gr, int64_t stride, int D) {
    int h;
    const int p = att_divmod(gr, R, h);
    return (int64_t)p * stride + (int64_t)h * D;
}
__device__ __forceinline__ int64_t att_stat_idx(int R, att_grp gr, int b, int H, int hk, int S) {
    int h;
    const int p = att_divmod(gr, R, h);
    return ((int64_t)b * H + (int64_t)hk * gr.g + h) * S + p;
}

// The document start of position p of a row of docs (already offset to its batch); 0 without docs.
__device__ __forceinline__ int att_doc0(const int *docs, int p) { return docs ? docs[p] : 0; }

// An upper bound (< S) on the last position whose document starts at or before key kmax (S - 1 without
// docs), found by the whole block at once (every thread of the block calls it; NT threads, a multiple
// of 32): the threads probe every 16th position after kmax together, one round of loads per 16 NT
// positions, and the first probe whose document starts after kmax ends the search (the positions
// between probes are masked by the kernels anyway). A binary search costs a chain of log2 S dependent
// loads per block, which the short blocks of packed rows cannot hide.
#define ATT_DOC_PROBE 16
template <int NT>
__device__ __forceinline__ int att_doc_end_block(const int *docs, int S, int kmax) {
    if (!docs) return S - 1;
    __shared__ int red[NT / 32];
    for (int base = kmax + 1; base < S; base += NT * ATT_DOC_PROBE) {
        const int p = base + (int)threadIdx.x * ATT_DOC_PROBE;
        const unsigned past = __ballot_sync(0xffffffffu, p < S && docs[p] > kmax);
        if (threadIdx.x % 32 == 0)
            red[threadIdx.x / 32] = past ? base + ((int)threadIdx.x + __ffs((int)past) - 1) * ATT_DOC_PROBE : INT_MAX;
        __syncthreads();
        int e = INT_MAX;
#pragma unroll
        for (int w = 0; w < NT / 32; w++) e = min(e, red[w]);
        __syncthreads(); // red is read by everyone before the next round writes it
        if (e != INT_MAX) return e - 1;
    }
    return S - 1;
}

#endif
