// File helpers of the base layer (ops/base/file.h): read-only mappings and atomic replacement.
#include "ops/base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int stg_mmap_open(const char *path, stg_mmap *m, stg_err *err) {
    m->data = NULL;
    m->size = 0;
    // O_NONBLOCK: opening a FIFO for reading would wait for a writer before fstat could refuse it
    // (for a regular file the flag changes nothing).
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return stg_errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return stg_errf(err, "%s: fstat failed: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return stg_errf(err, "%s: not a regular file", path);
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return stg_errf(err, "%s: file size %lld does not fit in memory", path, (long long)st.st_size);
    }
    size_t size = (size_t)st.st_size;
    void *p = NULL;
    if (size > 0) {
        p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return stg_errf(err, "%s: mmap of %zu bytes failed: %s", path, size, strerror(e));
        }
    }
    if (close(fd) != 0) {
        int e = errno;
        if (p) munmap(p, size);
        return stg_errf(err, "%s: close failed: %s", path, strerror(e));
    }
    m->data = p;
    m->size = size;
    return 0;
}

void stg_mmap_close(stg_mmap *m) {
    if (m->data && m->size) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

// ---- atomic file replacement -----------------------------------------------------------------

struct stg_afile {
    FILE *fp;
    char *path; // final name
    char *tmp;  // PATH.tmp.<pid>
};

int stg_afile_open(const char *path, stg_afile **out, stg_err *err) {
    *out = NULL;
    stg_afile *f = stg_calloc(1, sizeof *f, err);
    if (!f) return -1;
    size_t n = strlen(path);
    f->path = stg_strdup(path, err);
    f->tmp = stg_malloc(n + 32, err);
    if (!f->path || !f->tmp) {
        free(f->path);
        free(f->tmp);
        free(f);
        return -1;
    }
    snprintf(f->tmp, n + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        stg_errf(err, "%s: cannot create temporary file %s: %s", path, f->tmp, strerror(errno));
        free(f->path);
        free(f->tmp);
        free(f);
        return -1;
    }
    f->fp = fdopen(fd, "wb");
    if (!f->fp) {
        stg_errf(err, "%s: fdopen of %s failed: %s", path, f->tmp, strerror(errno));
        close(fd);
        unlink(f->tmp);
        free(f->path);
        free(f->tmp);
        free(f);
        return -1;
    }
    *out = f;
    return 0;
}

int stg_afile_write(stg_afile *f, const void *p, size_t n, stg_err *err) {
    if (n == 0) return 0;
    errno = 0;
    if (fwrite(p, 1, n, f->fp) != n)
        return stg_errf(err, "%s: write of %zu bytes to %s failed: %s", f->path, n, f->tmp,
                        errno ? strerror(errno) : "short write");
    return 0;
}

static void afile_release(stg_afile *f) {
    free(f->path);
    free(f->tmp);
    free(f);
}

void stg_afile_abort(stg_afile *f) {
    if (!f) return;
    if (f->fp) fclose(f->fp);
    unlink(f->tmp);
    afile_release(f);
}

int stg_afile_write_all(const char *path, const void *p, size_t n, stg_err *err) {
    stg_afile *f;
    if (stg_afile_open(path, &f, err)) return -1;
    if (stg_afile_write(f, p, n, err)) {
        stg_afile_abort(f);
        return -1;
    }
    return stg_afile_commit(f, err);
}

// fsyncs the directory holding `path` so that the rename itself is durable. Filesystems that
// cannot fsync a directory answer EINVAL: that is not an error.
static int fsync_parent(const char *path, stg_err *err) {
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) {
        dir = stg_strdup(".", err);
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        dir = stg_malloc(n + 1, err);
        if (dir) {
            memcpy(dir, path, n);
            dir[n] = '\0';
        }
    }
    if (!dir) return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        stg_errf(err, "%s: cannot open directory %s to fsync it: %s", path, dir, strerror(errno));
        free(dir);
        return -1;
    }
    int rc = 0;
    if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        rc = stg_errf(err, "%s: fsync of directory %s failed: %s", path, dir, strerror(errno));
    if (close(fd) != 0 && rc == 0) rc = stg_errf(err, "%s: close of directory %s failed: %s", path, dir, strerror(errno));
    free(dir);
    return rc;
}

int stg_afile_commit(stg_afile *f, stg_err *err) {
    int rc = 0;
    if (fflush(f->fp) != 0)
        rc = stg_errf(err, "%s: write to %s failed: %s", f->path, f->tmp, strerror(errno));
    if (rc == 0 && fsync(fileno(f->fp)) != 0)
        rc = stg_errf(err, "%s: fsync of %s failed: %s", f->path, f->tmp, strerror(errno));
    int e = 0;
    if (fclose(f->fp) != 0) e = errno;
    f->fp = NULL;
    if (rc == 0 && e != 0) rc = stg_errf(err, "%s: close of %s failed: %s", f->path, f->tmp, strerror(e));
    if (rc == 0 && rename(f->tmp, f->path) != 0)
        rc = stg_errf(err, "%s: rename of %s over it failed: %s", f->path, f->tmp, strerror(errno));
    if (rc != 0) {
        unlink(f->tmp);
        afile_release(f);
        return -1;
    }
    rc = fsync_parent(f->path, err);
    afile_release(f);
    return rc;
}

int stg_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int stg_check_output(const char *out, const char *what, const char *const *inputs, const char *const *input_what,
                     int n_inputs, stg_err *err) {
    if (!out) return 0;
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i]) continue;
        if (stg_same_file(out, inputs[i]))
            return stg_errf(err, "%s %s is the same file as the %s %s: refusing to overwrite an input", what, out,
                            input_what && input_what[i] ? input_what[i] : "input", inputs[i]);
    }
    return 0;
}
