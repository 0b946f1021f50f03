// The learning-rate schedules of the lr_schedule op (stg_lr_attrs, ops/base/oplist.h), written once
// for the host (the CPU runner, ops_lr_at, the start-of-run summary) and the device (the CUDA kernel),
// in double. t is the 0-based iteration: step s of a run uses t = s - 1.
//
//   t < W (warm-up):       lr * t / W                          (0 at the first step)
//   E = 0 or constant:     lr
//   cosine:                min + (lr - min) * (1 + cos(pi * (t - W) / (E - W))) / 2   for W <= t <= E
//   linear:                min + (lr - min) * (1 - (t - W) / (E - W))                for W <= t <= E
//   wsd:                   lr for W <= t < S, then min + (lr - min) * shape((t - S) / (E - S)) for
//                          S <= t < E, with S = max(W, E - round(frac * E)) and shape(p) = 1 - p
//                          (linear), (1 + cos(pi p)) / 2 (cosine) or 1 - sqrt(p) (sqrt)
//   after E (or E <= W):   min
//
// W = warmup, E = cosine_steps (the step where the decay reaches min), min = min_lr.
#ifndef STG_OPS_OPTIM_SCHEDULE_H
#define STG_OPS_OPTIM_SCHEDULE_H

#include <math.h>
#include <stdint.h>

#include "ops/base/oplist.h"

#ifdef __CUDACC__
#define STG_LR_FN __host__ __device__ static inline
#else
#define STG_LR_FN static inline
#endif

#define STG_LR_PI 3.14159265358979323846

// The first iteration of a WSD schedule's decay (S above).
STG_LR_FN int64_t stg_lr_wsd_start(const stg_lr_attrs *a) {
    int64_t decay = (int64_t)(a->wsd_decay_frac * (double)a->cosine_steps + 0.5);
    int64_t s = a->cosine_steps - decay;
    return s < a->warmup ? a->warmup : s;
}

// The share of (lr - min) left after a fraction p in [0, 1] of a WSD decay.
STG_LR_FN double stg_lr_wsd_shape(int shape, double p) {
    if (shape == STG_WSD_COSINE) return 0.5 * (1.0 + cos(STG_LR_PI * p));
    if (shape == STG_WSD_SQRT) return 1.0 - sqrt(p);
    return 1.0 - p;
}

STG_LR_FN double stg_lr_schedule_at(const stg_lr_attrs *a, int64_t t) {
    int64_t w = a->warmup, e = a->cosine_steps;
    if (t < w) return (double)t / (double)w * a->lr;
    if (e == 0 || a->kind == STG_LR_CONSTANT) return a->lr;
    double span = a->lr - a->min_lr;
    if (a->kind == STG_LR_WSD) {
        int64_t s = stg_lr_wsd_start(a);
        if (t < s) return a->lr;
        if (t < e) return a->min_lr + span * stg_lr_wsd_shape(a->wsd_shape, (double)(t - s) / (double)(e - s));
        return a->min_lr;
    }
    if (t <= e && e > w) {
        double p = (double)(t - w) / (double)(e - w);
        return a->min_lr + span * (a->kind == STG_LR_LINEAR ? 1.0 - p : 0.5 * (1.0 + cos(p * STG_LR_PI)));
    }
    return a->min_lr;
}

#endif
