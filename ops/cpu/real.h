// The storage type of the CPU reference kernels. Every family's ops/<family>/real.c is written
// once over `real` and compiled twice (CMakeLists.txt): with STG_REAL_F32 (real = float, names end
// in _f32) and with STG_REAL_F64 (real = double, names end in _f64). Reductions always accumulate
// in double. Only those files include this header; everything else sees both variants through
// the families' kernels.h.
#ifndef STG_OPS_CPU_REAL_H
#define STG_OPS_CPU_REAL_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"

#if defined(STG_REAL_F32) && defined(STG_REAL_F64)
#error "define exactly one of STG_REAL_F32 and STG_REAL_F64"
#elif defined(STG_REAL_F32)
typedef float real;
#define RFN(name) name##_f32
#elif defined(STG_REAL_F64)
typedef double real;
#define RFN(name) name##_f64
#else
#error "ops/<family>/real.c must be compiled with -DSTG_REAL_F32 or -DSTG_REAL_F64"
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

#define CPU_STR_(x) #x
#define CPU_STR(x) CPU_STR_(x)

// `#pragma omp parallel for` over the loop that follows, taken only when the loop does enough
// work (a rough count of elements touched or multiply-adds, >= 2^18) to pay for waking the
// threads: the small ops of a tiny model stay on one thread. Expands to nothing
// without OpenMP, so the code compiles (warning-free) either way.
#ifdef _OPENMP
#define CPU_PARALLEL_FOR(work) _Pragma(CPU_STR(omp parallel for schedule(static) if ((work) >= 262144)))
#else
#define CPU_PARALLEL_FOR(work)
#endif

// `#pragma omp simd` on the loop that follows: vectorized even at -O2 (where GCC's cost model
// would not). The loop must be free of dependences between iterations.
// CPU_SIMD_SUM(acc): the same for a loop that sums into the double `acc` (the compiler may keep
// several partial sums; the order is fixed by the code, not by the thread count).
#ifdef _OPENMP
#define CPU_SIMD _Pragma("omp simd")
#define CPU_SIMD_SUM(acc) _Pragma(CPU_STR(omp simd reduction(+ : acc)))
#else
#define CPU_SIMD
#define CPU_SIMD_SUM(acc)
#endif

// Reductions to one number (sum of squares, the mean loss) split their range into this many
// fixed chunks, sum each chunk in order (in parallel), then add the chunk sums in order: the
// result does not depend on the thread count.
#define CPU_CHUNKS 64

// Threads a parallel region may use, and the calling thread's index in it (for per-thread
// scratch rows allocated before the region).
static inline int cpu_max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int cpu_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// ---- scratch bookkeeping ---------------------------------------------------------------------

// Per-thread scratch rows are padded to CPU_SCRATCH_PAD doubles (64 bytes), so that two threads
// never write the same cache line.
#define CPU_SCRATCH_PAD 8

static inline size_t cpu_pad(size_t n_doubles) {
    return (n_doubles + CPU_SCRATCH_PAD - 1) / CPU_SCRATCH_PAD * CPU_SCRATCH_PAD;
}

// 0 when `scratch` holds the `need` bytes kernel `kernel` asks for and is aligned to 8 bytes; else
// -1 with a message. threads: the thread count `need` was computed for (0: it does not depend on it).
static inline int cpu_scratch_check(const char *kernel, const void *scratch, size_t have, size_t need,
                                    int threads, stg_err *err) {
    if (need == 0) return 0;
    if (!scratch || have < need)
        return threads > 0
                   ? stg_errf(err, "%s: scratch is %zu bytes, the kernel needs %zu (for %d threads)",
                              kernel, scratch ? have : (size_t)0, need, threads)
                   : stg_errf(err, "%s: scratch is %zu bytes, the kernel needs %zu", kernel,
                              scratch ? have : (size_t)0, need);
    if ((uintptr_t)scratch % 8 != 0)
        return stg_errf(err, "%s: scratch at %p is not aligned to 8 bytes", kernel, scratch);
    return 0;
}

#endif
