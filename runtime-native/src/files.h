/* Files of a model folder: every path is a relative name inside the folder (docs/format.md), every
 * file a regular file whose size is checked before anything is read or allocated. */
#ifndef TSR_FILES_H
#define TSR_FILES_H

#include "common.h"
#include "executable.h"
#include "facts.h"

/* The longest path the format allows, in bytes (the other runtimes count characters: an ASCII path is
 * refused alike). */
#define TSR_MAX_PATH_BYTES TSR_MAX_PATH_CHARS

/* 0 if `name` is a path the format allows, else TESSERA_ERROR_FORMAT naming `what`, the path and
 * why. Refused: NULL or "", more than TSR_MAX_PATH_BYTES bytes, a leading '/', a space at either
 * end (URL parsing strips it), an empty, "." or
 * ".." part, a backslash, a drive letter ("C:"), a control character, and the characters the
 * browser's URL parsing would decode or drop: '%', '?', '#', ':'. */
int tsr_check_relative_path(const char *name, const char *what);

/* `s` for an error message: quoted, at most about buf_size bytes, control and non-ASCII bytes as
 * \xNN, so that a hostile name in a file cannot forge the rest of the message. */
void tsr_quote(const char *s, char *buf, size_t buf_size);

/* dir/name as an absolute path inside dir, into buf: the path rules above, then realpath() of
 * both, and the file's must lie under the folder's (a symlink that leaves the folder is refused,
 * named). TESSERA_ERROR_IO when the file does not exist. */
int tsr_resolve_inside(const char *dir, const char *name, char *buf, size_t buf_size);

/* Reads dir/name whole into a NUL-terminated buffer from `a` (*size excludes the NUL). Refuses
 * what tsr_resolve_inside refuses, anything but a regular file (a FIFO, a device, a directory:
 * never opened in a way that could block), and a file larger than max_bytes (checked before
 * allocating). Errors name dir/name and the reason. */
int tsr_read_file(tsr_alloc *a, const char *dir, const char *name, size_t max_bytes, char **data, size_t *size);

/* A kernel module's file, read whole (as tsr_read_file) and checked against executable.json's `nbytes`
 * and `sha256`: TESSERA_ERROR_CHECKSUM for a truncated or changed file (*data NULL then). Every device
 * reads its modules through it. */
int tsr_read_module(tsr_alloc *a, const char *dir, const tsr_module *m, char **data, size_t *size);

/* A read-only private mapping of dir/name (same checks as tsr_read_file). expected_size, unless
 * SIZE_MAX, must equal the file's size: TESSERA_ERROR_CHECKSUM otherwise (a truncated shard). An
 * empty file gives data NULL, size 0. The mapping is the kernel's memory, not the allocator's. */
typedef struct tsr_mapped {
    void *data;
    size_t size;
} tsr_mapped;
int tsr_map_file(const char *dir, const char *name, size_t expected_size, tsr_mapped *out);
void tsr_unmap_file(tsr_mapped *m);

#endif
