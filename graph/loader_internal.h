// Internals shared by the model loader's two files (not for use outside graph/): the loader's
// state L, the YAML location helpers, and the functions each file gives the other.
//   graph/loader.c    the YAML walking: files and includes, dims, options, --set, inputs, the
//                     repeat and if blocks, the entry points graph_load / graph_load_string;
//   graph/callexpr.c  the statements inside the graph's lists: names ({expr} substituted), op
//                     calls with key=value attributes (nested calls), `param` declarations, and
//                     the table of names bound so far.
#ifndef STG_GRAPH_LOADER_INTERNAL_H
#define STG_GRAPH_LOADER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "graph/graph.h"

#define MAX_FILES STG_MAX_MODEL_FILES
#define MAX_OPTS 16
#define MAX_CHOICES 8
#define MAX_VARS 8

typedef struct {
    yaml_document_t doc;
    const char *file; // interned in the graph
    int loaded;
} ydoc;

typedef struct {
    char name[64];
    const char *text; // expression text (points into a YAML node or a --set string)
    size_t len;
    stg_loc loc;
    int state; // 0 not evaluated, 1 evaluating, 2 done
    int64_t value;
} dimdef;

typedef struct {
    char name[64];
    char value[64];
    char choices[MAX_CHOICES][64];
    int nchoices;
    stg_loc loc;
} optdef;

typedef struct {
    char name[STG_NAME_MAX];
    int tensor;
    int version;               // bindings of this name within `scope` (for display names)
    char scope[STG_NAME_MAX];  // the scope of the latest binding
    bool param;
} sym;

typedef struct {
    char name[64];
    int64_t value;
} loopvar;

typedef struct {
    stg_graph *g;
    stg_err *err;
    ydoc docs[MAX_FILES];
    int ndocs;
    dimdef *dims;
    int ndims;
    // roles: the dim each role is given to (NULL: the dim named like the role), where, and the
    // resolved index into dims (-1: none)
    const char *role_decl[STG_DIM_ROLES];
    stg_loc role_loc[STG_DIM_ROLES];
    int role_dim[STG_DIM_ROLES];
    optdef opts[MAX_OPTS];
    int nopts;
    sym *syms;
    int nsyms, capsyms;
    int *symhash;  // open addressing over syms by name: index + 1, 0 for an empty slot
    int hashcap;   // a power of two, at least twice nsyms
    int nstatements;
    int call_nest;
    int dim_depth;
    loopvar vars[MAX_VARS];
    int nvars;
    char scope[STG_NAME_MAX];
    // where the sections were found (document index, node)
    int inputs_doc, graph_doc, loss_doc;
    yaml_node_t *inputs, *graph, *loss;
    int nest;
} L;
// ---- YAML helpers ---------------------------------------------------------------------------

static inline stg_loc node_loc(const ydoc *d, const yaml_node_t *n) {
    stg_loc l = {d->file, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
    return l;
}

// Location of character `off` of a scalar's text (exact for one-line scalars).
static inline stg_loc scalar_loc(const ydoc *d, const yaml_node_t *n, size_t off) {
    stg_loc l = node_loc(d, n);
    int quoted = n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE || n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    l.col += quoted + (int)off;
    return l;
}

static inline const char *sval(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

// ---- graph/loader.c -------------------------------------------------------------------------

// The lookup of names in integer and float expressions (stg_expr_lookup): loop variables of the
// enclosing repeat blocks, then dims (evaluated on first use).
int loader_dim_lookup(void *ctx, const char *name, int64_t *val, stg_err *err);

// ---- graph/callexpr.c -----------------------------------------------------------------------

// One statement, the scalar n: 'x = op(...)', 'a, b = op(...)', 'x = y' or 'param NAME [dims] init=...'.
int callexpr_statement(L *l, ydoc *d, yaml_node_t *n);
// Counts one statement (or one repeat iteration) against the limit on statements executed.
int callexpr_count_statement(L *l, ydoc *d, yaml_node_t *n);
// The name in the scalar n ({expr} replaced by its value) into out (cap bytes): a repeat's scope.
int callexpr_name(L *l, ydoc *d, yaml_node_t *n, char *out, size_t cap);
// The tensor bound to a name, NULL when none is.
sym *callexpr_find_sym(L *l, const char *name);
// Binds name to tensor (a rebinding of a non-parameter name replaces the old one).
int callexpr_bind(L *l, const char *name, int tensor, bool param, stg_loc loc);

#endif
