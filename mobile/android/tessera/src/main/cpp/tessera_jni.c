/* tessera_jni.c: the JNI entry points of ai.tessera.TesseraJni (TesseraJni.kt), each a thin call of
 * tessera.h. Errors of the runtime come back as its status (or 0L for a handle); Kotlin then reads
 * lastError on the same thread and throws a TesseraException. Failures of JNI itself (an allocation)
 * leave a Java exception pending and return at once. Module's calls live in jni_call.c
 * (a run) and jni_io.c (what a function takes and returns).
 */
#include <stdlib.h>
#include <string.h>

#include "jni_support.h"
#include "tessera_jni.h"

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved) {
    (void)vm;
    (void)reserved;
    return JNI_VERSION_1_6;
}

JNIEXPORT jbyteArray TJ_FN(lastError)(JNIEnv *env, jclass cls) {
    (void)cls;
    return tj_bytes_of(env, tessera_last_error());
}

JNIEXPORT jbyteArray TJ_FN(statusName)(JNIEnv *env, jclass cls, jint status) {
    (void)cls;
    return tj_bytes_of(env, tessera_status_name(status));
}

JNIEXPORT jlong TJ_FN(modelLoad)(JNIEnv *env, jclass cls, jbyteArray dir, jbyteArray device, jint threads,
                                 jbyteArray cache_dir, jlong memory_limit) {
    (void)cls;
    jlong handle = 0;
    char *dir_text = tj_cstring(env, dir);
    char *device_text = dir_text ? tj_cstring(env, device) : NULL;
    char *cache_text = device_text && cache_dir ? tj_cstring(env, cache_dir) : NULL;
    if (device_text && (!cache_dir || cache_text)) {
        tessera_model_params params = tessera_model_default_params();
        params.n_threads = threads;
        params.device = device_text;
        params.cache_dir = cache_text;
        /* Kotlin refuses a negative limit; Long.MAX_VALUE (no limit) is above any machine's memory. */
        params.memory_limit = memory_limit > 0 ? (uint64_t)memory_limit : 0;
        handle = TJ_JLONG(tessera_model_load(dir_text, &params));
    }
    free(cache_text);
    free(device_text);
    free(dir_text);
    return handle;
}

JNIEXPORT void TJ_FN(modelFree)(JNIEnv *env, jclass cls, jlong model) {
    (void)env;
    (void)cls;
    tessera_model_free(TJ_HANDLE(tessera_model, model));
}

JNIEXPORT jbyteArray TJ_FN(modelDevice)(JNIEnv *env, jclass cls, jlong model) {
    (void)cls;
    return tj_bytes_of(env, tessera_model_device(TJ_HANDLE(tessera_model, model)));
}

JNIEXPORT jint TJ_FN(modelContextLength)(JNIEnv *env, jclass cls, jlong model) {
    (void)env;
    (void)cls;
    return tessera_model_context_length(TJ_HANDLE(tessera_model, model));
}

/* ---- memory: tessera_model_plan_devices and tessera_model_memory_devices ------------------------ */

typedef int32_t (*devices_fn)(const void *source, tessera_device_memory *out, int32_t max);

static int32_t plan_devices(const void *dir, tessera_device_memory *out, int32_t max) {
    return tessera_model_plan_devices((const char *)dir, out, max);
}

static int32_t memory_devices(const void *model, tessera_device_memory *out, int32_t max) {
    return tessera_model_memory_devices((const tessera_model *)model, out, max);
}

/* With names NULL: the number of devices. Otherwise fills names[i] (the kind) and sizes[4i..4i+3]. */
static jint read_devices(JNIEnv *env, devices_fn fn, const void *source, jobjectArray names, jlongArray sizes) {
    if (!names || !sizes) return fn(source, NULL, 0);
    jsize max = (*env)->GetArrayLength(env, names);
    if ((*env)->GetArrayLength(env, sizes) < 4 * max) {
        tj_throw_illegal_argument(env, "tessera_jni: sizes must hold four entries per device");
        return 0;
    }
    tessera_device_memory *entries = calloc((size_t)(max > 0 ? max : 1), sizeof *entries);
    if (!entries) {
        tj_throw_out_of_memory(env, "tessera_jni: reading the memory of each device");
        return 0;
    }
    int32_t count = fn(source, entries, max);
    for (int32_t i = 0; i < count && i < max; i++) {
        const tessera_device_memory *e = &entries[i];
        const char *end = memchr(e->device, '\0', sizeof e->device); /* strnlen is POSIX, not C11 */
        jbyteArray name = tj_bytes(env, e->device, end ? (size_t)(end - e->device) : sizeof e->device);
        if (!name) break;
        (*env)->SetObjectArrayElement(env, names, i, name);
        (*env)->DeleteLocalRef(env, name);
        jlong four[4] = {(jlong)e->weights, (jlong)e->arena, (jlong)e->kv_cache, (jlong)e->total};
        (*env)->SetLongArrayRegion(env, sizes, 4 * i, 4, four);
        if ((*env)->ExceptionCheck(env)) break;
    }
    free(entries);
    return count;
}

JNIEXPORT jint TJ_FN(planDevices)(JNIEnv *env, jclass cls, jbyteArray dir, jobjectArray names, jlongArray sizes) {
    (void)cls;
    char *dir_text = tj_cstring(env, dir);
    if (!dir_text) return 0;
    jint count = read_devices(env, plan_devices, dir_text, names, sizes);
    free(dir_text);
    return count;
}

JNIEXPORT jint TJ_FN(memoryDevices)(JNIEnv *env, jclass cls, jlong model, jobjectArray names, jlongArray sizes) {
    (void)cls;
    return read_devices(env, memory_devices, TJ_HANDLE(tessera_model, model), names, sizes);
}

/* ---- sessions and chat --------------------------------------------------------------------------- */

JNIEXPORT jlong TJ_FN(sessionNew)(JNIEnv *env, jclass cls, jlong model) {
    (void)env;
    (void)cls;
    return TJ_JLONG(tessera_session_new(TJ_HANDLE(tessera_model, model)));
}

JNIEXPORT void TJ_FN(sessionReset)(JNIEnv *env, jclass cls, jlong session) {
    (void)env;
    (void)cls;
    tessera_session_reset(TJ_HANDLE(tessera_session, session));
}

JNIEXPORT void TJ_FN(sessionFree)(JNIEnv *env, jclass cls, jlong session) {
    (void)env;
    (void)cls;
    tessera_session_free(TJ_HANDLE(tessera_session, session));
}

/* What the piece callback needs: the runtime calls it on the thread that called chatCompletion, so the
 * JNIEnv of that call is the right one. */
typedef struct piece_target {
    JNIEnv *env;
    jobject receiver;
    jmethodID on_piece;
} piece_target;

/* Hands one piece to PieceReceiver.onPiece as a byte[]; non-zero stops generation. The receiver catches
 * its consumer's exceptions, so one pending here is JNI's own (an allocation): stop, and leave it. */
static int deliver_piece(const char *piece, void *user) {
    piece_target *t = user;
    JNIEnv *env = t->env;
    if ((*env)->ExceptionCheck(env)) return 1;
    jbyteArray bytes = tj_bytes_of(env, piece);
    if (!bytes) return 1;
    jboolean more = (*env)->CallBooleanMethod(env, t->receiver, t->on_piece, bytes);
    (*env)->DeleteLocalRef(env, bytes); /* one local per piece: a long reply must not fill the frame */
    if ((*env)->ExceptionCheck(env)) return 1;
    return more ? 0 : 1;
}

/* The messages as C strings: 2n malloc'd strings (role, content) that free_messages releases. */
static tessera_message *read_messages(JNIEnv *env, jobjectArray roles, jobjectArray contents, size_t n) {
    tessera_message *msgs = calloc(n > 0 ? n : 1, sizeof *msgs);
    if (!msgs) {
        tj_throw_out_of_memory(env, "tessera_jni: copying the conversation");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        jobject role = (*env)->GetObjectArrayElement(env, roles, (jsize)i);
        if (role) msgs[i].role = tj_cstring(env, role);
        (*env)->DeleteLocalRef(env, role);
        jobject content = msgs[i].role ? (*env)->GetObjectArrayElement(env, contents, (jsize)i) : NULL;
        if (content) msgs[i].content = tj_cstring(env, content);
        (*env)->DeleteLocalRef(env, content);
        if (!msgs[i].role || !msgs[i].content) {
            tj_throw_illegal_argument(env, "tessera_jni: a message's role or content is missing");
            break;
        }
    }
    return msgs;
}

static void free_messages(tessera_message *msgs, size_t n) {
    if (!msgs) return;
    for (size_t i = 0; i < n; i++) {
        free((char *)msgs[i].role);
        free((char *)msgs[i].content);
    }
    free(msgs);
}

JNIEXPORT jint TJ_FN(chatCompletion)(JNIEnv *env, jclass cls, jlong session, jobjectArray roles,
                                     jobjectArray contents, jint max_tokens, jfloat temperature, jfloat top_p,
                                     jboolean seeded, jlong seed, jobject receiver, jintArray usage_out) {
    (void)cls;
    jsize n = (*env)->GetArrayLength(env, roles);
    if ((*env)->GetArrayLength(env, contents) != n || (*env)->GetArrayLength(env, usage_out) < 3) {
        tj_throw_illegal_argument(env, "tessera_jni: roles and contents differ in length, or usage is short");
        return 0;
    }
    jclass receiver_class = (*env)->GetObjectClass(env, receiver);
    jmethodID on_piece = (*env)->GetMethodID(env, receiver_class, "onPiece", "([B)Z");
    (*env)->DeleteLocalRef(env, receiver_class);
    if (!on_piece) return 0; /* NoSuchMethodError pending */
    tessera_message *msgs = read_messages(env, roles, contents, (size_t)n);
    if ((*env)->ExceptionCheck(env)) {
        free_messages(msgs, (size_t)n);
        return 0;
    }
    tessera_sampling_params sp = tessera_sampling_default_params();
    sp.max_tokens = max_tokens;
    sp.temperature = temperature;
    sp.top_p = top_p;
    if (seeded) sp.seed = (uint64_t)seed;
    piece_target target = {env, receiver, on_piece};
    tessera_usage usage;
    memset(&usage, 0, sizeof usage);
    int status = tessera_chat_completion(TJ_HANDLE(tessera_session, session), msgs, (size_t)n, &sp, deliver_piece,
                                         &target, &usage);
    free_messages(msgs, (size_t)n);
    if (!(*env)->ExceptionCheck(env)) {
        jint counts[3] = {usage.prompt_tokens, usage.prefilled_tokens, usage.completion_tokens};
        (*env)->SetIntArrayRegion(env, usage_out, 0, 3, counts);
    }
    return status;
}
