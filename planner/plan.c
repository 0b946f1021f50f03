#include "planner/plan.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"

stg_plan_opts plan_defaults(void) {
    stg_plan_opts o = {.alignment = 256};
    return o;
}

static int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void plan_free(stg_plan *p) {
    if (!p) return;
    free(p->region);
    free(p->offset);
    free(p->first);
    free(p->last);
    free(p->owner);
    free(p->next_inplace);
    free(p->size);
    free(p->live);
    free(p);
}

int64_t plan_live_at(const stg_plan *p, int s, int c) {
    if (!p || s < 0 || s >= p->nsched) return 0;
    if (c >= 0) return p->live[(size_t)s * STG_CLASS_COUNT + (size_t)c];
    int64_t n = 0;
    for (int k = 0; k < STG_CLASS_COUNT; k++) n += p->live[(size_t)s * STG_CLASS_COUNT + (size_t)k];
    return n;
}

// Follows view bases to the tensor that owns the bytes in the graph (not counting in-place reuse).
// Returns -1 on a cycle or an out-of-range base.
static int view_root(const stg_graph *g, int t) {
    for (int steps = 0; g->t[t].base >= 0; steps++) {
        if (steps > g->nt || g->t[t].base >= g->nt) return -1;
        t = g->t[t].base;
    }
    return t;
}

// The optimizer in backward runs its updates (adamw ops with slots) on a stream of their own beside
// the backward's (ops/optim/cuda.cu), one after another in schedule order. A gradient's bytes freed
// at its update would be taken by the next tensors of the backward, whose writers would then wait for
// that update on the updates' stream: the backward would go at the updates' pace. So a gradient is
// held until the updates after it have read UPDATE_HOLD_DIV-th of all the updated gradients' bytes (or
// to the end of the schedule when fewer follow): at most that share of the gradients is live beyond
// the in-backward minimum. H200, twenty-seventh session (docs/perf/LOG.md): with no hold, 2.7B at
// ctx 1024 took 146.1 ms a step against 146.4 for the ordinary step; held for about a layer's updates,
// 141.8; to the end of the step, 140.9.
#define UPDATE_HOLD_DIV 16

static int hold_updated_grads(const stg_graph *g, int *last, stg_err *err) {
    int n = 0;
    for (int s = 0; s < g->nsched; s++) {
        const stg_op *op = &g->ops[g->schedule[s]];
        if (op->kind == STG_OP_ADAMW && op->a.adamw.slot > 0 && op->n_in > 1) n++;
    }
    if (n == 0) return 0;
    int *pos = malloc(sizeof(int) * (size_t)n);
    int64_t *bytes = malloc(sizeof(int64_t) * (size_t)n);
    if (!pos || !bytes) {
        free(pos);
        free(bytes);
        return stg_errf(err, "plan: out of memory for %d updates", n);
    }
    int64_t total = 0;
    n = 0;
    for (int s = 0; s < g->nsched; s++) {
        const stg_op *op = &g->ops[g->schedule[s]];
        if (op->kind != STG_OP_ADAMW || op->a.adamw.slot <= 0 || op->n_in <= 1) continue;
        pos[n] = s;
        bytes[n] = stg_bytes(&g->t[op->in[1]]);
        total += bytes[n++];
    }
    const int64_t hold = total / UPDATE_HOLD_DIV;
    if (hold <= 0) n = 0;
    int64_t after = 0; // bytes of the updates k + 1 .. j
    for (int k = 0, j = 0; k < n; k++) {
        if (j < k) j = k, after = 0;
        while (j + 1 < n && after < hold) after += bytes[++j];
        int t = view_root(g, g->ops[g->schedule[pos[k]]].in[1]);
        int to = after >= hold && j > k ? pos[j] : g->nsched - 1;
        if (t >= 0 && last[t] < to) last[t] = to;
        if (j > k) after -= bytes[k + 1];
    }
    free(pos);
    free(bytes);
    return 0;
}

// Lifetimes from the schedule: first = the write (or the first read of a tensor never written),
// last = the last read (or the write). Fails on a tensor written twice or read before its write.
static int compute_lifetimes(const stg_graph *g, int *first, int *last, stg_err *err) {
    int *wpos = malloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
    int *rfirst = malloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
    int *seen = calloc((size_t)(g->nops ? g->nops : 1), sizeof(int));
    if (!wpos || !rfirst || !seen) {
        free(wpos);
        free(rfirst);
        free(seen);
        return stg_errf(err, "plan: out of memory for %d tensors", g->nt);
    }
    int rc = 0;
    for (int t = 0; t < g->nt; t++) wpos[t] = rfirst[t] = first[t] = last[t] = -1;
    for (int s = 0; s < g->nsched && rc == 0; s++) {
        int id = g->schedule[s];
        if (id < 0 || id >= g->nops) {
            rc = stg_errf(err, "plan: schedule position %d names op %d; the graph has %d ops", s, id, g->nops);
            break;
        }
        if (seen[id]++) {
            rc = stg_errf(err, "plan: op %d (%s) appears twice in the schedule", id, ops_name(g->ops[id].kind));
            break;
        }
        const stg_op *op = &g->ops[id];
        for (int i = 0; i < op->n_in; i++) {
            int t = op->in[i];
            if (t < 0 || t >= g->nt) {
                rc = stg_errf(err, "plan: op %d (%s) input %d is tensor %d; the graph has %d", id, ops_name(op->kind), i, t,
                              g->nt);
                break;
            }
            if (rfirst[t] < 0) rfirst[t] = s;
            last[t] = s;
        }
        for (int k = 0; k < op->n_out && rc == 0; k++) {
            int t = op->out[k];
            if (t < 0 || t >= g->nt) {
                rc = stg_errf(err, "plan: op %d (%s) output %d is tensor %d; the graph has %d", id, ops_name(op->kind), k, t,
                              g->nt);
                break;
            }
            if (wpos[t] >= 0) {
                rc = stg_errf(err, "plan: tensor '%s' is written at schedule positions %d and %d; each tensor is written once",
                              g->t[t].name, wpos[t], s);
                break;
            }
            if (rfirst[t] >= 0) {
                rc = stg_errf(err, "plan: tensor '%s' is read at schedule position %d before op '%s' writes it at %d",
                              g->t[t].name, rfirst[t], ops_name(op->kind), s);
                break;
            }
            wpos[t] = s;
        }
    }
    if (rc == 0)
        for (int t = 0; t < g->nt; t++) {
            first[t] = wpos[t] >= 0 ? wpos[t] : rfirst[t];
            if (wpos[t] > last[t]) last[t] = wpos[t];
        }
    // The step's results (the loss, the gradient norm) are read back after the step: they live to
    // the end of the schedule.
    const int results[2] = {g->loss, g->grad_norm};
    for (int i = 0; i < 2 && rc == 0; i++)
        if (results[i] >= 0 && results[i] < g->nt && first[results[i]] >= 0 && g->nsched > 0) last[results[i]] = g->nsched - 1;
    if (rc == 0) rc = hold_updated_grads(g, last, err);
    free(wpos);
    free(rfirst);
    free(seen);
    return rc;
}

// ---- offset assignment ------------------------------------------------------------------------

typedef struct item {
    int64_t size;
    int first, last;
    int64_t off;
} item;

typedef struct placed {
    int64_t off, end;
    int first, last;
} placed;

typedef struct sort_key {
    int64_t k1, k2, k3;
    int idx;
} sort_key;

static int cmp_key(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->k1 != y->k1) return x->k1 < y->k1 ? -1 : 1;
    if (x->k2 != y->k2) return x->k2 < y->k2 ? -1 : 1;
    if (x->k3 != y->k3) return x->k3 < y->k3 ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

enum { ORDER_SIZE, ORDER_LENGTH, ORDER_AREA, ORDER_FIRST, ORDER_LAST, ORDER_COUNT };
static const char *const order_names[ORDER_COUNT] = {"size-desc", "length-desc", "size*length-desc", "first-write-asc",
                                                     "last-read-desc"};

static void order_items(const item *it, int n, int order, sort_key *keys) {
    for (int i = 0; i < n; i++) {
        int64_t len = (int64_t)(it[i].last - it[i].first + 1);
        sort_key k = {0, 0, 0, i};
        switch (order) {
        case ORDER_SIZE: k.k1 = -it[i].size; k.k2 = it[i].first; k.k3 = -len; break;
        case ORDER_LENGTH: k.k1 = -len; k.k2 = -it[i].size; k.k3 = it[i].first; break;
        case ORDER_AREA: {
            double a = (double)it[i].size * (double)len;
            k.k1 = a >= 9.0e18 ? INT64_MIN : -(int64_t)a;
            k.k2 = -it[i].size;
            k.k3 = it[i].first;
            break;
        }
        case ORDER_FIRST: k.k1 = it[i].first; k.k2 = -it[i].size; k.k3 = -len; break;
        case ORDER_LAST: k.k1 = -(int64_t)it[i].last; k.k2 = -it[i].size; k.k3 = it[i].first; break;
        }
        keys[i] = k;
    }
    qsort(keys, (size_t)n, sizeof *keys, cmp_key);
}

// Best fit over one ordering. `pl` is scratch for n entries, kept sorted by offset: for each item
// the placed storages whose lives intersect it are visited in offset order, so the gaps between
// them come out in one pass. O(n) per item. Returns the arena size; offsets into off[].
static int64_t assign_offsets(const item *it, int n, const sort_key *keys, placed *pl, int64_t *off) {
    int np = 0;
    int64_t arena = 0;
    for (int k = 0; k < n; k++) {
        const item *x = &it[keys[k].idx];
        int64_t cur = 0, best = -1, best_gap = INT64_MAX;
        for (int j = 0; j < np; j++) {
            const placed *p = &pl[j];
            if (p->last < x->first || p->first > x->last) continue;
            if (p->off > cur) {
                int64_t gap = p->off - cur;
                if (gap >= x->size && gap < best_gap) {
                    best_gap = gap;
                    best = cur;
                }
            }
            if (p->end > cur) cur = p->end;
        }
        if (best < 0) best = cur;
        off[keys[k].idx] = best;
        if (best + x->size > arena) arena = best + x->size;
        // Insert keeping pl sorted by offset (binary search, then shift).
        int lo = 0, hi = np;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (pl[mid].off <= best)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(&pl[lo + 1], &pl[lo], sizeof *pl * (size_t)(np - lo));
        pl[lo] = (placed){best, best + x->size, x->first, x->last};
        np++;
    }
    return arena;
}

// ---- the plan ---------------------------------------------------------------------------------

static stg_plan *plan_alloc(int nt, int nsched, stg_err *err) {
    stg_plan *p = stg_calloc(1, sizeof *p, err);
    if (!p) return NULL;
    size_t n = (size_t)(nt ? nt : 1);
    p->nt = nt;
    p->nsched = nsched;
    p->region = calloc(n, sizeof *p->region);
    p->offset = calloc(n, sizeof *p->offset);
    p->first = calloc(n, sizeof *p->first);
    p->last = calloc(n, sizeof *p->last);
    p->owner = calloc(n, sizeof *p->owner);
    p->next_inplace = calloc(n, sizeof *p->next_inplace);
    p->size = calloc(n, sizeof *p->size);
    p->live = calloc((size_t)(nsched ? nsched : 1) * STG_CLASS_COUNT, sizeof *p->live);
    if (!p->region || !p->offset || !p->first || !p->last || !p->owner || !p->next_inplace || !p->size || !p->live) {
        plan_free(p);
        stg_errf(err, "plan: out of memory for %d tensors and %d steps", nt, nsched);
        return NULL;
    }
    return p;
}

// Assigns owner[] (views and in-place takeovers) in schedule order.
static int resolve_storage(const stg_graph *g, stg_plan *p, int *vroot, stg_err *err) {
    int nt = g->nt;
    int64_t *famlast = malloc(sizeof(int64_t) * (size_t)(nt ? nt : 1)); // last read of a tensor or any view of it
    int64_t *slast = malloc(sizeof(int64_t) * (size_t)(nt ? nt : 1));   // per storage: last read so far
    int *occupant = malloc(sizeof(int) * (size_t)(nt ? nt : 1));        // per storage: the tensor in it now
    if (!famlast || !slast || !occupant) {
        free(famlast);
        free(slast);
        free(occupant);
        return stg_errf(err, "plan: out of memory");
    }
    for (int t = 0; t < nt; t++) {
        vroot[t] = view_root(g, t);
        if (vroot[t] < 0) {
            free(famlast);
            free(slast);
            free(occupant);
            return stg_errf(err, "plan: tensor '%s' has a cycle of view bases", g->t[t].name);
        }
        famlast[t] = -1;
        p->owner[t] = t;
        p->next_inplace[t] = -1;
        occupant[t] = t;
    }
    for (int t = 0; t < nt; t++) famlast[vroot[t]] = max64(famlast[vroot[t]], p->last[t]);
    for (int t = 0; t < nt; t++) slast[t] = famlast[t];
    for (int t = 0; t < nt; t++) {
        if (g->t[t].base >= 0 && g->t[t].group >= 0) {
            free(famlast);
            free(slast);
            free(occupant);
            return stg_errf(err, "plan: tensor '%s' is a view of '%s' and in group %d; only storage owners can be grouped",
                            g->t[t].name, g->t[vroot[t]].name, g->t[t].group);
        }
    }

    for (int s = 0; s < g->nsched; s++) {
        const stg_op *op = &g->ops[g->schedule[s]];
        const stg_op_def *d = ops_def(op->kind);
        for (int k = 0; k < op->n_out; k++) {
            int t = op->out[k];
            if (g->t[t].base >= 0) {
                p->owner[t] = p->owner[vroot[t]];
                continue;
            }
            if (k != 0 || !d || d->inplace_in < 0 || d->inplace_in >= op->n_in) continue;
            int in = op->in[d->inplace_in];
            int st = p->owner[in];
            if (stg_tensor_persistent(g, st) || stg_tensor_persistent(g, t)) continue;
            if (g->t[st].group >= 0 || g->t[t].group >= 0) continue;
            if (slast[st] != s) continue; // read later (itself, a view, or an earlier tenant's view)
            if (p->size[t] > p->size[st]) continue;
            bool shared = false; // another input reads the same bytes: not safe to overwrite
            for (int j = 0; j < op->n_in; j++)
                if (j != d->inplace_in && p->owner[op->in[j]] == st) shared = true;
            if (shared) continue;
            p->owner[t] = st;
            p->next_inplace[occupant[st]] = t;
            occupant[st] = t;
            slast[st] = max64(slast[st], famlast[t]);
            p->n_inplace++;
        }
    }
    // Views never written by a scheduled op follow their base's final storage.
    for (int t = 0; t < nt; t++)
        if (g->t[t].base >= 0) p->owner[t] = p->owner[vroot[t]];
    free(famlast);
    free(slast);
    free(occupant);
    return 0;
}

int plan_build(const stg_graph *g, const stg_plan_opts *o, stg_plan **out, stg_err *err) {
    *out = NULL;
    stg_plan_opts def = plan_defaults();
    if (!o) o = &def;
    if (o->alignment <= 0) return stg_errf(err, "plan: alignment must be positive, got %lld", (long long)o->alignment);
    if (!g) return stg_errf(err, "plan: no graph");
    if (g->nsched > 0 && !g->schedule) return stg_errf(err, "plan: the graph has no schedule");
    int nt = g->nt, ns = g->nsched;
    stg_plan *p = plan_alloc(nt, ns, err);
    if (!p) return -1;
    p->alignment = o->alignment;
    p->peak_step = -1;
    int rc = -1; // until the plan is whole

    int *vroot = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    int *sfirst = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    int *slast = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    int *item_of = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    item *it = malloc(sizeof(item) * (size_t)(nt ? nt : 1));
    int *members = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    int64_t *diff = calloc((size_t)(ns + 1) * STG_CLASS_COUNT, sizeof(int64_t));
    int64_t *adiff = calloc((size_t)(ns + 1), sizeof(int64_t));
    if (!vroot || !sfirst || !slast || !item_of || !it || !members || !diff || !adiff) {
        stg_errf(err, "plan: out of memory");
        goto fail;
    }
    for (int t = 0; t < nt; t++) {
        int64_t b = stg_bytes(&g->t[t]);
        if (b < 0) {
            stg_errf(err, "plan: tensor '%s' has a negative size", g->t[t].name);
            goto fail;
        }
        p->size[t] = align_up(b, o->alignment);
    }
    if (compute_lifetimes(g, p->first, p->last, err)) goto fail;
    if (resolve_storage(g, p, vroot, err)) goto fail;

    // Storage lives: the union of their tenants' lives.
    for (int t = 0; t < nt; t++) sfirst[t] = slast[t] = -1;
    for (int t = 0; t < nt; t++) {
        int st = p->owner[t];
        if (p->first[t] < 0) continue;
        if (sfirst[st] < 0 || p->first[t] < sfirst[st]) sfirst[st] = p->first[t];
        if (p->last[t] > slast[st]) slast[st] = p->last[t];
    }

    // Groups: a group is one block in tensor-id order; its life is the union of its members'.
    // members[] lists storage owners sorted by (group key, id) where the key is the group's
    // smallest member id (a lone storage is its own key): contiguous groups fall out of the order.
    int nm = 0;
    for (int t = 0; t < nt; t++)
        if (p->owner[t] == t) members[nm++] = t;
    {
        // Group key: the smallest tensor id with that group number.
        sort_key *keys = malloc(sizeof *keys * (size_t)(nm ? nm : 1));
        if (!keys) {
            stg_errf(err, "plan: out of memory");
            goto fail;
        }
        for (int i = 0; i < nm; i++) {
            int t = members[i];
            keys[i] = (sort_key){t, t, 0, t};
            if (g->t[t].group >= 0)
                for (int u = 0; u < t; u++)
                    if (g->t[u].group == g->t[t].group && p->owner[u] == u) {
                        keys[i].k1 = u;
                        break;
                    }
        }
        qsort(keys, (size_t)nm, sizeof *keys, cmp_key);
        for (int i = 0; i < nm; i++) members[i] = keys[i].idx;
        free(keys);
    }

    // Regions and the persistent layout.
    int64_t pers = 0;
    for (int i = 0; i < nm; i++) {
        int t = members[i];
        if (!stg_tensor_persistent(g, t)) continue;
        p->region[t] = STG_REGION_PERSISTENT;
        p->offset[t] = pers;
        pers += p->size[t];
        p->by_class[g->t[t].cls] += p->size[t];
    }
    p->persistent_bytes = pers;

    // Arena items (one per storage, one per group).
    int nit = 0;
    for (int i = 0; i < nm; i++) {
        int t = members[i];
        item_of[t] = -1;
        if (stg_tensor_persistent(g, t)) continue;
        int grp = g->t[t].group;
        if (grp >= 0 && i > 0) {
            int prev = members[i - 1];
            if (g->t[prev].group == grp && !stg_tensor_persistent(g, prev) && item_of[prev] >= 0) {
                item *x = &it[item_of[prev]];
                item_of[t] = item_of[prev];
                x->size += p->size[t];
                if (sfirst[t] >= 0) {
                    if (x->first < 0 || sfirst[t] < x->first) x->first = sfirst[t];
                    if (slast[t] > x->last) x->last = slast[t];
                }
                continue;
            }
        }
        item_of[t] = nit;
        it[nit++] = (item){p->size[t], sfirst[t], slast[t], 0};
    }
    for (int i = 0; i < nm; i++) { // a group mixing regions cannot be one block
        int t = members[i];
        if (i > 0 && g->t[t].group >= 0 && g->t[members[i - 1]].group == g->t[t].group &&
            stg_tensor_persistent(g, t) != stg_tensor_persistent(g, members[i - 1])) {
            stg_errf(err, "plan: group %d holds '%s' (%s, persistent) and '%s' (%s, arena); a group must lie in one region",
                     g->t[t].group, g->t[stg_tensor_persistent(g, t) ? t : members[i - 1]].name,
                     stg_class_name(g->t[stg_tensor_persistent(g, t) ? t : members[i - 1]].cls),
                     g->t[stg_tensor_persistent(g, t) ? members[i - 1] : t].name,
                     stg_class_name(g->t[stg_tensor_persistent(g, t) ? members[i - 1] : t].cls));
            goto fail;
        }
    }
    // Items never used take no bytes.
    int nused = 0;
    int *used_idx = malloc(sizeof(int) * (size_t)(nit ? nit : 1));
    if (!used_idx) {
        stg_errf(err, "plan: out of memory");
        goto fail;
    }
    for (int i = 0; i < nit; i++)
        if (it[i].first >= 0) used_idx[nused++] = i;
    {
        item *ui = malloc(sizeof(item) * (size_t)(nused ? nused : 1));
        sort_key *keys = malloc(sizeof(sort_key) * (size_t)(nused ? nused : 1));
        placed *pl = malloc(sizeof(placed) * (size_t)(nused ? nused : 1));
        int64_t *off = malloc(sizeof(int64_t) * (size_t)(nused ? nused : 1));
        int64_t *best_off = malloc(sizeof(int64_t) * (size_t)(nused ? nused : 1));
        const bool ok = ui && keys && pl && off && best_off;
        if (ok) {
            for (int i = 0; i < nused; i++) ui[i] = it[used_idx[i]];
            int64_t best = -1;
            for (int ord = 0; ord < ORDER_COUNT; ord++) {
                order_items(ui, nused, ord, keys);
                int64_t a = assign_offsets(ui, nused, keys, pl, off);
                if (best < 0 || a < best) {
                    best = a;
                    memcpy(best_off, off, sizeof(int64_t) * (size_t)nused);
                    snprintf(p->strategy, sizeof p->strategy, "%s", order_names[ord]);
                }
            }
            p->arena_bytes = best < 0 ? 0 : best;
            for (int i = 0; i < nused; i++) it[used_idx[i]].off = best_off[i];
            p->n_storages = nused;
        }
        free(ui);
        free(keys);
        free(pl);
        free(off);
        free(best_off);
        if (!ok) {
            free(used_idx);
            stg_errf(err, "plan: out of memory");
            goto fail;
        }
    }
    free(used_idx);

    // Offsets of arena storages (group members follow each other from the block's offset).
    {
        int last_item = -1;
        int64_t cursor = 0;
        for (int i = 0; i < nm; i++) {
            int t = members[i];
            if (item_of[t] < 0) continue;
            const item *x = &it[item_of[t]];
            if (item_of[t] != last_item) {
                cursor = x->off;
                last_item = item_of[t];
            }
            if (x->first < 0) {
                p->region[t] = STG_REGION_NONE;
                p->offset[t] = 0;
                continue;
            }
            p->region[t] = STG_REGION_ARENA;
            p->offset[t] = cursor;
            cursor += p->size[t];
            p->by_class[g->t[t].cls] += p->size[t];
        }
    }
    // Every tenant and view takes its storage's place.
    for (int t = 0; t < nt; t++) {
        int st = p->owner[t];
        p->region[t] = p->region[st];
        p->offset[t] = p->offset[st];
    }

    // Live bytes per step and class. Persistent classes live at every step; an arena block counts
    // as the class of its current tenant (the in-place chain hands the bytes from one to the next).
    if (ns > 0) {
        int64_t pers_class[STG_CLASS_COUNT] = {0};
        for (int i = 0; i < nm; i++)
            if (p->region[members[i]] == STG_REGION_PERSISTENT) pers_class[g->t[members[i]].cls] += p->size[members[i]];
        for (int i = 0; i < nm; i++) {
            int t = members[i];
            if (item_of[t] < 0 || p->region[t] != STG_REGION_ARENA) continue;
            const item *x = &it[item_of[t]];
            int64_t sz = p->size[t];
            // A group member lives as long as its block; other storages as their tenants.
            int from = g->t[t].group >= 0 ? x->first : sfirst[t];
            int to = g->t[t].group >= 0 ? x->last : slast[t];
            int cur = t;
            while (cur >= 0) {
                int nx = p->next_inplace[cur];
                int seg_end = nx >= 0 ? p->first[nx] - 1 : to;
                if (seg_end >= from) {
                    diff[(size_t)from * STG_CLASS_COUNT + g->t[cur].cls] += sz;
                    diff[(size_t)(seg_end + 1) * STG_CLASS_COUNT + g->t[cur].cls] -= sz;
                }
                if (nx >= 0) from = p->first[nx];
                cur = nx;
            }
        }
        for (int i = 0; i < nit; i++)
            if (it[i].first >= 0) {
                adiff[it[i].first] += it[i].size;
                adiff[it[i].last + 1] -= it[i].size;
            }
        int64_t run[STG_CLASS_COUNT] = {0}, arun = 0, amax = 0, tmax = -1;
        for (int s = 0; s < ns; s++) {
            int64_t tot = 0;
            for (int c = 0; c < STG_CLASS_COUNT; c++) {
                run[c] += diff[(size_t)s * STG_CLASS_COUNT + (size_t)c];
                p->live[(size_t)s * STG_CLASS_COUNT + (size_t)c] = run[c] + pers_class[c];
                tot += run[c] + pers_class[c];
            }
            arun += adiff[s];
            if (arun > amax) amax = arun;
            if (tot > tmax) {
                tmax = tot;
                p->peak_step = s;
            }
        }
        p->lower_bound_bytes = pers + amax;
    } else {
        p->lower_bound_bytes = pers;
    }
    p->peak_bytes = p->persistent_bytes + p->arena_bytes;
    {
        int64_t lb_arena = p->lower_bound_bytes - p->persistent_bytes;
        p->fragmentation = lb_arena > 0 ? (double)p->arena_bytes / (double)lb_arena - 1.0 : 0.0;
    }
    if (!p->strategy[0]) snprintf(p->strategy, sizeof p->strategy, "%s", "empty");

    *out = p;
    p = NULL; // (the caller's now)
    rc = 0;
fail:
    free(vroot);
    free(sfirst);
    free(slast);
    free(item_of);
    free(it);
    free(members);
    free(diff);
    free(adiff);
    plan_free(p);
    return rc;
}

// ---- verification -----------------------------------------------------------------------------

typedef struct vstore {
    int64_t off, end;
    int first, last, t;
} vstore;

static int cmp_vstore(const void *a, const void *b) {
    const vstore *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t;
}

int plan_verify(const stg_graph *g, const stg_plan *p, stg_err *err) {
    if (!g || !p) return stg_errf(err, "plan_verify: no graph or no plan");
    if (p->nt != g->nt || p->nsched != g->nsched)
        return stg_errf(err, "plan_verify: the plan has %d tensors and %d steps, the graph %d and %d", p->nt, p->nsched, g->nt,
                        g->nsched);
    int nt = g->nt;
    int rc = -1;
    int *first = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    int *last = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    int *sfirst = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    int *slast = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    int *efflast = malloc(sizeof(int) * (size_t)(nt ? nt : 1)); // last read of a tensor or its views
    vstore *vs = malloc(sizeof(vstore) * (size_t)(nt ? nt : 1));
    if (!first || !last || !sfirst || !slast || !efflast || !vs) {
        stg_errf(err, "plan_verify: out of memory");
        goto done;
    }
    if (compute_lifetimes(g, first, last, err)) goto done;
    for (int t = 0; t < nt; t++) {
        if (first[t] != p->first[t] || last[t] != p->last[t]) {
            stg_errf(err, "plan_verify: tensor '%s' lives [%d, %d] in the schedule but [%d, %d] in the plan", g->t[t].name,
                     first[t], last[t], p->first[t], p->last[t]);
            goto done;
        }
        sfirst[t] = slast[t] = efflast[t] = -1;
    }
    // Owners, regions, bounds.
    for (int t = 0; t < nt; t++) {
        const stg_tensor *x = &g->t[t];
        int st = p->owner[t];
        if (st < 0 || st >= nt || p->owner[st] != st) {
            stg_errf(err, "plan_verify: tensor '%s' has owner %d, which is not a storage", x->name, st);
            goto done;
        }
        if (p->region[t] != p->region[st] || p->offset[t] != p->offset[st]) {
            stg_errf(err, "plan_verify: tensor '%s' is not at its storage '%s' (region %d offset %lld vs %d %lld)", x->name,
                     g->t[st].name, p->region[t], (long long)p->offset[t], p->region[st], (long long)p->offset[st]);
            goto done;
        }
        int r = view_root(g, t);
        if (r < 0) {
            stg_errf(err, "plan_verify: tensor '%s' has a cycle of view bases", x->name);
            goto done;
        }
        if (x->base >= 0 && p->owner[r] != st) {
            stg_errf(err, "plan_verify: view '%s' is not in the storage of its base '%s'", x->name, g->t[r].name);
            goto done;
        }
        if (stg_tensor_persistent(g, st) && p->region[st] != STG_REGION_PERSISTENT) {
            stg_errf(err, "plan_verify: '%s' (%s) is not in the persistent region", g->t[st].name, stg_class_name(g->t[st].cls));
            goto done;
        }
        if (!stg_tensor_persistent(g, st) && p->region[st] == STG_REGION_PERSISTENT) {
            stg_errf(err, "plan_verify: '%s' (%s) is in the persistent region", g->t[st].name, stg_class_name(g->t[st].cls));
            goto done;
        }
        if (first[t] >= 0 && p->region[t] == STG_REGION_NONE) {
            stg_errf(err, "plan_verify: tensor '%s' is used at step %d but has no region", x->name, first[t]);
            goto done;
        }
        if (first[t] >= 0 && (sfirst[st] < 0 || first[t] < sfirst[st])) sfirst[st] = first[t];
        if (last[t] > slast[st]) slast[st] = last[t];
        if (last[t] > efflast[r]) efflast[r] = last[t];
        if (p->region[t] == STG_REGION_NONE) continue;
        int64_t bytes = stg_bytes(x);
        int64_t need = x->base >= 0 ? bytes : align_up(bytes, p->alignment);
        int64_t cap = p->region[t] == STG_REGION_ARENA ? p->arena_bytes : p->persistent_bytes;
        if (p->offset[t] < 0 || p->offset[t] + need > cap) {
            stg_errf(err, "plan_verify: tensor '%s' [%lld, %lld) lies outside its %s region of %lld bytes", x->name,
                     (long long)p->offset[t], (long long)(p->offset[t] + need),
                     p->region[t] == STG_REGION_ARENA ? "arena" : "persistent", (long long)cap);
            goto done;
        }
        if (need > align_up(stg_bytes(&g->t[st]), p->alignment)) {
            stg_errf(err, "plan_verify: tensor '%s' (%lld bytes) does not fit in the storage of '%s' (%lld bytes)", x->name,
                     (long long)need, g->t[st].name, (long long)align_up(stg_bytes(&g->t[st]), p->alignment));
            goto done;
        }
    }
    // In-place hand-overs: the tenants of one storage (non-view tensors) must follow each other,
    // the next written only at the op where the previous (and its views) is read for the last time,
    // and only by an op allowed to overwrite that input.
    for (int t = 0; t < nt; t++) {
        int st = p->owner[t];
        if (g->t[t].base >= 0 || st == t) continue;
        int prev = -1; // the tenant just before t: the latest tenant of st written before t
        for (int u = 0; u < nt; u++)
            if (u != t && g->t[u].base < 0 && p->owner[u] == st && first[u] >= 0 && first[u] <= first[t] &&
                (prev < 0 || first[u] > first[prev]))
                prev = u;
        if (prev < 0) continue;
        if (efflast[prev] > first[t] || first[prev] == first[t]) {
            stg_errf(err, "plan_verify: '%s' is written over '%s' at step %d, but '%s' is still read at step %d", g->t[t].name,
                     g->t[prev].name, first[t], g->t[prev].name, efflast[prev]);
            goto done;
        }
        if (efflast[prev] == first[t]) {
            const stg_op *op = &g->ops[g->schedule[first[t]]];
            const stg_op_def *d = ops_def(op->kind);
            bool ok = d && d->inplace_in >= 0 && d->inplace_in < op->n_in && op->out[0] == t &&
                      p->owner[op->in[d->inplace_in]] == st;
            for (int j = 0; ok && j < op->n_in; j++)
                if (d && j != d->inplace_in && p->owner[op->in[j]] == st) ok = false;
            if (!ok) {
                stg_errf(err, "plan_verify: op '%s' at step %d writes '%s' over '%s', which it reads, without an in-place rule",
                         ops_name(op->kind), first[t], g->t[t].name, g->t[prev].name);
                goto done;
            }
        }
    }
    // Arena storages: any two live at one step must be disjoint in bytes.
    int nv = 0;
    for (int t = 0; t < nt; t++)
        if (p->owner[t] == t && p->region[t] == STG_REGION_ARENA && sfirst[t] >= 0)
            vs[nv++] = (vstore){p->offset[t], p->offset[t] + align_up(stg_bytes(&g->t[t]), p->alignment), sfirst[t],
                                slast[t], t};
    // Group blocks live as long as their longest-lived member.
    for (int i = 0; i < nv; i++) {
        int grp = g->t[vs[i].t].group;
        if (grp < 0) continue;
        for (int j = 0; j < nv; j++)
            if (g->t[vs[j].t].group == grp) {
                if (vs[j].first < vs[i].first) vs[i].first = vs[j].first;
                if (vs[j].last > vs[i].last) vs[i].last = vs[j].last;
            }
    }
    qsort(vs, (size_t)nv, sizeof *vs, cmp_vstore);
    for (int i = 0; i < nv; i++)
        for (int j = i + 1; j < nv && vs[j].off < vs[i].end; j++) {
            if (vs[j].end == vs[j].off) continue;
            if (vs[i].last < vs[j].first || vs[j].last < vs[i].first) continue;
            int lo = vs[i].first > vs[j].first ? vs[i].first : vs[j].first;
            stg_errf(err,
                     "plan_verify: '%s' [%lld, %lld) and '%s' [%lld, %lld) overlap in the arena and are both live at step %d",
                     g->t[vs[i].t].name, (long long)vs[i].off, (long long)vs[i].end, g->t[vs[j].t].name, (long long)vs[j].off,
                     (long long)vs[j].end, lo);
            goto done;
        }
    // Persistent storages never share bytes.
    nv = 0;
    for (int t = 0; t < nt; t++)
        if (p->owner[t] == t && p->region[t] == STG_REGION_PERSISTENT)
            vs[nv++] = (vstore){p->offset[t], p->offset[t] + align_up(stg_bytes(&g->t[t]), p->alignment), 0, 0, t};
    qsort(vs, (size_t)nv, sizeof *vs, cmp_vstore);
    for (int i = 0; i < nv; i++)
        for (int j = i + 1; j < nv && vs[j].off < vs[i].end; j++)
            if (vs[j].end > vs[j].off) {
                stg_errf(err, "plan_verify: persistent '%s' and '%s' overlap", g->t[vs[i].t].name, g->t[vs[j].t].name);
                goto done;
            }
    // Groups: members back to back in tensor-id order.
    for (int t = 0; t < nt; t++) {
        int grp = g->t[t].group;
        if (grp < 0 || p->region[t] == STG_REGION_NONE) continue;
        int nx = -1;
        for (int u = t + 1; u < nt; u++)
            if (g->t[u].group == grp) {
                nx = u;
                break;
            }
        if (nx < 0 || p->region[nx] == STG_REGION_NONE) continue;
        if (p->region[nx] != p->region[t] || p->offset[nx] != p->offset[t] + align_up(stg_bytes(&g->t[t]), p->alignment)) {
            stg_errf(err, "plan_verify: group %d is not contiguous: '%s' at %lld does not follow '%s' at %lld", grp,
                     g->t[nx].name, (long long)p->offset[nx], g->t[t].name, (long long)p->offset[t]);
            goto done;
        }
    }
    rc = 0;
done:
    free(first);
    free(last);
    free(sfirst);
    free(slast);
    free(efflast);
    free(vs);
    return rc;
}
