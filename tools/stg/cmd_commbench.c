// stg comm-bench: NCCL all-reduce time, algorithm bandwidth and bus bandwidth from 1 MB to 1 GB,
// fp32 and bf16, at the world size it is launched with (`stg launch -n N -- stg comm-bench`; alone
// it is one rank). Rank 0 prints; every size starts after a barrier of all ranks.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dist.h"
#include "tools/stg/cli.h"
#ifdef STG_HAVE_CUDA
#include "runtime/cuda/backend_cuda.h"
#endif

static const char *commbench_usage = "usage: stg [launch -n N --] comm-bench [--iters N] [--warmup N] [--json]\n";

int cmd_commbench(int argc, char **argv) {
    int64_t iters = 20, warmup = 5;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--json") == 0) json = true;
        else if (strcmp(argv[i], "--iters") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int("--iters", v, 1, 100000, &iters)) return 2;
        } else if (strcmp(argv[i], "--warmup") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int("--warmup", v, 0, 100000, &warmup)) return 2;
        } else {
            fprintf(stderr, "stg comm-bench: unexpected argument '%s'\n%s", argv[i], commbench_usage);
            return 2;
        }
    }
#ifdef STG_HAVE_CUDA
    rt_dist d;
    stg_err err;
    if (rt_dist_from_env(&d, &err)) {
        fprintf(stderr, "stg comm-bench: %s\n", err.msg);
        return 2;
    }
    rt_backend *b = cli_open_backend_at("cuda", STG_PREC_FP32, false, d.local_rank);
    if (!b) return 2;
    int rc = 1;
    if (rt_dist_connect(&d, &err) || rt_backend_cuda_join(b, &d, &err)) {
        fprintf(stderr, "stg comm-bench: rank %d: %s\n", d.rank, err.msg);
        goto out;
    }
    static const double mb[] = {1, 10, 100, 1000};
    if (d.rank == 0 && !json)
        printf("all-reduce (in place, sum) on %d rank(s), %s; %lld iterations after %lld warm-up, rank 0's device time\n"
               "%-5s %9s %10s %12s %12s\n", d.world, cuda_device_name(rt_backend_cuda_context(b)), (long long)iters,
               (long long)warmup, "dtype", "size_MB", "time_ms", "algbw_GB/s", "busbw_GB/s");
    for (int p = 0; p < 2; p++)
        for (size_t k = 0; k < sizeof mb / sizeof mb[0]; k++) {
            size_t bytes = (size_t)(mb[k] * 1e6);
            double ms = 0;
            if (rt_dist_barrier(&d, &err) || rt_backend_cuda_allreduce_bench(b, bytes, p == 1, (int)warmup, (int)iters, &ms, &err)) {
                fprintf(stderr, "stg comm-bench: rank %d: %s\n", d.rank, err.msg);
                goto out;
            }
            double alg = (double)bytes / (ms * 1e-3) / 1e9, bus = alg * 2.0 * (d.world - 1) / d.world;
            if (d.rank != 0) continue;
            if (json)
                printf("{\"world\": %d, \"dtype\": \"%s\", \"bytes\": %zu, \"time_ms\": %.4f, \"algbw_gbps\": %.2f, \"busbw_gbps\": %.2f}\n",
                       d.world, p ? "bf16" : "fp32", bytes, ms, alg, bus);
            else
                printf("%-5s %9.0f %10.4f %12.2f %12.2f\n", p ? "bf16" : "fp32", mb[k], ms, alg, bus);
            fflush(stdout);
        }
    rc = 0;
out:
    b->ops->destroy(b);
    rt_dist_close(&d);
    return rc;
#else
    (void)json;
    (void)iters;
    (void)warmup;
    fprintf(stderr, "stg comm-bench: this stg was built without CUDA\n");
    return 2;
#endif
}
