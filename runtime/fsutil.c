#include "runtime/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ---- CRC-32C ----------------------------------------------------------------------------------

// Slicing by 8: table k advances the CRC over a byte followed by k zero bytes, so 8 bytes cost 8
// lookups and no serial dependence between them. A checkpoint of the 2.7B model is 32 GiB: a byte
// at a time would take a minute.
static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_tab[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++) crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
}

static uint32_t crc_soft(uint32_t c, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^ crc_tab[5][(lo >> 16) & 0xff] ^ crc_tab[4][lo >> 24] ^
            crc_tab[3][p[4]] ^ crc_tab[2][p[5]] ^ crc_tab[1][p[6]] ^ crc_tab[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_tab[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
// SSE4.2 has the CRC-32C instruction itself (about 8 bytes a cycle); every x86-64 CPU of the last
// decade has it, and the table version stays for the rest.
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t rt_crc32c(uint32_t crc, const void *p, size_t n) {
    pthread_once(&crc_once, crc_init);
    uint32_t c = ~crc;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("sse4.2")) return ~crc_hw(c, p, n);
#endif
    return ~crc_soft(c, p, n);
}

// ---- checks -----------------------------------------------------------------------------------

int rt_require_regular(const char *path, const char *what, stg_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) return 0; // the open that follows reports it with its own words
    if (S_ISREG(st.st_mode)) return 0;
    const char *kind = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : S_ISCHR(st.st_mode) ? "a character device"
                     : S_ISBLK(st.st_mode) ? "a block device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a file";
    return stg_errf(err, "%s %s: not a regular file (%s); stg reads it whole, so it must be a file", what, path, kind);
}

int rt_probe_dir(const char *dir, stg_err *err) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return stg_errf(err, "%s: cannot create the checkpoint directory: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0) return stg_errf(err, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return stg_errf(err, "%s: not a directory; --ckpt names a directory", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/.stg-probe.%ld", dir, (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return stg_errf(err, "%s: cannot write checkpoints here: %s", dir, strerror(errno));
    int rc = 0;
    if (write(fd, "stg", 3) != 3) rc = stg_errf(err, "%s: cannot write checkpoints here: %s", dir, strerror(errno));
    if (rc == 0 && fsync(fd) != 0 && errno != EINVAL)
        rc = stg_errf(err, "%s: cannot write checkpoints here (fsync): %s", dir, strerror(errno));
    if (close(fd) != 0 && rc == 0) rc = stg_errf(err, "%s: cannot write checkpoints here (close): %s", dir, strerror(errno));
    if (unlink(path) != 0 && rc == 0) rc = stg_errf(err, "%s: cannot remove the probe file %s: %s", dir, path, strerror(errno));
    return rc;
}

// A pid that no process has: kill(pid, 0) says ESRCH. EPERM means a process of another user has it:
// alive, so its file stays.
static bool pid_dead(long pid) { return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH; }

int rt_remove_stale_tmp(const char *dir, const char *prefix, stg_err *err) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return stg_errf(err, "%s: cannot list: %s", dir, strerror(errno));
    }
    int removed = 0, rc = 0;
    for (;;) {
        errno = 0; // readdir's NULL means the end or an error: errno tells which
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno != 0) rc = stg_errf(err, "%s: cannot list: %s", dir, strerror(errno));
            break;
        }
        const char *name = de->d_name, *t = strstr(name, ".tmp.");
        const char *last;
        for (last = t; last; last = strstr(last + 1, ".tmp.")) t = last; // the last ".tmp." holds the pid
        if (!t || t == name) continue;
        if (prefix && strncmp(name, prefix, strlen(prefix)) != 0) continue;
        char *end;
        errno = 0;
        long pid = strtol(t + 5, &end, 10);
        if (errno || end == t + 5 || *end || !pid_dead(pid)) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        struct stat st;
        // regular files (checkpoints, logs) and symlinks (the `latest` pointer's temporary): unlink
        // removes the link itself, never what it points at
        if (lstat(path, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) continue;
        if (unlink(path) != 0) {
            rc = stg_errf(err, "%s: cannot remove the stale temporary file: %s", path, strerror(errno));
            break;
        }
        removed++;
    }
    if (closedir(d) != 0 && rc == 0) rc = stg_errf(err, "%s: closedir failed: %s", dir, strerror(errno));
    return rc ? -1 : removed;
}
