// Integer dim expressions (`d_model / n_heads`, `4 * d_model`) and float attribute expressions
// (`1 / sqrt(head_dim)`, `-inf`). Integer mode: + - * / % and parentheses over int64; a division
// must be exact; overflow and division by zero are errors. Float mode adds decimals, sqrt() and inf.
#ifndef STG_EXPR_H
#define STG_EXPR_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"

// Resolves a name: returns 0 and sets *val when found, 1 when the name is unknown, -1 on an error
// (already in err, e.g. a cycle between dims).
typedef int (*stg_expr_lookup)(void *ctx, const char *name, int64_t *val, stg_err *err);

// loc is where s[0] sits; errors point at the offending column.
int expr_eval_int(const char *s, size_t len, stg_expr_lookup lookup, void *ctx, stg_loc loc, int64_t *out, stg_err *err);
int expr_eval_float(const char *s, size_t len, stg_expr_lookup lookup, void *ctx, stg_loc loc, double *out, stg_err *err);

#endif
