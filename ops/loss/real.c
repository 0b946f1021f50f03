// Mean cross-entropy over the rows whose target is not -1 (ignored: packed documents' targets that
// cross a boundary under --doc-loss-mask), with the log-sum-exp saved for the backward. Every row
// ignored: loss 0 and a zero gradient.
#include <math.h>

#include "ops/loss/kernels.h"
#include "ops/cpu/real.h"

// Targets are in [0, V) or -1; *kept gets the count of the others.
static int check_targets(const int32_t *tgt, int64_t rows, int64_t V, int64_t *kept, stg_err *err) {
    *kept = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (tgt[r] == -1) continue;
        if (tgt[r] < 0 || (int64_t)tgt[r] >= V)
            return stg_errf(err, "cross_entropy: target %d at position %lld is outside [0, %lld) (and not -1, ignored)",
                            (int)tgt[r], (long long)r, (long long)V);
        (*kept)++;
    }
    return 0;
}

// logits (rows, V), tgt (rows) -> loss (1) = mean over kept rows (lse - logit[tgt]), lse (rows)
int RFN(cpu_cross_entropy_fwd)(const real *logits, const int32_t *tgt, real *loss, real *lse,
                               int64_t rows, int64_t V, stg_err *err) {
    int64_t kept;
    if (check_targets(tgt, rows, V, &kept, err)) return -1;
    double part[CPU_CHUNKS]; // loss sums of fixed row chunks, added in order below
    CPU_PARALLEL_FOR(rows * V)
    for (int c = 0; c < CPU_CHUNKS; c++) {
        double acc = 0.0;
        for (int64_t r = rows * c / CPU_CHUNKS; r < rows * (c + 1) / CPU_CHUNKS; r++) {
            const real *x = logits + r * V;
            double mx = -INFINITY;
            for (int64_t j = 0; j < V; j++)
                if ((double)x[j] > mx) mx = (double)x[j];
            double sum = 0.0;
            for (int64_t j = 0; j < V; j++) sum += exp((double)x[j] - mx);
            double l = mx + log(sum);
            lse[r] = (real)l;
            if (tgt[r] >= 0) acc += l - (double)x[tgt[r]];
        }
        part[c] = acc;
    }
    double total = 0.0;
    for (int c = 0; c < CPU_CHUNKS; c++) total += part[c];
    loss[0] = kept ? (real)(total / (double)kept) : (real)0;
    return 0;
}

// logits (rows, V), tgt (rows), lse (rows) -> dlogits (rows, V) = (softmax - onehot(tgt)) / kept rows,
// 0 on ignored rows. dlogits may alias logits.
int RFN(cpu_cross_entropy_bwd)(const real *logits, const int32_t *tgt, const real *lse,
                               real *dlogits, int64_t rows, int64_t V, stg_err *err) {
    int64_t kept;
    if (check_targets(tgt, rows, V, &kept, err)) return -1;
    double inv_rows = kept ? 1.0 / (double)kept : 0.0;
    CPU_PARALLEL_FOR(rows * V)
    for (int64_t r = 0; r < rows; r++) {
        const real *x = logits + r * V;
        real *d = dlogits + r * V;
        double l = (double)lse[r];
        int64_t t = tgt[r];
        double w = t >= 0 ? inv_rows : 0.0;
        for (int64_t j = 0; j < V; j++) {
            double p = exp((double)x[j] - l);
            d[j] = (real)((p - (j == t ? 1.0 : 0.0)) * w);
        }
    }
    return 0;
}
