// Errors with context, shared by every module. Library code fills an stg_err and returns -1;
// only tools/ prints and exits. Part of the base layer (ops/base/): includes nothing outside it.
#ifndef STG_ERR_H
#define STG_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct stg_err {
    char msg[1024];
} stg_err;

// A position in a source file (1-based line and column; 0 when unknown).
typedef struct stg_loc {
    const char *file; // owned by the graph (or static); may be NULL
    int line, col;
} stg_loc;

#if defined(__GNUC__)
#define STG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define STG_PRINTF(a, b)
#endif

// Sets err->msg (if err is non-NULL) and returns -1.
int stg_errf(stg_err *err, const char *fmt, ...) STG_PRINTF(2, 3);
// Same, prefixed with "file:line:col: " when loc has a file.
int stg_errf_at(stg_err *err, stg_loc loc, const char *fmt, ...) STG_PRINTF(3, 4);
// Prepends "prefix: " to an existing message (for adding context on the way up).
int stg_err_prefix(stg_err *err, const char *fmt, ...) STG_PRINTF(2, 3);

// Allocation that reports failure through err.
void *stg_malloc(size_t n, stg_err *err);
void *stg_calloc(size_t n, size_t size, stg_err *err);
void *stg_realloc(void *p, size_t n, stg_err *err);
char *stg_strdup(const char *s, stg_err *err);

#ifdef __cplusplus
}
#endif

#endif
