// The YAML model loader: dims with integer expressions, string options, inputs, parameters, and
// the forward op graph (repeat blocks, if/else on options, SSA rebinding). See docs/MODEL_FORMAT.md.
#ifndef STG_LOADER_H
#define STG_LOADER_H

#include "graph/graph.h"

typedef struct stg_load_opts {
    stg_precision precision;
    const char *const *sets; // "name=value": a dim (integer expression) or an option
    int nsets;
} stg_load_opts;

// Loads a model file (and the file it includes) into a forward graph. On bad input returns -1
// with "file:line:col: what is wrong; what was expected" in err.
int graph_load(const char *path, const stg_load_opts *o, stg_graph **out, stg_err *err);
// Same from text in memory (tests, fuzzing); `name` is used in messages. Includes are resolved
// relative to the current directory.
int graph_load_string(const char *text, size_t len, const char *name, const stg_load_opts *o, stg_graph **out,
                      stg_err *err);

#endif
