/* The C calls of mobile/ios's Swift package (the Swift sources of Sources/Tessera), in the order and
 * with the argument conventions the Swift uses. There is no Swift toolchain here, so this mirror is what
 * runs: a change to the Swift's call sequence must change this test too (tests/mobile/test_swift_api.py
 * checks that every tessera_* function the Swift calls appears here).
 *
 * The model is a plain executable written to a temporary folder (a CPU build with no kernels: its main
 * calls the runtime's own unique builtins), so Module.run is mirrored with real numbers. There is no chat
 * model in tests/data, so Engine's sequence is mirrored up to where a plain executable must refuse it by
 * name, and the chat calls are checked to refuse a closed (NULL) session. Given a chat model's folder as
 * its argument (tests/mobile/test_swift_mirror_chat.py compiles the tiny Llama for the CPU), it also runs
 * Engine's chat sequence: a whole reply, a streamed reply cancelled from the callback, reset, close. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessera.h"

/* main(x: float32[n]) -> the sorted unique values of x (tessera.builtin.unique_size, then unique). */
static const char *const EXECUTABLE =
    "{\"format\": \"tessera-executable\", \"version\": 3,"
    " \"target\": {\"kind\": \"cpu\", \"name\": \"cpu-generic\", \"backend\": \"c-native\", \"features\": []},"
    " \"constants\": [], \"libraries\": [\"tessera.builtin.unique_size\", \"tessera.builtin.unique\"],"
    " \"required_features\": [], \"required_limits\": {}, \"modules\": [], \"kernels\": [],"
    " \"functions\": {\"main\": {"
    "  \"params\": [{\"name\": \"x\", \"register\": 0, \"state\": false, \"sinfo\": {\"kind\": \"tensor\","
    "   \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}}],"
    "  \"symbols\": {\"n\": {\"upper_bound\": null}, \"m\": {\"upper_bound\": null}}, \"registers\": 3,"
    "  \"tensors\": {}, \"locations\": {}, \"memory\": {\"static\": false, \"buffers\": [], \"storages\": []},"
    "  \"code\": ["
    "   {\"op\": \"match\", \"reg\": 0, \"what\": \"argument 'x' of main\", \"text\": \"R.Tensor((n,))\","
    "    \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}},"
    "   {\"op\": \"call_builtin\", \"name\": \"tessera.builtin.unique_size\", \"args\": [0], \"outs\": [],"
    "    \"scalars\": [], \"dst\": 1},"
    "   {\"op\": \"match\", \"reg\": 1, \"what\": \"the unique count\", \"text\": \"R.Prim(value=m)\","
    "    \"sinfo\": {\"kind\": \"prim\", \"dtype\": \"int64\", \"value\": \"m\"}},"
    "   {\"op\": \"alloc_tensor\", \"dst\": 2, \"shape\": [\"m\"], \"dtype\": \"float32\"},"
    "   {\"op\": \"call_builtin\", \"name\": \"tessera.builtin.unique\", \"args\": [0], \"outs\": [2],"
    "    \"scalars\": [], \"dst\": null},"
    "   {\"op\": \"ret\", \"src\": 2}],"
    "  \"result\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"m\"]},"
    "  \"result_names\": [\"unique\"]}}}";

static const char *const TENSOR_CACHE = "{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": []}";

static void write_text(const char *dir, const char *name, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(text, 1, strlen(text), f) == strlen(text));
    fclose(f);
}

static void remove_folder(const char *dir) {
    const char *names[] = {"executable.json", "tensor-cache.json"};
    char path[600];
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    /* A load may leave a (here empty) pipeline cache folder behind. */
    snprintf(path, sizeof path, "%s/.tessera-cache", dir);
    remove(path);
    remove(dir);
}

/* The Swift's TesseraError: the status name and tessera_last_error() read right after the failing call. */
static void expect_error(int status, const char *status_name, const char *message_part) {
    CHECK(status < 0);
    CHECK(strcmp(tessera_status_name(status), status_name) == 0);
    const char *message = tessera_last_error();
    CHECK(message != NULL && message[0] != '\0');
    if (message && message_part && !strstr(message, message_part)) {
        fprintf(stderr, "message without \"%s\": %s\n", message_part, message);
        CHECK(0);
    }
}

/* Module(modelPath:options:).run([Tensor]) and close(): Module.swift. */
static void module_run_mirrors_the_swift(const char *dir) {
    /* init: default params, then the options' threads and device (the Swift keeps the C string alive
     * for the duration of the load with withCString). */
    tessera_model_params params = tessera_model_default_params();
    params.n_threads = 1;
    params.memory_limit = 0; /* EngineOptions.memoryLimit's default: what the machine has available */
    params.device = "cpu";
    tessera_model *m = tessera_model_load(dir, &params);
    CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "load: %s\n", tessera_last_error());
        return;
    }
    const char *device = tessera_model_device(m);
    CHECK(device != NULL && strncmp(device, "cpu", 3) == 0);
    tessera_compile_stats stats;
    CHECK_EQ_INT(tessera_model_compile_stats(m, &stats), TESSERA_OK);
    CHECK_EQ_INT(stats.kernels, 0);

    /* run: each Tensor becomes a TESSERA_VALUE_TENSOR over the Swift array's bytes (withUnsafeMutableBytes),
     * shape copied into the fixed array; then the function "main". */
    float x[6] = {3.0f, 1.0f, 3.0f, 2.0f, 1.0f, 5.0f};
    tessera_value arg;
    memset(&arg, 0, sizeof arg);
    arg.kind = TESSERA_VALUE_TENSOR;
    arg.tensor.data = x;
    arg.tensor.dtype = TESSERA_FLOAT32;
    arg.tensor.ndim = 1;
    arg.tensor.shape[0] = 6;
    const tessera_tensor *outputs = NULL;
    size_t n_outputs = 0;
    CHECK_EQ_INT(tessera_model_call(m, "main", &arg, 1, &outputs, &n_outputs), TESSERA_OK);
    /* The Swift copies every output out before the next call (they belong to the model). */
    CHECK_EQ_INT(n_outputs, 1);
    if (n_outputs == 1) {
        CHECK_EQ_INT(outputs[0].dtype, TESSERA_FLOAT32);
        CHECK_EQ_INT(outputs[0].ndim, 1);
        CHECK_EQ_INT(outputs[0].shape[0], 4);
        const float want[4] = {1.0f, 2.0f, 3.0f, 5.0f};
        if (outputs[0].shape[0] == 4) CHECK(memcmp(outputs[0].data, want, sizeof want) == 0);
    }

    /* A wrong input (int32 where main wants float32) is a TesseraError, and the model stays usable. */
    int32_t wrong[2] = {1, 2};
    arg.tensor.data = wrong;
    arg.tensor.dtype = TESSERA_INT32;
    arg.tensor.shape[0] = 2;
    int status = tessera_model_call(m, "main", &arg, 1, &outputs, &n_outputs);
    expect_error(status, "TESSERA_ERROR_RUNTIME_CHECK", "main");
    arg.tensor.data = x;
    arg.tensor.dtype = TESSERA_FLOAT32;
    arg.tensor.shape[0] = 3;
    CHECK_EQ_INT(tessera_model_call(m, "main", &arg, 1, &outputs, &n_outputs), TESSERA_OK);
    CHECK(n_outputs == 1 && outputs[0].shape[0] == 2);

    /* A function the executable lacks. */
    status = tessera_model_call(m, "missing", &arg, 1, &outputs, &n_outputs);
    CHECK(status < 0);
    CHECK(tessera_last_error()[0] != '\0');

    /* close(): free, then null the handle; a second close() sees NULL and calls nothing. */
    tessera_model_free(m);
    m = NULL;
    if (m) tessera_model_free(m);
}

/* Module.inputs(function:) / outputs(function:) (ask for the count, then fill an array of that many) and
 * run(named:function:outputNames:): the names as C strings, integers as TESSERA_VALUE_INT, the outputs by
 * pointer, copied out before the next call. */
static void module_named_run_mirrors_the_swift(const char *dir) {
    tessera_model_params params = tessera_model_default_params();
    params.n_threads = 1;
    params.device = "cpu";
    tessera_model *m = tessera_model_load(dir, &params);
    CHECK(m != NULL);
    if (!m) return;
    int32_t count = tessera_model_inputs(m, "main", NULL, 0);
    CHECK_EQ_INT(count, 1);
    tessera_io io[1];
    CHECK_EQ_INT(tessera_model_inputs(m, "main", io, count), 1);
    CHECK(strcmp(io[0].name, "x") == 0 && io[0].kind == 0 && io[0].has_dtype && io[0].dtype == TESSERA_FLOAT32);
    CHECK(io[0].ndim == 1 && strcmp(io[0].dims[0], "n") == 0 && io[0].shape[0] == -1 && io[0].upper_bounds[0] == -1);
    count = tessera_model_outputs(m, "main", NULL, 0);
    CHECK_EQ_INT(count, 1);
    CHECK_EQ_INT(tessera_model_outputs(m, "main", io, count), 1);
    CHECK(strcmp(io[0].name, "unique") == 0);
    expect_error(tessera_model_inputs(m, "missing", NULL, 0), "TESSERA_ERROR_INVALID_ARGUMENT", "missing");

    float x[5] = {4.0f, 4.0f, 1.0f, 9.0f, 1.0f};
    tessera_value value;
    memset(&value, 0, sizeof value);
    value.tensor.data = x;
    value.tensor.dtype = TESSERA_FLOAT32;
    value.tensor.ndim = 1;
    value.tensor.shape[0] = 5;
    const char *names[] = {"x"};
    const tessera_tensor *outputs[1] = {NULL};
    CHECK_EQ_INT(tessera_model_run_named(m, "main", 1, names, &value, 1, NULL, outputs), TESSERA_OK);
    CHECK(outputs[0] != NULL && outputs[0]->shape[0] == 3);
    const char *wanted[] = {"unique"};
    CHECK_EQ_INT(tessera_model_run_named(m, "main", 1, names, &value, 1, wanted, outputs), TESSERA_OK);
    if (outputs[0] && outputs[0]->shape[0] == 3) {
        const float want[3] = {1.0f, 4.0f, 9.0f};
        CHECK(memcmp(outputs[0]->data, want, sizeof want) == 0);
    }
    /* A wrong name is a TesseraError naming it. */
    const char *typo[] = {"y"};
    expect_error(tessera_model_run_named(m, "main", 1, typo, &value, 1, NULL, outputs), "TESSERA_ERROR_INVALID_ARGUMENT",
                 "unknown input 'y' of main");
    tessera_model_free(m);
}

/* Engine(modelPath:options:) on a plain executable: the model loads, the session is refused by name,
 * and the Swift frees the model before throwing. Engine.memory(modelPath:) works before any load. */
static void engine_sequence_on_a_plain_executable(const char *dir) {
    /* Engine.memory: ask for the count, then fill an array of that many. */
    int32_t count = tessera_model_plan_devices(dir, NULL, 0);
    CHECK_EQ_INT(count, 1);
    if (count == 1) {
        tessera_device_memory devices[1];
        CHECK_EQ_INT(tessera_model_plan_devices(dir, devices, count), 1);
        CHECK(strcmp(devices[0].device, "cpu") == 0);
        CHECK_EQ_INT(devices[0].weights, 0);
    }

    tessera_model_params params = tessera_model_default_params();
    /* EngineOptions(threads: 1): one thread, because this test also runs in the AArch64 build under
     * qemu-user, which hangs in a guest's pthread_create (runtime-native/CMakeLists.txt). */
    params.n_threads = 1;
    params.memory_limit = 0;
    params.device = "auto";
    tessera_model *m = tessera_model_load(dir, &params);
    CHECK(m != NULL);
    if (!m) return;
    CHECK(tessera_model_device(m) != NULL);
    tessera_session *s = tessera_session_new(m);
    CHECK(s == NULL);
    const char *message = tessera_last_error();
    CHECK(message != NULL && message[0] != '\0');
    if (s) tessera_session_free(s);
    tessera_model_free(m);

    /* The calls the Swift makes on a live engine refuse NULL handles cleanly (close() then a call). */
    tessera_sampling_params sp = tessera_sampling_default_params();
    sp.max_tokens = 4;
    sp.temperature = 0.0f;
    sp.top_p = 1.0f;
    sp.seed = 7;
    tessera_message msg = {"user", "hi"};
    tessera_usage usage;
    int status = tessera_chat_completion(NULL, &msg, 1, &sp, NULL, NULL, &usage);
    expect_error(status, "TESSERA_ERROR_INVALID_ARGUMENT", NULL);
    tessera_session_reset(NULL);
    tessera_session_free(NULL);
    tessera_model_free(NULL);
}

/* A failed load: NULL, and the message names what is missing; the Swift throws it with no status code. */
static void a_failed_load_explains_itself(void) {
    tessera_model_params params = tessera_model_default_params();
    params.device = "metal";
    tessera_model *m = tessera_model_load("/nonexistent-tessera-model", &params);
    CHECK(m == NULL);
    const char *message = tessera_last_error();
    CHECK(message != NULL && message[0] != '\0');
    CHECK(tessera_model_plan_devices("/nonexistent-tessera-model", NULL, 0) < 0);
}

/* The Swift's PieceSink as far as the C callback sees it: collect the pieces; return non-zero (stop) once
 * the consumer has cancelled, which here is after `cancel_after` pieces (0: never). */
typedef struct sink {
    char text[4096];
    size_t length;
    int pieces;
    int cancel_after;
} sink;

static int piece_callback(const char *utf8_piece, void *user) {
    sink *k = user;
    if (!utf8_piece || !k) return 1;
    if (k->cancel_after > 0 && k->pieces >= k->cancel_after) return 1;
    size_t n = strlen(utf8_piece);
    if (k->length + n < sizeof k->text) {
        memcpy(k->text + k->length, utf8_piece, n);
        k->length += n;
        k->text[k->length] = '\0';
    }
    k->pieces++;
    return k->cancel_after > 0 && k->pieces >= k->cancel_after;
}

/* Engine.complete: sampling defaults with the options on top, the messages, the callback with the sink as
 * its user pointer, the usage. */
static int complete(tessera_session *s, sink *k, int32_t max_tokens, tessera_usage *usage) {
    tessera_sampling_params sp = tessera_sampling_default_params();
    sp.max_tokens = max_tokens;
    sp.temperature = 0.0f;
    sp.top_p = 1.0f;
    tessera_message msgs[2] = {{"system", "You are terse."}, {"user", "Hello there"}};
    memset(usage, 0, sizeof *usage);
    return tessera_chat_completion(s, msgs, 2, &sp, piece_callback, k, usage);
}

static void engine_chat_mirrors_the_swift(const char *dir) {
    tessera_model_params params = tessera_model_default_params();
    params.n_threads = 1;
    params.memory_limit = 0;
    params.device = "auto";
    tessera_model *m = tessera_model_load(dir, &params);
    CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "load %s: %s\n", dir, tessera_last_error());
        return;
    }
    CHECK(tessera_model_device(m) != NULL);
    tessera_session *s = tessera_session_new(m);
    CHECK(s != NULL);
    if (!s) {
        tessera_model_free(m);
        return;
    }
    /* create(): the whole reply. */
    sink whole = {.cancel_after = 0};
    tessera_usage usage;
    CHECK_EQ_INT(complete(s, &whole, 6, &usage), TESSERA_OK);
    CHECK_EQ_INT(usage.completion_tokens, 6);
    CHECK(usage.prompt_tokens > 0);
    CHECK(whole.pieces >= 1);
    /* The reply, for the pytest to compare with the Python VM's. */
    printf("reply: %s\n", whole.text);

    /* stream() cancelled after two pieces: the callback's non-zero return ends the turn with OK. */
    sink cancelled = {.cancel_after = 2};
    CHECK_EQ_INT(complete(s, &cancelled, 6, &usage), TESSERA_OK);
    CHECK_EQ_INT(cancelled.pieces, 2);
    CHECK_EQ_INT(usage.completion_tokens, 2);
    CHECK(strncmp(whole.text, cancelled.text, cancelled.length) == 0);

    /* reset(), then the same greedy reply again. */
    tessera_session_reset(s);
    sink again = {.cancel_after = 0};
    CHECK_EQ_INT(complete(s, &again, 6, &usage), TESSERA_OK);
    CHECK(strcmp(again.text, whole.text) == 0);
    CHECK_EQ_INT(usage.prefilled_tokens, usage.prompt_tokens);

    /* close() twice: free the session, then the model, nulling each; the second close frees nothing. */
    for (int i = 0; i < 2; i++) {
        if (s) tessera_session_free(s);
        s = NULL;
        if (m) tessera_model_free(m);
        m = NULL;
    }
}

int main(int argc, char **argv) {
    char dir[] = "/tmp/tessera-swift-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    write_text(dir, "executable.json", EXECUTABLE);
    write_text(dir, "tensor-cache.json", TENSOR_CACHE);
    module_run_mirrors_the_swift(dir);
    module_named_run_mirrors_the_swift(dir);
    engine_sequence_on_a_plain_executable(dir);
    a_failed_load_explains_itself();
    remove_folder(dir);
    if (argc > 1) engine_chat_mirrors_the_swift(argv[1]);
    return tsr_test_failures();
}
