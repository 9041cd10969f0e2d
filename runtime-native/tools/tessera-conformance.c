/* tessera-conformance: run one conformance case folder (tests/conformance/README.md) through the C
 * API, where Python cannot load the library: the AArch64 build under qemu-user, a phone over adb.
 *
 *   tessera-conformance CASE_DIR OUT_DIR [--device NAME]
 *
 * Runs every call of CASE_DIR/case.json in order on one model (one thread: Debian 12's qemu-user
 * hangs in a guest's pthread_create), with the library every adapter registers (tessera.test.double),
 * and writes what each call gave to OUT_DIR/results.json: {"calls": [{"outputs": [{"dtype", "shape",
 * "data"}]} or {"error": MESSAGE}, ...]}, with each output's raw bytes in OUT_DIR/callI-outJ.bin.
 * It judges nothing: the comparison is the one rule of tests/conformance/caseio.py, applied by the
 * adapter that reads OUT_DIR (tests/conformance/qemu_aarch64.py). Exit status 0 once every call
 * ran (an expected error is a result too), 1 when the case could not be read or loaded. --device names
 * the device as tessera_model_params.device does (default "auto"); the device line goes to stderr. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

#define MAX_ARGS 64
#define MAX_PATH 4096

static const char *const DTYPE_NAMES[] = {"float32", "float16", "int32", "uint32", "int64", "bool", "int8", "uint8"};
static const size_t DTYPE_SIZES[] = {4, 2, 4, 4, 8, 1, 1, 1};
#define N_DTYPES (sizeof DTYPE_NAMES / sizeof DTYPE_NAMES[0])

static int dtype_of(const char *name) {
    for (size_t i = 0; name && i < N_DTYPES; i++)
        if (strcmp(name, DTYPE_NAMES[i]) == 0) return (int)i;
    return -1;
}

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *data = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n + 1)) != NULL) {
        if (fread(data, 1, (size_t)n, f) != (size_t)n) {
            free(data);
            data = NULL;
        } else {
            data[n] = '\0';
            *size = (size_t)n;
        }
    }
    fclose(f);
    return data;
}

/* tessera.test.double: out[i] = 2 * x[i], float32 (tests/conformance/programs.py). */
static int test_double(const tessera_value *args, size_t n_args, tessera_tensor *outs, size_t n_outs,
                       const int64_t *scalars, size_t n_scalars, int64_t *result, void *user) {
    if (n_args < 1 || n_outs != 1 || args[0].kind != TESSERA_VALUE_TENSOR || args[0].tensor.dtype != TESSERA_FLOAT32 ||
        outs[0].dtype != TESSERA_FLOAT32) {
        tessera_library_error("tessera.test.double takes one float32 tensor and fills one");
        return 1;
    }
    int64_t n = 1;
    for (int32_t i = 0; i < outs[0].ndim; i++) n *= outs[0].shape[i];
    const float *x = args[0].tensor.data;
    float *out = outs[0].data;
    for (int64_t i = 0; i < n; i++) out[i] = 2.0f * x[i];
    return 0;
}

/* Arguments of one call: the values, and the buffers and tuple arrays they point into. */
typedef struct arg_store {
    void *owned[MAX_ARGS * 4];
    size_t n_owned;
} arg_store;

static int own(arg_store *store, void *p) {
    if (!p || store->n_owned == sizeof store->owned / sizeof store->owned[0]) {
        free(p);
        return 1;
    }
    store->owned[store->n_owned++] = p;
    return 0;
}

static int read_arg(const char *dir, const cJSON *entry, tessera_value *out, arg_store *store) {
    memset(out, 0, sizeof *out);
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(entry, "value");
    const cJSON *tuple = cJSON_GetObjectItemCaseSensitive(entry, "tuple");
    if (cJSON_IsNumber(value)) {
        out->kind = TESSERA_VALUE_INT;
        out->value = (int64_t)value->valuedouble;
        return 0;
    }
    if (cJSON_IsArray(tuple)) {
        int n = cJSON_GetArraySize(tuple);
        tessera_value *items = calloc(n > 0 ? (size_t)n : 1, sizeof *items);
        if (own(store, items)) return 1;
        for (int i = 0; i < n; i++)
            if (read_arg(dir, cJSON_GetArrayItem(tuple, i), &items[i], store)) return 1;
        out->kind = TESSERA_VALUE_TUPLE;
        out->items = items;
        out->n_items = (size_t)n;
        return 0;
    }
    int dtype = dtype_of(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "dtype")));
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const char *data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "data"));
    if (dtype < 0 || !cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > TESSERA_MAX_NDIM || !data) {
        fprintf(stderr, "error: an argument of case.json is neither a value, a tuple nor a known tensor\n");
        return 1;
    }
    out->kind = TESSERA_VALUE_TENSOR;
    out->tensor.dtype = (tessera_dtype)dtype;
    out->tensor.ndim = cJSON_GetArraySize(shape);
    size_t count = 1, size = 0;
    for (int32_t i = 0; i < out->tensor.ndim; i++) {
        out->tensor.shape[i] = (int64_t)cJSON_GetArrayItem(shape, i)->valuedouble;
        count *= (size_t)out->tensor.shape[i];
    }
    char path[MAX_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, data);
    out->tensor.data = read_file(path, &size);
    if (own(store, out->tensor.data) || size != count * DTYPE_SIZES[dtype]) {
        fprintf(stderr, "error: %s: missing, or not %zu elements of %s\n", path, count, DTYPE_NAMES[dtype]);
        return 1;
    }
    return 0;
}

static int write_output(const char *out_dir, int call, int position, const tessera_tensor *t, cJSON *outputs) {
    char name[64], path[MAX_PATH];
    snprintf(name, sizeof name, "call%d-out%d.bin", call, position);
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    size_t count = 1;
    cJSON *entry = cJSON_CreateObject(), *shape = cJSON_CreateArray();
    for (int32_t i = 0; i < t->ndim; i++) {
        count *= (size_t)t->shape[i];
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[i]));
    }
    cJSON_AddStringToObject(entry, "dtype", DTYPE_NAMES[t->dtype]);
    cJSON_AddItemToObject(entry, "shape", shape);
    cJSON_AddStringToObject(entry, "data", name);
    cJSON_AddItemToArray(outputs, entry);
    FILE *f = fopen(path, "wb");
    size_t bytes = count * DTYPE_SIZES[t->dtype];
    int failed = !f || (bytes && fwrite(t->data, 1, bytes, f) != bytes);
    if (f && fclose(f)) failed = 1;
    if (failed) fprintf(stderr, "error: cannot write %s\n", path);
    return failed;
}

int main(int argc, char **argv) {
    const char *device = "auto";
    if (argc == 5 && strcmp(argv[3], "--device") == 0) device = argv[4];
    else if (argc != 3) {
        fprintf(stderr, "usage: tessera-conformance CASE_DIR OUT_DIR [--device NAME]\n");
        return 2;
    }
    const char *dir = argv[1], *out_dir = argv[2];
    char path[MAX_PATH];
    size_t size;
    snprintf(path, sizeof path, "%s/case.json", dir);
    char *text = read_file(path, &size);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(doc, "calls");
    if (!cJSON_IsArray(calls)) {
        fprintf(stderr, "error: %s is missing or has no calls\n", path);
        cJSON_Delete(doc);
        return 1;
    }
    tessera_library libraries[] = {{"tessera.test.double", test_double, NULL}};
    tessera_model_params params = tessera_model_default_params();
    params.n_threads = 1;
    params.libraries = libraries;
    params.n_libraries = 1;
    params.device = device;
    tessera_model *model = tessera_model_load(dir, &params);
    if (!model) {
        fprintf(stderr, "error: %s\n", tessera_last_error());
        cJSON_Delete(doc);
        return 1;
    }
    fprintf(stderr, "device: %s\n", tessera_model_device(model));
    cJSON *results = cJSON_CreateObject(), *results_calls = cJSON_AddArrayToObject(results, "calls");
    int status = 0;
    for (int c = 0; c < cJSON_GetArraySize(calls) && !status; c++) {
        const cJSON *call = cJSON_GetArrayItem(calls, c);
        const char *function = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "function"));
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(call, "args");
        int n_args = cJSON_GetArraySize(args);
        if (!function || !cJSON_IsArray(args) || n_args > MAX_ARGS) {
            fprintf(stderr, "error: call %d of %s has no function or too many arguments\n", c, path);
            status = 1;
            break;
        }
        arg_store store = {{0}, 0};
        tessera_value values[MAX_ARGS];
        for (int a = 0; a < n_args && !status; a++) status = read_arg(dir, cJSON_GetArrayItem(args, a), &values[a], &store);
        cJSON *result = cJSON_CreateObject();
        cJSON_AddItemToArray(results_calls, result);
        const tessera_tensor *outputs = NULL;
        size_t n_outputs = 0;
        if (!status) {
            if (tessera_model_call(model, function, values, (size_t)n_args, &outputs, &n_outputs) != 0) {
                cJSON_AddStringToObject(result, "error", tessera_last_error());
            } else {
                cJSON *list = cJSON_AddArrayToObject(result, "outputs");
                for (size_t i = 0; i < n_outputs && !status; i++) status = write_output(out_dir, c, (int)i, &outputs[i], list);
            }
        }
        for (size_t i = 0; i < store.n_owned; i++) free(store.owned[i]);
    }
    tessera_model_free(model);
    cJSON_Delete(doc);
    snprintf(path, sizeof path, "%s/results.json", out_dir);
    char *json = cJSON_Print(results);
    FILE *f = fopen(path, "w");
    if (!json || !f || fputs(json, f) < 0) status = 1;
    if (f && fclose(f)) status = 1;
    if (status) fprintf(stderr, "error: the case did not run to its end (%s)\n", path);
    free(json);
    cJSON_Delete(results);
    return status;
}
