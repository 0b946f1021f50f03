// File-system checks the runtime makes before it works, so that a run fails at once with a message
// instead of hanging, losing data, or failing after hours: checksums of what is written, regular
// files only where a file is read whole, a probe of an output directory, and the removal of the
// temporary files (PATH.tmp.<pid>, ops/base/file.h) that a killed process left behind.
#ifndef STG_RUNTIME_FSUTIL_H
#define STG_RUNTIME_FSUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"

// CRC-32C (Castagnoli, the iSCSI polynomial): crc of the bytes p[0..n), continuing from `crc`
// (0 to start). rt_crc32c(0, "123456789", 9) == 0xe3069283.
uint32_t rt_crc32c(uint32_t crc, const void *p, size_t n);

// Fails with "WHAT PATH: not a regular file (...)" when path exists and is a FIFO, a device, a
// directory or a socket: opening a FIFO blocks until a writer comes, and /dev/zero never ends. A
// missing file passes (the open that follows says so). Uses stat, which never blocks.
int rt_require_regular(const char *path, const char *what, stg_err *err);

// Creates dir when missing (one level), then creates, writes, fsyncs and removes a small file in
// it: fails when checkpoints could not be written there (read-only, no permission, full).
int rt_probe_dir(const char *dir, stg_err *err);

// Removes, in directory dir, every "<name>.tmp.<pid>" whose pid names no living process (and is
// not this process), when `prefix` is NULL or <name> starts with it. Returns how many were
// removed, or -1 (err) when dir cannot be read. A missing dir removes nothing.
int rt_remove_stale_tmp(const char *dir, const char *prefix, stg_err *err);

#endif
