#include "planner/shard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int plan_shard(const stg_graph *g, const stg_plan *p, int world, int zero, int done, int64_t bucket_bytes, stg_shard_report *r,
               stg_err *err) {
    memset(r, 0, sizeof *r);
    if (world < 1) return stg_errf(err, "--world must be at least 1, not %d", world);
    if (zero < 0 || zero > 3) return stg_errf(err, "--zero must be 0, 1, 2 or 3, not %d", zero);
    if (bucket_bytes < 0) return stg_errf(err, "negative bucket size");
    r->world = world;
    r->zero = zero;
    r->peak = p->peak_bytes;
    r->optimizer = p->by_class[STG_CLASS_OPTIMIZER];
    r->grads = p->by_class[STG_CLASS_GRAD];
    r->params = p->by_class[STG_CLASS_PARAM];
    int64_t largest = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_PARAM && p->size[t] > largest) largest = p->size[t];
    if (zero >= 1 && done < 1) {
        // what stg runs: each parameter's AdamW state on its owner rank (graph_dp_owners); a device
        // keeps the busiest rank's share
        int *owner = malloc(sizeof *owner * (size_t)(g->nt ? g->nt : 1));
        int64_t *held = calloc((size_t)world, sizeof *held);
        if (!owner || !held) {
            free(owner);
            free(held);
            return stg_errf(err, "out of host memory for the ZeRO accounting");
        }
        stg_optim_config oc;
        memset(&oc, 0, sizeof oc);
        oc.dp_world = world;
        graph_dp_owners(g, &oc, owner);
        int64_t busiest = 0;
        for (int t = 0; t < g->nt; t++)
            if (g->t[t].cls == STG_CLASS_OPTIMIZER && g->t[t].param >= 0 && owner[g->t[t].param] >= 0) held[owner[g->t[t].param]] += p->size[t];
        for (int k = 0; k < world; k++)
            if (held[k] > busiest) busiest = held[k];
        free(owner);
        free(held);
        r->removed += r->optimizer - busiest;
    }
    if (zero >= 2) {
        r->removed += r->grads - ceil_div(r->grads, world);
        if (world > 1) r->transient += 2 * (bucket_bytes < r->grads ? bucket_bytes : r->grads);
    }
    if (zero >= 3) {
        r->removed += r->params - ceil_div(r->params, world);
        if (world > 1) r->transient += 2 * largest;
    }
    r->per_device = r->peak - r->removed + r->transient;
    return 0;
}

int plan_shard_devices_needed(const stg_graph *g, const stg_plan *p, int zero, int64_t bucket_bytes, int64_t capacity, int max_world) {
    // One device's bytes do not grow with the device count (stages 0, 2 and 3 divide evenly; stage 1
    // keeps the busiest owner's share, which only falls as owners are added, up to the greedy
    // balance's slack of under one parameter), so: none if max_world does not fit, else bisection.
    // Each probe is a whole plan_shard (stage 1 balances every parameter over n owners).
    stg_err err;
    stg_shard_report r;
    if (max_world < 1 || plan_shard(g, p, max_world, zero, 0, bucket_bytes, &r, &err) || r.per_device > capacity) return 0;
    int lo = 1, hi = max_world; // the answer is in [lo, hi]; hi fits
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (plan_shard(g, p, mid, zero, 0, bucket_bytes, &r, &err)) return 0;
        if (r.per_device <= capacity)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static double gib(int64_t b) { return (double)b / (double)(1LL << 30); }

int plan_shard_write(FILE *f, bool md, const stg_graph *g, const stg_plan *p, const stg_shard_report *r, int64_t bucket_bytes,
                     int64_t capacity, stg_err *err) {
    const char *h = md ? "## " : "", *li = md ? "- " : "  ";
    fprintf(f, "\n%sData parallel: %d device%s, ZeRO stage %d (per device)\n", h, r->world, r->world == 1 ? "" : "s", r->zero);
    if (md) fprintf(f, "\n");
    fprintf(f, "%sone device's plan: peak %.3f GiB, of which parameters %.3f, gradients %.3f, optimizer state %.3f GiB (persistent)\n",
            li, gib(r->peak), gib(r->params), gib(r->grads), gib(r->optimizer));
    fprintf(f, "%ssharded over %d: %s; removes %.3f GiB per device\n", li, r->world,
            r->zero == 0 ? "nothing (plain data parallelism: every device holds everything)"
            : r->zero == 1 ? "the optimizer state"
            : r->zero == 2 ? "the optimizer state and the gradients"
                           : "the optimizer state, the gradients and the parameters",
            gib(r->removed));
    if (r->transient)
        fprintf(f, "%sadds %.3f GiB of transient buffers (%s)\n", li, gib(r->transient),
                r->zero == 2 ? "two gradient buckets in reduce-scatter" : "two gradient buckets, and two gathered copies of the largest parameter");
    fprintf(f, "%sper device: %.3f GiB (%lld bytes)%s\n", li, gib(r->per_device), (long long)r->per_device,
            r->zero >= 2 ? "; stages 2 and 3 are accounting only: stg runs stages 0 and 1" : "");
    if (capacity > 0) {
        fprintf(f, "%sdevices needed for %.1f GiB per device:", li, gib(capacity));
        for (int z = 0; z <= 3; z++) {
            int n = plan_shard_devices_needed(g, p, z, bucket_bytes, capacity, 1 << 16);
            if (n) fprintf(f, " ZeRO-%d %d;", z, n);
            else fprintf(f, " ZeRO-%d none (the unsharded part alone is too large);", z);
        }
        fprintf(f, "\n");
    }
    if (ferror(f)) return stg_errf(err, "writing the data-parallel section: %s", strerror(errno));
    return 0;
}
