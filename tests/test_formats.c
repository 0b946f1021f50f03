// File formats (npy, safetensors), token data sources, the Markov source and the RNG.
// Every file is written under a mkdtemp directory that the group teardown removes.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/data.h"
#include "runtime/npy.h"
#include "runtime/rng.h"
#include "runtime/safetensors.h"

static char tmpdir[256];

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

// Removes a directory tree (the test's own files only: regular files and directories).
static int rm_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) return remove(path);
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
            chmod(sub, 0755);
            rc |= rm_tree(sub);
        } else {
            rc |= remove(sub);
        }
    }
    closedir(d);
    return rc | remove(path);
}

static int group_setup(void **state) {
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/stg_formats_XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    return rm_tree(tmpdir) == 0 ? 0 : -1;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long sz = ftell(f);
    assert_true(sz >= 0);
    rewind(f);
    unsigned char *p = malloc((size_t)sz + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return p;
}

// Asserts that msg contains every one of the given substrings (NULL-terminated list).
static void assert_mentions(const char *msg, ...) {
    va_list ap;
    va_start(ap, msg);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *)) {
        if (!strstr(msg, s)) {
            print_error("message \"%s\" does not mention \"%s\"\n", msg, s);
            va_end(ap);
            fail();
        }
    }
    va_end(ap);
}

static int count_tmp_files(void) {
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

// ---- RNG ------------------------------------------------------------------------------------

static void test_rng_determinism(void **state) {
    (void)state;
    rt_rng a, b, c;
    rt_rng_seed(&a, 1234);
    rt_rng_seed(&b, 1234);
    rt_rng_seed(&c, 1235);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rt_rng_u64(&a), y = rt_rng_u64(&b), z = rt_rng_u64(&c);
        assert_true(x == y);
        differ += x != z;
    }
    assert_true(differ > 990);
    // Streams of one seed differ from each other.
    rt_rng s0, s1;
    rt_rng_seed_stream(&s0, 7, 0);
    rt_rng_seed_stream(&s1, 7, 1);
    assert_true(rt_rng_u64(&s0) != rt_rng_u64(&s1));
    // uniform in [0, 1), below(n) in [0, n)
    for (int i = 0; i < 10000; i++) {
        double u = rt_rng_uniform(&a);
        assert_true(u >= 0.0 && u < 1.0);
        assert_true(rt_rng_below(&a, 7) < 7);
    }
    assert_true(rt_rng_below(&a, 1) == 0);
    assert_true(rt_rng_below(&a, 0) == 0);
}

static void test_rng_save_restore(void **state) {
    (void)state;
    rt_rng a, b;
    stg_err err = {{0}};
    rt_rng_seed(&a, 99);
    for (int i = 0; i < 17; i++) rt_rng_u64(&a);
    (void)rt_rng_normal(&a); // leaves a cached normal: it must be saved too
    uint8_t buf[RT_RNG_STATE_BYTES];
    rt_rng_save(&a, buf);
    rt_rng_seed(&b, 1);
    assert_int_equal(rt_rng_load(&b, buf, &err), 0);
    for (int i = 0; i < 100; i++) {
        assert_true(rt_rng_normal(&a) == rt_rng_normal(&b));
        assert_true(rt_rng_u64(&a) == rt_rng_u64(&b));
    }
    buf[0] ^= 1;
    assert_int_equal(rt_rng_load(&b, buf, &err), -1);
    assert_mentions(err.msg, "tag", NULL);
    buf[0] ^= 1;
    memset(buf + 8, 0, 32);
    assert_int_equal(rt_rng_load(&b, buf, &err), -1);
    assert_mentions(err.msg, "all-zero", NULL);
}

static void test_rng_distributions(void **state) {
    (void)state;
    rt_rng r;
    rt_rng_seed(&r, 2024);
    const int n = 200000;
    // below(3): every value about a third of the time
    int cnt[3] = {0, 0, 0};
    for (int i = 0; i < 3 * n; i++) cnt[rt_rng_below(&r, 3)]++;
    for (int v = 0; v < 3; v++) assert_true(fabs(cnt[v] / (double)n - 1.0) < 0.02);
    // normal: mean 0, std 1
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        double x = rt_rng_normal(&r);
        s += x;
        s2 += x * x;
    }
    assert_true(fabs(s / n) < 0.01);
    assert_true(fabs(sqrt(s2 / n) - 1.0) < 0.01);
    // truncated normal at +-3 std (the CS336 init): within bounds, std = 0.02 * 0.98658
    const double sd = 0.02;
    s = s2 = 0;
    double mx = 0;
    for (int i = 0; i < n; i++) {
        double x = rt_rng_trunc_normal(&r, sd, -3 * sd, 3 * sd);
        assert_true(x >= -3 * sd && x <= 3 * sd);
        s += x;
        s2 += x * x;
        if (fabs(x) > mx) mx = fabs(x);
    }
    double std_t = sqrt(s2 / n - (s / n) * (s / n));
    assert_true(fabs(std_t / (sd * 0.98658) - 1.0) < 0.02);
    assert_true(mx > 2.5 * sd); // the tails are there
    // tight, asymmetric bounds
    for (int i = 0; i < 10000; i++) {
        double x = rt_rng_trunc_normal(&r, 1.0, 0.5, 0.7);
        assert_true(x >= 0.5 && x <= 0.7);
    }
    // an interval with almost no mass still returns, inside the bounds
    double far = rt_rng_trunc_normal(&r, 1.0, 40.0, 41.0);
    assert_true(far >= 40.0 && far <= 41.0);
}

// ---- npy ------------------------------------------------------------------------------------

static void test_npy_roundtrip(void **state) {
    (void)state;
    stg_err err = {{0}};
    const rt_dtype dts[] = {RT_DT_U8, RT_DT_U16, RT_DT_I32, RT_DT_I64, RT_DT_F16, RT_DT_F32, RT_DT_F64};
    const int64_t shapes[][3] = {{2, 3, 5}, {7, 0, 0}, {0, 0, 0}, {3, 0, 4}};
    const int ndims[] = {3, 1, 0, 3};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        for (size_t s = 0; s < 4; s++) {
            size_t es = rt_dtype_size(dts[d]);
            int64_t numel = 1;
            for (int k = 0; k < ndims[s]; k++) numel *= shapes[s][k];
            size_t nb = (size_t)numel * es;
            unsigned char *data = malloc(nb + 1);
            for (size_t i = 0; i < nb; i++) data[i] = (unsigned char)(i * 37 + d);
            const char *p = tpath("rt.npy");
            assert_int_equal(rt_npy_write(p, dts[d], ndims[s], shapes[s], data, &err), 0);
            rt_npy a;
            if (rt_npy_open(p, &a, &err) != 0) fail_msg("%s", err.msg);
            assert_int_equal(a.info.dtype, dts[d]);
            assert_int_equal(a.info.ndim, ndims[s]);
            for (int k = 0; k < ndims[s]; k++) assert_int_equal(a.info.shape[k], shapes[s][k]);
            assert_int_equal(a.info.numel, numel);
            assert_int_equal(a.info.nbytes, nb);
            assert_int_equal(a.info.major, 1);
            assert_int_equal(a.info.data_offset % 64, 0);
            if (nb) assert_memory_equal(a.info.data, data, nb);
            rt_npy_close(&a);
            free(data);
        }
    }
    // bf16 has no numpy dtype
    int64_t one = 1;
    uint16_t h = 0;
    assert_int_equal(rt_npy_write(tpath("bf.npy"), RT_DT_BF16, 1, &one, &h, &err), -1);
    assert_mentions(err.msg, "BF16", NULL);
    assert_int_equal(count_tmp_files(), 0);
}

// The exact bytes numpy writes for np.arange(6, dtype='<f4').reshape(2, 3) (format 1.0).
static void test_npy_numpy_header(void **state) {
    (void)state;
    stg_err err = {{0}};
    int64_t shape[2] = {2, 3};
    char *h;
    size_t hn;
    assert_int_equal(rt_npy_header(RT_DT_F32, 2, shape, 0, &h, &hn, &err), 0);
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    assert_int_equal(hn, 128); // numpy pads 10 + dict + '\n' to a multiple of 64
    assert_memory_equal(h, "\x93NUMPY\x01\x00\x76\x00", 10);
    assert_memory_equal(h + 10, dict, strlen(dict));
    for (size_t i = 10 + strlen(dict); i < hn - 1; i++) assert_int_equal(h[i], ' ');
    assert_int_equal(h[hn - 1], '\n');
    free(h);
    int64_t five = 5;
    assert_int_equal(rt_npy_header(RT_DT_U8, 1, &five, 0, &h, &hn, &err), 0);
    assert_non_null(strstr(h + 10, "'descr': '|u1'"));
    assert_non_null(strstr(h + 10, "'shape': (5,)"));
    free(h);
}

// Builds a .npy buffer (exactly sized) from a version, a header dict text and data length.
static unsigned char *make_npy(int major, const char *dict, int pad_to_64, size_t data_len, size_t *len) {
    size_t pre = major == 1 ? 10 : 12;
    size_t dn = strlen(dict);
    size_t hl = dn;
    if (pad_to_64) hl = (pre + dn + 1 + 63) / 64 * 64 - pre;
    *len = pre + hl + data_len;
    unsigned char *b = malloc(*len);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    b[8] = (unsigned char)(hl & 0xff);
    b[9] = (unsigned char)(hl >> 8);
    if (major != 1) {
        b[10] = (unsigned char)(hl >> 16);
        b[11] = (unsigned char)(hl >> 24);
    }
    memcpy(b + pre, dict, dn);
    if (pad_to_64) {
        memset(b + pre + dn, ' ', hl - dn - 1);
        b[pre + hl - 1] = '\n';
    }
    for (size_t i = 0; i < data_len; i++) b[pre + hl + i] = (unsigned char)i;
    return b;
}

static void test_npy_versions(void **state) {
    (void)state;
    stg_err err = {{0}};
    int64_t shape[2] = {4, 2};
    float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int major = 1; major <= 2; major++) {
        char *h;
        size_t hn;
        assert_int_equal(rt_npy_header(RT_DT_F32, 2, shape, major, &h, &hn, &err), 0);
        assert_int_equal(hn % 64, 0);
        unsigned char *buf = malloc(hn + sizeof data);
        memcpy(buf, h, hn);
        memcpy(buf + hn, data, sizeof data);
        rt_npy_info info;
        if (rt_npy_parse(buf, hn + sizeof data, &info, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(info.major, major);
        assert_int_equal(info.data_offset, hn);
        assert_int_equal(info.ndim, 2);
        assert_int_equal(info.shape[0], 4);
        assert_memory_equal(info.data, data, sizeof data);
        free(buf);
        free(h);
    }
    // Hand-made dicts: double quotes, no trailing comma, extra spaces, version 3.0, Python 2 longs.
    const char *ok[] = {
        "{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (3,)}",
        "{ 'shape' : ( 3 , ) , 'fortran_order' : False , 'descr' : '<i4' , }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (3L,), }",
    };
    for (int v = 1; v <= 3; v++)
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            size_t len;
            unsigned char *b = make_npy(v, ok[i], 1, 12, &len);
            rt_npy_info info;
            if (rt_npy_parse(b, len, &info, &err) != 0) fail_msg("%s: %s", ok[i], err.msg);
            assert_int_equal(info.dtype, RT_DT_I32);
            assert_int_equal(info.numel, 3);
            free(b);
        }
}

static void expect_npy_error(const unsigned char *b, size_t len, const char *what) {
    stg_err err = {{0}};
    rt_npy_info info;
    if (rt_npy_parse(b, len, &info, &err) == 0) fail_msg("accepted, expected an error about '%s'", what);
    assert_mentions(err.msg, what, NULL);
}

static void expect_npy_dict_error(const char *dict, size_t data_len, const char *what) {
    size_t len;
    unsigned char *b = make_npy(1, dict, 1, data_len, &len);
    expect_npy_error(b, len, what);
    free(b);
}

static void test_npy_corrupt(void **state) {
    (void)state;
    size_t len;
    const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    unsigned char *b = make_npy(1, good, 1, 24, &len);
    // sanity: the good one parses
    stg_err err = {{0}};
    rt_npy_info info;
    assert_int_equal(rt_npy_parse(b, len, &info, &err), 0);

    b[1] = 'X';
    expect_npy_error(b, len, "magic");
    b[1] = 'N';
    expect_npy_error(b, 5, "truncated");
    expect_npy_error(b, 40, "truncated header");
    b[6] = 4;
    expect_npy_error(b, len, "version 4.0");
    b[6] = 1;
    b[7] = 1;
    expect_npy_error(b, len, "version 1.1");
    b[7] = 0;
    // size mismatch: data short by one byte, and one byte too many
    expect_npy_error(b, len - 1, "data size mismatch");
    unsigned char *big = malloc(len + 1);
    memcpy(big, b, len);
    big[len] = 0;
    expect_npy_error(big, len + 1, "trailing");
    free(big);
    free(b);
    // header length 0
    b = make_npy(1, "", 0, 0, &len);
    expect_npy_error(b, len, "header length is 0");
    free(b);
    // header length pointing past the end (v2: a 4 GiB header): over the header limit
    b = make_npy(2, good, 1, 24, &len);
    b[11] = 0xff;
    expect_npy_error(b, len, "exceeds the limit");
    free(b);

    // bad dicts
    expect_npy_dict_error("'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, "expected '{'");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 24, "unknown key");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False}", 4, "no 'shape'");
    expect_npy_dict_error("{'fortran_order': False, 'shape': (2,)}", 8, "no 'descr'");
    expect_npy_dict_error("{'descr': '<f4', 'shape': (2,)}", 8, "no 'fortran_order'");
    expect_npy_dict_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8, "duplicate");
    expect_npy_dict_error("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8, "expected ',' or '}'");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, "expected ',' or '}'");
    expect_npy_dict_error("{'descr: '<f4', 'fortran_order': False, 'shape': (2,)}", 8, "expected ':'");
    expect_npy_dict_error("{'descr': '>f4', 'fortran_order': False, 'shape': (2,)}", 8, "big-endian");
    expect_npy_dict_error("{'descr': '<c16', 'fortran_order': False, 'shape': (2,)}", 32, "unsupported dtype '<c16'");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", 8, "True or False");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (5)}", 20, "not a tuple");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", 24, "negative");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x)}", 24, "expected a dimension");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", 24, "expected '('");
    expect_npy_dict_error("{'descr': '<f\\4', 'fortran_order': False, 'shape': (2,)}", 8, "escape");
    // shape overflow: a dimension beyond int64, and a product beyond int64
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 0,
                          "overflows int64");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}",
                          0, "shape overflow");
    expect_npy_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,)}", 0,
                          "shape overflow");
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
                          "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1)}", 4, "too many dimensions");
    // Fortran order
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, "fortran_order is True");
    // no newline at the end / junk after the dict
    b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 0, 8, &len);
    expect_npy_error(b, len, "'\\n'");
    free(b);
    expect_npy_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, "'\\n'");
    // misaligned data (header not padded: data offset not a multiple of 4)
    b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}\n", 0, 8, &len);
    expect_npy_error(b, len, "misaligned");
    free(b);
}

// Every truncation and many single-byte corruptions of a valid file: rejected or parsed, never a
// crash or an out-of-bounds read (AddressSanitizer watches: each buffer is exactly sized).
static void test_npy_fuzz_lite(void **state) {
    (void)state;
    int64_t shape[2] = {3, 5};
    char *h;
    size_t hn;
    stg_err err = {{0}};
    assert_int_equal(rt_npy_header(RT_DT_F64, 2, shape, 0, &h, &hn, &err), 0);
    size_t len = hn + 15 * 8;
    unsigned char *full = calloc(1, len);
    memcpy(full, h, hn);
    free(h);
    rt_npy_info info;
    for (size_t n = 0; n < len; n++) {
        unsigned char *b = malloc(n ? n : 1);
        memcpy(b, full, n);
        assert_int_equal(rt_npy_parse(b, n, &info, &err), -1);
        free(b);
    }
    rt_rng r;
    rt_rng_seed(&r, 5);
    for (int it = 0; it < 20000; it++) {
        unsigned char *b = malloc(len);
        memcpy(b, full, len);
        size_t pos = (size_t)rt_rng_below(&r, hn);
        b[pos] = (unsigned char)rt_rng_u64(&r);
        if (rt_npy_parse(b, len, &info, &err) == 0) assert_true(info.data_offset + info.nbytes == len);
        free(b);
    }
    free(full);
}

// ---- safetensors ----------------------------------------------------------------------------

static void test_st_roundtrip(void **state) {
    (void)state;
    stg_err err = {{0}};
    float w[6] = {1, -2, 3.5f, 4, 5, 6};
    int64_t ids[4] = {1, 2, 3, -4};
    uint16_t bf[4] = {0x3f80, 0x4000, 0xbf80, 0};
    uint8_t scalar = 42;
    int64_t s_w[2] = {2, 3}, s_ids[1] = {4}, s_bf[2] = {2, 2}, s_empty[2] = {0, 5};
    rt_st_writer *wr = rt_st_writer_new(&err);
    assert_non_null(wr);
    assert_int_equal(rt_st_writer_add(wr, "layers.0.weight", RT_DT_F32, 2, s_w, w, &err), 0);
    assert_int_equal(rt_st_writer_add(wr, "ids", RT_DT_I64, 1, s_ids, ids, &err), 0);
    assert_int_equal(rt_st_writer_add(wr, "b\"f\\16 \xc3\xa9", RT_DT_BF16, 2, s_bf, bf, &err), 0);
    assert_int_equal(rt_st_writer_add(wr, "empty", RT_DT_F16, 2, s_empty, NULL, &err), 0);
    assert_int_equal(rt_st_writer_add(wr, "scalar", RT_DT_U8, 0, NULL, &scalar, &err), 0);
    assert_int_equal(rt_st_writer_meta(wr, "format", "pt", &err), 0);
    assert_int_equal(rt_st_writer_meta(wr, "note", "line1\nline2\t\"quoted\" \\ \x01 \xe2\x82\xac", &err), 0);
    // rejected additions
    assert_int_equal(rt_st_writer_add(wr, "ids", RT_DT_I64, 1, s_ids, ids, &err), -1);
    assert_mentions(err.msg, "duplicate", NULL);
    assert_int_equal(rt_st_writer_add(wr, "__metadata__", RT_DT_I64, 1, s_ids, ids, &err), -1);
    assert_int_equal(rt_st_writer_add(wr, "bad\xff", RT_DT_I64, 1, s_ids, ids, &err), -1);
    assert_mentions(err.msg, "UTF-8", NULL);
    assert_int_equal(rt_st_writer_add(wr, "null", RT_DT_I64, 1, s_ids, NULL, &err), -1);
    assert_int_equal(rt_st_writer_meta(wr, "format", "again", &err), -1);

    const char *p = tpath("model.safetensors");
    if (rt_st_writer_write(wr, p, &err) != 0) fail_msg("%s", err.msg);
    rt_st_writer_free(wr);
    assert_int_equal(count_tmp_files(), 0);

    size_t n;
    unsigned char *raw = read_all(p, &n);
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++) hl |= (uint64_t)raw[k] << (8 * k);
    assert_int_equal(hl % 8, 0);
    assert_int_equal(raw[8], '{');
    assert_int_equal(n, 8 + hl + sizeof w + sizeof ids + sizeof bf + 1);
    free(raw);

    rt_st *st;
    if (rt_st_open(p, &st, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(rt_st_count(st), 5);
    assert_string_equal(rt_st_at(st, 0)->name, "layers.0.weight");
    assert_string_equal(rt_st_at(st, 2)->name, "b\"f\\16 \xc3\xa9");
    assert_string_equal(rt_st_at(st, 4)->name, "scalar");
    assert_null(rt_st_at(st, 5));
    const rt_st_tensor *t = rt_st_find(st, "layers.0.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, RT_DT_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->begin, 0);
    assert_int_equal(t->end, 24);
    assert_memory_equal(t->data, w, sizeof w);
    t = rt_st_find(st, "ids");
    assert_int_equal(t->dtype, RT_DT_I64);
    assert_memory_equal(t->data, ids, sizeof ids);
    t = rt_st_find(st, "b\"f\\16 \xc3\xa9");
    assert_non_null(t);
    assert_int_equal(t->dtype, RT_DT_BF16);
    assert_memory_equal(t->data, bf, sizeof bf);
    t = rt_st_find(st, "empty");
    assert_int_equal(t->numel, 0);
    assert_null(t->data);
    t = rt_st_find(st, "scalar");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->numel, 1);
    assert_int_equal(*(const uint8_t *)t->data, 42);
    assert_null(rt_st_find(st, "missing"));
    assert_int_equal(rt_st_meta_count(st), 2);
    assert_string_equal(rt_st_meta_get(st, "format"), "pt");
    assert_string_equal(rt_st_meta_get(st, "note"), "line1\nline2\t\"quoted\" \\ \x01 \xe2\x82\xac");
    const char *k, *v;
    rt_st_meta_at(st, 1, &k, &v);
    assert_string_equal(k, "note");
    assert_null(rt_st_meta_get(st, "nope"));
    rt_st_free(st);

    // An empty file of tensors (header "{}") round-trips too.
    wr = rt_st_writer_new(&err);
    assert_int_equal(rt_st_writer_write(wr, tpath("empty.safetensors"), &err), 0);
    rt_st_writer_free(wr);
    assert_int_equal(rt_st_open(tpath("empty.safetensors"), &st, &err), 0);
    assert_int_equal(rt_st_count(st), 0);
    rt_st_free(st);
}

// A safetensors buffer from header JSON text and data length (exactly sized).
static unsigned char *make_st(const char *json, size_t data_len, size_t *len) {
    size_t hn = strlen(json);
    *len = 8 + hn + data_len;
    unsigned char *b = malloc(*len ? *len : 1);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)hn >> (8 * k));
    memcpy(b + 8, json, hn);
    for (size_t i = 0; i < data_len; i++) b[8 + hn + i] = (unsigned char)i;
    return b;
}

static void test_st_handwritten(void **state) {
    (void)state;
    stg_err err = {{0}};
    // whitespace, escapes (\u00e9, a surrogate pair), key order, metadata after tensors
    const char *json = " {\n \"a\\u00e9\\ud83d\\ude00\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ] , "
                       "\"dtype\" : \"F32\" } ,\r\n\t\"__metadata__\": {\"k\\/\": \"v\\\"\"}, "
                       "\"b\": {\"dtype\": \"U16\", \"shape\": [], \"data_offsets\": [8, 10]} }   ";
    size_t len;
    unsigned char *b = make_st(json, 10, &len);
    rt_st *st;
    if (rt_st_parse(b, len, &st, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(rt_st_count(st), 2);
    assert_string_equal(rt_st_at(st, 0)->name, "a\xc3\xa9\xf0\x9f\x98\x80");
    assert_string_equal(rt_st_meta_get(st, "k/"), "v\"");
    assert_int_equal(rt_st_find(st, "b")->nbytes, 2);
    assert_ptr_equal(rt_st_find(st, "b")->data, b + 8 + strlen(json) + 8);
    rt_st_free(st);
    free(b);
}

static void expect_st_error(const char *json, size_t data_len, const char *what) {
    size_t len;
    unsigned char *b = make_st(json, data_len, &len);
    stg_err err = {{0}};
    rt_st *st = NULL;
    if (rt_st_parse(b, len, &st, &err) == 0) fail_msg("accepted %s; expected an error about '%s'", json, what);
    assert_null(st);
    assert_mentions(err.msg, what, NULL);
    free(b);
}

static void test_st_corrupt(void **state) {
    (void)state;
    stg_err err = {{0}};
    rt_st *st;
    unsigned char small[5] = {1, 0, 0, 0, 0};
    assert_int_equal(rt_st_parse(small, sizeof small, &st, &err), -1);
    assert_mentions(err.msg, "truncated", NULL);
    // header length beyond the file
    size_t len;
    unsigned char *b = make_st("{}", 0, &len);
    b[0] = 200;
    assert_int_equal(rt_st_parse(b, len, &st, &err), -1);
    assert_mentions(err.msg, "header length 200", "beyond the end", NULL);
    b[0] = 0;
    b[4] = 1; // 4 GiB
    assert_int_equal(rt_st_parse(b, len, &st, &err), -1);
    assert_mentions(err.msg, "exceeds the limit", NULL);
    free(b);
    // a truncated header (file cut inside the JSON)
    const char *one = "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";
    b = make_st(one, 8, &len);
    assert_int_equal(rt_st_parse(b, len, &st, &err), 0);
    rt_st_free(st);
    assert_int_equal(rt_st_parse(b, 30, &st, &err), -1);
    assert_mentions(err.msg, "beyond the end", NULL);
    free(b);

    // bad JSON, with the byte offset
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}", 8, "unexpected end");
    expect_st_error("{\"a\" {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, "expected ':' after a key at byte 13");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}} x", 8, "trailing characters");
    expect_st_error("[1, 2]", 0, "must be a JSON object");
    expect_st_error("{\"a\\q\": {}}", 0, "invalid escape");
    expect_st_error("{\"a\\u12G4\": {}}", 0, "hex digit");
    expect_st_error("{\"a\\ud800x\": {}}", 0, "surrogate");
    expect_st_error("{\"a\\udc00\": {}}", 0, "surrogate");
    expect_st_error("{\"a\\u0000\": {}}", 0, "NUL");
    expect_st_error("{\"a\tb\": {}}", 0, "control character");
    expect_st_error("{\"a\xc3\": {}}", 0, "UTF-8");
    expect_st_error("{\"a\xc0\xaf\": {}}", 0, "UTF-8");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2.0], \"data_offsets\": [0, 8]}}", 8, "fraction");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [02], \"data_offsets\": [0, 8]}}", 8, "leading zero");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", 8, "negative");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [99999999999999999999], \"data_offsets\": [0, 8]}}", 8,
                    "overflows int64");
    expect_st_error("{\"a\": {\"dtype\": \"F8\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, "unknown dtype");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8], \"x\": 1}}", 8, "unknown key");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8,
                    "duplicate key");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", 8, "no shape");
    expect_st_error("{\"a\": {}}", 0, "empty tensor entry");
    expect_st_error("{\"a\": 5}", 0, "expected '{'");
    expect_st_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", 1,
                    "too many dimensions");
    expect_st_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1, 2]}}", 2, "exactly 2");
    expect_st_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0]}}", 1, "exactly 2");
    expect_st_error("{\"__metadata__\": {\"k\": 1}}", 0, "must be strings");
    expect_st_error("{\"__metadata__\": {\"k\": \"v\", \"k\": \"w\"}}", 0, "duplicate key in __metadata__");
    expect_st_error("{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "duplicate __metadata__");
    expect_st_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
                    "\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}",
                    2, "duplicate tensor name 'a'");
    // offsets: wrong size for dtype x shape, reversed, out of range, overlapping, holes, trailing data
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
                    "hold 8 bytes but F32 [3] needs 12");
    expect_st_error("{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}", 16, "needs 8");
    expect_st_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [4, 0]}}", 4, "reversed");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4, "out of range");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                    "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                    12, "overlap");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                    "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
                    12, "hole of 4 bytes");
    expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 6,
                    "2 bytes of data after the last tensor");
    expect_st_error("{\"a\": {\"dtype\": \"F64\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 8]}}", 8,
                    "overflows");
}

static void test_st_fuzz_lite(void **state) {
    (void)state;
    const char *json = "{\"__metadata__\":{\"a\":\"b\\n\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                       "\"data_offsets\":[0,16]},\"y\\u00e9\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]}}";
    size_t len;
    unsigned char *full = make_st(json, 19, &len);
    stg_err err = {{0}};
    rt_st *st;
    assert_int_equal(rt_st_parse(full, len, &st, &err), 0);
    rt_st_free(st);
    for (size_t n = 0; n < len; n++) {
        unsigned char *b = malloc(n ? n : 1);
        memcpy(b, full, n);
        assert_int_equal(rt_st_parse(b, n, &st, &err), -1);
        free(b);
    }
    rt_rng r;
    rt_rng_seed(&r, 11);
    size_t hn = 8 + strlen(json);
    for (int it = 0; it < 20000; it++) {
        unsigned char *b = malloc(len);
        memcpy(b, full, len);
        int flips = 1 + (int)rt_rng_below(&r, 3);
        for (int f = 0; f < flips; f++) b[rt_rng_below(&r, hn)] = (unsigned char)rt_rng_u64(&r);
        if (rt_st_parse(b, len, &st, &err) == 0) {
            for (size_t i = 0; i < rt_st_count(st); i++) {
                const rt_st_tensor *t = rt_st_at(st, i);
                assert_true(t->end - t->begin == t->nbytes);
                if (t->nbytes) {
                    const unsigned char *d = t->data;
                    assert_true(d >= b + 8 && d + t->nbytes <= b + len);
                }
            }
            rt_st_free(st);
        }
        free(b);
    }
    free(full);
}

// The old file survives a failed write, and no temporary file is left behind.
static void test_atomic_write(void **state) {
    (void)state;
    stg_err err = {{0}};
    const char *p = tpath("ckpt.safetensors");
    float small[4] = {1, 2, 3, 4};
    int64_t s4 = 4;
    rt_st_writer *wr = rt_st_writer_new(&err);
    assert_int_equal(rt_st_writer_add(wr, "w", RT_DT_F32, 1, &s4, small, &err), 0);
    assert_int_equal(rt_st_writer_write(wr, p, &err), 0);
    rt_st_writer_free(wr);
    size_t n0;
    unsigned char *before = read_all(p, &n0);

    // 1. The file size limit makes a write fail half-way (EFBIG), after the temp file exists.
    size_t big_n = 1 << 20;
    float *big = calloc(big_n, sizeof *big);
    int64_t sb = (int64_t)big_n;
    wr = rt_st_writer_new(&err);
    assert_int_equal(rt_st_writer_add(wr, "w", RT_DT_F32, 1, &sb, big, &err), 0);
    struct rlimit old_lim, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
    void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old_lim;
    lim.rlim_cur = 64 * 1024;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = rt_st_writer_write(wr, p, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_lim), 0);
    signal(SIGXFSZ, old_sig);
    assert_int_equal(rc, -1);
    assert_mentions(err.msg, p, "File too large", NULL);
    size_t n1;
    unsigned char *after = read_all(p, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(after);
    assert_int_equal(count_tmp_files(), 0);
    // the same failure through the npy writer
    const char *pn = tpath("arr.npy");
    assert_int_equal(rt_npy_write(pn, RT_DT_F32, 1, &s4, small, &err), 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    old_sig = signal(SIGXFSZ, SIG_IGN);
    rc = rt_npy_write(pn, RT_DT_F32, 1, &sb, big, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_lim), 0);
    signal(SIGXFSZ, old_sig);
    assert_int_equal(rc, -1);
    rt_npy a;
    assert_int_equal(rt_npy_open(pn, &a, &err), 0);
    assert_int_equal(a.info.numel, 4);
    rt_npy_close(&a);
    assert_int_equal(count_tmp_files(), 0);

    // 2. A path whose parent is a regular file: the temporary file cannot be created.
    char bad[600];
    snprintf(bad, sizeof bad, "%s/model.safetensors", p);
    assert_int_equal(rt_st_writer_write(wr, bad, &err), -1);
    assert_mentions(err.msg, "Not a directory", "model.safetensors", NULL);
    rt_st_writer_free(wr);
    free(big);

    // 3. A read-only directory (meaningless as root, who may write anyway).
    if (geteuid() != 0) {
        const char *ro = tpath("ro");
        assert_int_equal(mkdir(ro, 0755), 0);
        char f[600];
        snprintf(f, sizeof f, "%s/x.npy", ro);
        assert_int_equal(rt_npy_write(f, RT_DT_F32, 1, &s4, small, &err), 0);
        assert_int_equal(chmod(ro, 0555), 0);
        float other[4] = {9, 9, 9, 9};
        assert_int_equal(rt_npy_write(f, RT_DT_F32, 1, &s4, other, &err), -1);
        assert_mentions(err.msg, "Permission denied", NULL);
        assert_int_equal(chmod(ro, 0755), 0);
        assert_int_equal(rt_npy_open(f, &a, &err), 0);
        assert_memory_equal(a.info.data, small, sizeof small);
        rt_npy_close(&a);
    }
    // reading a missing file names it and the reason
    assert_int_equal(rt_st_open(tpath("missing.safetensors"), &(rt_st *){NULL}, &err), -1);
    assert_mentions(err.msg, "missing.safetensors", "No such file", NULL);
    free(before);
}

// ---- token files ----------------------------------------------------------------------------

static void write_u16_bin(const char *path, const uint16_t *v, size_t n) {
    unsigned char *b = malloc(2 * n + 1);
    for (size_t i = 0; i < n; i++) {
        b[2 * i] = (unsigned char)(v[i] & 0xff);
        b[2 * i + 1] = (unsigned char)(v[i] >> 8);
    }
    write_bytes(path, b, 2 * n);
    free(b);
}

// x[i] = i: each token equals its index in the file, so a row shows where it started.
static void check_batches(const rt_tokens *src, int64_t n) {
    stg_err err = {{0}};
    const int64_t B = 8, T = 16;
    int32_t tok[8 * 16], tgt[8 * 16], tok2[8 * 16], tgt2[8 * 16];
    rt_rng r1, r2;
    rt_rng_seed(&r1, 77);
    rt_rng_seed(&r2, 77);
    int64_t max_start = -1, min_start = n;
    for (int it = 0; it < 2000; it++) {
        assert_int_equal(rt_tokens_batch(src, &r1, B, T, tok, tgt, &err), 0);
        assert_int_equal(rt_tokens_batch(src, &r2, B, T, tok2, tgt2, &err), 0);
        assert_memory_equal(tok, tok2, sizeof tok);
        assert_memory_equal(tgt, tgt2, sizeof tgt);
        for (int64_t b = 0; b < B; b++) {
            int64_t s = tok[b * T];
            assert_true(s >= 0 && s <= n - T - 1);
            if (s > max_start) max_start = s;
            if (s < min_start) min_start = s;
            for (int64_t t = 0; t < T; t++) {
                assert_int_equal(tok[b * T + t], s + t);
                assert_int_equal(tgt[b * T + t], s + t + 1);
                if (t + 1 < T) assert_int_equal(tgt[b * T + t], tok[b * T + t + 1]);
            }
        }
    }
    assert_int_equal(min_start, 0);
    assert_int_equal(max_start, n - T - 1); // the last valid start is reachable
    // a different seed gives a different batch
    rt_rng_seed(&r2, 78);
    assert_int_equal(rt_tokens_batch(src, &r2, B, T, tok2, tgt2, &err), 0);
    assert_true(memcmp(tok, tok2, sizeof tok) != 0);
}

static void test_tokens_bin(void **state) {
    (void)state;
    stg_err err = {{0}};
    const int64_t n = 100;
    uint16_t v[100];
    for (int i = 0; i < n; i++) v[i] = (uint16_t)i;
    const char *p = tpath("tok.bin");
    write_u16_bin(p, v, (size_t)n);
    rt_tokens *src;
    if (rt_tokens_open(p, 100, &src, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(rt_tokens_count(src), n);
    assert_int_equal(rt_tokens_at(src, 99), 99);
    assert_int_equal(rt_tokens_at(src, 100), -1);
    check_batches(src, n);
    // too short for one row: n tokens, ctx = n needs n + 1
    int32_t *tok = malloc(sizeof(int32_t) * 2 * 100), *tgt = malloc(sizeof(int32_t) * 2 * 100);
    rt_rng r;
    rt_rng_seed(&r, 1);
    assert_int_equal(rt_tokens_batch(src, &r, 2, 100, tok, tgt, &err), -1);
    assert_mentions(err.msg, "tok.bin", "has 100 tokens", "ctx+1 = 101", NULL);
    // exactly long enough: one possible start
    assert_int_equal(rt_tokens_batch(src, &r, 2, 99, tok, tgt, &err), 0);
    assert_int_equal(tok[0], 0);
    assert_int_equal(tgt[98], 99);
    assert_int_equal(rt_tokens_batch(src, &r, 0, 99, tok, tgt, &err), -1);
    free(tok);
    free(tgt);
    rt_tokens_free(src);

    // a token id >= vocab
    v[37] = 300;
    write_u16_bin(p, v, (size_t)n);
    assert_int_equal(rt_tokens_open(p, 256, &src, &err), -1);
    assert_mentions(err.msg, "tok.bin", "index 37", "value 300", "256", NULL);
    // odd size, empty, missing
    unsigned char odd[3] = {1, 0, 2};
    write_bytes(p, odd, 3);
    assert_int_equal(rt_tokens_open(p, 256, &src, &err), -1);
    assert_mentions(err.msg, "3 bytes", "whole number", NULL);
    write_bytes(p, odd, 0);
    assert_int_equal(rt_tokens_open(p, 256, &src, &err), -1);
    assert_mentions(err.msg, "empty", NULL);
    assert_int_equal(rt_tokens_open(tpath("nope.bin"), 256, &src, &err), -1);
    assert_mentions(err.msg, "nope.bin", "No such file", NULL);
    assert_int_equal(rt_tokens_open(tmpdir, 256, &src, &err), -1); // a directory
    assert_int_equal(rt_tokens_open(p, 0, &src, &err), -1);
    assert_mentions(err.msg, "vocab", NULL);
}

static void test_tokens_npy(void **state) {
    (void)state;
    stg_err err = {{0}};
    const int64_t n = 64;
    uint16_t v16[64];
    int32_t v32[64];
    for (int i = 0; i < n; i++) {
        v16[i] = (uint16_t)i;
        v32[i] = i;
    }
    rt_tokens *src;
    const char *p16 = tpath("tok16.npy"), *p32 = tpath("tok32.npy");
    assert_int_equal(rt_npy_write(p16, RT_DT_U16, 1, &n, v16, &err), 0);
    assert_int_equal(rt_npy_write(p32, RT_DT_I32, 1, &n, v32, &err), 0);
    if (rt_tokens_open(p16, 64, &src, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(rt_tokens_count(src), n);
    check_batches(src, n);
    int32_t tok[64], tgt[64];
    rt_rng r;
    rt_rng_seed(&r, 3);
    assert_int_equal(rt_tokens_batch(src, &r, 1, 64, tok, tgt, &err), -1);
    assert_mentions(err.msg, "tok16.npy", "has 64 tokens", "ctx+1 = 65", NULL);
    rt_tokens_free(src);
    if (rt_tokens_open(p32, 64, &src, &err) != 0) fail_msg("%s", err.msg);
    check_batches(src, n);
    rt_tokens_free(src);
    // out of range: too large, and negative (int32)
    assert_int_equal(rt_tokens_open(p32, 63, &src, &err), -1);
    assert_mentions(err.msg, "index 63", "value 63", NULL);
    v32[5] = -5;
    assert_int_equal(rt_npy_write(p32, RT_DT_I32, 1, &n, v32, &err), 0);
    assert_int_equal(rt_tokens_open(p32, 64, &src, &err), -1);
    assert_mentions(err.msg, "index 5", "value -5", NULL);
    // wrong rank, wrong dtype, empty, corrupt
    int64_t s2[2] = {8, 8};
    assert_int_equal(rt_npy_write(p32, RT_DT_I32, 2, s2, v32, &err), 0);
    assert_int_equal(rt_tokens_open(p32, 64, &src, &err), -1);
    assert_mentions(err.msg, "1-D", NULL);
    float f[4] = {0};
    int64_t s4 = 4, s0 = 0;
    assert_int_equal(rt_npy_write(p32, RT_DT_F32, 1, &s4, f, &err), 0);
    assert_int_equal(rt_tokens_open(p32, 64, &src, &err), -1);
    assert_mentions(err.msg, "dtype", "<f4", NULL);
    assert_int_equal(rt_npy_write(p32, RT_DT_I32, 1, &s0, NULL, &err), 0);
    assert_int_equal(rt_tokens_open(p32, 64, &src, &err), -1);
    assert_mentions(err.msg, "empty", NULL);
    write_bytes(p32, "\x93NUMPX", 6);
    assert_int_equal(rt_tokens_open(p32, 64, &src, &err), -1);
    assert_mentions(err.msg, "tok32.npy", "truncated", NULL);
}

static void test_tokens_from_text(void **state) {
    (void)state;
    stg_err err = {{0}};
    unsigned char text[300];
    for (int i = 0; i < 300; i++) text[i] = (unsigned char)(i * 7);
    const char *in = tpath("corpus.txt"), *out = tpath("corpus.bin");
    write_bytes(in, text, sizeof text);
    write_bytes(out, "old", 3); // replaced atomically
    assert_int_equal(rt_tokens_from_text(in, out, &err), 300);
    rt_tokens *src;
    if (rt_tokens_open(out, 256, &src, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(rt_tokens_count(src), 300);
    for (int i = 0; i < 300; i++) assert_int_equal(rt_tokens_at(src, i), text[i]);
    rt_tokens_free(src);
    assert_int_equal(rt_tokens_from_text(tpath("absent.txt"), out, &err), -1);
    assert_mentions(err.msg, "absent.txt", "No such file", NULL);
    assert_int_equal(count_tmp_files(), 0);
}

// ---- Markov source --------------------------------------------------------------------------

static double empirical_entropy(const rt_markov *m, uint64_t seed, int64_t transitions, int k) {
    const int64_t V = rt_markov_vocab(m), B = 16, T = 256;
    int64_t *cnt = calloc((size_t)(V * V), sizeof *cnt);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * T)), *tgt = malloc(sizeof(int32_t) * (size_t)(B * T));
    rt_rng r;
    rt_rng_seed(&r, seed);
    stg_err err = {{0}};
    int64_t total = 0;
    while (total < transitions) {
        assert_int_equal(rt_markov_batch(m, &r, B, T, tok, tgt, &err), 0);
        for (int64_t i = 0; i < B * T; i++) {
            assert_true(tok[i] >= 0 && tok[i] < V && tgt[i] >= 0 && tgt[i] < V);
            if (i % T) assert_int_equal(tok[i], tgt[i - 1]);
            cnt[tok[i] * V + tgt[i]]++;
        }
        total += B * T;
    }
    double h = 0;
    for (int64_t s = 0; s < V; s++) {
        int64_t row = 0, distinct = 0;
        for (int64_t j = 0; j < V; j++) {
            row += cnt[s * V + j];
            distinct += cnt[s * V + j] > 0;
        }
        assert_true(distinct <= k); // only the k successors ever follow s
        for (int64_t j = 0; j < V; j++) {
            int64_t c = cnt[s * V + j];
            if (c) h -= (double)c / (double)total * log((double)c / (double)row);
        }
    }
    free(cnt);
    free(tok);
    free(tgt);
    return h;
}

static void test_markov(void **state) {
    (void)state;
    stg_err err = {{0}};
    rt_markov *m = rt_markov_new(64, 4, 123, RT_MARKOV_UNIFORM, &err);
    assert_non_null(m);
    assert_true(fabs(rt_markov_entropy(m) - log(4.0)) < 1e-12);
    double h = empirical_entropy(m, 9, 1000000, 4);
    assert_true(fabs(h / rt_markov_entropy(m) - 1.0) < 0.01);
    double psum = 0;
    for (int s = 0; s < 64; s++) psum += rt_markov_stationary(m)[s];
    assert_true(fabs(psum - 1.0) < 1e-9);
    rt_markov_free(m);

    m = rt_markov_new(64, 4, 321, RT_MARKOV_SEEDED, &err);
    assert_non_null(m);
    double H = rt_markov_entropy(m);
    assert_true(H > 0.5 && H < log(4.0)); // skewed: below the uniform ln 4
    h = empirical_entropy(m, 10, 1000000, 4);
    assert_true(fabs(h / H - 1.0) < 0.01);
    // deterministic for a seed
    int32_t a[4 * 32], b[4 * 32], ta[4 * 32], tb[4 * 32];
    rt_rng r1, r2;
    rt_rng_seed(&r1, 5);
    rt_rng_seed(&r2, 5);
    assert_int_equal(rt_markov_batch(m, &r1, 4, 32, a, ta, &err), 0);
    assert_int_equal(rt_markov_batch(m, &r2, 4, 32, b, tb, &err), 0);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(ta, tb, sizeof ta);
    rt_markov_free(m);
    // the same seed builds the same chain
    rt_markov *m1 = rt_markov_new(1000, 3, 8, RT_MARKOV_SEEDED, &err), *m2 = rt_markov_new(1000, 3, 8, RT_MARKOV_SEEDED, &err);
    assert_true(rt_markov_entropy(m1) == rt_markov_entropy(m2));
    rt_markov_free(m1);
    rt_markov_free(m2);
    // k == 1: a deterministic cycle
    m = rt_markov_new(10, 1, 1, RT_MARKOV_SEEDED, &err);
    assert_non_null(m);
    assert_true(rt_markov_entropy(m) == 0.0);
    rt_markov_free(m);
    // bad arguments
    assert_null(rt_markov_new(3, 4, 1, RT_MARKOV_UNIFORM, &err));
    assert_mentions(err.msg, "--markov-k 4", NULL);
    assert_null(rt_markov_new(0, 1, 1, RT_MARKOV_UNIFORM, &err));
}

// ---- toy classifier data --------------------------------------------------------------------

static void test_toy(void **state) {
    (void)state;
    stg_err err = {{0}};
    rt_toy *toy = rt_toy_new(16, 4, 42, &err);
    assert_non_null(toy);
    float x1[64 * 16], x2[64 * 16];
    int32_t y1[64], y2[64];
    rt_rng r1, r2;
    rt_rng_seed(&r1, 1);
    rt_rng_seed(&r2, 1);
    assert_int_equal(rt_toy_batch(toy, &r1, 64, x1, y1, &err), 0);
    assert_int_equal(rt_toy_batch(toy, &r2, 64, x2, y2, &err), 0);
    assert_memory_equal(x1, x2, sizeof x1);
    assert_memory_equal(y1, y2, sizeof y1);
    int seen[4] = {0};
    for (int i = 0; i < 64; i++) {
        assert_true(y1[i] >= 0 && y1[i] < 4);
        seen[y1[i]] = 1;
    }
    assert_true(seen[0] + seen[1] + seen[2] + seen[3] >= 3);
    // the same seed gives the same map: labels agree for the same inputs
    rt_toy *toy2 = rt_toy_new(16, 4, 42, &err);
    rt_rng_seed(&r2, 1);
    assert_int_equal(rt_toy_batch(toy2, &r2, 64, x2, y2, &err), 0);
    assert_memory_equal(y1, y2, sizeof y1);
    rt_toy_free(toy2);
    rt_toy_free(toy);
    assert_null(rt_toy_new(0, 4, 1, &err));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_determinism),
        cmocka_unit_test(test_rng_save_restore),
        cmocka_unit_test(test_rng_distributions),
        cmocka_unit_test(test_npy_roundtrip),
        cmocka_unit_test(test_npy_numpy_header),
        cmocka_unit_test(test_npy_versions),
        cmocka_unit_test(test_npy_corrupt),
        cmocka_unit_test(test_npy_fuzz_lite),
        cmocka_unit_test(test_st_roundtrip),
        cmocka_unit_test(test_st_handwritten),
        cmocka_unit_test(test_st_corrupt),
        cmocka_unit_test(test_st_fuzz_lite),
        cmocka_unit_test(test_atomic_write),
        cmocka_unit_test(test_tokens_bin),
        cmocka_unit_test(test_tokens_npy),
        cmocka_unit_test(test_tokens_from_text),
        cmocka_unit_test(test_markov),
        cmocka_unit_test(test_toy),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
