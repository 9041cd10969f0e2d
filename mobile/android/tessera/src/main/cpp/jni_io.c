/* jni_io.c: TesseraJni.modelFunctions and modelIo, what Module knows of an executable's functions: their
 * names, and each one's inputs and outputs as tessera_model_inputs/_outputs describe them (tessera.h). The
 * runtime read executable.json once, at load; Kotlin parses nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "jni_support.h"
#include "tessera_jni.h"

/* A byte[][] of the strings (NULL entries stay null); NULL with an exception pending. */
static jobjectArray string_array(JNIEnv *env, const char *const *texts, size_t n) {
    jclass bytes_class = (*env)->FindClass(env, "[B");
    jobjectArray array = bytes_class ? (*env)->NewObjectArray(env, (jsize)n, bytes_class, NULL) : NULL;
    for (size_t i = 0; array && i < n; i++) {
        if (!texts[i]) continue;
        jbyteArray text = tj_bytes_of(env, texts[i]);
        if (!text) {
            (*env)->DeleteLocalRef(env, array);
            array = NULL;
            break;
        }
        (*env)->SetObjectArrayElement(env, array, (jsize)i, text);
        (*env)->DeleteLocalRef(env, text);
    }
    (*env)->DeleteLocalRef(env, bytes_class);
    return array;
}

JNIEXPORT jobjectArray TJ_FN(modelFunctions)(JNIEnv *env, jclass cls, jlong model) {
    (void)cls;
    const tessera_model *m = TJ_HANDLE(tessera_model, model);
    int32_t n = tessera_model_functions(m, NULL, 0);
    if (n < 0) return NULL;
    const char **names = calloc(n > 0 ? (size_t)n : 1, sizeof *names);
    if (!names) {
        tj_throw_out_of_memory(env, "tessera_jni: listing the functions");
        return NULL;
    }
    jobjectArray result = NULL;
    if (tessera_model_functions(m, names, n) == n) result = string_array(env, names, (size_t)n);
    free(names);
    return result;
}

/* [int[] (kind, has_dtype, dtype, ndim) per entry, long[] (shape, upper bound) per dimension of each entry,
 * byte[][] (name, value, then each dimension's text) per entry]. */
static jobjectArray encode(JNIEnv *env, const tessera_io *io, int32_t n) {
    size_t n_dims = 0;
    for (int32_t i = 0; i < n; i++) n_dims += io[i].ndim > 0 ? (size_t)io[i].ndim : 0;
    jint *fields = malloc((size_t)(n > 0 ? n : 1) * 4 * sizeof *fields);
    jlong *dims = malloc((n_dims > 0 ? n_dims : 1) * 2 * sizeof *dims);
    const char **texts = malloc(((size_t)n * 2 + n_dims + 1) * sizeof *texts);
    jclass object_class = (*env)->FindClass(env, "java/lang/Object");
    jobjectArray result = object_class ? (*env)->NewObjectArray(env, 3, object_class, NULL) : NULL;
    jintArray field_array = result ? (*env)->NewIntArray(env, (jsize)(n * 4)) : NULL;
    jlongArray dim_array = field_array ? (*env)->NewLongArray(env, (jsize)(n_dims * 2)) : NULL;
    jobjectArray text_array = NULL;
    if (!fields || !dims || !texts) tj_throw_out_of_memory(env, "tessera_jni: describing a function");
    if (dim_array && fields && dims && texts) {
        size_t d = 0, t = 0;
        for (int32_t i = 0; i < n; i++) {
            fields[4 * i] = io[i].kind;
            fields[4 * i + 1] = io[i].has_dtype;
            fields[4 * i + 2] = (jint)io[i].dtype;
            fields[4 * i + 3] = io[i].ndim;
            texts[t++] = io[i].name;
            texts[t++] = io[i].value;
            for (int32_t k = 0; k < io[i].ndim; k++, d++) {
                dims[2 * d] = io[i].shape[k];
                dims[2 * d + 1] = io[i].upper_bounds[k];
                texts[t++] = io[i].dims[k];
            }
        }
        (*env)->SetIntArrayRegion(env, field_array, 0, (jsize)(n * 4), fields);
        (*env)->SetLongArrayRegion(env, dim_array, 0, (jsize)(n_dims * 2), dims);
        text_array = string_array(env, texts, t);
        if (text_array) {
            (*env)->SetObjectArrayElement(env, result, 0, field_array);
            (*env)->SetObjectArrayElement(env, result, 1, dim_array);
            (*env)->SetObjectArrayElement(env, result, 2, text_array);
        }
    }
    free(fields);
    free(dims);
    free(texts);
    (*env)->DeleteLocalRef(env, object_class);
    (*env)->DeleteLocalRef(env, field_array);
    (*env)->DeleteLocalRef(env, dim_array);
    (*env)->DeleteLocalRef(env, text_array);
    if ((*env)->ExceptionCheck(env)) {
        (*env)->DeleteLocalRef(env, result);
        return NULL;
    }
    return result;
}

JNIEXPORT jobjectArray TJ_FN(modelIo)(JNIEnv *env, jclass cls, jlong model, jbyteArray function, jboolean outputs,
                                      jintArray status_out) {
    (void)cls;
    const tessera_model *m = TJ_HANDLE(tessera_model, model);
    char *name = tj_cstring(env, function);
    if (!name) return NULL;
    int32_t (*describe)(const tessera_model *, const char *, tessera_io *, int32_t) =
        outputs ? tessera_model_outputs : tessera_model_inputs;
    jobjectArray result = NULL;
    jint n = describe(m, name, NULL, 0);
    tessera_io *io = n >= 0 ? calloc(n > 0 ? (size_t)n : 1, sizeof *io) : NULL;
    if (n >= 0 && !io) tj_throw_out_of_memory(env, "tessera_jni: describing a function");
    if (io) n = describe(m, name, io, n);
    if (n < 0)
        (*env)->SetIntArrayRegion(env, status_out, 0, 1, &n);
    else if (io)
        result = encode(env, io, n);
    free(io);
    free(name);
    return result;
}
