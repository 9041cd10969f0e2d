/* Files of a model folder: every path is a relative name inside the folder (docs/format.md), every
 * file a regular file whose size is checked before anything is read or allocated. */
#ifndef TSR_FILES_H
#define TSR_FILES_H

#include "common.h"

/* 0 if `name` is a path the format allows (relative, no "..", ".", empty part, backslash, drive
 * letter, control character; at most 4096 bytes), else TESSERA_ERROR_FORMAT naming `what` and why. */
int tsr_check_relative_path(const char *name, const char *what);

/* Reads dir/name whole into a NUL-terminated buffer from `a`. Refuses a path the format forbids,
 * a path that leaves the folder through a symlink, anything but a regular file, and a file larger
 * than max_bytes (all named in the error). */
int tsr_read_file(tsr_alloc *a, const char *dir, const char *name, size_t max_bytes, char **data, size_t *size);

/* A read-only mapping of dir/name (same checks as tsr_read_file); expected_size, unless
 * SIZE_MAX, must equal the file's size (TESSERA_ERROR_CHECKSUM otherwise: a truncated shard). */
typedef struct tsr_mapped {
    void *data;
    size_t size;
} tsr_mapped;
int tsr_map_file(const char *dir, const char *name, size_t expected_size, tsr_mapped *out);
void tsr_unmap_file(tsr_mapped *m);

/* dir/name as an absolute path inside dir (checked as above), into buf. */
int tsr_resolve_inside(const char *dir, const char *name, char *buf, size_t buf_size);

#endif
