// NumPy .npy files (format versions 1.0, 2.0 and 3.0), plus the file helpers the runtime's file
// formats share (runtime/safetensors.c, runtime/data.c):
//   - rt_dtype: the element types of the file formats, with their npy and safetensors names;
//   (the read-only mapping stg_mmap and atomic replacement stg_afile are the base layer's,
//   ops/base/file.h)
//
// The .npy format (numpy.lib.format): the 6 bytes "\x93NUMPY", one byte major and one byte minor
// version, the header length (little-endian u16 for 1.0, u32 for 2.0/3.0), then that many bytes of
// a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with
// spaces and ended by '\n'; the data follows. The reader accepts C order only, the dtypes of
// rt_dtype except bf16, little-endian (or byte-order-free '|u1'), and checks every length: the
// data must be exactly numel * element size bytes and end exactly at the end of the file.
// Hostile input never makes the reader crash or read outside the buffer.
#ifndef STG_RUNTIME_NPY_H
#define STG_RUNTIME_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/file.h"

// ---- element types --------------------------------------------------------------------------

typedef enum rt_dtype {
    RT_DT_U8,
    RT_DT_U16,
    RT_DT_I32,
    RT_DT_I64,
    RT_DT_F16,
    RT_DT_BF16, // safetensors only: numpy has no bfloat16
    RT_DT_F32,
    RT_DT_F64,
    RT_DT_COUNT
} rt_dtype;

// Bytes per element (0 for an invalid value).
size_t rt_dtype_size(rt_dtype dt);
// Safetensors name: "U8", "U16", "I32", "I64", "F16", "BF16", "F32", "F64" ("?" if invalid).
const char *rt_dtype_name(rt_dtype dt);
// NumPy descr: "|u1", "<u2", "<i4", "<i8", "<f2", "<f4", "<f8"; NULL for bf16 and invalid values.
const char *rt_dtype_npy_descr(rt_dtype dt);

// ---- .npy ------------------------------------------------------------------------------------

#define RT_NPY_MAX_DIMS 32
// The reader refuses longer header dicts (numpy writes a few hundred bytes; its reader stops at 10,000).
#define RT_NPY_MAX_HEADER 1000000u

typedef struct rt_npy_info {
    rt_dtype dtype;
    int ndim;                         // 0 for a scalar
    int64_t shape[RT_NPY_MAX_DIMS];   // C order (outermost first)
    int64_t numel;                    // product of shape (1 for a scalar)
    size_t nbytes;                    // numel * element size
    size_t data_offset;               // bytes before the data (a multiple of the element size)
    const void *data;                 // points into the parsed buffer (NULL when nbytes == 0)
    int major, minor;                 // format version
} rt_npy_info;

// Parses a whole .npy file held in buf[0..len). On success fills *out (data points into buf:
// element-aligned whenever buf is 8-byte aligned). On failure returns -1 with a message saying
// what is wrong and where (byte offset within the header dict).
int rt_npy_parse(const void *buf, size_t len, rt_npy_info *out, stg_err *err);

typedef struct rt_npy {
    rt_npy_info info; // info.data points into the mapping
    stg_mmap map;
} rt_npy;

// Memory-maps and parses `path`; messages start with the path. Release with rt_npy_close.
int rt_npy_open(const char *path, rt_npy *out, stg_err *err);
void rt_npy_close(rt_npy *a);

// Builds the header (magic through the final '\n') for an array: `major` 1 or 2 forces that
// version, 0 picks 1.0 unless the dict needs more than 65535 bytes. The total header length is a
// multiple of 64, as numpy writes it. *out is malloc'ed (free it); *len is its length.
int rt_npy_header(rt_dtype dt, int ndim, const int64_t *shape, int major, char **out, size_t *len,
                  stg_err *err);

// Writes data (numel * element size bytes, C order) as a .npy file at path, atomically
// (stg_afile). bf16 is refused (no numpy dtype).
int rt_npy_write(const char *path, rt_dtype dt, int ndim, const int64_t *shape, const void *data,
                 stg_err *err);

#endif
