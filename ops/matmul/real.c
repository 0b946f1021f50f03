// Batched matrix multiply C = op(A) op(B); linear layers are the case batch 1, tb = 1.
//
// Each output row is accumulated in a double row buffer in i-k-j order: the inner loop runs
// along a contiguous row of B and the accumulator, so it vectorizes. B is first copied to double
// in (k, n) layout (transposed when tb), so the inner loop stays contiguous and does no
// conversions; when B is already double and not transposed it is used as is. Parallel over
// output rows of all batches; every row is summed in the same order whatever the thread count.
#include <string.h>

#include "ops/matmul/kernels.h"
#include "ops/cpu/real.h"

// B (nb, n, k) if tb else (nb, k, n) -> Bd (nb, k, n) in double
static void to_double_kn(const real *B, double *Bd, int64_t nb, int64_t n, int64_t k, int tb) {
    CPU_PARALLEL_FOR(nb * n * k)
    for (int64_t b = 0; b < nb; b++) {
        const real *src = B + b * n * k;
        double *dst = Bd + b * n * k;
        if (tb) {
            for (int64_t j = 0; j < n; j++)
                for (int64_t p = 0; p < k; p++) dst[p * n + j] = (double)src[j * k + p];
        } else {
            for (int64_t i = 0; i < k * n; i++) dst[i] = (double)src[i];
        }
    }
}

// acc (n) += a0 b0 + a1 b1 + a2 b2 + a3 b3: four steps of the i-k-j loop at once (a quarter of
// the accumulator traffic). Vectorized by `omp simd` whatever the optimization level.
static void axpy4(double *restrict acc, const double *restrict b0, const double *restrict b1,
                  const double *restrict b2, const double *restrict b3, double a0, double a1,
                  double a2, double a3, int64_t n) {
    CPU_SIMD
    for (int64_t j = 0; j < n; j++) acc[j] += (a0 * b0[j] + a1 * b1[j]) + (a2 * b2[j] + a3 * b3[j]);
}

// acc (n) += a0 b0
static void axpy1(double *restrict acc, const double *restrict b0, double a0, int64_t n) {
    CPU_SIMD
    for (int64_t j = 0; j < n; j++) acc[j] += a0 * b0[j];
}

// Whether B is copied to double (in scratch) rather than used as is.
static int copy_b_of(int tb) { return tb || sizeof(real) != sizeof(double); }

size_t RFN(cpu_matmul_scratch)(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb,
                               int b_batched) {
    if (batch <= 0 || m <= 0 || n <= 0 || k < 0) return 0;
    int64_t nb = b_batched ? batch : 1;
    size_t n_doubles = (size_t)cpu_max_threads() * cpu_pad((size_t)n) +
                       (copy_b_of(tb) ? (size_t)(nb * k * n) : 0);
    return n_doubles * sizeof(double);
}

// A (batch, m, k) or (batch, k, m) when ta; B (k, n) or (n, k) when tb, per batch when
// b_batched; C (batch, m, n), or C += the product when accumulate
int RFN(cpu_matmul)(const real *A, const real *B, real *C, int64_t batch, int64_t m, int64_t n,
                    int64_t k, int ta, int tb, int b_batched, int accumulate, void *scratch_mem,
                    size_t scratch_bytes, stg_err *err) {
    size_t need = RFN(cpu_matmul_scratch)(batch, m, n, k, ta, tb, b_batched);
    if (cpu_scratch_check("matmul", scratch_mem, scratch_bytes, need, cpu_max_threads(), err))
        return -1;
    int64_t nb = b_batched ? batch : 1;
    int nthr = cpu_max_threads();
    int copy_b = copy_b_of(tb);
    size_t row = cpu_pad((size_t)n); // accumulator row stride
    // scratch: per thread an accumulator row (n, padded), then B in double (nb, k, n) when copied
    double *scratch = scratch_mem;
    const double *Bd; // (nb, k, n)
    if (copy_b) {
        double *bd = scratch + (size_t)nthr * row;
        to_double_kn(B, bd, nb, n, k, tb);
        Bd = bd;
    } else {
        Bd = (const double *)(const void *)B; // real is double here
    }

    CPU_PARALLEL_FOR(batch * m * n * k)
    for (int64_t r = 0; r < batch * m; r++) {
        int64_t b = r / m, i = r % m;
        double *acc = scratch + (size_t)cpu_thread_id() * row;
        const real *a = A + b * m * k;                       // (m, k) or (k, m)
        const double *bm = Bd + (b_batched ? b : 0) * k * n; // (k, n)
        for (int64_t j = 0; j < n; j++) acc[j] = 0.0;
        int64_t p = 0;
        for (; p + 4 <= k; p += 4) {
            double a4[4];
            for (int u = 0; u < 4; u++) a4[u] = (double)(ta ? a[(p + u) * m + i] : a[i * k + p + u]);
            axpy4(acc, bm + p * n, bm + (p + 1) * n, bm + (p + 2) * n, bm + (p + 3) * n, a4[0], a4[1],
                  a4[2], a4[3], n);
        }
        for (; p < k; p++) axpy1(acc, bm + p * n, (double)(ta ? a[p * m + i] : a[i * k + p]), n);
        real *c = C + r * n;
        if (accumulate)
            for (int64_t j = 0; j < n; j++) c[j] = (real)((double)c[j] + acc[j]);
        else
            for (int64_t j = 0; j < n; j++) c[j] = (real)acc[j];
    }
    return 0;
}

// y (rows, n) += b (n)
void RFN(cpu_add_bias)(real *y, const real *b, int64_t rows, int64_t n) {
    CPU_PARALLEL_FOR(rows * n)
    for (int64_t r = 0; r < rows; r++) {
        real *row = y + r * n;
        CPU_SIMD
        for (int64_t j = 0; j < n; j++) row[j] = (real)((double)row[j] + (double)b[j]);
    }
}

// y (n) = sum over r of x (rows, n): columns in blocks of SUM_COLS (parallel over blocks), each
// block's rows added in order into double accumulators: the same result for any thread count.
#define SUM_COLS 64
void RFN(cpu_sum_rows)(const real *x, real *y, int64_t rows, int64_t n) {
    int64_t nblk = (n + SUM_COLS - 1) / SUM_COLS;
    CPU_PARALLEL_FOR(rows * n)
    for (int64_t bl = 0; bl < nblk; bl++) {
        int64_t j0 = bl * SUM_COLS, w = n - j0 < SUM_COLS ? n - j0 : SUM_COLS;
        double acc[SUM_COLS];
        for (int64_t j = 0; j < w; j++) acc[j] = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            const real *row = x + r * n + j0;
            CPU_SIMD
            for (int64_t j = 0; j < w; j++) acc[j] += (double)row[j];
        }
        for (int64_t j = 0; j < w; j++) y[j0 + j] = (real)acc[j];
    }
}
