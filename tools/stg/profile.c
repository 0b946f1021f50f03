// The tables `stg bench --profile` and `stg sample --profile` print from one eager run's device time
// per op (rt_exec_profile): by op kind, then by op name with layer numbers folded.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "runtime/exec.h"
#include "tools/stg/cli.h"

double cli_profile_kinds(FILE *f, const stg_graph *g, const double *pm) {
    double bykind[STG_OP_COUNT] = {0}, total = 0;
    int count[STG_OP_COUNT] = {0};
    for (int s = 0; s < g->nsched; s++) {
        stg_op_kind k = g->ops[g->schedule[s]].kind;
        bykind[k] += pm[s];
        count[k] += pm[s] > 0;
        total += pm[s];
    }
    fprintf(f, "  profile   %.3f ms of device time in %d ops (one eager run, a mark around every op)\n", total, g->nsched);
    for (int n = 0; n < STG_OP_COUNT; n++) {
        int best = -1;
        for (int k = 0; k < STG_OP_COUNT; k++)
            if (bykind[k] > 0 && (best < 0 || bykind[k] > bykind[best])) best = k;
        if (best < 0) break;
        fprintf(f, "            %6.2f%% %9.3f ms  %4d x %s\n", 100 * bykind[best] / total, bykind[best], count[best],
                ops_name((stg_op_kind)best));
        bykind[best] = -1;
    }
    return total;
}

// After --profile: device time by op name with layer numbers folded ("layers.#.attn.q"), the
// largest first, with the part on the critical path (when on_path is given) and the FLOPs rate where the op has FLOPs; then,
// for the largest `whatif` names (with a dag), how much shorter the critical path would be if they took no time.
int cli_profile_names(FILE *f, const stg_graph *g, const double *pm, const bool *on_path, const rt_dag *dag, double len, int top,
                      int whatif) {
    int n = g->nsched;
    char (*key)[STG_NAME_MAX] = malloc(sizeof *key * (size_t)(n ? n : 1));
    double *ms = calloc((size_t)(n ? n : 1), sizeof *ms), *fl = calloc((size_t)(n ? n : 1), sizeof *fl);
    double *on = calloc((size_t)(n ? n : 1), sizeof *on), *ms0 = calloc((size_t)(n ? n : 1), sizeof *ms0);
    int *cnt = calloc((size_t)(n ? n : 1), sizeof *cnt), *gid = calloc((size_t)(n ? n : 1), sizeof *gid), nk = 0;
    int *order = calloc((size_t)(n ? n : 1), sizeof *order), rc = -1;
    if (!key || !ms || !fl || !cnt || !on || !ms0 || !gid || !order) goto out;
    for (int s = 0; s < n; s++) {
        gid[s] = -1;
        if (pm[s] <= 0) continue;
        const stg_op *op = &g->ops[g->schedule[s]];
        char k[STG_NAME_MAX], full[2 * STG_NAME_MAX];
        snprintf(full, sizeof full, "%s %s", ops_name(op->kind), op->n_out > 0 ? g->t[op->out[0]].name : "");
        size_t j = 0;
        for (const char *c = full; *c && j + 1 < sizeof k; c++) {
            if (*c >= '0' && *c <= '9') {
                if (j == 0 || k[j - 1] != '#') k[j++] = '#';
            } else {
                k[j++] = *c;
            }
        }
        k[j] = 0;
        int i = 0;
        while (i < nk && strcmp(key[i], k) != 0) i++;
        if (i == nk) memcpy(key[nk++], k, sizeof k);
        gid[s] = i;
        ms[i] += pm[s];
        on[i] += on_path && on_path[s] ? pm[s] : 0;
        fl[i] += graph_op_flops(g, g->schedule[s]);
        cnt[i]++;
    }
    fprintf(f, "  by op name (layer numbers folded), the %d largest: device ms, %sops, name\n", top,
            on_path ? "of it on the critical path, " : "");
    int nr = 0;
    for (int r = 0; r < top; r++) {
        int best = -1;
        for (int i = 0; i < nk; i++)
            if (ms[i] > 0 && (best < 0 || ms[i] > ms[best])) best = i;
        if (best < 0) break;
        fprintf(f, "            %9.3f ms ", ms[best]);
        if (on_path) fprintf(f, "%9.3f ", on[best]);
        fprintf(f, "%4d x %-56s", cnt[best], key[best]);
        if (fl[best] > 0) fprintf(f, " %7.1f TFLOP/s", fl[best] / (ms[best] * 1e-3) / 1e12);
        fprintf(f, "\n");
        order[nr++] = best;
        ms[best] = -ms[best] - 1; // printed (restored below)
    }
    for (int i = 0; i < nk; i++)
        if (ms[i] < 0) ms[i] = -ms[i] - 1;
    if (whatif > nr || !dag) whatif = dag ? nr : 0;
    if (whatif > 0)
        fprintf(f, "  what if   the critical path with one name's ops taking no time (the model above; the %d largest):\n", whatif);
    for (int r = 0; r < whatif; r++) {
        for (int s = 0; s < n; s++) ms0[s] = gid[s] == order[r] ? 0 : pm[s];
        double l0 = rt_dag_length(dag, ms0, NULL, NULL);
        if (l0 < 0) goto out;
        fprintf(f, "            %9.3f ms shorter without %9.3f ms of %s\n", len - l0, ms[order[r]], key[order[r]]);
    }
    rc = 0;
out:
    free(key), free(ms), free(fl), free(cnt), free(on), free(ms0), free(gid), free(order);
    return rc;
}

