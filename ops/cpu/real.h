// The storage type of the CPU reference kernels. Every file in ops/cpu/real/ is written once over
// `real` and compiled twice (CMakeLists.txt): with STG_REAL_F32 (real = float, names end in _f32)
// and with STG_REAL_F64 (real = double, names end in _f64). Reductions always accumulate in double.
//
// Only files in ops/cpu/real/ include this header; everything else sees both variants through
// ops/cpu/kernels.h.
#ifndef STG_OPS_CPU_REAL_H
#define STG_OPS_CPU_REAL_H

#include <stddef.h>
#include <stdint.h>

#if defined(STG_REAL_F32) && defined(STG_REAL_F64)
#error "define exactly one of STG_REAL_F32 and STG_REAL_F64"
#elif defined(STG_REAL_F32)
typedef float real;
#define RFN(name) name##_f32
#elif defined(STG_REAL_F64)
typedef double real;
#define RFN(name) name##_f64
#else
#error "ops/cpu/real/*.c must be compiled with -DSTG_REAL_F32 or -DSTG_REAL_F64"
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

#define CPU_STR_(x) #x
#define CPU_STR(x) CPU_STR_(x)

// `#pragma omp parallel for` over the loop that follows, taken only when the loop does enough
// work (an estimate of the elements touched) to pay for waking the threads. Expands to nothing
// without OpenMP, so the code compiles (warning-free) either way.
#ifdef _OPENMP
#define CPU_PARALLEL_FOR(work) _Pragma(CPU_STR(omp parallel for schedule(static) if ((work) >= 32768)))
#else
#define CPU_PARALLEL_FOR(work)
#endif

// `#pragma omp simd` on the loop that follows: vectorized even at -O2 (where GCC's cost model
// would not). The loop must be free of dependences between iterations.
#ifdef _OPENMP
#define CPU_SIMD _Pragma("omp simd")
#else
#define CPU_SIMD
#endif

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

#endif
