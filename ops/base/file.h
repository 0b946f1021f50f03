// File helpers of the base layer: a read-only memory mapping of a whole file, and atomic file
// replacement (write PATH.tmp.<pid>, fsync, rename over PATH, fsync the directory), so a crash or
// an error never leaves a partial file at PATH and never loses the file that was there. Includes
// nothing outside ops/base/.
#ifndef STG_BASE_FILE_H
#define STG_BASE_FILE_H

#include <stddef.h>

#include "ops/base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- read-only mapping of a whole file -------------------------------------------------------

typedef struct stg_mmap {
    const void *data; // the file's bytes (page-aligned); NULL when the file is empty
    size_t size;      // file size in bytes
} stg_mmap;

// Maps `path` read-only. Fails (with the path and the errno text) if the file cannot be opened,
// is not a regular file, or cannot be mapped. Note: another process truncating the file while it
// is mapped makes later reads fault (SIGBUS); the runtime's own writers replace files by rename,
// which never does that.
int stg_mmap_open(const char *path, stg_mmap *m, stg_err *err);
// Unmaps (safe on a zeroed or already-closed stg_mmap).
void stg_mmap_close(stg_mmap *m);

// ---- atomic file replacement -----------------------------------------------------------------

typedef struct stg_afile stg_afile;

// Creates PATH.tmp.<pid> for writing (truncating a stale one).
int stg_afile_open(const char *path, stg_afile **out, stg_err *err);
// Appends n bytes (fwrite, checked).
int stg_afile_write(stg_afile *f, const void *p, size_t n, stg_err *err);
// fflush, fsync, fclose (all checked), rename over PATH, fsync the directory. Always frees f. On
// any error before the rename the temporary file is unlinked and the file at PATH is untouched; a
// failed directory fsync after the rename is reported too (the new file is then in place).
// One writer per PATH at a time within a process (the temporary name holds only the pid).
int stg_afile_commit(stg_afile *f, stg_err *err);
// Gives up: closes and unlinks the temporary file, frees f (NULL is fine).
void stg_afile_abort(stg_afile *f);
// PATH replaced by the n bytes at p, atomically (open, write, commit; the temporary file removed on
// any error, PATH then untouched).
int stg_afile_write_all(const char *path, const void *p, size_t n, stg_err *err);

// ---- outputs never overwrite inputs ---------------------------------------------------------

// 1 when both paths exist and name the same file (device and inode, through symlinks), else 0.
int stg_same_file(const char *a, const char *b);
// Fails with "WHAT OUT is the same file as the INPUT_WHAT[i] INPUTS[i]" when output path `out`
// is any of the n inputs (NULL entries and a NULL out are skipped). Call before opening out.
int stg_check_output(const char *out, const char *what, const char *const *inputs, const char *const *input_what,
                     int n_inputs, stg_err *err);

#ifdef __cplusplus
}
#endif

#endif
