/* executable.json (docs/format.md, versions 3 and 4): a small hand-written executable parses into the
 * structures the VM trusts (functions, kernels, symbols and bounds, registers and locations,
 * instructions), and each way of breaking it is refused with the right status and a message
 * that names the problem. Every parse, accepted or refused, frees all it allocated. */
#include <stdlib.h>
#include <string.h>

#include "executable.h"
#include "harness.h"

static tsr_test_counts counts;
static tsr_alloc a;

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

/* The valid executable every malformed case starts from: two functions (main calls helper by
 * name, launches kernel 0, calls a library, branches), one kernel with three bindings and one
 * scalar, an arena of one buffer with one placed storage. Markers that the cases replace occur
 * once each (checked by `variant`). */
static const char *VALID =
    "{\"format\": \"tessera-executable\", \"version\": 3,\n"
    " \"target\": {\"kind\": \"cpu\", \"name\": \"test-cpu\", \"backend\": \"c-native\"},\n"
    " \"constants\": [\"const_0\"], \"libraries\": [\"tessera.test.lib\"], \"required_features\": [\"shader-f16\"],\n"
    " \"required_limits\": {\"maxBufferSize\": 4096, \"maxComputeInvocationsPerWorkgroup\": 16},\n"
    " \"modules\": [{\"path\": \"kernels.so\", \"backend\": \"c-native\", \"nbytes\": 10,\n"
    "              \"sha256\": \"0000000000000000000000000000000000000000000000000000000000000000\"}],\n"
    " \"kernels\": [{\"name\": \"add\", \"backend\": \"c-native\", \"module\": \"kernels.so\", \"entry_point\": \"k_add\",\n"
    "              \"workgroup_size\": [16, 1, 1],\n"
    "              \"abi\": {\"bindings\": [{\"index\": 0}, {\"index\": 1}, {\"index\": 2}],\n"
    "                      \"scalars\": [{\"name\": \"len\", \"passed\": \"argument\", \"position\": 3}]},\n"
    "              \"grid\": [\"(len + 15) // 16\", \"1\", \"1\"]}],\n"
    " \"functions\": {\n"
    "  \"helper\": {\"params\": [{\"name\": \"y\", \"register\": 0, \"state\": false,\n"
    "                          \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 2, \"shape\": [\"m\", \"4\"]}}],\n"
    "             \"symbols\": {\"m\": {\"upper_bound\": null}}, \"registers\": 1,\n"
    "             \"tensors\": {\"0\": {\"shape\": [\"m\", \"4\"], \"dtype\": \"float32\", \"bytes\": \"m * 16\"}},\n"
    "             \"locations\": {\"0\": {\"kind\": \"param\", \"index\": 0}},\n"
    "             \"memory\": {\"static\": true, \"buffers\": [], \"storages\": []},\n"
    "             \"code\": [{\"op\": \"match\", \"reg\": 0, \"what\": \"argument 'y' of helper\",\n"
    "                       \"text\": \"R.Tensor((m, 4), dtype=\\\"float32\\\")\",\n"
    "                       \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 2, \"shape\": [\"m\", \"4\"]}},\n"
    "                      {\"op\": \"ret\", \"src\": 0}]},\n"
    "  \"main\": {\"params\": [{\"name\": \"x\", \"register\": 0, \"state\": false,\n"
    "                        \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}}],\n"
    "           \"symbols\": {\"n\": {\"upper_bound\": 64}}, \"registers\": 5,\n"
    "           \"tensors\": {\"0\": {\"shape\": [\"n\"], \"dtype\": \"float32\", \"bytes\": \"n * 4\"},\n"
    "                       \"1\": {\"shape\": [\"n\"], \"dtype\": \"float32\", \"bytes\": \"n * 4\"},\n"
    "                       \"4\": {\"shape\": [\"n\"], \"dtype\": \"float32\", \"bytes\": \"n * 4\"}},\n"
    "           \"locations\": {\"0\": {\"kind\": \"param\", \"index\": 0}, \"1\": {\"kind\": \"arena\", \"token\": 0},\n"
    "                         \"4\": {\"kind\": \"constant\", \"name\": \"const_0\"}},\n"
    "           \"memory\": {\"static\": true, \"arena_bytes\": 256, \"buffers\": [256],\n"
    "                      \"storages\": [{\"index\": 0, \"buffer\": 0, \"offset\": 0, \"static_size\": 256, \"size\": \"n * 4\"}]},\n"
    "           \"code\": [{\"op\": \"match\", \"reg\": 0, \"what\": \"argument 'x' of main\", \"text\": \"R.Tensor((n,))\",\n"
    "                     \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}},\n"
    "                    {\"op\": \"launch\", \"kernel\": 0, \"args\": [0, 4], \"outs\": [1], \"scalars\": [\"n\"]},\n"
    "                    {\"op\": \"call_builtin\", \"name\": \"tessera.test.lib\", \"args\": [1], \"outs\": [], \"scalars\": [], \"dst\": 3},\n"
    "                    {\"op\": \"if\", \"cond\": 3, \"else\": 5},\n"
    "                    {\"op\": \"goto\", \"target\": 5},\n"
    "                    {\"op\": \"call\", \"func\": \"helper\", \"args\": [1], \"dst\": 2},\n"
    "                    {\"op\": \"ret\", \"src\": 2}]}}}\n";

/* VALID with the one occurrence of `from` replaced by `to` (a static buffer). */
static const char *variant(const char *from, const char *to) {
    static char out[16384];
    const char *at = strstr(VALID, from);
    if (!at || strstr(at + 1, from)) {
        fprintf(stderr, "marker \"%s\" is not in the template exactly once\n", from);
        tsr_test_fail(__FILE__, __LINE__, "marker occurs once");
        snprintf(out, sizeof out, "%s", VALID);
        return out;
    }
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - VALID), VALID, to, at + strlen(from));
    return out;
}

/* Parses text and expects `status` with `needle` in the message, nothing left allocated and
 * the output zeroed. */
static void refused(const char *label, const char *json, size_t size, int status, const char *needle) {
    tsr_executable exe;
    memset(&exe, 0xab, sizeof exe);
    counts.live = 0;
    int s = tsr_executable_parse(&a, json, size, &exe);
    if (s != status) fprintf(stderr, "%s: status %s, want %s (%s)\n", label, tessera_status_name(s),
                             tessera_status_name(status), tessera_last_error());
    CHECK(s == status);
    if (needle) CHECK(has(needle));
    if (s == 0) tsr_executable_free(&exe);
    CHECK_EQ_INT(counts.live, 0); /* a refusal frees everything */
    CHECK(exe.mem == NULL && exe.n_functions == 0 && exe.functions == NULL);
}

static void bad(const char *from, const char *to, int status, const char *needle) {
    const char *json = variant(from, to);
    char label[256];
    snprintf(label, sizeof label, "%s -> %s", from, to);
    refused(label, json, strlen(json), status, needle);
}

static const tsr_instr *instr(const tsr_function *f, int32_t pc) { return &f->code[pc]; }

static void valid(void) {
    tsr_executable exe;
    counts.live = 0;
    CHECK_EQ_INT(tsr_executable_parse(&a, VALID, strlen(VALID), &exe), 0);
    CHECK(counts.live > 0);
    CHECK(strcmp(exe.target_kind, "cpu") == 0 && strcmp(exe.target_name, "test-cpu") == 0);
    CHECK_EQ_INT(exe.n_constants, 1);
    CHECK_EQ_INT(exe.n_libraries, 1);
    CHECK(strcmp(exe.libraries[0], "tessera.test.lib") == 0);
    CHECK_EQ_INT(exe.n_required_features, 1);
    CHECK_EQ_INT(exe.max_buffer_size, 4096);
    CHECK_EQ_INT(exe.max_invocations, 16);
    CHECK_EQ_INT(exe.max_storage_buffers, -1); /* absent limits read as -1 */
    CHECK_EQ_INT(exe.n_modules, 1);
    CHECK_EQ_INT(exe.modules[0].nbytes, 10);
    CHECK(strcmp(exe.modules[0].path, "kernels.so") == 0);

    /* the kernel: module resolved to its index, ABI counts, grid compiled over its scalars */
    CHECK_EQ_INT(exe.n_kernels, 1);
    const tsr_kernel *k = &exe.kernels[0];
    CHECK(strcmp(k->name, "add") == 0 && strcmp(k->entry_point, "k_add") == 0);
    CHECK_EQ_INT(k->module, 0);
    CHECK_EQ_INT(k->workgroup_size[0], 16);
    CHECK_EQ_INT(k->n_bindings, 3);
    CHECK_EQ_INT(k->n_scalars, 1);
    CHECK_EQ_INT(k->scalar_symbols.count, 1);
    int64_t len = 33, g = 0;
    uint8_t bound = 1;
    CHECK_EQ_INT(tsr_shape_expr_eval(&k->grid[0], &k->scalar_symbols, &len, &bound, &g), 0);
    CHECK_EQ_INT(g, 3);

    /* functions, looked up by name in file order */
    CHECK_EQ_INT(exe.n_functions, 2);
    CHECK_EQ_INT(tsr_executable_function(&exe, "helper"), 0);
    CHECK_EQ_INT(tsr_executable_function(&exe, "main"), 1);
    CHECK_EQ_INT(tsr_executable_function(&exe, "absent"), -1);
    const tsr_function *h = &exe.functions[0], *m = &exe.functions[1];
    CHECK_EQ_INT(h->n_registers, 1);
    CHECK_EQ_INT(h->symbols.count, 1);
    CHECK_EQ_INT(h->upper_bounds[0], -1); /* "upper_bound": null */
    CHECK_EQ_INT(h->params[0].sinfo.kind, TSR_SINFO_TENSOR);
    CHECK_EQ_INT(h->params[0].sinfo.n_dims, 2);
    CHECK_EQ_INT(h->params[0].sinfo.dims[0].symbol, 0);  /* "m" is a plain variable: bound by a match */
    CHECK_EQ_INT(h->params[0].sinfo.dims[1].symbol, -1); /* "4" is not */
    CHECK(strcmp(instr(h, 0)->what, "argument 'y' of helper") == 0);
    CHECK(strcmp(instr(h, 0)->text, "R.Tensor((m, 4), dtype=\"float32\")") == 0);

    CHECK_EQ_INT(m->n_registers, 5);
    CHECK_EQ_INT(m->n_params, 1);
    CHECK(strcmp(m->params[0].name, "x") == 0 && !m->params[0].state);
    CHECK_EQ_INT(m->symbols.count, 1);
    CHECK(strcmp(m->symbols.names[0], "n") == 0);
    CHECK_EQ_INT(m->upper_bounds[0], 64);
    CHECK(m->static_memory && !m->recursive);
    CHECK_EQ_INT(m->n_arena_buffers, 1);
    CHECK_EQ_INT(m->arena_buffers[0], 256);
    CHECK_EQ_INT(m->n_storages, 1);
    CHECK_EQ_INT(m->storages[0].buffer, 0);
    CHECK_EQ_INT(m->storages[0].static_size, 256);
    CHECK_EQ_INT(m->max_token, 0);
    CHECK_EQ_INT(m->token_to_storage[0], 0);
    /* registers: locations and planned tensors */
    CHECK(m->regs[0].has_tensor && m->regs[0].location == TSR_LOC_PARAM);
    CHECK(m->regs[1].has_tensor && m->regs[1].location == TSR_LOC_ARENA && m->regs[1].index == 0);
    CHECK(!m->regs[2].has_tensor && m->regs[2].location == TSR_LOC_NONE);
    CHECK(m->regs[4].location == TSR_LOC_CONSTANT && m->regs[4].index == 0);
    CHECK_EQ_INT(m->regs[1].ndim, 1);
    CHECK_EQ_INT(m->regs[1].dtype, TESSERA_FLOAT32);
    int64_t n = 10, bytes = 0;
    CHECK_EQ_INT(tsr_shape_expr_eval(&m->regs[1].bytes, &m->symbols, &n, &bound, &bytes), 0);
    CHECK_EQ_INT(bytes, 40);
    /* instructions with their operands resolved */
    CHECK_EQ_INT(m->n_code, 7);
    CHECK_EQ_INT(instr(m, 0)->op, TSR_OP_MATCH);
    const tsr_instr *l = instr(m, 1);
    CHECK_EQ_INT(l->op, TSR_OP_LAUNCH);
    CHECK_EQ_INT(l->target, 0);
    CHECK_EQ_INT(l->n_args, 2);
    CHECK_EQ_INT(l->n_outs, 1);
    CHECK(l->regs[0] == 0 && l->regs[1] == 4 && l->regs[2] == 1);
    CHECK_EQ_INT(l->n_exprs, 1);
    CHECK_EQ_INT(instr(m, 2)->op, TSR_OP_CALL_BUILTIN);
    CHECK_EQ_INT(instr(m, 2)->library, 0);
    CHECK_EQ_INT(instr(m, 2)->dst, 3);
    CHECK_EQ_INT(instr(m, 3)->op, TSR_OP_IF);
    CHECK_EQ_INT(instr(m, 3)->reg, 3);
    CHECK_EQ_INT(instr(m, 3)->target, 5);
    CHECK_EQ_INT(instr(m, 4)->op, TSR_OP_GOTO);
    CHECK_EQ_INT(instr(m, 4)->target, 5);
    CHECK_EQ_INT(instr(m, 5)->op, TSR_OP_CALL);
    CHECK_EQ_INT(instr(m, 5)->target, 0); /* "helper" resolved to its index */
    CHECK_EQ_INT(instr(m, 5)->dst, 2);
    CHECK_EQ_INT(instr(m, 6)->op, TSR_OP_RET);
    CHECK_EQ_INT(instr(m, 6)->reg, 2);
    tsr_executable_free(&exe);
    CHECK_EQ_INT(counts.live, 0); /* a parsed executable is freed at once */
    CHECK(exe.mem == NULL);
}

/* A real executable from the compiler, if the test data has one (tests/data/executable/). */
static void real_files(void) {
    static const char *names[] = {"program-calls.json", "program-unique.json", "gemm.json", "kv-cache.json",
                                  "program-recursion.json"};
    for (size_t i = 0; i < TSR_ARRAY_LEN(names); i++) {
        char path[256];
        snprintf(path, sizeof path, "data/executable/%s", names[i]);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        if (!f) continue;
        static char text[1 << 17];
        size_t size = fread(text, 1, sizeof text, f);
        fclose(f);
        tsr_executable exe;
        counts.live = 0;
        int s = tsr_executable_parse(&a, text, size, &exe);
        if (s) fprintf(stderr, "%s: %s\n", path, tessera_last_error());
        CHECK_EQ_INT(s, 0);
        CHECK(exe.n_functions >= 1);
        tsr_executable_free(&exe);
        CHECK_EQ_INT(counts.live, 0);
    }
}

static void malformed(void) {
    /* the header */
    bad("\"format\": \"tessera-executable\"", "\"format\": \"tessera-model\"", TESSERA_ERROR_FORMAT,
        "not \"tessera-executable\"");
    bad("\"version\": 3", "\"version\": 2", TESSERA_ERROR_VERSION, "rebuild");
    bad("\"version\": 3", "\"version\": 2", TESSERA_ERROR_VERSION, "version 2");
    bad("\"version\": 3", "\"version\": 5", TESSERA_ERROR_VERSION, "rebuild");
    /* Version 4 is a build split across devices: it lists them, and only it does (split() below). */
    bad("\"version\": 3", "\"version\": 4", TESSERA_ERROR_FORMAT, "must list its devices");
    bad("\"version\": 3,", "\"version\": 3, \"devices\": [],", TESSERA_ERROR_FORMAT, "only a version 4");
    /* A version-3 file may state device 0 and no other. */
    bad("\"entry_point\": \"k_add\",", "\"entry_point\": \"k_add\", \"device\": 1,", TESSERA_ERROR_FORMAT,
        "'device' must be an index below 1");
    bad("\"constants\": [\"const_0\"],", "\"constants\": [\"const_0\"], \"constant_devices\": {\"const_0\": [0]},",
        TESSERA_ERROR_FORMAT, "constant_devices: 'const_0' names a weight or device");
    bad("\"version\": 3", "\"version\": \"3\"", TESSERA_ERROR_FORMAT, "version");
    bad("\"version\": 3,", "", TESSERA_ERROR_FORMAT, "field 'version' is missing");

    /* instructions */
    bad("\"op\": \"goto\"", "\"op\": \"jump\"", TESSERA_ERROR_UNSUPPORTED, "unknown instruction 'jump'");
    bad("\"op\": \"goto\"", "\"op\": \"jump\"", TESSERA_ERROR_UNSUPPORTED, "function 'main', instruction 4");
    bad("\"cond\": 3", "\"cond\": 5", TESSERA_ERROR_FORMAT, "field 'cond': not a register of the function");
    bad("\"cond\": 3", "\"cond\": -1", TESSERA_ERROR_FORMAT, "not a register");
    bad("\"src\": 2", "\"src\": 99", TESSERA_ERROR_FORMAT, "field 'src': not a register");
    bad("\"args\": [0, 4]", "\"args\": [0, 7]", TESSERA_ERROR_FORMAT, "a register out of range");
    bad("\"args\": [1], \"dst\": 2", "\"args\": [1.5], \"dst\": 2", TESSERA_ERROR_FORMAT, "register out of range");
    bad("\"kernel\": 0", "\"kernel\": 1", TESSERA_ERROR_FORMAT, "kernel index out of range");
    bad("\"kernel\": 0", "\"kernel\": -1", TESSERA_ERROR_FORMAT, "kernel index out of range");
    bad("\"target\": 5", "\"target\": 7", TESSERA_ERROR_FORMAT, "field 'target' is 7, outside [0, 6]");
    bad("\"else\": 5", "\"else\": 70", TESSERA_ERROR_FORMAT, "field 'else' is 70, outside [0, 6]");
    bad("\"else\": 5", "\"else\": -1", TESSERA_ERROR_FORMAT, "field 'else'");
    bad("\"outs\": [1], \"scalars\": [\"n\"]", "\"outs\": [1, 2], \"scalars\": [\"n\"]", TESSERA_ERROR_FORMAT,
        "binds a different number of tensors than the kernel's ABI");
    bad("\"args\": [0, 4], \"outs\": [1]", "\"args\": [0], \"outs\": [1]", TESSERA_ERROR_FORMAT,
        "binds a different number of tensors");
    bad("\"scalars\": [\"n\"]", "\"scalars\": []", TESSERA_ERROR_FORMAT, "different number of scalars");
    bad("\"func\": \"helper\"", "\"func\": \"nowhere\"", TESSERA_ERROR_FORMAT,
        "calls a function the executable does not have");
    bad("\"name\": \"tessera.test.lib\"", "\"name\": \"tessera.test.other\"", TESSERA_ERROR_FORMAT,
        "calls a library function that 'libraries' does not list");
    bad("{\"op\": \"ret\", \"src\": 2}", "{\"op\": \"prim\", \"dst\": 2, \"value\": \"n\"}", TESSERA_ERROR_FORMAT,
        "does not end with ret");
    bad("{\"op\": \"goto\", \"target\": 5}", "[]", TESSERA_ERROR_FORMAT, "instruction 4: not an object");

    /* the memory plan and the locations */
    bad("\"buffer\": 0", "\"buffer\": null", TESSERA_ERROR_FORMAT,
        "an arena location names a storage the plan does not place");
    bad("\"buffer\": 0", "\"buffer\": 1", TESSERA_ERROR_FORMAT, "a storage's buffer is out of range");
    bad("\"static_size\": 256", "\"static_size\": 257", TESSERA_ERROR_FORMAT, "a storage lies outside its arena buffer");
    bad("\"offset\": 0", "\"offset\": 200", TESSERA_ERROR_FORMAT, "outside its arena buffer");
    bad("\"offset\": 0", "\"offset\": 1e300", TESSERA_ERROR_FORMAT, "beyond 2^53");
    bad("\"token\": 0", "\"token\": 1", TESSERA_ERROR_FORMAT, "field 'token' is 1, outside [0, 0]");
    bad("\"name\": \"const_0\"", "\"name\": \"const_9\"", TESSERA_ERROR_FORMAT,
        "names a constant that 'constants' does not list");
    bad("\"4\": {\"kind\": \"constant\"", "\"9\": {\"kind\": \"constant\"", TESSERA_ERROR_FORMAT,
        "'locations' names a register out of range");
    bad("\"1\": {\"kind\": \"arena\"", "\"2\": {\"kind\": \"arena\"", TESSERA_ERROR_FORMAT,
        "a register has a location but no entry in 'tensors'");
    bad("\"kind\": \"arena\"", "\"kind\": \"heap\"", TESSERA_ERROR_FORMAT, "unknown location kind");
    bad("\"4\": {\"shape\"", "\"x4\": {\"shape\"", TESSERA_ERROR_FORMAT, "'tensors' names a register out of range");

    /* modules and kernels */
    bad("\"path\": \"kernels.so\"", "\"path\": \"../kernels.so\"", TESSERA_ERROR_FORMAT, "'..'");
    bad("\"path\": \"kernels.so\"", "\"path\": \"lib/../../kernels.so\"", TESSERA_ERROR_FORMAT, "../kernels.so");
    bad("\"path\": \"kernels.so\"", "\"path\": \"/usr/lib/kernels.so\"", TESSERA_ERROR_FORMAT, "starts with '/'");
    bad("\"path\": \"kernels.so\"", "\"path\": \"C:kernels.so\"", TESSERA_ERROR_FORMAT, "drive letter");
    bad("\"path\": \"kernels.so\"", "\"path\": \"kernels\\\\x.so\"", TESSERA_ERROR_FORMAT, "backslash");
    bad("\"path\": \"kernels.so\"", "\"path\": \"other.so\"", TESSERA_ERROR_FORMAT,
        "its module is not listed in 'modules'");
    bad("\"sha256\": \"0000", "\"sha256\": \"000", TESSERA_ERROR_FORMAT, "64 hex digits");
    bad("\"workgroup_size\": [16, 1, 1]", "\"workgroup_size\": [16, 1]", TESSERA_ERROR_FORMAT, "3 entries");
    bad("\"workgroup_size\": [16, 1, 1]", "\"workgroup_size\": [0, 1, 1]", TESSERA_ERROR_FORMAT, "outside [1, 65536]");
    bad("\"(len + 15) // 16\"", "\"(n + 15) // 16\"", TESSERA_ERROR_FORMAT, "not one of its scalars");
    bad("\"grid\": [", "\"grid\": [\"1\", ", TESSERA_ERROR_FORMAT, "grid must have 3 expressions");

    /* shape expressions and struct info */
    bad("\"bytes\": \"m * 16\"", "\"bytes\": \"m * * 16\"", TESSERA_ERROR_FORMAT, "not a shape expression: 'm * * 16'");
    bad("\"bytes\": \"m * 16\"", "\"bytes\": \"m * 16)\"", TESSERA_ERROR_FORMAT, "not a shape expression");
    bad("\"bytes\": \"m * 16\"", "\"bytes\": true", TESSERA_ERROR_FORMAT, "a shape expression must be a string");
    /* A number is no shape expression (docs/executable.schema.json), however large. */
    bad("\"bytes\": \"m * 16\"", "\"bytes\": 99999999999999999999", TESSERA_ERROR_FORMAT, "a shape expression must be a string");
    bad("\"bytes\": \"m * 16\"", "\"bytes\": 16", TESSERA_ERROR_FORMAT, "a shape expression must be a string");
    bad("\"shape\": [\"m\", \"4\"]}}]", "\"shape\": [1,2,3,4,5,6,7,8,9]}}]", TESSERA_ERROR_FORMAT,
        "more dimensions than the runtime supports");
    bad("\"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}}],", "\"dtype\": \"float128\", \"ndim\": 1, \"shape\": [\"n\"]}}],",
        TESSERA_ERROR_FORMAT, "unknown dtype");
    /* a dtype of the format that the C API has no tensors of: refused, named (not run with a wrong layout) */
    bad("\"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}}],", "\"dtype\": \"int16\", \"ndim\": 1, \"shape\": [\"n\"]}}],",
        TESSERA_ERROR_UNSUPPORTED, "has dtype 'int16', which this runtime does not support");
    bad("\"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}}],",
        "\"sinfo\": {\"kind\": \"blob\"}}],", TESSERA_ERROR_FORMAT, "unknown struct info kind");

    /* numbers out of range */
    bad("\"registers\": 5", "\"registers\": 99999999999", TESSERA_ERROR_FORMAT, "field 'registers'");
    bad("\"registers\": 5", "\"registers\": 0", TESSERA_ERROR_FORMAT, "field 'registers' is 0, outside");
    bad("\"registers\": 5", "\"registers\": 5.5", TESSERA_ERROR_FORMAT, "not an integer");
    bad("\"upper_bound\": 64", "\"upper_bound\": 1e300", TESSERA_ERROR_FORMAT, "beyond 2^53");
    bad("\"upper_bound\": 64", "\"upper_bound\": -1", TESSERA_ERROR_FORMAT, "outside");
    bad("\"buffers\": [256]", "\"buffers\": [1e15]", TESSERA_ERROR_FORMAT, "outside");
    bad("\"nbytes\": 10", "\"nbytes\": 1e30", TESSERA_ERROR_FORMAT, "field 'nbytes'");

    /* missing and mistyped fields */
    bad("\"registers\": 5,", "", TESSERA_ERROR_FORMAT, "function 'main': field 'registers' is missing");
    bad("\"kernels\"", "\"kernelz\"", TESSERA_ERROR_FORMAT, "field 'kernels' is missing");
    bad("\"entry_point\": \"k_add\",", "", TESSERA_ERROR_FORMAT, "field 'entry_point' is missing");
    bad("\"memory\": {\"static\": true, \"arena_bytes\"", "\"memry\": {\"static\": true, \"arena_bytes\"",
        TESSERA_ERROR_FORMAT, "field 'memory' is missing");
    bad("\"libraries\": [\"tessera.test.lib\"]", "\"libraries\": \"tessera.test.lib\"", TESSERA_ERROR_FORMAT,
        "field 'libraries' is not");
    bad("\"libraries\": [\"tessera.test.lib\"]", "\"libraries\": [7]", TESSERA_ERROR_FORMAT, "entries must be strings");
    bad("\"registers\": 5", "\"registers\": 5, \"registers\": 6", TESSERA_ERROR_FORMAT, "appears twice");
    bad("\"functions\": {", "\"functions\": [", TESSERA_ERROR_FORMAT, "not valid JSON");

    /* not JSON, or JSON too deep for the parser's guard */
    refused("empty", "", 0, TESSERA_ERROR_FORMAT, "not valid JSON");
    refused("not an object", "[3]", 3, TESSERA_ERROR_FORMAT, "not an object");
    refused("trailing bytes", "{} x", 4, TESSERA_ERROR_FORMAT, "unexpected bytes");
    static char deep[4096];
    memset(deep, '[', 2000);
    memset(deep + 2000, ']', 2000);
    refused("deep arrays", deep, 4000, TESSERA_ERROR_FORMAT, "nested deeper than 256");
    /* struct info nested 40 tuples deep (within JSON's limit, beyond the struct info limit) */
    static char sinfo[8192];
    size_t used = 0;
    for (int i = 0; i < 40; i++) used += (size_t)snprintf(sinfo + used, sizeof sinfo - used, "{\"kind\": \"tuple\", \"fields\": [");
    used += (size_t)snprintf(sinfo + used, sizeof sinfo - used, "{\"kind\": \"object\"}");
    for (int i = 0; i < 40; i++) used += (size_t)snprintf(sinfo + used, sizeof sinfo - used, "]}");
    char with[8300];
    snprintf(with, sizeof with, "%s}],", sinfo);
    bad("{\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}}],", with, TESSERA_ERROR_FORMAT,
        "struct info nested deeper than 32");
}

/* Every prefix of the valid text is refused (it is not JSON until the last brace), without a
 * crash or a leak; the whole text is accepted. */
static void truncations(void) {
    size_t n = strlen(VALID);
    int accepted = 0;
    for (size_t len = 0; len <= n; len++) {
        char *copy = malloc(len ? len : 1); /* exactly len bytes: ASan sees any read past the end */
        memcpy(copy, VALID, len);
        tsr_executable exe;
        counts.live = 0;
        int s = tsr_executable_parse(&a, copy, len, &exe);
        if (s == 0) {
            accepted++;
            tsr_executable_free(&exe);
        }
        CHECK_EQ_INT(counts.live, 0);
        free(copy);
    }
    CHECK_EQ_INT(accepted, 2); /* the whole text, and the text less its final newline */
}

/* ---- version 4: a build split across devices (tests/data/vm/split.json, which test_vm runs) ---------- */

static char split_text[1 << 15];

/* split.json with the one occurrence of `from` replaced by `to`, refused with `status` and `needle`. */
static void split_bad(const char *from, const char *to, int status, const char *needle) {
    static char out[1 << 15];
    const char *at = strstr(split_text, from);
    if (!at || strstr(at + 1, from)) {
        fprintf(stderr, "marker \"%s\" is not in split.json exactly once\n", from);
        tsr_test_fail(__FILE__, __LINE__, "marker occurs once");
        return;
    }
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - split_text), split_text, to, at + strlen(from));
    char label[256];
    snprintf(label, sizeof label, "split.json: %s -> %s", from, to);
    refused(label, out, strlen(out), status, needle);
}

static void split(void) {
    FILE *f = fopen("data/vm/split.json", "rb");
    CHECK(f != NULL);
    if (!f) return;
    size_t size = fread(split_text, 1, sizeof split_text - 1, f);
    fclose(f);
    split_text[size] = '\0';
    tsr_executable exe;
    counts.live = 0;
    int rc = tsr_executable_parse(&a, split_text, size, &exe);
    if (rc) fprintf(stderr, "split.json: %s\n", tessera_last_error());
    CHECK_EQ_INT(rc, 0);
    if (rc) return;
    CHECK_EQ_INT(exe.n_devices, 2);
    CHECK(strcmp(exe.devices[0].kind, "vulkan") == 0 && strcmp(exe.devices[0].vdevice, "vulkan:0") == 0);
    CHECK(strcmp(exe.devices[1].kind, "cpu") == 0 && strcmp(exe.devices[1].target_cpu, "x86-64-v2") == 0);
    CHECK_EQ_INT(exe.devices[0].n_required_features, 1);
    CHECK_EQ_INT(exe.devices[0].max_buffer_size, 4096);
    CHECK_EQ_INT(exe.devices[1].n_required_features, 0);
    CHECK_EQ_INT(exe.devices[1].max_buffer_size, -1);
    CHECK_EQ_INT(exe.constant_devices[0], 3); /* bias on both */
    CHECK_EQ_INT(exe.kernels[0].device, 1);
    CHECK_EQ_INT(exe.kernels[1].device, 0);
    const tsr_function *m = &exe.functions[tsr_executable_function(&exe, "main")];
    CHECK_EQ_INT(m->params[0].device, 0);
    CHECK_EQ_INT(m->buffer_devices[0], 0);
    CHECK_EQ_INT(m->buffer_devices[1], 1);
    CHECK_EQ_INT(m->regs[2].device, 1);
    CHECK(m->regs[2].device_stated);
    CHECK_EQ_INT(m->code[2].op, TSR_OP_TO_DEVICE);
    CHECK_EQ_INT(m->code[2].reg, 1);
    CHECK_EQ_INT(m->code[2].dst, 2);
    CHECK_EQ_INT(m->code[2].device, 1);
    const tsr_function *pooled = &exe.functions[tsr_executable_function(&exe, "pooled")];
    CHECK_EQ_INT(pooled->code[1].op, TSR_OP_ALLOC_TENSOR);
    CHECK_EQ_INT(pooled->code[1].device, 0);
    CHECK_EQ_INT(pooled->code[3].device, 1);
    /* The view a device's load_kernels and requirement check read: its own target and requirements. */
    tsr_executable cpu = tsr_executable_device_view(&exe, 1);
    CHECK(strcmp(cpu.target_cpu, "x86-64-v2") == 0 && cpu.n_required_features == 0 && cpu.max_buffer_size == -1);
    CHECK(cpu.kernels == exe.kernels && cpu.n_kernels == 2); /* every kernel, by its index */
    tsr_executable gpu = tsr_executable_device_view(&exe, 0);
    CHECK(gpu.n_required_features == 1 && gpu.max_buffer_size == 4096);
    tsr_executable_free(&exe);
    CHECK_EQ_INT(counts.live, 0);

    /* The loader's version-4 checks (docs/format.md "What a loader checks"), each as the Python loader's. */
    split_bad("\"version\": 4", "\"version\": 3", TESSERA_ERROR_FORMAT, "only a version 4");
    split_bad("{\"kind\": \"cpu\", \"id\": 0,", "{\"id\": 0,", TESSERA_ERROR_FORMAT, "field 'kind' is missing");
    split_bad("\"vdevices\": [\"cpu:0\"],", "\"vdevices\": [\"cpu:0\"], \"id\": 70000,", TESSERA_ERROR_FORMAT, "id");
    split_bad("\"entry_point\": \"k_add\", \"device\": 1,", "\"entry_point\": \"k_add\", \"device\": 2,",
              TESSERA_ERROR_FORMAT, "'device' must be an index below 2");
    split_bad("\"entry_point\": \"k_add\", \"device\": 1,", "\"entry_point\": \"k_add\", \"device\": \"1\",",
              TESSERA_ERROR_FORMAT, "'device' must be an index");
    /* A kernel binds only tensors of its own device. */
    split_bad("\"4\": {\"shape\": [\"n\"], \"dtype\": \"float32\", \"bytes\": \"n * 4\", \"device\": 1}",
              "\"4\": {\"shape\": [\"n\"], \"dtype\": \"float32\", \"bytes\": \"n * 4\", \"device\": 0}",
              TESSERA_ERROR_FORMAT, "binds register 4, on device 0, to kernel 0 (add), which runs on device 1");
    /* A to_device's destination is on the device it names. */
    split_bad("{\"op\": \"to_device\", \"src\": 1, \"dst\": 2, \"device\": 1}",
              "{\"op\": \"to_device\", \"src\": 1, \"dst\": 2, \"device\": 0}", TESSERA_ERROR_FORMAT,
              "not a tensor on device 0");
    split_bad("{\"op\": \"to_device\", \"src\": 1, \"dst\": 2, \"device\": 1}",
              "{\"op\": \"to_device\", \"src\": 1, \"dst\": 2}", TESSERA_ERROR_FORMAT, "must name its destination");
    split_bad("\"buffer_devices\": [0, 1]", "\"buffer_devices\": [0]", TESSERA_ERROR_FORMAT,
              "one device per arena buffer");
    split_bad("\"buffer_devices\": [0, 1]", "\"buffer_devices\": [0, 5]", TESSERA_ERROR_FORMAT,
              "buffer_devices names a device");
    split_bad("\"size\": \"n * 4\", \"device\": 0}", "\"size\": \"n * 4\", \"device\": 9}", TESSERA_ERROR_FORMAT,
              "'device' must be an index below 2");
    split_bad("\"constant_devices\": {\"bias\": [0, 1]}", "\"constant_devices\": {\"weight\": [0]}",
              TESSERA_ERROR_FORMAT, "'weight' names a weight or device");
    split_bad("\"constant_devices\": {\"bias\": [0, 1]}", "\"constant_devices\": {\"bias\": [0, 2]}",
              TESSERA_ERROR_FORMAT, "'bias' names a weight or device");
    split_bad("\"device\": 0, \"workgroup_size\"", "\"device\": 0, \"requirements\": {}, \"workgroup_size\"", 0, NULL);
}

int main(void) {
    tessera_allocator counting = tsr_test_counting_allocator(&counts);
    tsr_alloc_init(&a, &counting);
    valid();
    split();
    real_files();
    malformed();
    truncations();
    CHECK(counts.total > 0);
    return tsr_test_failures();
}
