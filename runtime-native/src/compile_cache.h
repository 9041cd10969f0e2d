/* The GPU devices' on-disk caches of compiled code (Vulkan pipeline caches, OpenCL program binaries):
 * which folder, and the file IO every device shares. The format of a cache file and its checks stay
 * with the device that writes it; this module only moves bytes, safely.
 *
 * A model folder is untrusted input (a download), and the default cache folder lies inside it, so
 * nothing here follows a symlink it did not make: the default folder must be a real directory (lstat),
 * cache files are opened with O_NOFOLLOW (and O_NONBLOCK, so that a FIFO cannot hang a load), and
 * temporary files are created with O_CREAT | O_EXCL. A cache only saves time: every failure here means
 * "compile again", never an error of the load. */
#ifndef TSR_COMPILE_CACHE_H
#define TSR_COMPILE_CACHE_H

#include "common.h"
#include "device.h"

/* The longest folder a cache may use, in bytes: a device's file name (under 100 bytes) and a temporary
 * suffix still fit in a TSR_COMPILE_CACHE_PATH buffer. */
#define TSR_COMPILE_CACHE_MAX_FOLDER 3840
#define TSR_COMPILE_CACHE_PATH 4096

/* The cache folder for a device opened with `options` (allocated from a), or NULL for no disk cache.
 * options->cache_dir, when set, is the app's choice: made with its parents (mkdir -p), and NULL when it
 * is not a folder afterwards. Otherwise <options->model_dir>/.tessera-cache, made if need be; NULL
 * without a model_dir or when it cannot be made (a read-only model), silently; and NULL with one warning
 * line on stderr when it exists but is a symlink or not a folder (the model's files may not send the
 * cache elsewhere). */
char *tsr_compile_cache_folder(tsr_alloc *a, const tsr_device_options *options);

/* Reads cache file `path` whole. 0 with *data NULL and *size 0: no such file (nothing cached yet). 0
 * with *data (from a, NUL-terminated beyond *size, freed by the caller) and *size: its bytes. Non-zero
 * (not a tsr_error: the caller warns and compiles again) with the reason in `why`: a symlink, not a
 * regular file, more than max_bytes (checked before allocating), unreadable, out of memory. */
int tsr_compile_cache_read(tsr_alloc *a, const char *path, size_t max_bytes, void **data, size_t *size, char *why,
                           size_t why_size);

/* Writes the n_parts byte ranges, one after the other, to `path` atomically: a new temporary file beside
 * it ("<path>.<pid>.<n>.tmp", the first n that does not exist, created O_EXCL | O_NOFOLLOW, mode 0644
 * less the umask), then rename(). A reader never sees half a file, two writers never share a temporary
 * file, and a symlink planted at a temporary name is never followed (rename replaces a symlink at `path`
 * itself, not its target). False, with the temporary file removed, on any failure. */
bool tsr_compile_cache_write(const char *path, const void *const parts[], const size_t sizes[], int n_parts);

#endif
