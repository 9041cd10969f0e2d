/* Named inputs and outputs (tessera_model_inputs, tessera_model_outputs, tessera_model_run_named): what a
 * function's inputs and outputs are, a run by name, and an error naming the input for each feed that does not
 * fit. The model is a plain CPU executable without kernels: main(x: (n, 4) float32, y: (n + 1,) float32,
 * k: int64, ids: (m,) int32) returns (x, (y, k), ids), whose values executable.json names (result_names);
 * `pack` takes a tuple, which this API does not describe. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessera.h"

static const char *const EXECUTABLE_HEAD =
    "{\"format\": \"tessera-executable\", \"version\": 3,"
    " \"target\": {\"kind\": \"cpu\", \"name\": \"cpu-generic\", \"backend\": \"c-native\", \"features\": []},"
    " \"constants\": [], \"libraries\": [], \"required_features\": [], \"required_limits\": {}, \"modules\": [],"
    " \"kernels\": [], \"functions\": {\"main\": {"
    "  \"params\": ["
    "   {\"name\": \"x\", \"register\": 0, \"state\": false, \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\","
    "    \"ndim\": 2, \"shape\": [\"n\", \"4\"]}},"
    "   {\"name\": \"y\", \"register\": 1, \"state\": false, \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\","
    "    \"ndim\": 1, \"shape\": [\"n + 1\"]}},"
    "   {\"name\": \"k\", \"register\": 2, \"state\": false, \"sinfo\": {\"kind\": \"prim\", \"dtype\": \"int64\","
    "    \"value\": null}},"
    "   {\"name\": \"ids\", \"register\": 3, \"state\": false, \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"int32\","
    "    \"ndim\": 1, \"shape\": [\"m\"]}}],"
    "  \"symbols\": {\"n\": {\"upper_bound\": 8}, \"m\": {\"upper_bound\": null}}, \"unbounded_symbols\": [\"m\"],"
    "  \"registers\": 6, \"tensors\": {}, \"locations\": {}, \"runtime_allocations\": [],"
    "  \"memory\": {\"static\": false, \"recursive\": false, \"arena_bytes\": 0, \"buffers\": [], \"storages\": [],"
    "   \"liveness_lower_bound_bytes\": 0},"
    "  \"code\": ["
    "   {\"op\": \"match\", \"reg\": 0, \"what\": \"argument 'x' of main\", \"text\": \"R.Tensor((n, 4))\","
    "    \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 2, \"shape\": [\"n\", \"4\"]}},"
    "   {\"op\": \"match\", \"reg\": 1, \"what\": \"argument 'y' of main\", \"text\": \"R.Tensor((n + 1,))\","
    "    \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n + 1\"]}},"
    "   {\"op\": \"match\", \"reg\": 2, \"what\": \"argument 'k' of main\", \"text\": \"R.Prim('int64')\","
    "    \"sinfo\": {\"kind\": \"prim\", \"dtype\": \"int64\", \"value\": null}},"
    "   {\"op\": \"match\", \"reg\": 3, \"what\": \"argument 'ids' of main\", \"text\": \"R.Tensor((m,))\","
    "    \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"int32\", \"ndim\": 1, \"shape\": [\"m\"]}},"
    "   {\"op\": \"tuple\", \"dst\": 4, \"fields\": [1, 2]},"
    "   {\"op\": \"tuple\", \"dst\": 5, \"fields\": [0, 4, 3]},"
    "   {\"op\": \"ret\", \"src\": 5}],"
    "  \"result\": {\"kind\": \"tuple\", \"fields\": ["
    "   {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 2, \"shape\": [\"n\", \"4\"]},"
    "   {\"kind\": \"tuple\", \"fields\": [{\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n + 1\"]},"
    "                                     {\"kind\": \"prim\", \"dtype\": \"int64\", \"value\": null}]},"
    "   {\"kind\": \"tensor\", \"dtype\": \"int32\", \"ndim\": 1, \"shape\": [\"m\"]}]}";
/* Then main's result_names (or none), and: */
static const char *const EXECUTABLE_TAIL =
    "}, \"pack\": {"
    "  \"params\": [{\"name\": \"t\", \"register\": 0, \"state\": false, \"sinfo\": {\"kind\": \"tuple\", \"fields\": ["
    "    {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"4\"]}]}}],"
    "  \"symbols\": {}, \"unbounded_symbols\": [], \"registers\": 1, \"tensors\": {}, \"locations\": {},"
    "  \"runtime_allocations\": [], \"memory\": {\"static\": false, \"recursive\": false, \"arena_bytes\": 0,"
    "   \"buffers\": [], \"storages\": [], \"liveness_lower_bound_bytes\": 0},"
    "  \"code\": [{\"op\": \"ret\", \"src\": 0}],"
    "  \"result\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"4\"]}}}}";

static void write_text(const char *dir, const char *name, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(text, 1, strlen(text), f) == strlen(text));
    fclose(f);
}

/* The folder with main's result_names given as JSON text (NULL: the member left out). */
static void make_folder(const char *dir, const char *result_names) {
    size_t size = strlen(EXECUTABLE_HEAD) + strlen(EXECUTABLE_TAIL) + (result_names ? strlen(result_names) : 0) + 64;
    char *text = malloc(size);
    CHECK(text != NULL);
    if (!text) return;
    snprintf(text, size, "%s%s%s%s", EXECUTABLE_HEAD, result_names ? ", \"result_names\": " : "",
             result_names ? result_names : "", EXECUTABLE_TAIL);
    write_text(dir, "executable.json", text);
    free(text);
    write_text(dir, "tensor-cache.json", "{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": []}");
}

static void remove_folder(const char *dir) {
    const char *names[] = {"executable.json", "tensor-cache.json"};
    char path[600];
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    remove(dir);
}

static tessera_model *load(const char *dir, tsr_test_counts *counts) {
    tessera_model_params params = tessera_model_default_params();
    params.n_threads = 1;
    params.device = "cpu";
    params.allocator = tsr_test_counting_allocator(counts);
    tessera_model *m = tessera_model_load(dir, &params);
    if (!m) fprintf(stderr, "load: %s\n", tessera_last_error());
    return m;
}

static bool says(const char *text) {
    bool found = strstr(tessera_last_error(), text) != NULL;
    if (!found) fprintf(stderr, "expected '%s' in: %s\n", text, tessera_last_error());
    return found;
}

static void the_inputs_and_outputs_are_described(tessera_model *m) {
    const char *functions[4];
    CHECK_EQ_INT(tessera_model_functions(m, functions, 4), 2);
    CHECK(strcmp(functions[0], "main") == 0 && strcmp(functions[1], "pack") == 0);
    CHECK_EQ_INT(tessera_model_functions(m, NULL, 0), 2);
    tessera_io io[8];
    CHECK_EQ_INT(tessera_model_inputs(m, "main", io, 8), 4);
    CHECK(strcmp(io[0].name, "x") == 0 && io[0].kind == TESSERA_VALUE_TENSOR && io[0].has_dtype);
    CHECK(io[0].dtype == TESSERA_FLOAT32 && io[0].ndim == 2);
    CHECK(strcmp(io[0].dims[0], "n") == 0 && io[0].shape[0] == -1 && io[0].upper_bounds[0] == 8);
    CHECK(strcmp(io[0].dims[1], "4") == 0 && io[0].shape[1] == 4 && io[0].upper_bounds[1] == -1);
    CHECK(strcmp(io[1].dims[0], "n + 1") == 0 && io[1].shape[0] == -1 && io[1].upper_bounds[0] == -1);
    CHECK(strcmp(io[2].name, "k") == 0 && io[2].kind == TESSERA_VALUE_INT && io[2].ndim == 0);
    CHECK(io[2].dtype == TESSERA_INT64 && io[2].value == NULL);
    CHECK(strcmp(io[3].name, "ids") == 0 && io[3].dtype == TESSERA_INT32 && io[3].upper_bounds[0] == -1);
    /* A short array: the count, and only what fits written. */
    CHECK_EQ_INT(tessera_model_inputs(m, "main", io, 1), 4);
    CHECK_EQ_INT(tessera_model_inputs(m, "main", NULL, 0), 4);
    CHECK_EQ_INT(tessera_model_outputs(m, "main", io, 8), 4);
    const char *names[] = {"features", "shifted", "count", "ids"};
    for (int i = 0; i < 4; i++) CHECK(strcmp(io[i].name, names[i]) == 0);
    CHECK(io[1].ndim == 1 && strcmp(io[1].dims[0], "n + 1") == 0 && io[2].kind == TESSERA_VALUE_INT);
    /* Errors name what they are about. */
    CHECK_EQ_INT(tessera_model_inputs(m, "decode", io, 8), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(says("no function 'decode'"));
    CHECK_EQ_INT(tessera_model_inputs(m, "pack", io, 8), TESSERA_ERROR_UNSUPPORTED);
    CHECK(says("input 't' of pack is a tuple, not a tensor or an integer"));
    CHECK_EQ_INT(tessera_model_outputs(m, "pack", io, 8), 1);
    CHECK(strcmp(io[0].name, "output0") == 0 && io[0].shape[0] == 4); /* no result_names: output0 ... */
    CHECK_EQ_INT(tessera_model_inputs(NULL, "main", io, 8), TESSERA_ERROR_INVALID_ARGUMENT);
}

typedef struct feed {
    float x[9 * 4], y[10];
    int32_t ids[5];
    const char *names[5];
    tessera_value values[5];
    size_t n;
} feed;

static tessera_value tensor(void *data, tessera_dtype dtype, int32_t ndim, int64_t d0, int64_t d1) {
    tessera_value v;
    memset(&v, 0, sizeof v);
    v.kind = TESSERA_VALUE_TENSOR;
    v.tensor.data = data;
    v.tensor.dtype = dtype;
    v.tensor.ndim = ndim;
    v.tensor.shape[0] = d0;
    v.tensor.shape[1] = d1;
    return v;
}

/* A good feed for n rows, in an order other than the parameters'. */
static void make_feed(feed *f, int64_t n) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < 9 * 4; i++) f->x[i] = (float)i;
    for (int i = 0; i < 10; i++) f->y[i] = (float)-i;
    for (int i = 0; i < 5; i++) f->ids[i] = 100 + i;
    f->names[0] = "ids", f->values[0] = tensor(f->ids, TESSERA_INT32, 1, 5, 0);
    f->names[1] = "y", f->values[1] = tensor(f->y, TESSERA_FLOAT32, 1, n + 1, 0);
    f->names[2] = "x", f->values[2] = tensor(f->x, TESSERA_FLOAT32, 2, n, 4);
    f->names[3] = "k";
    f->values[3].kind = TESSERA_VALUE_INT;
    f->values[3].value = 42;
    f->n = 4;
}

static void a_run_by_name(tessera_model *m) {
    feed f;
    make_feed(&f, 3);
    const tessera_tensor *out[4];
    CHECK_EQ_INT(tessera_model_run_named(m, "main", f.n, f.names, f.values, 4, NULL, out), 0);
    CHECK(out[0]->ndim == 2 && out[0]->shape[0] == 3 && ((const float *)out[0]->data)[5] == 5.0f);
    CHECK(out[1]->ndim == 1 && out[1]->shape[0] == 4 && ((const float *)out[1]->data)[3] == -3.0f);
    CHECK(out[2]->dtype == TESSERA_INT64 && out[2]->ndim == 0 && *(const int64_t *)out[2]->data == 42);
    CHECK(out[3]->dtype == TESSERA_INT32 && ((const int32_t *)out[3]->data)[4] == 104);
    /* Chosen outputs, in the order asked for. */
    const char *wanted[] = {"ids", "count"};
    CHECK_EQ_INT(tessera_model_run_named(m, "main", f.n, f.names, f.values, 2, wanted, out), 0);
    CHECK(out[0]->dtype == TESSERA_INT32 && *(const int64_t *)out[1]->data == 42);
    /* n at its bound, 8, runs; the same loop again allocates nothing new once warm. */
    make_feed(&f, 8);
    CHECK_EQ_INT(tessera_model_run_named(m, "main", f.n, f.names, f.values, 4, NULL, out), 0);
    uint64_t before = tessera_model_allocation_count(m);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(tessera_model_run_named(m, "main", f.n, f.names, f.values, 4, NULL, out), 0);
    CHECK_EQ_INT(tessera_model_allocation_count(m), before);
}

/* One feed made wrong by `change`: the status and a message naming the input. */
static void refused(tessera_model *m, void (*change)(feed *), int status, const char *text) {
    feed f;
    make_feed(&f, 3);
    change(&f);
    const tessera_tensor *out[4];
    CHECK_EQ_INT(tessera_model_run_named(m, "main", f.n, f.names, f.values, 4, NULL, out), status);
    CHECK(says(text));
}

static void drop_y(feed *f) { f->names[1] = f->names[3], f->values[1] = f->values[3], f->n = 3; }
static void unknown_z(feed *f) { f->names[4] = "z", f->values[4] = f->values[2], f->n = 5; }
static void twice(feed *f) { f->names[4] = "x", f->values[4] = f->values[2], f->n = 5; }
static void x_as_int32(feed *f) { f->values[2].tensor.dtype = TESSERA_INT32; }
static void x_rank_3(feed *f) { f->values[2].tensor.ndim = 3, f->values[2].tensor.shape[2] = 1; }
static void x_width_5(feed *f) { f->values[2].tensor.shape[1] = 5; }
static void n_past_bound(feed *f) { f->values[2].tensor.shape[0] = 9, f->values[1].tensor.shape[0] = 10; }
static void y_off_by_one(feed *f) { f->values[1].tensor.shape[0] = 5; }
static void k_as_tensor(feed *f) { f->values[3] = f->values[0]; }
static void x_as_int(feed *f) { f->values[2] = f->values[3]; }
static void ids_rank_2(feed *f) { f->values[0].tensor.ndim = 2, f->values[0].tensor.shape[1] = 1; }

static void each_bad_feed_names_its_input(tessera_model *m) {
    refused(m, drop_y, TESSERA_ERROR_INVALID_ARGUMENT, "input 'y' of main is missing (the inputs are 'x', 'y', 'k', 'ids')");
    refused(m, unknown_z, TESSERA_ERROR_INVALID_ARGUMENT, "unknown input 'z' of main; the inputs are 'x', 'y', 'k', 'ids'");
    refused(m, twice, TESSERA_ERROR_INVALID_ARGUMENT, "input 'x' of main is given twice");
    refused(m, x_as_int32, TESSERA_ERROR_RUNTIME_CHECK, "input 'x' of main: expected dtype float32, got int32");
    refused(m, x_rank_3, TESSERA_ERROR_RUNTIME_CHECK,
            "input 'x' of main: expected rank 2 (shape (n, 4)), got rank 3 (shape (3, 4, 1))");
    refused(m, x_width_5, TESSERA_ERROR_RUNTIME_CHECK,
            "input 'x' of main: expected shape (n, 4), got (3, 5): dimension 1 is 5, not 4");
    refused(m, n_past_bound, TESSERA_ERROR_RUNTIME_CHECK,
            "input 'x' of main: dimension 0 (n) is 9, above its upper bound 8");
    refused(m, y_off_by_one, TESSERA_ERROR_RUNTIME_CHECK,
            "input 'y' of main: expected shape (n + 1,), got (5,): dimension 0 is 5, not n + 1 = 4");
    refused(m, k_as_tensor, TESSERA_ERROR_INVALID_ARGUMENT, "input 'k' of main: expected an integer");
    refused(m, x_as_int, TESSERA_ERROR_INVALID_ARGUMENT, "input 'x' of main: expected a tensor");
    refused(m, ids_rank_2, TESSERA_ERROR_RUNTIME_CHECK, "input 'ids' of main: expected rank 1");
    /* Outputs: an unknown name, and every output asked for with room for fewer. */
    feed f;
    make_feed(&f, 3);
    const tessera_tensor *out[4];
    const char *logits[] = {"logits"};
    CHECK_EQ_INT(tessera_model_run_named(m, "main", f.n, f.names, f.values, 1, logits, out),
                 TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(says("unknown output 'logits' of main; the outputs are 'features', 'shifted', 'count', 'ids'"));
    CHECK_EQ_INT(tessera_model_run_named(m, "main", f.n, f.names, f.values, 2, NULL, out), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(says("main has 4 outputs; n_outputs is 2"));
    CHECK_EQ_INT(tessera_model_run_named(m, "main", f.n, NULL, f.values, 4, NULL, out), TESSERA_ERROR_INVALID_ARGUMENT);
    /* Two inputs disagreeing on m cannot happen here (one input has it): n from x against y is the check above. */
}

/* Result names that do not name the result once each are refused at load, as by the other runtimes. */
static void bad_result_names_are_refused(const char *dir) {
    const char *cases[][2] = {
        {"[\"a\", \"b\", \"c\"]", "'result_names' has 3 names for a result of 4 values"},
        {"[\"a\", \"b\", \"a\", \"d\"]", "'result_names' names the result 'a' a second time"},
        {"[\"a\", \"\", \"c\", \"d\"]", "non-empty strings"},
        {"\"abcd\"", "an array of strings"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        make_folder(dir, cases[i][0]);
        tsr_test_counts counts = {0, 0};
        tessera_model_params params = tessera_model_default_params();
        params.device = "cpu";
        params.allocator = tsr_test_counting_allocator(&counts);
        CHECK(tessera_model_load(dir, &params) == NULL);
        CHECK(says(cases[i][1]));
        CHECK_EQ_INT(counts.live, 0);
    }
    /* Without the member (executables from before it): output0 ... */
    make_folder(dir, NULL);
    tsr_test_counts counts = {0, 0};
    tessera_model *m = load(dir, &counts);
    CHECK(m != NULL);
    tessera_io io[4];
    if (m) CHECK_EQ_INT(tessera_model_outputs(m, "main", io, 4), 4);
    if (m) CHECK(strcmp(io[3].name, "output3") == 0);
    tessera_model_free(m);
}

int main(void) {
    char dir[] = "/tmp/tessera-model-io-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    make_folder(dir, "[\"features\", \"shifted\", \"count\", \"ids\"]");
    tsr_test_counts counts = {0, 0};
    tessera_model *m = load(dir, &counts);
    CHECK(m != NULL);
    if (m) {
        the_inputs_and_outputs_are_described(m);
        a_run_by_name(m);
        each_bad_feed_names_its_input(m);
    }
    tessera_model_free(m);
    CHECK_EQ_INT(counts.live, 0);
    bad_result_names_are_refused(dir);
    remove_folder(dir);
    return tsr_test_failures();
}
