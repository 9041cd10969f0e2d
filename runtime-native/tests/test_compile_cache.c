/* The GPU devices' compile-cache files (compile_cache.h): which folder (the app's, made with its
 * parents; the model's own, never through a symlink the model planted), bounded reads that refuse
 * symlinks, FIFOs and oversized files without blocking, and atomic writes that follow no link.
 * Works in a fresh folder under /tmp. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compile_cache.h"
#include "harness.h"

static char root[] = "/tmp/tessera-compile-cache-XXXXXX";

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* The file's text ("" when it cannot be read), for comparisons. */
static const char *text_of(const char *path, char *buf, size_t size) {
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return buf;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static bool is_link(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

static bool is_folder(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int entries_in(const char *folder) {
    DIR *d = opendir(folder);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* tsr_compile_cache_folder with stderr captured into `err`. */
static char *folder_of(tsr_alloc *a, const char *cache_dir, const char *model_dir, char *err, size_t err_size) {
    char path[4200];
    snprintf(path, sizeof path, "%s/stderr.txt", root);
    fflush(stderr);
    int saved = dup(2);
    FILE *to = freopen(path, "w", stderr);
    CHECK(to != NULL);
    tsr_device_options options = {.n_threads = 1, .index = -1, .cache_dir = cache_dir, .model_dir = model_dir};
    char *folder = tsr_compile_cache_folder(a, &options);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    clearerr(stderr);
    text_of(path, err, err_size);
    unlink(path);
    return folder;
}

static void folder_choice(tsr_alloc *a) {
    char given[256], model[256], expected[512], outside[256], err[1024];
    /* The app's folder, made with its parents. */
    snprintf(given, sizeof given, "%s/app/cache/deep", root);
    char *folder = folder_of(a, given, NULL, err, sizeof err);
    CHECK(folder && strcmp(folder, given) == 0 && is_folder(given) && err[0] == '\0');
    tsr_free(a, folder);
    /* ... and a link the app gave is its own choice: followed. */
    snprintf(expected, sizeof expected, "%s/app/link", root);
    CHECK(symlink(given, expected) == 0);
    folder = folder_of(a, expected, NULL, err, sizeof err);
    CHECK(folder && strcmp(folder, expected) == 0 && err[0] == '\0');
    tsr_free(a, folder);

    /* The default: <model>/.tessera-cache, made. */
    snprintf(model, sizeof model, "%s/model", root);
    CHECK(mkdir(model, 0755) == 0);
    snprintf(expected, sizeof expected, "%s/.tessera-cache", model);
    folder = folder_of(a, NULL, model, err, sizeof err);
    CHECK(folder && strcmp(folder, expected) == 0 && is_folder(expected) && err[0] == '\0');
    tsr_free(a, folder);
    folder = folder_of(a, "", model, err, sizeof err); /* an empty cache_dir is none */
    CHECK(folder && strcmp(folder, expected) == 0);
    tsr_free(a, folder);

    /* A model whose .tessera-cache is a symlink (to anywhere): no disk cache, one warning, nothing made there. */
    snprintf(outside, sizeof outside, "%s/outside", root);
    CHECK(mkdir(outside, 0755) == 0);
    snprintf(model, sizeof model, "%s/hostile", root);
    CHECK(mkdir(model, 0755) == 0);
    snprintf(expected, sizeof expected, "%s/.tessera-cache", model);
    CHECK(symlink(outside, expected) == 0);
    CHECK(folder_of(a, NULL, model, err, sizeof err) == NULL);
    char line[1024];
    snprintf(line, sizeof line, "tessera: warning: %s is not a folder Tessera made (a symlink?): compiling without a "
             "disk cache\n", expected);
    CHECK(strcmp(err, line) == 0);
    CHECK_EQ_INT(entries_in(outside), 0);
    /* A dangling link is refused alike (mkdir would otherwise make its target). */
    CHECK(unlink(expected) == 0);
    snprintf(outside, sizeof outside, "%s/not-yet", root);
    CHECK(symlink(outside, expected) == 0);
    CHECK(folder_of(a, NULL, model, err, sizeof err) == NULL);
    CHECK(strcmp(err, line) == 0);
    CHECK(!is_folder(outside));
    /* ... and a regular file there. */
    CHECK(unlink(expected) == 0);
    write_text(expected, "not a folder");
    CHECK(folder_of(a, NULL, model, err, sizeof err) == NULL);
    CHECK(strcmp(err, line) == 0);

    /* Folders that cannot be made: no disk cache, silently. */
    snprintf(model, sizeof model, "%s/no/such/model", root);
    CHECK(folder_of(a, NULL, model, err, sizeof err) == NULL && err[0] == '\0');
    snprintf(model, sizeof model, "%s/model/.tessera-cache/file", root); /* a model "folder" that is a file */
    write_text(model, "x");
    CHECK(folder_of(a, NULL, model, err, sizeof err) == NULL && err[0] == '\0');
    CHECK(folder_of(a, model, NULL, err, sizeof err) == NULL && err[0] == '\0');
    CHECK(folder_of(a, "/proc/no/such/folder", NULL, err, sizeof err) == NULL && err[0] == '\0');
    CHECK(folder_of(a, NULL, NULL, err, sizeof err) == NULL && err[0] == '\0');
    /* A folder too long for a cache file's name after it. */
    char *longer = malloc(TSR_COMPILE_CACHE_MAX_FOLDER + 2);
    memset(longer, 'a', TSR_COMPILE_CACHE_MAX_FOLDER + 1);
    longer[0] = '/';
    longer[TSR_COMPILE_CACHE_MAX_FOLDER + 1] = '\0';
    CHECK(folder_of(a, longer, NULL, err, sizeof err) == NULL);
    free(longer);
}

static void reads(tsr_alloc *a) {
    char folder[256], path[512], outside[256], why[160];
    snprintf(folder, sizeof folder, "%s/reads", root);
    CHECK(mkdir(folder, 0755) == 0);
    void *data = (void *)1;
    size_t size = 99;
    /* Missing: nothing cached yet, no reason. */
    snprintf(path, sizeof path, "%s/missing.bin", folder);
    CHECK_EQ_INT(tsr_compile_cache_read(a, path, 100, &data, &size, why, sizeof why), 0);
    CHECK(data == NULL && size == 0 && why[0] == '\0');
    /* A regular file: its bytes, NUL-terminated beyond them. */
    snprintf(path, sizeof path, "%s/good.bin", folder);
    write_text(path, "0123456789");
    CHECK_EQ_INT(tsr_compile_cache_read(a, path, 10, &data, &size, why, sizeof why), 0);
    CHECK(data && size == 10 && memcmp(data, "0123456789", 11) == 0);
    tsr_free(a, data);
    /* An empty one reads as 0 bytes (the caller's format check refuses it). */
    snprintf(path, sizeof path, "%s/empty.bin", folder);
    write_text(path, "");
    CHECK_EQ_INT(tsr_compile_cache_read(a, path, 10, &data, &size, why, sizeof why), 0);
    CHECK(data && size == 0);
    tsr_free(a, data);
    /* Larger than allowed: refused before anything is allocated. */
    snprintf(path, sizeof path, "%s/good.bin", folder);
    CHECK(tsr_compile_cache_read(a, path, 9, &data, &size, why, sizeof why) != 0);
    CHECK(data == NULL && strstr(why, "10 bytes, more than the 9") != NULL);
    /* A symlink, even to a good file: not followed. */
    snprintf(outside, sizeof outside, "%s/secret.txt", root);
    write_text(outside, "secret");
    snprintf(path, sizeof path, "%s/link.bin", folder);
    CHECK(symlink(outside, path) == 0);
    CHECK(tsr_compile_cache_read(a, path, 100, &data, &size, why, sizeof why) != 0);
    CHECK(data == NULL && strstr(why, "symlink") != NULL);
    /* A FIFO (no writer: a blocking open would hang the load; alarm() fails the test instead). */
    snprintf(path, sizeof path, "%s/fifo.bin", folder);
    CHECK(mkfifo(path, 0600) == 0);
    alarm(20);
    CHECK(tsr_compile_cache_read(a, path, 100, &data, &size, why, sizeof why) != 0);
    alarm(0);
    CHECK(data == NULL && strstr(why, "not a regular file") != NULL);
    /* A folder. */
    snprintf(path, sizeof path, "%s/dir.bin", folder);
    CHECK(mkdir(path, 0755) == 0);
    CHECK(tsr_compile_cache_read(a, path, 100, &data, &size, why, sizeof why) != 0);
    CHECK(data == NULL && strstr(why, "not a regular file") != NULL);
}

static void writes(void) {
    char folder[256], path[512], temporary[700], victim[256], text[64];
    snprintf(folder, sizeof folder, "%s/writes", root);
    CHECK(mkdir(folder, 0755) == 0);
    snprintf(path, sizeof path, "%s/cache.bin", folder);
    const void *parts[] = {"head", "body"};
    const size_t sizes[] = {4, 4};
    /* Written whole, nothing left beside it; then replaced. */
    CHECK(tsr_compile_cache_write(path, parts, sizes, 2));
    CHECK(strcmp(text_of(path, text, sizeof text), "headbody") == 0);
    CHECK_EQ_INT(entries_in(folder), 1);
    CHECK(tsr_compile_cache_write(path, parts, sizes, 1));
    CHECK(strcmp(text_of(path, text, sizeof text), "head") == 0);
    CHECK_EQ_INT(entries_in(folder), 1);
    mode_t mask = umask(0);
    umask(mask);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == (0644 & ~mask));

    /* A symlink planted at the first temporary name: not followed (its target untouched, the link left
     * as it was), the next name used. */
    snprintf(victim, sizeof victim, "%s/victim.txt", root);
    write_text(victim, "precious");
    snprintf(temporary, sizeof temporary, "%s.%ld.0.tmp", path, (long)getpid());
    CHECK(symlink(victim, temporary) == 0);
    CHECK(tsr_compile_cache_write(path, parts, sizes, 2));
    CHECK(strcmp(text_of(path, text, sizeof text), "headbody") == 0);
    CHECK(strcmp(text_of(victim, text, sizeof text), "precious") == 0);
    CHECK(is_link(temporary));
    CHECK_EQ_INT(entries_in(folder), 2); /* the file and the planted link */
    /* Every temporary name taken: no cache written, the targets untouched. */
    for (int n = 1; n < 64; n++) {
        snprintf(temporary, sizeof temporary, "%s.%ld.%d.tmp", path, (long)getpid(), n);
        CHECK(symlink(victim, temporary) == 0 || errno == EEXIST);
    }
    CHECK(!tsr_compile_cache_write(path, (const void *const[]){"new"}, (const size_t[]){3}, 1));
    CHECK(strcmp(text_of(path, text, sizeof text), "headbody") == 0);
    CHECK(strcmp(text_of(victim, text, sizeof text), "precious") == 0);
    for (int n = 0; n < 64; n++) {
        snprintf(temporary, sizeof temporary, "%s.%ld.%d.tmp", path, (long)getpid(), n);
        CHECK(unlink(temporary) == 0);
    }

    /* A symlink at the final name: rename replaces the link itself, never its target. */
    CHECK(unlink(path) == 0);
    CHECK(symlink(victim, path) == 0);
    CHECK(tsr_compile_cache_write(path, parts, sizes, 2));
    CHECK(!is_link(path) && strcmp(text_of(path, text, sizeof text), "headbody") == 0);
    CHECK(strcmp(text_of(victim, text, sizeof text), "precious") == 0);
    CHECK_EQ_INT(entries_in(folder), 1);

    /* Failures leave nothing behind: a folder at the final name, a missing folder. */
    snprintf(path, sizeof path, "%s/taken", folder);
    CHECK(mkdir(path, 0755) == 0);
    write_text(strcat(strcpy(temporary, path), "/inside"), "x");
    CHECK(!tsr_compile_cache_write(path, parts, sizes, 2));
    CHECK_EQ_INT(entries_in(folder), 2);
    snprintf(path, sizeof path, "%s/no/such/cache.bin", folder);
    CHECK(!tsr_compile_cache_write(path, parts, sizes, 2));
}

int main(void) {
    CHECK(mkdtemp(root) != NULL);
    tsr_test_counts counts = {0};
    tessera_allocator user = tsr_test_counting_allocator(&counts);
    tsr_alloc a;
    tsr_alloc_init(&a, &user);
    folder_choice(&a);
    reads(&a);
    writes();
    CHECK_EQ_INT(counts.live, 0);
    char command[256];
    snprintf(command, sizeof command, "rm -rf '%s'", root);
    CHECK(system(command) == 0);
    return tsr_test_failures();
}
