#include "runtime/npy.h"

#include "runtime/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// ---- element types --------------------------------------------------------------------------

static const struct {
    const char *name;
    const char *npy;
    size_t size;
} dtypes[RT_DT_COUNT] = {
    [RT_DT_U8] = {"U8", "|u1", 1},     [RT_DT_U16] = {"U16", "<u2", 2},
    [RT_DT_I32] = {"I32", "<i4", 4},   [RT_DT_I64] = {"I64", "<i8", 8},
    [RT_DT_F16] = {"F16", "<f2", 2},   [RT_DT_BF16] = {"BF16", NULL, 2},
    [RT_DT_F32] = {"F32", "<f4", 4},   [RT_DT_F64] = {"F64", "<f8", 8},
};

static int dtype_ok(rt_dtype dt) { return (int)dt >= 0 && dt < RT_DT_COUNT; }

size_t rt_dtype_size(rt_dtype dt) { return dtype_ok(dt) ? dtypes[dt].size : 0; }
const char *rt_dtype_name(rt_dtype dt) { return dtype_ok(dt) ? dtypes[dt].name : "?"; }
const char *rt_dtype_npy_descr(rt_dtype dt) { return dtype_ok(dt) ? dtypes[dt].npy : NULL; }

// ---- mapping --------------------------------------------------------------------------------

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

typedef struct {
    const char *s; // the header dict text
    size_t n, i;   // length, cursor
    size_t base;   // file offset of s[0] (for messages)
    stg_err *err;
} hcur;

static int hfail(hcur *c, const char *what) {
    return stg_errf(c->err, ".npy header: %s at byte %zu", what, c->base + c->i);
}

static void hws(hcur *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t')) c->i++;
}

static int hexpect(hcur *c, char ch, const char *what) {
    hws(c);
    if (c->i >= c->n || c->s[c->i] != ch) return hfail(c, what);
    c->i++;
    return 0;
}

// A quoted string ('...' or "..."), no escapes. *p, *len: its contents within c->s.
static int hstring(hcur *c, const char **p, size_t *len) {
    hws(c);
    if (c->i >= c->n || (c->s[c->i] != '\'' && c->s[c->i] != '"')) return hfail(c, "expected a quoted string");
    char q = c->s[c->i++];
    size_t start = c->i;
    while (c->i < c->n && c->s[c->i] != q) {
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '\\') return hfail(c, "escape sequences are not supported in header strings");
        if (ch < 0x20 || ch >= 0x7f) return hfail(c, "non-printable character in a header string");
        c->i++;
    }
    if (c->i >= c->n) return hfail(c, "unterminated string");
    *p = c->s + start;
    *len = c->i - start;
    c->i++;
    return 0;
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

// A non-negative integer that fits int64 (an optional Python 2 'L' suffix is accepted).
static int hint(hcur *c, int64_t *out) {
    hws(c);
    if (c->i < c->n && c->s[c->i] == '-') return hfail(c, "negative dimension in shape");
    if (c->i >= c->n || !is_digit(c->s[c->i])) return hfail(c, "expected a dimension (non-negative integer)");
    int64_t v = 0;
    while (c->i < c->n && is_digit(c->s[c->i])) {
        int d = c->s[c->i] - '0';
        if (v > (INT64_MAX - d) / 10) return hfail(c, "dimension overflows int64");
        v = v * 10 + d;
        c->i++;
    }
    if (c->i < c->n && c->s[c->i] == 'L') c->i++;
    *out = v;
    return 0;
}

static int hshape(hcur *c, rt_npy_info *info) {
    if (hexpect(c, '(', "expected '(' starting the shape tuple") != 0) return -1;
    int nd = 0;
    int trailing_comma = 0;
    hws(c);
    if (c->i < c->n && c->s[c->i] == ')') {
        c->i++;
        info->ndim = 0;
        return 0;
    }
    for (;;) {
        if (nd >= RT_NPY_MAX_DIMS) return hfail(c, "too many dimensions in shape (at most 32)");
        if (hint(c, &info->shape[nd]) != 0) return -1;
        nd++;
        hws(c);
        if (c->i >= c->n) return hfail(c, "unterminated shape tuple");
        if (c->s[c->i] == ')') {
            trailing_comma = 0;
            c->i++;
            break;
        }
        if (c->s[c->i] != ',') return hfail(c, "expected ',' or ')' in shape tuple");
        c->i++;
        trailing_comma = 1;
        hws(c);
        if (c->i < c->n && c->s[c->i] == ')') {
            c->i++;
            break;
        }
    }
    if (nd == 1 && !trailing_comma) return hfail(c, "shape (n) is not a tuple: a 1-D shape is written (n,)");
    info->ndim = nd;
    return 0;
}

static int descr_to_dtype(const char *p, size_t n, rt_dtype *dt) {
    if (n == 3 && (p[0] == '<' || p[0] == '|') && p[1] == 'u' && p[2] == '1') {
        *dt = RT_DT_U8;
        return 0;
    }
    for (int d = 0; d < RT_DT_COUNT; d++) {
        const char *s = dtypes[d].npy;
        if (s && strlen(s) == n && memcmp(s, p, n) == 0) {
            *dt = (rt_dtype)d;
            return 0;
        }
    }
    return -1;
}

static int parse_dict(hcur *c, rt_npy_info *info) {
    int have_descr = 0, have_fo = 0, have_shape = 0;
    if (hexpect(c, '{', "expected '{' starting the header dict") != 0) return -1;
    for (;;) {
        hws(c);
        if (c->i < c->n && c->s[c->i] == '}') {
            c->i++;
            break;
        }
        size_t key_at = c->i;
        const char *k;
        size_t kn;
        if (hstring(c, &k, &kn) != 0) return -1;
        if (hexpect(c, ':', "expected ':' after a key") != 0) return -1;
        if (kn == 5 && memcmp(k, "descr", 5) == 0) {
            if (have_descr) { c->i = key_at; return hfail(c, "duplicate key 'descr'"); }
            have_descr = 1;
            hws(c);
            size_t at = c->i;
            const char *v;
            size_t vn;
            if (hstring(c, &v, &vn) != 0) return -1;
            if (descr_to_dtype(v, vn, &info->dtype) != 0) {
                c->i = at;
                char msg[160];
                const char *why = (vn > 0 && v[0] == '>') ? "big-endian data is not supported; "
                                                           : "";
                snprintf(msg, sizeof msg,
                         "unsupported dtype '%.*s' (%ssupported: |u1 <u2 <i4 <i8 <f2 <f4 <f8)",
                         (int)(vn > 32 ? 32 : vn), v, why);
                return hfail(c, msg);
            }
        } else if (kn == 13 && memcmp(k, "fortran_order", 13) == 0) {
            if (have_fo) { c->i = key_at; return hfail(c, "duplicate key 'fortran_order'"); }
            have_fo = 1;
            hws(c);
            if (c->n - c->i >= 5 && memcmp(c->s + c->i, "False", 5) == 0) {
                c->i += 5;
            } else if (c->n - c->i >= 4 && memcmp(c->s + c->i, "True", 4) == 0) {
                return hfail(c, "fortran_order is True: only C-order arrays are supported "
                                "(save with np.ascontiguousarray)");
            } else {
                return hfail(c, "fortran_order must be True or False");
            }
        } else if (kn == 5 && memcmp(k, "shape", 5) == 0) {
            if (have_shape) { c->i = key_at; return hfail(c, "duplicate key 'shape'"); }
            have_shape = 1;
            if (hshape(c, info) != 0) return -1;
        } else {
            c->i = key_at;
            return hfail(c, "unknown key in header dict (expected 'descr', 'fortran_order', 'shape')");
        }
        hws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == '}') {
            c->i++;
            break;
        }
        return hfail(c, "expected ',' or '}' in header dict");
    }
    if (!have_descr) return hfail(c, "header dict has no 'descr'");
    if (!have_fo) return hfail(c, "header dict has no 'fortran_order'");
    if (!have_shape) return hfail(c, "header dict has no 'shape'");
    // Only padding may follow: spaces, then exactly one '\n' as the last byte.
    while (c->i < c->n && c->s[c->i] == ' ') c->i++;
    if (c->i + 1 != c->n || c->s[c->i] != '\n')
        return hfail(c, "header must end with space padding and a single '\\n'");
    return 0;
}

int rt_npy_parse(const void *buf, size_t len, rt_npy_info *out, stg_err *err) {
    memset(out, 0, sizeof *out);
    const unsigned char *b = buf;
    if (len < 10) return stg_errf(err, ".npy: truncated: %zu bytes, the header needs at least 10", len);
    if (memcmp(b, npy_magic, 6) != 0) return stg_errf(err, ".npy: bad magic: not a .npy file (expected \\x93NUMPY)");
    int major = b[6], minor = b[7];
    size_t pre, hlen;
    if (major == 1 && minor == 0) {
        pre = 10;
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12) return stg_errf(err, ".npy: truncated: %zu bytes, a version %d.0 header needs at least 12", len, major);
        pre = 12;
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    } else {
        return stg_errf(err, ".npy: unsupported format version %d.%d (supported: 1.0, 2.0, 3.0)", major, minor);
    }
    if (hlen > RT_NPY_MAX_HEADER)
        return stg_errf(err, ".npy: header length %zu exceeds the limit of %u bytes (a header is a short dict)", hlen,
                        RT_NPY_MAX_HEADER);
    if (hlen > len - pre)
        return stg_errf(err, ".npy: truncated header: header length %zu needs %zu bytes, the file has %zu",
                        hlen, pre + hlen, len);
    if (hlen == 0) return stg_errf(err, ".npy: header length is 0 (empty header dict)");
    hcur c = {.s = (const char *)b + pre, .n = hlen, .i = 0, .base = pre, .err = err};
    if (parse_dict(&c, out) != 0) return -1;
    size_t esize = rt_dtype_size(out->dtype);
    size_t off = pre + hlen;
    if (off % esize != 0)
        return stg_errf(err, ".npy: data offset %zu is not a multiple of the element size %zu (misaligned data)",
                        off, esize);
    int64_t numel = 1;
    for (int d = 0; d < out->ndim; d++) {
        int64_t s = out->shape[d];
        if (s != 0 && numel > INT64_MAX / s)
            return stg_errf(err, ".npy: shape overflow: the element count exceeds int64 at dimension %d", d);
        numel *= s;
    }
    if ((uint64_t)numel > (uint64_t)(SIZE_MAX / esize))
        return stg_errf(err, ".npy: shape overflow: %lld elements of %zu bytes exceed the address space",
                        (long long)numel, esize);
    size_t nbytes = (size_t)numel * esize;
    size_t have = len - off;
    if (have < nbytes)
        return stg_errf(err, ".npy: data size mismatch: shape needs %zu bytes of data but the file has %zu after the header",
                        nbytes, have);
    if (have > nbytes)
        return stg_errf(err, ".npy: data size mismatch: %zu trailing bytes after the %zu bytes of data",
                        have - nbytes, nbytes);
    out->numel = numel;
    out->nbytes = nbytes;
    out->data_offset = off;
    out->data = nbytes ? b + off : NULL;
    out->major = major;
    out->minor = minor;
    return 0;
}

int rt_npy_open(const char *path, rt_npy *out, stg_err *err) {
    memset(out, 0, sizeof *out);
    if (rt_require_regular(path, ".npy file", err) || stg_mmap_open(path, &out->map, err) != 0) return -1;
    if (rt_npy_parse(out->map.data, out->map.size, &out->info, err) != 0) {
        stg_err_prefix(err, "%s", path);
        stg_mmap_close(&out->map);
        return -1;
    }
    return 0;
}

void rt_npy_close(rt_npy *a) {
    stg_mmap_close(&a->map);
    memset(&a->info, 0, sizeof a->info);
}

// ---- .npy writing -----------------------------------------------------------------------------

int rt_npy_header(rt_dtype dt, int ndim, const int64_t *shape, int major, char **out, size_t *len,
                  stg_err *err) {
    *out = NULL;
    *len = 0;
    const char *descr = rt_dtype_npy_descr(dt);
    if (!descr) return stg_errf(err, ".npy: dtype %s has no numpy equivalent", rt_dtype_name(dt));
    if (ndim < 0 || ndim > RT_NPY_MAX_DIMS) return stg_errf(err, ".npy: %d dimensions (0 to %d supported)", ndim, RT_NPY_MAX_DIMS);
    if (major != 0 && major != 1 && major != 2) return stg_errf(err, ".npy: cannot write format version %d", major);
    char dict[64 + RT_NPY_MAX_DIMS * 24];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return stg_errf(err, ".npy: negative dimension %lld", (long long)shape[d]);
        n += snprintf(dict + n, sizeof dict - (size_t)n, d ? ", %lld" : "%lld", (long long)shape[d]);
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    size_t dn = (size_t)n;
    if (major == 0) major = dn + 1 + 10 <= 65535 ? 1 : 2;
    size_t pre = major == 1 ? 10 : 12;
    size_t total = (pre + dn + 1 + 63) / 64 * 64; // dict + '\n', padded to 64
    size_t hlen = total - pre;
    if (major == 1 && hlen > 65535) return stg_errf(err, ".npy: header too long for format 1.0");
    char *h = stg_malloc(total, err);
    if (!h) return -1;
    memcpy(h, npy_magic, 6);
    h[6] = (char)major;
    h[7] = 0;
    h[8] = (char)(hlen & 0xff);
    h[9] = (char)((hlen >> 8) & 0xff);
    if (major == 2) {
        h[10] = (char)((hlen >> 16) & 0xff);
        h[11] = (char)((hlen >> 24) & 0xff);
    }
    memcpy(h + pre, dict, dn);
    memset(h + pre + dn, ' ', total - pre - dn - 1);
    h[total - 1] = '\n';
    *out = h;
    *len = total;
    return 0;
}

int rt_npy_write(const char *path, rt_dtype dt, int ndim, const int64_t *shape, const void *data,
                 stg_err *err) {
    char *h;
    size_t hn;
    if (rt_npy_header(dt, ndim, shape, 0, &h, &hn, err) != 0) return stg_err_prefix(err, "%s", path);
    size_t esize = rt_dtype_size(dt);
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] != 0 && numel > (uint64_t)(SIZE_MAX / esize) / (uint64_t)shape[d]) {
            free(h);
            return stg_errf(err, "%s: shape overflow", path);
        }
        numel *= (uint64_t)shape[d];
    }
    size_t nbytes = (size_t)numel * esize;
    if (nbytes && !data) {
        free(h);
        return stg_errf(err, "%s: data pointer is NULL for %zu bytes", path, nbytes);
    }
    stg_afile *f;
    if (stg_afile_open(path, &f, err) != 0) {
        free(h);
        return -1;
    }
    int rc = stg_afile_write(f, h, hn, err);
    free(h);
    if (rc == 0) rc = stg_afile_write(f, data, nbytes, err);
    if (rc != 0) {
        stg_afile_abort(f);
        return -1;
    }
    return stg_afile_commit(f, err);
}
