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

// q, dout (B, S, H, D) bf16 as 4-D maps (D, H, S, B) with boxes of 64 dims x G heads x 64 / G positions x 1 (tq, tdo) and
// of the 16 tail dims at head dim 64 NP + 16 (tqt, tdot; zeroed otherwise), in the swizzles above: a box at (0, hk G, R0 /
// G, b) is the 64-row tile of rows R0 .. R0 + 63 of kv head hk's group (row R = s G + h % G, R0 a multiple of G), rows in
// that order. G must divide 64 (and H). Returns 0, or -1 with err set.
int tm_q_maps(CUtensorMap *tq, CUtensorMap *tdo, CUtensorMap *tqt, CUtensorMap *tdot, const void *q, const void *dout, int B,
              int S, int H, int G, int D, stg_err *err);

// The grid and head-batch groups of a launch whose blocks walk work items (the forward's and the dk/dv launch's: items
// longest first within each group of *hg head-batches, tm_item_split), of HB head-batches whose items each read `bytes`
// (a forward's kv head: its K and V; a dk/dv launch's: its query heads' Q, dO, lse and D).
// - When all head-batches read more than twice the L2: groups of 2 head-batches and a block an item. Longest first over
//   every head keeps all heads' rows streaming through the L2 at once (B4 H16 seq 16384 head dim 64: 9.1 GB read from
//   DRAM in one group against 0.9 GB in groups of 1); and a fixed share of a grouped order is unbalanced (each group's
//   longest items come late in the launch), where the hardware's placement, starting a block wherever a multiprocessor
//   frees, balances any order. Measured (docs/perf/2026-11-29o-h200-call3.txt; B4 H16): seq 16384 head dim 64 forward /
//   backward 4.81 / 18.12 ms against 5.16 / 19.29 persistent in one group, head dim 128 8.05 / 31.26 against 8.86 /
//   33.84; seq 4096 head dim 128 forward 0.576 against 0.621 (backward 2.056 against 2.046); persistent in groups of 4,
//   8 or 16 up to 1.3-1.4 times slower at seq 4096 (the fixed shares' longest / average 1.50 in groups of 4 in a model
//   of the items' tiles, docs/perf/2026-11-29o-groups.py).
// - Else one group (the longest items of all first) and, at two waves of items or more, as many persistent blocks as
//   are resident (each walking items x, x + grid, ...; the stages' ring carried across them). Below two waves a block
//   takes one item or two either way, and the hardware's placement balances those better than a fixed share
//   (docs/perf/2026-11-29n-snake.py models small ctx 512's forward, 192 items over 132 blocks: the longest block 1.57 of
//   the average with the fixed share, 1.18 placed by the hardware).
// Switches (read at every launch; for A/B runs and tests): cap >= 0 (the launch's STG_ATT_*_PERSIST set) fixes the grid
// (0: a block an item; N > 0: at most N blocks); STG_ATT_HGROUP=N, groups of N. Returns 0, or -1 with err set.
int tm_item_plan(const void *kernel, int threads, size_t smem, long long items, long long HB, long long bytes, int cap,
                 int *grid, int *hg, stg_err *err);

#endif
