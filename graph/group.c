// Grouping matmuls: independent products of equal shapes that share an operand become one
// matmul_group op (one launch on a GPU, the members' outputs unchanged).
//
// In the CS336 LM that is the q, k and v projections of a layer (they share the normed input), the
// w1 and w3 projections, and the weight gradients of each of those sets (they share the flattened
// input). On a GPU each set is one batched product with more output tiles than any one of them,
// which fills the waves of a small product better and pays one launch.
//
// Rules: members are LINEAR (input of 2 or more dims: the matmul x · Wᵀ) or MATMUL ops of one phase
// (forward or backward) with a 2-D second operand (and a 2-D first when it is transposed: each
// member one matrix product), without an addend, that are not recomputation copies, with the same
// transposes, output dtype, gradient accumulation (stg_op.accum) and operand shapes and dtypes; each after the first shares the view root
// of an operand with the first; none depends on another. At most STG_MAX_OUT members.
//
// The group takes the place of its last member in creation order (all members' inputs exist
// there); ops in between that read an earlier member's output move after it, keeping their order.
// The order stays the creation order the scheduler follows, forward ops first.
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "ops/registry.h"

static int root_of(const stg_graph *g, int t) {
    for (int k = 0; g->t[t].base >= 0 && k <= g->nt; k++) t = g->t[t].base;
    return t;
}

// Op o as a product: its transposes and output dtype flag; false when it cannot be a member.
static bool as_product(const stg_graph *g, int o, stg_matmul_attrs *a) {
    const stg_op *op = &g->ops[o];
    if (op->n_in != 2 || op->n_out != 1 || op->recompute_of >= 0 || op->phase == STG_PHASE_OPTIMIZER) return false;
    // a 2-D B (and a 2-D A when transposed): one matrix product each, whatever A's batch dims
    if (g->t[op->in[1]].ndim != 2) return false;
    if (op->kind == STG_OP_MATMUL) {
        if (op->a.matmul.ta && g->t[op->in[0]].ndim != 2) return false;
        *a = op->a.matmul;
        a->ta = a->ta != 0;
        a->tb = a->tb != 0;
        a->grad_out = a->grad_out == 2 ? 2 : a->grad_out != 0; // 2: a bf16 parameter gradient
        return true;
    }
    if (op->kind == STG_OP_LINEAR && g->t[op->in[0]].ndim >= 2) {
        *a = (stg_matmul_attrs){.ta = 0, .tb = 1, .grad_out = 0}; // x · Wᵀ, in x's dtype
        return true;
    }
    return false;
}

static bool same_tensor_shape(const stg_tensor *x, const stg_tensor *y) {
    if (x->ndim != y->ndim || x->dtype != y->dtype) return false;
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] != y->shape[i]) return false;
    return true;
}

// Whether op `to` reads, directly or through other ops, an output of op `from` (stamp: a per-op
// mark array, `mark` a value not used in it before). With `ordered` (every op's producers come
// before it in the op list), the walk stops at ops older than `from`: none of them can read it.
static bool depends(const stg_graph *g, int to, int from, int *stamp, int mark, int *stack, bool ordered) {
    int n = 0;
    stack[n++] = to;
    stamp[to] = mark;
    while (n) {
        const stg_op *op = &g->ops[stack[--n]];
        for (int i = 0; i < op->n_in; i++) {
            int pr = g->t[op->in[i]].producer;
            if (pr < 0 || stamp[pr] == mark || (ordered && pr < from)) continue;
            if (pr == from) return true;
            stamp[pr] = mark;
            stack[n++] = pr;
        }
    }
    return false;
}

// The products reading each view root as their first (side 0) or second (side 1) operand, in op
// order: start[side][root] .. start[side][root + 1] in list[side]. A member after the first shares
// an operand's root with the first, so these are the only candidates.
typedef struct {
    int *start[2], *list[2];
} by_root;

static int by_root_build(const stg_graph *g, by_root *b) {
    int nt = g->nt;
    for (int s = 0; s < 2; s++) {
        b->start[s] = calloc((size_t)nt + 2, sizeof(int));
        b->list[s] = malloc(sizeof(int) * (size_t)(g->nops ? g->nops : 1));
        if (!b->start[s] || !b->list[s]) return -1;
    }
    stg_matmul_attrs a;
    for (int s = 0; s < 2; s++) {
        for (int o = 0; o < g->nops; o++)
            if (as_product(g, o, &a)) b->start[s][root_of(g, g->ops[o].in[s]) + 2]++;
        for (int r = 0; r < nt; r++) b->start[s][r + 2] += b->start[s][r + 1];
        for (int o = 0; o < g->nops; o++)
            if (as_product(g, o, &a)) b->list[s][b->start[s][root_of(g, g->ops[o].in[s]) + 1]++] = o;
    }
    return 0;
}

static void by_root_free(by_root *b) {
    for (int s = 0; s < 2; s++) {
        free(b->start[s]);
        free(b->list[s]);
    }
}

// A min-heap of op slots by key.
typedef struct {
    int *v;
    const int *key;
    int n;
} heap;

static void heap_push(heap *h, int x) {
    int i = h->n++;
    h->v[i] = x;
    while (i > 0 && h->key[h->v[(i - 1) / 2]] > h->key[h->v[i]]) {
        int p = (i - 1) / 2, t = h->v[p];
        h->v[p] = h->v[i];
        h->v[i] = t;
        i = p;
    }
}

static int heap_pop(heap *h) {
    int top = h->v[0];
    h->v[0] = h->v[--h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->key[h->v[l]] < h->key[h->v[m]]) m = l;
        if (r < h->n && h->key[h->v[r]] < h->key[h->v[m]]) m = r;
        if (m == i) break;
        int t = h->v[m];
        h->v[m] = h->v[i];
        h->v[i] = t;
        i = m;
    }
    return top;
}

int graph_group_matmuls(stg_graph *g, stg_err *err) {
    const int n = g->nops;
    int *group = malloc(sizeof(int) * (size_t)(n ? n : 1));      // op -> its group's last member, -1
    int *stamp = calloc((size_t)(n ? n : 1), sizeof(int));
    int *stack = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *members = malloc(sizeof(int) * (size_t)(n ? n : 1) * STG_MAX_OUT); // by last member: up to 3 ops
    int *nmem = calloc((size_t)(n ? n : 1), sizeof(int));
    int ngroups = -1, mark = 0;
    // the new order: slots 0..n-1 are the ops; key = position in creation order (a group: its last
    // member's); indeg counts unemitted producer slots
    int *key = NULL, *indeg = NULL, *order = NULL, *newid = NULL, *heapv = NULL, *rstart = NULL, *rend = NULL, *readers = NULL;
    stg_op *ops2 = NULL;
    int **groupin = NULL; // (n) the groups' input arrays until they are handed to ops2
    if (!group || !stamp || !stack || !members || !nmem) {
        stg_errf(err, "grouping matmuls: out of host memory");
        goto out;
    }
    for (int o = 0; o < n; o++) group[o] = -1;

    bool ordered = true; // every op after its inputs' producers (the creation order)
    for (int o = 0; o < n && ordered; o++)
        for (int i = 0; i < g->ops[o].n_in; i++)
            if (g->t[g->ops[o].in[i]].producer >= o) ordered = false;
    by_root br = {{NULL, NULL}, {NULL, NULL}};
    if (by_root_build(g, &br)) {
        by_root_free(&br);
        stg_errf(err, "grouping matmuls: out of host memory");
        goto out;
    }
    int found = 0;
    for (int i = 0; i < n; i++) {
        stg_matmul_attrs ai;
        if (group[i] >= 0 || !as_product(g, i, &ai)) continue;
        const stg_op *oi = &g->ops[i];
        int mem[STG_MAX_OUT] = {i}, k = 1;
        // the later products sharing the root of oi's first or second operand, in op order (the
        // merge of two ascending lists)
        int r0 = root_of(g, oi->in[0]), r1 = root_of(g, oi->in[1]);
        const int *l0 = br.list[0] + br.start[0][r0], *l1 = br.list[1] + br.start[1][r1];
        int n0 = br.start[0][r0 + 1] - br.start[0][r0], n1 = br.start[1][r1 + 1] - br.start[1][r1], p0 = 0, p1 = 0;
        while (p0 < n0 && l0[p0] <= i) p0++;
        while (p1 < n1 && l1[p1] <= i) p1++;
        while ((p0 < n0 || p1 < n1) && k < STG_MAX_OUT) {
            int j;
            if (p1 >= n1 || (p0 < n0 && l0[p0] < l1[p1])) j = l0[p0++];
            else if (p0 >= n0 || l1[p1] < l0[p0]) j = l1[p1++];
            else {
                j = l0[p0++];
                p1++;
            }
            stg_matmul_attrs aj;
            if (group[j] >= 0 || !as_product(g, j, &aj)) continue;
            const stg_op *oj = &g->ops[j];
            if (oj->phase != oi->phase || aj.ta != ai.ta || aj.tb != ai.tb || aj.grad_out != ai.grad_out) continue;
            if ((oj->accum & 1u) != (oi->accum & 1u)) continue; // a group's products all accumulate, or none

            if (!same_tensor_shape(&g->t[oi->in[0]], &g->t[oj->in[0]]) ||
                !same_tensor_shape(&g->t[oi->in[1]], &g->t[oj->in[1]]) ||
                !same_tensor_shape(&g->t[oi->out[0]], &g->t[oj->out[0]]))
                continue;
            bool dep = false;
            for (int m = 0; m < k && !dep; m++) dep = depends(g, j, mem[m], stamp, ++mark, stack, ordered);
            if (!dep) mem[k++] = j;
        }
        if (k < 2) continue;
        int last = mem[k - 1];
        for (int m = 0; m < k; m++) {
            group[mem[m]] = last;
            members[last * STG_MAX_OUT + m] = mem[m];
        }
        nmem[last] = k;
        found++;
    }
    by_root_free(&br);
    if (!found) {
        ngroups = 0;
        goto out;
    }

    // The new op list: Kahn's algorithm over the slots (an ungrouped op, or a group at its last
    // member), smallest creation position first.
    key = malloc(sizeof(int) * (size_t)n);
    indeg = calloc((size_t)n, sizeof(int));
    order = malloc(sizeof(int) * (size_t)n);
    newid = malloc(sizeof(int) * (size_t)n);
    heapv = malloc(sizeof(int) * (size_t)n);
    if (!key || !indeg || !order || !newid || !heapv) {
        stg_errf(err, "grouping matmuls: out of host memory");
        goto out;
    }
    // slot of op o: o itself, or its group's last member
    #define SLOT(o) (group[(o)] >= 0 ? group[(o)] : (o))
    for (int o = 0; o < n; o++) key[o] = o;
    // edges producer slot -> consumer slot, counted once per (consumer op, input)
    for (int o = 0; o < n; o++) {
        const stg_op *op = &g->ops[o];
        for (int i = 0; i < op->n_in; i++) {
            int pr = g->t[op->in[i]].producer;
            if (pr >= 0 && SLOT(pr) != SLOT(o)) indeg[SLOT(o)]++;
        }
    }
    // the readers of each tensor, once per input that reads it
    rstart = calloc((size_t)(g->nt > 0 ? g->nt : 0) + 1, sizeof(int));
    int nreads = 0;
    for (int o = 0; o < n; o++) nreads += g->ops[o].n_in;
    readers = malloc(sizeof(int) * (size_t)(nreads ? nreads : 1));
    if (!rstart || !readers) {
        stg_errf(err, "grouping matmuls: out of host memory");
        goto out;
    }
    for (int o = 0; o < n; o++)
        for (int i = 0; i < g->ops[o].n_in; i++) rstart[g->ops[o].in[i] + 1]++;
    for (int t = 0; t < g->nt; t++) rstart[t + 1] += rstart[t];
    rend = malloc(sizeof(int) * (size_t)(g->nt > 0 ? g->nt : 1));
    if (!rend) {
        stg_errf(err, "grouping matmuls: out of host memory");
        goto out;
    }
    for (int t = 0; t < g->nt; t++) rend[t] = rstart[t + 1];
    for (int o = 0; o < n; o++) // fill from the back of each tensor's range, rstart[t + 1] ends at rstart[t]
        for (int i = g->ops[o].n_in - 1; i >= 0; i--) readers[--rend[g->ops[o].in[i]]] = o;
    heap h = {heapv, key, 0};
    for (int o = 0; o < n; o++)
        if (SLOT(o) == o && indeg[o] == 0) heap_push(&h, o);
    int ns = 0;
    while (h.n) {
        int s = heap_pop(&h);
        order[ns++] = s;
        int k = group[s] >= 0 ? nmem[s] : 1;
        for (int m = 0; m < k; m++) {
            int o = group[s] >= 0 ? members[s * STG_MAX_OUT + m] : s;
            for (int q = 0; q < g->ops[o].n_out; q++) {
                int t = g->ops[o].out[q];
                for (int r = rstart[t]; r < rstart[t + 1]; r++) { // each read of t: one pending input fewer
                    int c = SLOT(readers[r]);
                    if (c != s && --indeg[c] == 0) heap_push(&h, c);
                }
            }
        }
    }
    int nslots = 0;
    for (int o = 0; o < n; o++) nslots += SLOT(o) == o;
    if (ns != nslots) {
        stg_errf(err, "internal: grouping matmuls left %d of %d ops unordered (a cycle)", nslots - ns, nslots);
        goto out;
    }

    // the forward ops must stay a prefix (the forward graph closes under its producers, and a
    // ready forward slot always has a smaller key than any backward one)
    int nfwd = 0;
    for (int s = 0; s < ns; s++) nfwd += g->ops[order[s]].phase == STG_PHASE_FORWARD;
    for (int s = 0; s < ns; s++)
        if ((g->ops[order[s]].phase == STG_PHASE_FORWARD) != (s < nfwd)) {
            stg_errf(err, "internal: grouping matmuls put a backward op among the forward ones");
            goto out;
        }
    ops2 = calloc((size_t)n, sizeof *ops2);
    groupin = calloc((size_t)n, sizeof *groupin);
    if (!ops2 || !groupin) {
        stg_errf(err, "grouping matmuls: out of host memory");
        goto out;
    }
    for (int s = 0; s < ns; s++) {
        int o = order[s];
        newid[o] = s;
        if (group[o] >= 0 && !(groupin[s] = malloc(sizeof(int) * (size_t)(2 * nmem[o])))) {
            stg_errf(err, "grouping matmuls: out of host memory");
            goto out;
        }
    }
    // nothing fails from here on: g is rewritten
    for (int s = 0; s < ns; s++) {
        int o = order[s];
        if (group[o] < 0) {
            ops2[s] = g->ops[o];
            continue;
        }
        int k = nmem[o], first = members[o * STG_MAX_OUT];
        stg_op grp = g->ops[first];
        stg_matmul_attrs a;
        as_product(g, first, &a);
        for (int m = 0; m < k; m++) {
            const stg_op *mo = &g->ops[members[o * STG_MAX_OUT + m]];
            groupin[s][2 * m] = mo->in[0];
            groupin[s][2 * m + 1] = mo->in[1];
            grp.out[m] = mo->out[0];
        }
        grp.kind = STG_OP_MATMUL_GROUP;
        grp.in = groupin[s];
        groupin[s] = NULL;
        grp.n_in = 2 * k;
        grp.n_out = k;
        grp.accum = (g->ops[first].accum & 1u) ? (uint8_t)((1u << k) - 1u) : 0; // gradient accumulation
        memset(&grp.a, 0, sizeof grp.a);
        grp.a.matmul = a;
        ops2[s] = grp;
    }
    for (int o = 0; o < n; o++) // the members' input arrays (each group has its own)
        if (group[o] >= 0) free(g->ops[o].in);
    for (int s = 0; s < ns; s++) {
        stg_op *op = &ops2[s];
        if (op->fwd >= 0) op->fwd = newid[SLOT(op->fwd)];
        if (op->recompute_of >= 0) op->recompute_of = newid[SLOT(op->recompute_of)];
        for (int q = 0; q < op->n_out; q++) g->t[op->out[q]].producer = s;
    }
    #undef SLOT
    memcpy(g->ops, ops2, sizeof *ops2 * (size_t)ns);
    g->nops = ns;
    g->n_fwd_ops = nfwd;
    free(g->schedule);
    g->schedule = NULL;
    g->nsched = 0;
    ngroups = found;
out:
    free(group);
    free(stamp);
    free(stack);
    free(members);
    free(nmem);
    free(key);
    free(indeg);
    free(order);
    free(newid);
    free(heapv);
    free(rstart);
    free(rend);
    free(readers);
    free(ops2);
    if (groupin)
        for (int s = 0; s < n; s++) free(groupin[s]);
    free(groupin);
    return ngroups;
}
