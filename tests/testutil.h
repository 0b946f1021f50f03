// Helpers shared by the test programs (each test is its own executable: static inline): relative
// error, reproducible random numbers, files, a temporary directory, running commands and the stg
// program. Include after <cmocka.h>.
#ifndef STG_TESTUTIL_H
#define STG_TESTUTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

// The same over floats, as the GPU tests compare device results with the CPU's: NaN anywhere gives
// infinity; so does an infinity, unless allow_inf, where one must be matched exactly (and is then
// left out: masked scores). *bad (when non-NULL) gets the index of the largest difference or of
// the mismatch, -1 when none.
static inline double rel_err_f32(const float *a, const float *ref, int64_t n, bool allow_inf, int64_t *bad) {
    double md = 0, mr = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < n; i++) {
        bool inf = isinf(a[i]) || isinf(ref[i]);
        if (isnan(a[i]) || isnan(ref[i]) || (inf && (!allow_inf || a[i] != ref[i]))) {
            if (bad) *bad = i;
            return INFINITY;
        }
        if (inf) continue;
        double d = fabs((double)a[i] - (double)ref[i]);
        if (d > md) md = d, at = i;
        if (fabs((double)ref[i]) > mr) mr = fabs((double)ref[i]);
    }
    if (bad) *bad = at;
    return md / (mr > 0 ? mr : 1);
}

// xorshift64* on state *s (never 0): reproducible test data. tu_next: 64 bits; tu_urand: uniform
// in [0, 1); tu_nrand: standard normal (Box-Muller).
static inline uint64_t tu_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

static inline double tu_urand(uint64_t *s) { return (double)(tu_next(s) >> 11) / 9007199254740992.0; }

static inline double tu_nrand(uint64_t *s) {
    double u1 = tu_urand(s), u2 = tu_urand(s);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
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

// The whole file at path (NUL-terminated; *len its length when len is not NULL), or NULL when it
// cannot be opened.
static inline char *tu_slurp(const char *path, size_t *len) {
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = tu_read_all(f, len);
    fclose(f);
    assert_non_null(b);
    return b;
}

// Runs fn on the whole of every file in dir (names starting with '.' left out), each in a buffer of
// its exact size, so ASan sees any read past its end (the fuzz targets' seeds and saved findings).
// Returns how many, 0 when dir cannot be opened (nothing saved there). With max_s > 0 a file that
// takes longer than max_s seconds fails the test, named.
static inline int tu_replay(const char *dir, int (*fn)(const uint8_t *, size_t), double max_s) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        FILE *f = fopen(p, "rb");
        assert_non_null(f);
        size_t len = 0;
        char *all = tu_read_all(f, &len);
        fclose(f);
        assert_non_null(all);
        uint8_t *buf = malloc(len ? len : 1);
        assert_non_null(buf);
        memcpy(buf, all, len);
        free(all);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fn(buf, len);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (max_s > 0 && dt > max_s) fail_msg("%s took %.1f s", p, dt);
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

// Writes n bytes to path (replacing it).
static inline void tu_write(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

// A new temporary directory /tmp/stg_<name>_XXXXXX into dir (cap bytes), for a cmocka group
// setup: 0, or -1 when it cannot be made. tu_rmtree removes it with everything in it (teardown).
static inline int tu_mkdtemp(char *dir, size_t cap, const char *name) {
    if (snprintf(dir, cap, "/tmp/stg_%s_XXXXXX", name) >= (int)cap) return -1;
    return mkdtemp(dir) ? 0 : -1;
}

static inline int tu_rmtree(const char *dir) {
    char cmd[1100];
    if (!dir[0] || snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir) >= (int)sizeof cmd) return -1;
    return system(cmd) == 0 ? 0 : -1;
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

// How long one run of the stg program may take before tu_stg kills it (exit status 124): a hang
// fails the test instead of the suite. A test program may define its own before the include.
#ifndef TU_STG_TIMEOUT
#define TU_STG_TIMEOUT 600
#endif

// Runs `stg ARGS` (the program under test, from directory cwd, under `timeout`): its exit status,
// stdout and stderr in out (n bytes). tu_stg: from the source directory; tu_stg_in: from cwd.
static inline int tu_vstg(const char *cwd, char *out, size_t n, const char *fmt, va_list ap) {
    char args[3000], cmd[4096];
    int k = vsnprintf(args, sizeof args, fmt, ap);
    assert_true(k >= 0 && k < (int)sizeof args);
    k = snprintf(cmd, sizeof cmd, "cd '%s' && timeout %d '%s' %s 2>&1", cwd, TU_STG_TIMEOUT, STG_BINARY, args);
    assert_true(k > 0 && k < (int)sizeof cmd);
    return tu_run(cmd, out, n);
}

static inline int tu_stg(char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vstg(STG_SOURCE_DIR, out, n, fmt, ap);
    va_end(ap);
    return rc;
}

static inline int tu_stg_in(const char *cwd, char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vstg(cwd, out, n, fmt, ap);
    va_end(ap);
    return rc;
}

#endif
