// safetensors files (https://github.com/huggingface/safetensors, format description in its README):
//   u64 little-endian N | N bytes of JSON header | data
// The header is one JSON object: an optional "__metadata__" object of string to string, and for
// each tensor  "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}  with the
// offsets relative to the start of the data. Dtypes: F32 F64 BF16 F16 I32 I64 U8 U16.
//
// The reader is strict, since checkpoints come from anywhere: its own small JSON parser accepts
// exactly this schema (strings with every JSON escape and valid UTF-8, non-negative integers,
// arrays, objects; no duplicate keys), and every error names the problem and the byte offset in
// the file. Limits: header <= 100,000,000 bytes, <= 100,000 tensors, <= 8 dims. The data offsets
// must match dtype x shape, lie inside the data, not overlap, and (as the format requires) cover
// the data with no hole and nothing after the last tensor.
//
// Tensor data is not necessarily aligned to its element size (safetensors packs tensors back to
// back; the data region itself starts 8-byte aligned). Copy with memcpy when in doubt; files
// written by rt_st_writer_write keep every tensor aligned when the tensors are given in
// decreasing element size or all have the same dtype.
#ifndef STG_RUNTIME_SAFETENSORS_H
#define STG_RUNTIME_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "runtime/npy.h" // rt_dtype, stg_mmap, stg_afile

#define RT_ST_MAX_HEADER 100000000u
#define RT_ST_MAX_TENSORS 100000
#define RT_ST_MAX_DIMS 8

typedef struct rt_st_tensor {
    const char *name;               // NUL-terminated UTF-8 (owned by the rt_st)
    rt_dtype dtype;
    int ndim;
    int64_t shape[RT_ST_MAX_DIMS];  // outermost first
    int64_t numel;
    size_t nbytes;
    size_t begin, end;              // data_offsets, relative to the data start
    const void *data;               // points into the file (NULL when nbytes == 0)
} rt_st_tensor;

typedef struct rt_st rt_st; // a parsed file (opaque)

// Memory-maps and parses a file. Messages start with the path.
int rt_st_open(const char *path, rt_st **out, stg_err *err);
// Parses a file held in memory; buf must outlive the rt_st (nothing is copied but the names).
int rt_st_parse(const void *buf, size_t len, rt_st **out, stg_err *err);
void rt_st_free(rt_st *st);

// Tensors in header order.
size_t rt_st_count(const rt_st *st);
const rt_st_tensor *rt_st_at(const rt_st *st, size_t i);
// By name (binary search); NULL if absent.
const rt_st_tensor *rt_st_find(const rt_st *st, const char *name);

// Metadata in header order, and by key (NULL if absent).
size_t rt_st_meta_count(const rt_st *st);
void rt_st_meta_at(const rt_st *st, size_t i, const char **key, const char **value);
const char *rt_st_meta_get(const rt_st *st, const char *key);

// ---- writing --------------------------------------------------------------------------------

typedef struct rt_st_writer rt_st_writer;

rt_st_writer *rt_st_writer_new(stg_err *err);
void rt_st_writer_free(rt_st_writer *w);
// Adds a tensor (written in the order added). The name is copied; `data` (numel * element size
// bytes, C order) is not, and must stay valid until rt_st_writer_write returns. Rejects
// duplicate names, "__metadata__", invalid UTF-8, negative dims, more than 8 dims.
int rt_st_writer_add(rt_st_writer *w, const char *name, rt_dtype dt, int ndim, const int64_t *shape,
                     const void *data, stg_err *err);
// Adds a metadata entry (both strings copied; duplicate keys rejected).
int rt_st_writer_meta(rt_st_writer *w, const char *key, const char *value, stg_err *err);
// Writes the file atomically (stg_afile): PATH.tmp.<pid>, every write checked, fflush, fsync,
// fclose, rename over PATH, fsync of the directory. On any error the temporary file is removed and
// an existing file at PATH is left as it was. The header is padded with spaces to a multiple of 8.
int rt_st_writer_write(const rt_st_writer *w, const char *path, stg_err *err);

#endif
