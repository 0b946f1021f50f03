#include "ops/base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int stg_errf(stg_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int stg_errf_at(stg_err *err, stg_loc loc, const char *fmt, ...) {
    if (!err) return -1;
    size_t n = 0;
    if (loc.file && loc.line > 0)
        n = (size_t)snprintf(err->msg, sizeof err->msg, "%s:%d:%d: ", loc.file, loc.line, loc.col > 0 ? loc.col : 1);
    else if (loc.file)
        n = (size_t)snprintf(err->msg, sizeof err->msg, "%s: ", loc.file);
    if (n >= sizeof err->msg) n = sizeof err->msg - 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + n, sizeof err->msg - n, fmt, ap);
    va_end(ap);
    return -1;
}

int stg_err_prefix(stg_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char old[sizeof err->msg];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof err->msg) snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", old);
    return -1;
}

void *stg_malloc(size_t n, stg_err *err) {
    void *p = malloc(n ? n : 1);
    if (!p) stg_errf(err, "out of host memory allocating %zu bytes", n);
    return p;
}

void *stg_calloc(size_t n, size_t size, stg_err *err) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) stg_errf(err, "out of host memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *stg_realloc(void *p, size_t n, stg_err *err) {
    void *q = realloc(p, n ? n : 1);
    if (!q) stg_errf(err, "out of host memory reallocating to %zu bytes", n);
    return q;
}

char *stg_strdup(const char *s, stg_err *err) {
    size_t n = strlen(s) + 1;
    char *p = stg_malloc(n, err);
    if (p) memcpy(p, s, n);
    return p;
}
