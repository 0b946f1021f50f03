// Helpers shared by the test programs (each test is its own executable: static inline).
#ifndef STG_TESTUTIL_H
#define STG_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

// max |a - ref| / max |ref| over n values; infinite when either holds a NaN.
static inline double rel_err(const double *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(ref[i])) return INFINITY;
        num = fmax(num, fabs(a[i] - ref[i]));
        den = fmax(den, fabs(ref[i]));
    }
    return num / (den > 0 ? den : 1);
}

// Reads f to its end into a malloc'ed, NUL-terminated buffer (*len its length when len is not
// NULL); NULL when out of memory.
static inline char *tu_read_all(FILE *f, size_t *len) {
    char *b = NULL;
    size_t n = 0, cap = 0, r;
    do {
        if (n + 65536 + 1 > cap) {
            cap = 2 * cap + 65536 + 1;
            char *nb = (char *)realloc(b, cap);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
        }
        r = fread(b + n, 1, cap - n - 1, f);
        n += r;
    } while (r > 0);
    b[n] = 0;
    if (len) *len = n;
    return b;
}

// Runs shell command cmd (add 2>&1 for stderr too); the first n - 1 bytes of its output go to out
// (NUL-terminated), the rest is drained. Returns its exit status, -1 when it could not start or
// did not exit.
static inline int tu_run(const char *cmd, char *out, size_t n) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int st = pclose(p);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
