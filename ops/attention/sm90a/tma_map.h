// Tensor maps of K and V for the warp-specialised attention kernels (host side; attention_ws.cu builds them).
#ifndef STG_OPS_ATTENTION_SM90A_TMA_MAP_H
#define STG_OPS_ATTENTION_SM90A_TMA_MAP_H

#include <cuda.h>

extern "C" {
#include "ops/base/err.h"
}

// k, v (B, S, Hkv, D) bf16 as 4-D maps (D, Hkv, S, B) with boxes of 64 dims x 1 x BK rows x 1 in the 128-byte
// swizzle (tk, tv), and, at head dim 64 NP + 16, of the 16 tail dims in the 32-byte swizzle (tkt, tvt; zeroed
// otherwise): the layout wgmma.cuh's descriptors read. Returns 0, or -1 with err set.
int tm_kv_maps(CUtensorMap *tk, CUtensorMap *tv, CUtensorMap *tkt, CUtensorMap *tvt, const void *k, const void *v, int B,
               int S, int Hkv, int D, int BK, stg_err *err);

// The grid of a launch whose blocks walk work items (the forward's and the dk/dv launch's persistent blocks): with cap < 0
// (its switch unset) as many blocks as are resident at once when the items are at least two such waves, else a block an
// item: below two waves a block takes one item or two either way, and the hardware's own scheduler, which starts a
// block wherever a multiprocessor frees (another stream's products hold some in a step), balances those better than a
// fixed share (docs/perf/2026-11-29n-snake.py models small ctx 512's forward, 192 items over 132 blocks: the longest
// block 1.57 of the average with the fixed share, 1.18 placed by the hardware). cap 0: a block an item; cap > 0: at
// most cap blocks. Returns 0 with *grid set, or -1 with err set.
int tm_persist_grid(const void *kernel, int threads, size_t smem, long long items, int cap, int *grid, stg_err *err);

// The head-batch group *hg of a launch's work items (tm_item_split) out of HB head-batches whose items each read
// `bytes` (a forward's kv head: its K and V; a dk/dv launch's: its Q, dO, lse and D): every head-batch in one group
// (the longest items of all first: the best balance) unless all of them read more than 4 times the L2, then as many as
// fit the L2 (at least 1), so fewer heads' rows stream through it at once: B4 H16 seq 16384 head dim 64 (4 MB a head,
// 256 MB in all) read 9.1 GB from DRAM in one group and 0.9 GB a head at a time, forward 3-4% faster in groups of 4 or
// 16 (docs/perf/2026-11-29o-h200-call1.txt); seq 4096 (64 MB) ran 18-34% slower in groups of 4 or 16. STG_ATT_HGROUP=N
// (read at every launch; for A/B runs and tests): groups of N. Returns 0, or -1 with err set.
int tm_head_group(long long HB, long long bytes, int *hg, stg_err *err);

#endif
