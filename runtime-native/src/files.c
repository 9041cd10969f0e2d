/* Path rules and checked file access for a model folder (docs/format.md). A folder may come from
 * anywhere (a download, a bundle), so every name in its JSON is treated as hostile: it is checked
 * by the format's rules before anything is opened, resolved with realpath() and required to stay
 * inside the folder, and only regular files of an expected size are read or mapped. */
/* realpath() is an XSI extension: glibc declares it only with _XOPEN_SOURCE (or the default
 * feature set), which the build's _POSIX_C_SOURCE alone does not give. Set for this file only. */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif
#include "files.h"
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

void tsr_quote(const char *s, char *buf, size_t buf_size) {
    if (buf_size == 0) return;
    if (!s) {
        snprintf(buf, buf_size, "(null)");
        return;
    }
    size_t at = 0;
    /* Room for the closing quote, "..." and the NUL is kept back while copying. */
    const size_t reserve = 5;
    if (buf_size < reserve + 2) {
        buf[0] = '\0';
        return;
    }
    buf[at++] = '\'';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        size_t need = (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') ? 4 : 1;
        if (at + need + reserve > buf_size) {
            memcpy(buf + at, "...", 3);
            at += 3;
            break;
        }
        if (need == 4)
            at += (size_t)snprintf(buf + at, 5, "\\x%02x", c);
        else
            buf[at++] = (char)c;
    }
    buf[at++] = '\'';
    buf[at] = '\0';
}

static int bad_path(const char *name, const char *what, const char *why) {
    char q[320];
    tsr_quote(name, q, sizeof q);
    return tsr_error(TESSERA_ERROR_FORMAT, "the %s path %s is not a relative path inside the folder: %s",
                     what ? what : "file", q, why);
}

int tsr_check_relative_path(const char *name, const char *what) {
    if (!name || !*name) return bad_path(name, what, "it is empty");
    size_t len = strnlen(name, TSR_MAX_PATH_BYTES + 1);
    if (len > TSR_MAX_PATH_BYTES) return bad_path(name, what, "it is longer than " TSR_FACT_TEXT(TSR_MAX_PATH_BYTES) " bytes");
    if (name[0] == '/') return bad_path(name, what, "it starts with '/'");
    /* A browser's URL parsing strips spaces at either end: " /etc/passwd" would become absolute. */
    if (name[0] == ' ' || name[len - 1] == ' ') return bad_path(name, what, "it starts or ends with a space");
    /* "C:" (a Windows drive) gets its own reason; any other ':' is refused below with the browser rule. */
    if (((name[0] >= 'A' && name[0] <= 'Z') || (name[0] >= 'a' && name[0] <= 'z')) && name[1] == ':')
        return bad_path(name, what, "it starts with a drive letter");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == '\\') return bad_path(name, what, "it contains a backslash");
        if (c < 0x20 || c == 0x7f) return bad_path(name, what, "it contains a control character");
        /* A browser fetches these names as URLs: '%' would be decoded, '?' and '#' cut the path,
         * ':' makes a scheme. A folder must load the same everywhere, so native refuses them too. */
        if (c == '%' || c == '?' || c == '#' || c == ':')
            return bad_path(name, what, "it contains '%', '?', '#' or ':'");
    }
    const char *part = name;
    for (;;) {
        const char *end = strchr(part, '/');
        size_t n = end ? (size_t)(end - part) : strlen(part);
        if (n == 0) return bad_path(name, what, "it has an empty part");
        if ((n == 1 && part[0] == '.') || (n == 2 && part[0] == '.' && part[1] == '.'))
            return bad_path(name, what, "it has a '.' or '..' part");
        if (!end) break;
        part = end + 1;
    }
    return TESSERA_OK;
}

int tsr_resolve_inside(const char *dir, const char *name, char *buf, size_t buf_size) {
    if (!dir || !buf) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "resolve: NULL folder or buffer");
    int status = tsr_check_relative_path(name, "file");
    if (status) return status;
    char joined[PATH_MAX], real_dir[PATH_MAX], real_file[PATH_MAX];
    int n = snprintf(joined, sizeof joined, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof joined)
        return tsr_error(TESSERA_ERROR_IO, "%s/%s: the path is too long", dir, name);
    if (!realpath(dir, real_dir)) return tsr_error(TESSERA_ERROR_IO, "cannot open folder %s: %s", dir, strerror(errno));
    if (!realpath(joined, real_file)) return tsr_error(TESSERA_ERROR_IO, "cannot open %s: %s", joined, strerror(errno));
    /* Containment on the resolved paths: a symlink anywhere along the name may point elsewhere. */
    size_t dn = strlen(real_dir);
    int inside = strncmp(real_file, real_dir, dn) == 0 &&
                 (real_file[dn] == '/' || (dn == 1 && real_dir[0] == '/' && real_file[1] != '\0'));
    if (!inside) return tsr_error(TESSERA_ERROR_IO, "%s leaves the folder (it resolves to %s)", joined, real_file);
    size_t fn = strlen(real_file);
    if (fn >= buf_size) return tsr_error(TESSERA_ERROR_IO, "%s: the resolved path is too long", joined);
    memcpy(buf, real_file, fn + 1);
    return TESSERA_OK;
}

static const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

/* Opens dir/name read-only as a regular file and gives its size. stat() first, so that a FIFO or a
 * device is refused without being opened at all; O_NONBLOCK in case it was swapped in between
 * (open of a FIFO would otherwise wait for a writer), and fstat() again on what was opened. */
static int open_regular(const char *dir, const char *name, int *fd_out, size_t *size_out) {
    char path[PATH_MAX];
    int status = tsr_resolve_inside(dir, name, path, sizeof path);
    if (status) return status;
    struct stat st;
    if (stat(path, &st) != 0) return tsr_error(TESSERA_ERROR_IO, "cannot open %s/%s: %s", dir, name, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return tsr_error(TESSERA_ERROR_IO, "%s/%s is %s, not a regular file", dir, name, file_kind(st.st_mode));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return tsr_error(TESSERA_ERROR_IO, "cannot open %s/%s: %s", dir, name, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tsr_error(TESSERA_ERROR_IO, "%s/%s is not a regular file", dir, name);
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return tsr_error(TESSERA_ERROR_IO, "%s/%s is too large for this machine", dir, name);
    }
    *fd_out = fd;
    *size_out = (size_t)st.st_size;
    return TESSERA_OK;
}

int tsr_read_file(tsr_alloc *a, const char *dir, const char *name, size_t max_bytes, char **data, size_t *size) {
    *data = NULL;
    *size = 0;
    int fd;
    size_t n;
    int status = open_regular(dir, name, &fd, &n);
    if (status) return status;
    if (n > max_bytes || n == SIZE_MAX) {
        close(fd);
        return tsr_error(TESSERA_ERROR_IO, "%s/%s has %zu bytes, more than the %zu this file may have", dir, name, n,
                         max_bytes);
    }
    char *buf = tsr_malloc(a, n + 1);
    if (!buf) {
        close(fd);
        return tsr_error_context(TESSERA_ERROR_OUT_OF_MEMORY, "reading %s/%s", dir, name);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            status = r < 0 ? tsr_error(TESSERA_ERROR_IO, "cannot read %s/%s: %s", dir, name, strerror(errno))
                           : tsr_error(TESSERA_ERROR_IO, "%s/%s became shorter while it was read", dir, name);
            close(fd);
            tsr_free(a, buf);
            return status;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return TESSERA_OK;
}

int tsr_map_file(const char *dir, const char *name, size_t expected_size, tsr_mapped *out) {
    out->data = NULL;
    out->size = 0;
    int fd;
    size_t n;
    int status = open_regular(dir, name, &fd, &n);
    if (status) return status;
    /* Checked before mapping: touching a mapping past the end of a file raises SIGBUS. */
    if (expected_size != SIZE_MAX && n != expected_size) {
        close(fd);
        return tsr_error(TESSERA_ERROR_CHECKSUM, "%s/%s has %zu bytes, expected %zu (%s)", dir, name, n, expected_size,
                         n < expected_size ? "truncated" : "too long");
    }
    if (n == 0) { /* mmap of length 0 is an error; an empty file is simply no bytes */
        close(fd);
        return TESSERA_OK;
    }
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    int saved = errno;
    close(fd); /* the mapping keeps the file */
    if (p == MAP_FAILED) return tsr_error(TESSERA_ERROR_IO, "cannot map %s/%s: %s", dir, name, strerror(saved));
    out->data = p;
    out->size = n;
    return TESSERA_OK;
}

void tsr_unmap_file(tsr_mapped *m) {
    if (m && m->data) munmap(m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}

int tsr_read_module(tsr_alloc *a, const char *dir, const tsr_module *m, char **data, size_t *size) {
    int rc = tsr_read_file(a, dir, m->path, (size_t)m->nbytes, data, size);
    if (rc) return rc;
    char hex[65];
    if (*size != m->nbytes)
        rc = tsr_error(TESSERA_ERROR_CHECKSUM, "module %s has %zu bytes; executable.json says %llu (truncated?)",
                       m->path, *size, (unsigned long long)m->nbytes);
    else if (tsr_sha256_hex(*data, *size, hex), strcmp(hex, m->sha256) != 0)
        rc = tsr_error(TESSERA_ERROR_CHECKSUM, "module %s does not match its SHA-256 in executable.json (corrupted "
                       "or replaced)", m->path);
    if (rc) {
        tsr_free(a, *data);
        *data = NULL;
    }
    return rc;
}
