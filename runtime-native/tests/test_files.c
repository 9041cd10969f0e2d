/* Path rules of docs/format.md, containment through symlinks, non-regular files refused without
 * blocking, size limits, reads and read-only mappings. Works in a fresh folder under /tmp. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "harness.h"

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void path_rules(void) {
    static const char *good[] = {"a.bin", "params_shard_0.bin", "kernels/000_k_add.wgsl", "a..b", ".hidden",
                                 "x/y/z", "name with space", "caf\xc3\xa9.bin"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (tsr_check_relative_path(good[i], "test") != 0) fprintf(stderr, "refused %s\n", good[i]);
        CHECK(tsr_check_relative_path(good[i], "test") == 0);
    }
    static const struct { const char *path, *why; } bad[] = {
        {"", "empty"},          {"/etc/passwd", "starts with '/'"}, {"../x", "'..'"},
        {"a/../b", "'..'"},     {"a/./b", "'.'"},                   {".", "'.'"},
        {"a//b", "empty part"}, {"a/", "empty part"},               {"a\\b", "backslash"},
        {"\\a", "backslash"},   {"C:x", "drive letter"},            {"c:/x", "drive letter"},
        {"a\x01" "b", "control"}, {"a\x7f", "control"},             {"a\nb", "control"},
        {"a%2e", "'%'"},        {"a?b", "'%'"},                     {"a#b", "'%'"},
        {"x/y:z", "'%'"},       {" /etc/passwd", "space"},          {"x.bin ", "space"},
        {"%2e%2e/x", "'%'"},    {"https://evil.test/x", "'%'"},     {"//host/x", "'/'"},
        {"file:///etc/passwd", "'%'"}, {"data:,x", "'%'"},          {"..\\x", "backslash"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(tsr_check_relative_path(bad[i].path, "weight shard"), TESSERA_ERROR_FORMAT);
        CHECK(has(bad[i].why));
        CHECK(has("weight shard path"));
    }
    CHECK_EQ_INT(tsr_check_relative_path(NULL, "x"), TESSERA_ERROR_FORMAT);
    char *longname = malloc(TSR_MAX_PATH_BYTES + 2);
    memset(longname, 'a', TSR_MAX_PATH_BYTES + 1);
    longname[TSR_MAX_PATH_BYTES + 1] = '\0';
    CHECK_EQ_INT(tsr_check_relative_path(longname, "x"), TESSERA_ERROR_FORMAT);
    CHECK(has("longer than 4096"));
    longname[TSR_MAX_PATH_BYTES] = '\0';
    CHECK_EQ_INT(tsr_check_relative_path(longname, "x"), 0);
    free(longname);
    /* A control character in the name is escaped in the message, not copied into it. */
    tsr_check_relative_path("a\nb", "x");
    CHECK(has("'a\\x0ab'"));
    char q[16];
    tsr_quote("abcdefghijklmnopqrstuvwxyz", q, sizeof q);
    CHECK(strlen(q) < sizeof q && strstr(q, "...") != NULL);
}

int main(void) {
    path_rules();

    char dir[] = "/tmp/tessera-files-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char outside[4200];
    snprintf(outside, sizeof outside, "%s-outside.bin", dir);
    FILE *f = fopen(outside, "wb");
    if (f) { fputs("secret", f); fclose(f); }
    write_file(dir, "weights.bin", "0123456789");
    write_file(dir, "empty.bin", "");
    char path[4300];
    snprintf(path, sizeof path, "%s/sub", dir);
    CHECK(mkdir(path, 0700) == 0);
    write_file(dir, "sub/inner.txt", "inner");
    snprintf(path, sizeof path, "%s/fifo", dir);
    CHECK(mkfifo(path, 0600) == 0);
    snprintf(path, sizeof path, "%s/escape", dir);
    CHECK(symlink(outside, path) == 0);
    snprintf(path, sizeof path, "%s/zero", dir);
    CHECK(symlink("/dev/zero", path) == 0);
    snprintf(path, sizeof path, "%s/up", dir);
    CHECK(symlink("..", path) == 0);
    snprintf(path, sizeof path, "%s/alias.bin", dir);
    CHECK(symlink("sub/inner.txt", path) == 0);

    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    char *data;
    size_t size;
    CHECK_EQ_INT(tsr_read_file(&a, dir, "weights.bin", 100, &data, &size), 0);
    CHECK_EQ_INT(size, 10);
    CHECK(data && strcmp(data, "0123456789") == 0);
    tsr_free(&a, data);
    CHECK_EQ_INT(tsr_read_file(&a, dir, "sub/inner.txt", 100, &data, &size), 0);
    tsr_free(&a, data);
    /* A symlink that stays inside the folder is fine. */
    CHECK_EQ_INT(tsr_read_file(&a, dir, "alias.bin", 100, &data, &size), 0);
    CHECK(data && strcmp(data, "inner") == 0);
    tsr_free(&a, data);
    CHECK_EQ_INT(tsr_read_file(&a, dir, "empty.bin", 100, &data, &size), 0);
    CHECK_EQ_INT(size, 0);
    tsr_free(&a, data);

    /* The size limit is checked before allocating: no allocation happens. */
    uint64_t before = a.count;
    CHECK_EQ_INT(tsr_read_file(&a, dir, "weights.bin", 9, &data, &size), TESSERA_ERROR_IO);
    CHECK(has("weights.bin has 10 bytes, more than the 9"));
    CHECK_EQ_INT(a.count, before);
    CHECK(data == NULL);

    CHECK_EQ_INT(tsr_read_file(&a, dir, "missing.bin", 100, &data, &size), TESSERA_ERROR_IO);
    CHECK(has("missing.bin") && has("No such file"));
    CHECK_EQ_INT(tsr_read_file(&a, dir, "sub", 100, &data, &size), TESSERA_ERROR_IO);
    CHECK(has("sub is a directory"));
    /* A FIFO with no writer: refused at once, never opened (an open would block). */
    CHECK_EQ_INT(tsr_read_file(&a, dir, "fifo", 100, &data, &size), TESSERA_ERROR_IO);
    CHECK(has("fifo is a FIFO"));
    CHECK_EQ_INT(tsr_read_file(&a, dir, "escape", 100, &data, &size), TESSERA_ERROR_IO);
    CHECK(has("escape leaves the folder"));
    CHECK_EQ_INT(tsr_read_file(&a, dir, "zero", 100, &data, &size), TESSERA_ERROR_IO);
    CHECK(has("zero leaves the folder") && has("/dev/zero"));
    snprintf(path, sizeof path, "up/%s", strrchr(outside, '/') + 1);
    CHECK_EQ_INT(tsr_read_file(&a, dir, path, 100, &data, &size), TESSERA_ERROR_IO);
    CHECK(has("leaves the folder"));
    CHECK_EQ_INT(tsr_read_file(&a, dir, "../x", 100, &data, &size), TESSERA_ERROR_FORMAT);
    CHECK_EQ_INT(tsr_read_file(&a, "/nonexistent-folder-xyz", "a.bin", 100, &data, &size), TESSERA_ERROR_IO);
    CHECK(has("nonexistent-folder-xyz"));

    char resolved[4300];
    CHECK_EQ_INT(tsr_resolve_inside(dir, "alias.bin", resolved, sizeof resolved), 0);
    CHECK(strstr(resolved, "/sub/inner.txt") != NULL);
    CHECK_EQ_INT(tsr_resolve_inside(dir, "alias.bin", resolved, 5), TESSERA_ERROR_IO);

    tsr_mapped m;
    CHECK_EQ_INT(tsr_map_file(dir, "weights.bin", 10, &m), 0);
    CHECK(m.size == 10 && m.data && memcmp(m.data, "0123456789", 10) == 0);
    tsr_unmap_file(&m);
    CHECK(m.data == NULL);
    CHECK_EQ_INT(tsr_map_file(dir, "weights.bin", SIZE_MAX, &m), 0);
    CHECK_EQ_INT(m.size, 10);
    tsr_unmap_file(&m);
    CHECK_EQ_INT(tsr_map_file(dir, "weights.bin", 11, &m), TESSERA_ERROR_CHECKSUM);
    CHECK(has("weights.bin has 10 bytes, expected 11 (truncated)"));
    CHECK_EQ_INT(tsr_map_file(dir, "weights.bin", 9, &m), TESSERA_ERROR_CHECKSUM);
    CHECK(has("too long"));
    CHECK_EQ_INT(tsr_map_file(dir, "empty.bin", 0, &m), 0);
    CHECK(m.data == NULL && m.size == 0);
    CHECK_EQ_INT(tsr_map_file(dir, "fifo", 0, &m), TESSERA_ERROR_IO);
    CHECK_EQ_INT(tsr_map_file(dir, "zero", 0, &m), TESSERA_ERROR_IO);

    static const char *names[] = {"weights.bin", "empty.bin", "sub/inner.txt", "fifo", "escape", "zero", "up",
                                  "alias.bin", "sub"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (strcmp(names[i], "sub") == 0) rmdir(path); else unlink(path);
    }
    rmdir(dir);
    unlink(outside);
    return tsr_test_failures();
}
