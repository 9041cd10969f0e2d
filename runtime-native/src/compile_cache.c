/* The GPU devices' compile caches on disk (compile_cache.h): the folder, bounded reads and atomic
 * writes, none of which follows a symlink that a downloaded model folder could have planted. */
#include "compile_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_FOLDER ".tessera-cache"
/* Temporary names tried before giving up: each is taken only by a live writer of this process or by
 * one that crashed (or by a planted file), so a few suffice. */
#define MAX_TEMPORARIES 16

/* mkdir -p, quietly: whether `path` is a folder afterwards (the app's own folder, so links are followed). */
static bool make_folders(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        (void)mkdir(path, 0755);
        *p = '/';
    }
    struct stat st;
    return (mkdir(path, 0755) == 0 || errno == EEXIST) && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* <model_dir>/.tessera-cache, made if need be; false when it cannot be made or is not a real folder. */
static bool default_folder(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        /* Made here, so no one else's link; EEXIST: another load made it (or planted something) meanwhile. */
        if (errno != ENOENT || (mkdir(path, 0755) != 0 && errno != EEXIST) || lstat(path, &st) != 0) return false;
    }
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tessera: warning: %s is not a folder Tessera made (a symlink?): compiling without a disk "
                "cache\n", path);
        return false;
    }
    return true;
}

char *tsr_compile_cache_folder(tsr_alloc *a, const tsr_device_options *options) {
    char path[TSR_COMPILE_CACHE_MAX_FOLDER + 1];
    bool given = options->cache_dir && options->cache_dir[0];
    int w;
    if (given)
        w = snprintf(path, sizeof path, "%s", options->cache_dir);
    else if (options->model_dir && options->model_dir[0])
        w = snprintf(path, sizeof path, "%s/" DEFAULT_FOLDER, options->model_dir);
    else
        return NULL;
    if (w < 0 || (size_t)w >= sizeof path) return NULL; /* a cache file's name would not fit after it */
    if (!(given ? make_folders(path) : default_folder(path))) return NULL;
    return tsr_strdup(a, path);
}

static int refuse(char *why, size_t why_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char *why, size_t why_size, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    if (why_size) vsnprintf(why, why_size, fmt, args);
    va_end(args);
    return 1;
}

int tsr_compile_cache_read(tsr_alloc *a, const char *path, size_t max_bytes, void **data, size_t *size, char *why,
                           size_t why_size) {
    *data = NULL;
    *size = 0;
    if (why_size) why[0] = '\0';
    /* O_NONBLOCK: opening a FIFO planted in the folder returns at once (and fstat refuses it below). */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        if (errno == ELOOP) return refuse(why, why_size, "a symlink, not followed");
        return refuse(why, why_size, "unreadable: %s", strerror(errno));
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = refuse(why, why_size, "unreadable: %s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = refuse(why, why_size, "not a regular file");
    else if (st.st_size < 0 || (uint64_t)st.st_size > max_bytes || (uint64_t)st.st_size >= SIZE_MAX)
        rc = refuse(why, why_size, "%lld bytes, more than the %zu a cache file may have", (long long)st.st_size,
                    max_bytes);
    size_t length = rc ? 0 : (size_t)st.st_size;
    char *bytes = rc ? NULL : tsr_malloc(a, length + 1);
    if (!rc && !bytes) rc = refuse(why, why_size, "out of memory for its %zu bytes", length);
    for (size_t done = 0; !rc && done < length;) {
        ssize_t n = read(fd, bytes + done, length - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) rc = refuse(why, why_size, "unreadable: %s", strerror(errno));
        else if (n == 0) rc = refuse(why, why_size, "shorter than its size (changed while read)");
        else done += (size_t)n;
    }
    close(fd);
    if (rc) {
        tsr_free(a, bytes);
        return rc;
    }
    bytes[length] = '\0';
    *data = bytes;
    *size = length;
    return 0;
}

static bool write_all(int fd, const unsigned char *p, size_t size) {
    while (size) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        p += n;
        size -= (size_t)n;
    }
    return true;
}

bool tsr_compile_cache_write(const char *path, const void *const parts[], const size_t sizes[], int n_parts) {
    char temporary[TSR_COMPILE_CACHE_PATH + 64];
    int fd = -1;
    for (int n = 0; n < MAX_TEMPORARIES && fd < 0; n++) {
        int w = snprintf(temporary, sizeof temporary, "%s.%ld.%d.tmp", path, (long)getpid(), n);
        if (w < 0 || (size_t)w >= sizeof temporary) return false;
        /* O_EXCL: a new file of ours, never one (or a link's target) that was there before. */
        fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) return false;
    }
    if (fd < 0) return false;
    bool ok = true;
    for (int i = 0; i < n_parts && ok; i++) ok = write_all(fd, parts[i], sizes[i]);
    ok = close(fd) == 0 && ok;
    ok = ok && rename(temporary, path) == 0;
    if (!ok) unlink(temporary);
    return ok;
}
