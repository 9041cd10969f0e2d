/* The checks of plan_checks.h on a small hand-written executable: tensors of different storages may share
 * bytes only while at most one of them is live (followed through move, tuple and get; everything counts as
 * live throughout in code that jumps back), no dimension is negative, and a device refuses offsets it does
 * not align and grids past its workgroups. Every refusal names the field and frees all it allocated. */
#include <stdio.h>
#include <string.h>

#include "executable.h"
#include "harness.h"
#include "plan_checks.h"

static tsr_test_counts counts;
static tsr_alloc a;

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

/* x -> a -> b -> c, one kernel each: a (storage 0, 256 bytes) is read by the launch that writes b (storage
 * 1), b by the one that writes c (storage 2, at a's offset: a is dead by then), c is returned. `EXTRA`
 * marks where cases put instructions after c's launch; registers 4 to 7 are free for them. */
static const char *TEMPLATE =
    "{\"format\": \"tessera-executable\", \"version\": 3, \"target\": {\"kind\": \"cpu\", \"name\": \"t\"},\n"
    " \"constants\": [], \"libraries\": [], \"required_features\": [], \"required_limits\": {},\n"
    " \"modules\": [{\"path\": \"kernels.so\", \"backend\": \"c-native\", \"nbytes\": 10,\n"
    "              \"sha256\": \"0000000000000000000000000000000000000000000000000000000000000000\"}],\n"
    " \"kernels\": [{\"name\": \"step\", \"backend\": \"c-native\", \"module\": \"kernels.so\", \"entry_point\": \"k\",\n"
    "              \"workgroup_size\": [16, 1, 1], \"abi\": {\"bindings\": [{\"index\": 0}, {\"index\": 1}],\n"
    "              \"scalars\": [{\"name\": \"len\", \"passed\": \"argument\", \"position\": 2}]},\n"
    "              \"grid\": [GRID, \"1\", \"1\"]}],\n"
    " \"functions\": {\"main\": {\n"
    "  \"params\": [{\"name\": \"x\", \"register\": 0, \"state\": false,\n"
    "              \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [PARAM]}}],\n"
    "  \"symbols\": {\"n\": {\"upper_bound\": 64}}, \"unbounded_symbols\": [], \"registers\": 8,\n"
    "  \"tensors\": {\"0\": {\"shape\": [\"n\"], \"dtype\": \"float32\", \"bytes\": \"n * 4\"},\n"
    "              \"1\": {\"shape\": [TENSOR], \"dtype\": \"float32\", \"bytes\": \"n * 4\"},\n"
    "              \"2\": {\"shape\": [\"n\"], \"dtype\": \"float32\", \"bytes\": \"n * 4\"},\n"
    "              \"3\": {\"shape\": [\"n\"], \"dtype\": \"float32\", \"bytes\": \"n * 4\"}},\n"
    "  \"locations\": {\"0\": {\"kind\": \"param\", \"index\": 0}, \"1\": {\"kind\": \"arena\", \"token\": 0},\n"
    "                \"2\": {\"kind\": \"arena\", \"token\": 1}, \"3\": {\"kind\": \"arena\", \"token\": 2}},\n"
    "  \"memory\": {\"static\": true, \"buffers\": [1024], \"storages\": [\n"
    "    {\"index\": 0, \"buffer\": 0, \"offset\": 0, \"static_size\": 256, \"size\": \"n * 4\"},\n"
    "    {\"index\": 1, \"buffer\": 0, \"offset\": B_OFFSET, \"static_size\": 256, \"size\": \"n * 4\"},\n"
    "    {\"index\": 2, \"buffer\": 0, \"offset\": C_OFFSET, \"static_size\": 256, \"size\": \"n * 4\"}]},\n"
    "  \"code\": [{\"op\": \"match\", \"reg\": 0, \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1,\n"
    "             \"shape\": [\"n\"]}},\n"
    "            {\"op\": \"launch\", \"kernel\": 0, \"args\": [0], \"outs\": [1], \"scalars\": [\"n\"]},\n"
    "            {\"op\": \"launch\", \"kernel\": 0, \"args\": [1], \"outs\": [2], \"scalars\": [\"n\"]},\n"
    "            {\"op\": \"launch\", \"kernel\": 0, \"args\": [2], \"outs\": [3], \"scalars\": [\"n\"]},\n"
    "            EXTRA{\"op\": \"ret\", \"src\": 3}LOOP]}}}\n";

typedef struct change {
    const char *grid, *param, *tensor, *b_offset, *c_offset, *extra, *loop;
} change;

/* TEMPLATE with its markers replaced by `c`'s texts, or their defaults (a valid executable). */
static const char *executable(change c) {
    static char out[8192];
    const char *markers[] = {"GRID", "PARAM", "TENSOR", "B_OFFSET", "C_OFFSET", "EXTRA", "LOOP"};
    const char *texts[] = {c.grid ? c.grid : "\"(len + 15) // 16\"", c.param ? c.param : "\"n\"",
                           c.tensor ? c.tensor : "\"n\"", c.b_offset ? c.b_offset : "256",
                           c.c_offset ? c.c_offset : "0", c.extra ? c.extra : "", c.loop ? c.loop : ""};
    size_t used = 0;
    for (const char *at = TEMPLATE; *at && used + 1 < sizeof out;) {
        size_t m = 0;
        while (m < TSR_ARRAY_LEN(markers) && strncmp(at, markers[m], strlen(markers[m])) != 0) m++;
        if (m < TSR_ARRAY_LEN(markers)) {
            int wrote = snprintf(out + used, sizeof out - used, "%s", texts[m]);
            used += wrote > 0 ? (size_t)wrote : 0;
            at += strlen(markers[m]);
        } else {
            out[used++] = *at++;
        }
    }
    out[used < sizeof out ? used : sizeof out - 1] = '\0';
    return out;
}

/* Parses `c`'s executable: 0, or `status` with `needle` in the message; nothing left allocated. */
static void parses(const char *label, change c, int status, const char *needle) {
    tsr_executable exe;
    counts.live = 0;
    const char *json = executable(c);
    int s = tsr_executable_parse(&a, json, strlen(json), &exe);
    if (s != status) fprintf(stderr, "%s: status %s, want %s (%s)\n", label, tessera_status_name(s),
                             tessera_status_name(status), tessera_last_error());
    CHECK_EQ_INT(s, status);
    if (needle && s) CHECK(has(needle));
    if (s == 0) tsr_executable_free(&exe);
    CHECK_EQ_INT(counts.live, 0);
}

static const char *MATCH_R4 = "{\"op\": \"match\", \"reg\": 4, \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", "
                              "\"ndim\": 1, \"shape\": [\"n\"]}},\n";

static void live_storages(void) {
    parses("a over c, which starts after a ends", (change){0}, 0, NULL);
    parses("b over a while a is read", (change){.b_offset = "0"}, TESSERA_ERROR_FORMAT,
           "memory.storages[1] shares bytes 0 to 256 of buffer 0 with storages[0] while both are live (at code[2])");
    parses("c over b while b is read", (change){.c_offset = "256"}, TESSERA_ERROR_FORMAT,
           "memory.storages[2] shares bytes 256 to 512 of buffer 0 with storages[1] while both are live (at code[3])");
    parses("c half over b", (change){.c_offset = "384"}, TESSERA_ERROR_FORMAT, "bytes 384 to 512 of buffer 0");
    /* a used again after c is written, through a move: a is live until that use */
    char extra[512];
    snprintf(extra, sizeof extra, "{\"op\": \"move\", \"dst\": 4, \"src\": 1},\n%s", MATCH_R4);
    parses("a kept live by a move", (change){.extra = extra}, TESSERA_ERROR_FORMAT,
           "storages[2] shares bytes 0 to 256 of buffer 0 with storages[0] while both are live (at code[3])");
    /* through a tuple: only the field a get takes out is used */
    snprintf(extra, sizeof extra, "{\"op\": \"tuple\", \"dst\": 5, \"fields\": [2, 1]},\n"
             "{\"op\": \"get\", \"dst\": 4, \"src\": 5, \"index\": 0},\n%s", MATCH_R4);
    parses("the tuple's other field used", (change){.extra = extra}, 0, NULL);
    snprintf(extra, sizeof extra, "{\"op\": \"tuple\", \"dst\": 5, \"fields\": [2, 1]},\n"
             "{\"op\": \"get\", \"dst\": 4, \"src\": 5, \"index\": 1},\n%s", MATCH_R4);
    parses("a used through a tuple", (change){.extra = extra}, TESSERA_ERROR_FORMAT, "storages[2] shares bytes 0 to 256");
    /* a tuple written twice: a get cannot tell which, so every field counts */
    snprintf(extra, sizeof extra, "{\"op\": \"tuple\", \"dst\": 5, \"fields\": [2, 1]},\n"
             "{\"op\": \"tuple\", \"dst\": 5, \"fields\": [2, 1]},\n"
             "{\"op\": \"get\", \"dst\": 4, \"src\": 5, \"index\": 0},\n%s", MATCH_R4);
    parses("a get of a tuple written twice", (change){.extra = extra}, TESSERA_ERROR_FORMAT, "storages[2] shares");
    /* passed to a call, whose result may be that argument */
    snprintf(extra, sizeof extra, "{\"op\": \"func\", \"dst\": 6, \"name\": \"main\"},\n"
             "{\"op\": \"call\", \"dst\": 4, \"callee\": 6, \"args\": [1]},\n%s", MATCH_R4);
    parses("a passed to a call", (change){.extra = extra}, TESSERA_ERROR_FORMAT,
           "storages[2] shares bytes 0 to 256");
    /* code that jumps back: every storage is live throughout (this goto is never reached, but a loader
     * cannot bound lifetimes past it) */
    parses("a loop", (change){.loop = ",\n{\"op\": \"goto\", \"target\": 0}"}, TESSERA_ERROR_FORMAT,
           "storages[2] shares bytes 0 to 256 of buffer 0 with storages[0] while both are live (at code[0])");
    parses("a jump forward", (change){.extra = "{\"op\": \"goto\", \"target\": 5},\n"}, 0, NULL);
}

static void dimensions(void) {
    parses("a tensor of -3", (change){.tensor = "\"-3\""}, TESSERA_ERROR_FORMAT,
           "function 'main': tensors['1'].shape[0] is -3: a negative dimension");
    parses("a tensor of n - 65", (change){.tensor = "\"n - 65\""}, TESSERA_ERROR_FORMAT,
           "tensors['1'].shape[0] is -1 at the upper bounds: a negative dimension");
    parses("a tensor of 65 - n", (change){.tensor = "\"65 - n\""}, 0, NULL);
    parses("a parameter of -4", (change){.param = "\"-4\""}, TESSERA_ERROR_FORMAT,
           "params[0].sinfo.shape[0] is '-4': a negative dimension");
    parses("a parameter of n - 100", (change){.param = "\"n - 100\""}, TESSERA_ERROR_FORMAT,
           "params[0].sinfo.shape[0] is 'n - 100', -36 at the upper bounds");
    parses("an allocation of -2", (change){.extra = "{\"op\": \"alloc_tensor\", \"dst\": 4, \"shape\": [\"8\", \"-2\"], "
                                                    "\"dtype\": \"float32\"},\n"},
           TESSERA_ERROR_FORMAT, "code[4].shape[1] is -2: a negative dimension");
}

/* What a device with `alignment` and `workgroups` makes of `c`'s executable: 0, or `status` naming `needle`. */
static void fits(const char *label, change c, uint64_t alignment, int64_t workgroups, int status, const char *needle) {
    tsr_executable exe;
    counts.live = 0;
    const char *json = executable(c);
    CHECK_EQ_INT(tsr_executable_parse(&a, json, strlen(json), &exe), 0);
    int s = tsr_check_device_fit(&a, &exe, "test device", alignment, workgroups);
    if (s != status) fprintf(stderr, "%s: status %s, want %s (%s)\n", label, tessera_status_name(s),
                             tessera_status_name(status), tessera_last_error());
    CHECK_EQ_INT(s, status);
    if (needle && s) CHECK(has(needle));
    tsr_executable_free(&exe);
    CHECK_EQ_INT(counts.live, 0);
}

static void device_fit(void) {
    fits("as compiled, on WebGPU's defaults", (change){0}, 256, 65535, 0, NULL);
    fits("b at 272 on WebGPU", (change){.b_offset = "272"}, 256, 65535, TESSERA_ERROR_UNSUPPORTED,
         "executable.json does not fit the test device: function 'main': memory.storages[1].offset is 272, not a "
         "multiple of 256, the test device's storage alignment (minStorageBufferOffsetAlignment)");
    fits("b at 272 on a CPU", (change){.b_offset = "272"}, 4, INT32_MAX, 0, NULL);
    fits("b at 258 on a CPU", (change){.b_offset = "258"}, 4, INT32_MAX, TESSERA_ERROR_UNSUPPORTED, "offset is 258");
    fits("a grid of len workgroups (64 at the bound)", (change){.grid = "\"len\""}, 256, 64, 0, NULL);
    fits("a grid of len + 1 workgroups", (change){.grid = "\"len + 1\""}, 256, 64, TESSERA_ERROR_UNSUPPORTED,
         "kernels[0].grid[0] (kernel step) is 65 workgroups at the upper bounds of function 'main', code[1], more "
         "than the test device's 64 (maxComputeWorkgroupsPerDimension)");
    fits("no limits stated", (change){.b_offset = "258", .grid = "\"len * 1000000000000\""}, 0, 0, 0, NULL);
}

/* A split build (tests/data/vm/split.json): each device is checked for its own arena buffers and kernels.
 * Storage 2 sits at offset 256 of the CPU's buffer; both kernels' grids are (len + 15) // 16, 4 at n = 64. */
static void split_fit(void) {
    FILE *f = fopen("data/vm/split.json", "rb");
    CHECK(f != NULL);
    if (!f) return;
    static char text[1 << 15];
    size_t size = fread(text, 1, sizeof text, f);
    fclose(f);
    tsr_executable exe;
    counts.live = 0;
    CHECK_EQ_INT(tsr_executable_parse(&a, text, size, &exe), 0);
    /* 512-byte alignment: the GPU's buffer holds one storage at 0; the CPU's has one at 256. */
    CHECK_EQ_INT(tsr_check_device_fit_on(&a, &exe, 0, "vulkan device (vulkan:0)", 512, 65535), 0);
    CHECK_EQ_INT(tsr_check_device_fit_on(&a, &exe, 1, "cpu device (cpu:0)", 512, INT32_MAX), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("does not fit the cpu device (cpu:0): function 'main': memory.storages[2].offset is 256"));
    CHECK_EQ_INT(tsr_check_device_fit(&a, &exe, "one device", 512, 0), TESSERA_ERROR_UNSUPPORTED); /* every storage */
    /* 3 workgroups per dimension: each device sees only its own kernel's launches. */
    CHECK_EQ_INT(tsr_check_device_fit_on(&a, &exe, 0, "vulkan device (vulkan:0)", 4, 3), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("kernels[1].grid[0] (kernel double)"));
    CHECK_EQ_INT(tsr_check_device_fit_on(&a, &exe, 1, "cpu device (cpu:0)", 4, 3), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("kernels[0].grid[0] (kernel add)"));
    CHECK_EQ_INT(tsr_check_device_fit_on(&a, &exe, 1, "cpu device (cpu:0)", 256, 4), 0);
    tsr_executable_free(&exe);
    CHECK_EQ_INT(counts.live, 0);
}

int main(void) {
    tessera_allocator counting = tsr_test_counting_allocator(&counts);
    tsr_alloc_init(&a, &counting);
    live_storages();
    dimensions();
    device_fit();
    split_fit();
    return tsr_test_failures();
}
