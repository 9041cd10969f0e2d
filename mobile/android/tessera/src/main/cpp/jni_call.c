/* jni_call.c: TesseraJni.modelRunNamed, Module.run's call of tessera_model_run_named. The inputs arrive as
 * arrays beside their names (the runtime matches names to parameters and checks each input, naming it);
 * each tensor's bytes are copied into a 64-byte aligned buffer that lives until the outputs are copied,
 * because an output may alias an input (a function that returns its argument) and the runtime owns the
 * outputs only until its next call.
 */
#include <stdlib.h>
#include <string.h>

#include "jni_support.h"
#include "tessera_jni.h"

#define TJ_ALIGNMENT 64

/* Bytes per element as tessera.h lays tensors out (bool one byte); 0 for an unknown dtype. */
static size_t element_bytes(int dtype) {
    switch (dtype) {
    case TESSERA_FLOAT32: case TESSERA_INT32: case TESSERA_UINT32: return 4;
    case TESSERA_FLOAT16: return 2;
    case TESSERA_INT64: return 8;
    case TESSERA_BOOL: case TESSERA_INT8: case TESSERA_UINT8: return 1;
    default: return 0;
    }
}

static size_t tensor_bytes(const tessera_tensor *t) {
    size_t n = element_bytes((int)t->dtype);
    for (int32_t d = 0; d < t->ndim && d < TESSERA_MAX_NDIM; d++) n *= (size_t)t->shape[d];
    return n;
}

/* The inputs: values[] for the runtime, and the malloc'd blocks behind their aligned data. */
typedef struct call_inputs {
    size_t n;
    tessera_value *values;
    void **blocks;
} call_inputs;

static void free_inputs(call_inputs *in) {
    for (size_t i = 0; in->blocks && i < in->n; i++) free(in->blocks[i]);
    free(in->blocks);
    free(in->values);
}

/* Reads input i, a tensor: its dtype, shape (at most TESSERA_MAX_NDIM) and bytes. 0, or -1 with an
 * exception pending. */
static int read_tensor(JNIEnv *env, call_inputs *in, size_t i, jint dtype, jobjectArray shapes, jobjectArray data) {
    tessera_value *v = &in->values[i];
    v->kind = TESSERA_VALUE_TENSOR;
    v->tensor.dtype = (tessera_dtype)dtype;
    jlongArray shape = (*env)->GetObjectArrayElement(env, shapes, (jsize)i);
    jbyteArray bytes = shape ? (*env)->GetObjectArrayElement(env, data, (jsize)i) : NULL;
    int rc = -1;
    if (!shape || !bytes) {
        tj_throw_illegal_argument(env, "tessera_jni: a tensor input without a shape or data");
    } else if ((*env)->GetArrayLength(env, shape) > TESSERA_MAX_NDIM || element_bytes(dtype) == 0) {
        tj_throw_illegal_argument(env, "tessera_jni: a tensor input with too many dimensions or an unknown dtype");
    } else {
        v->tensor.ndim = (int32_t)(*env)->GetArrayLength(env, shape);
        jlong dims[TESSERA_MAX_NDIM]; /* jlong and int64_t may be distinct types: copy, do not alias */
        (*env)->GetLongArrayRegion(env, shape, 0, v->tensor.ndim, dims);
        for (int32_t d = 0; d < v->tensor.ndim; d++) v->tensor.shape[d] = dims[d];
        size_t n = (size_t)(*env)->GetArrayLength(env, bytes);
        if (n != tensor_bytes(&v->tensor)) {
            tj_throw_illegal_argument(env, "tessera_jni: a tensor input's bytes do not match its shape");
        } else if (!(in->blocks[i] = malloc(n + TJ_ALIGNMENT))) {
            tj_throw_out_of_memory(env, "tessera_jni: copying an input tensor");
        } else {
            uintptr_t at = ((uintptr_t)in->blocks[i] + TJ_ALIGNMENT - 1) & ~(uintptr_t)(TJ_ALIGNMENT - 1);
            v->tensor.data = (void *)at;
            (*env)->GetByteArrayRegion(env, bytes, 0, (jsize)n, (jbyte *)v->tensor.data);
            rc = (*env)->ExceptionCheck(env) ? -1 : 0;
        }
    }
    (*env)->DeleteLocalRef(env, shape);
    (*env)->DeleteLocalRef(env, bytes);
    return rc;
}

static int read_inputs(JNIEnv *env, call_inputs *in, jintArray kinds, jintArray dtypes, jobjectArray shapes,
                       jobjectArray data, jlongArray ints) {
    in->n = (size_t)(*env)->GetArrayLength(env, kinds);
    in->values = calloc(in->n > 0 ? in->n : 1, sizeof *in->values);
    in->blocks = calloc(in->n > 0 ? in->n : 1, sizeof *in->blocks);
    jint *kind = malloc((in->n > 0 ? in->n : 1) * sizeof *kind);
    jint *dtype = malloc((in->n > 0 ? in->n : 1) * sizeof *dtype);
    jlong *value = malloc((in->n > 0 ? in->n : 1) * sizeof *value);
    int rc = -1;
    if (!in->values || !in->blocks || !kind || !dtype || !value) {
        tj_throw_out_of_memory(env, "tessera_jni: reading the inputs");
    } else {
        jsize n = (jsize)in->n;
        (*env)->GetIntArrayRegion(env, kinds, 0, n, kind);
        (*env)->GetIntArrayRegion(env, dtypes, 0, n, dtype);
        (*env)->GetLongArrayRegion(env, ints, 0, n, value);
        rc = (*env)->ExceptionCheck(env) ? -1 : 0;
        for (size_t i = 0; rc == 0 && i < in->n; i++) {
            if (kind[i] == 1) {
                in->values[i].kind = TESSERA_VALUE_INT;
                in->values[i].value = value[i];
            } else {
                rc = read_tensor(env, in, i, dtype[i], shapes, data);
            }
        }
    }
    free(kind);
    free(dtype);
    free(value);
    return rc;
}

/* [int[] dtypes, long[] (ndim, dims...) per output, byte[] per output]: copies of the runtime's outputs. */
static jobjectArray copy_outputs(JNIEnv *env, const tessera_tensor *outputs, size_t n) {
    size_t n_shape = 0;
    for (size_t i = 0; i < n; i++) n_shape += 1 + (size_t)outputs[i].ndim;
    jint *dtypes = malloc((n > 0 ? n : 1) * sizeof *dtypes);
    jlong *shapes = malloc((n_shape > 0 ? n_shape : 1) * sizeof *shapes);
    jclass object_class = (*env)->FindClass(env, "java/lang/Object");
    jobjectArray result = object_class ? (*env)->NewObjectArray(env, (jsize)n + 2, object_class, NULL) : NULL;
    jintArray dtype_array = result ? (*env)->NewIntArray(env, (jsize)n) : NULL;
    jlongArray shape_array = dtype_array ? (*env)->NewLongArray(env, (jsize)n_shape) : NULL;
    if (!dtypes || !shapes) tj_throw_out_of_memory(env, "tessera_jni: copying the outputs");
    if (shape_array && dtypes && shapes) {
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            dtypes[i] = (jint)outputs[i].dtype;
            shapes[at++] = outputs[i].ndim;
            for (int32_t d = 0; d < outputs[i].ndim; d++) shapes[at++] = outputs[i].shape[d];
        }
        (*env)->SetIntArrayRegion(env, dtype_array, 0, (jsize)n, dtypes);
        (*env)->SetLongArrayRegion(env, shape_array, 0, (jsize)n_shape, shapes);
        (*env)->SetObjectArrayElement(env, result, 0, dtype_array);
        (*env)->SetObjectArrayElement(env, result, 1, shape_array);
        for (size_t i = 0; i < n && !(*env)->ExceptionCheck(env); i++) {
            jbyteArray bytes = tj_bytes(env, outputs[i].data, outputs[i].data ? tensor_bytes(&outputs[i]) : 0);
            if (!bytes) break;
            (*env)->SetObjectArrayElement(env, result, (jsize)(2 + i), bytes);
            (*env)->DeleteLocalRef(env, bytes);
        }
    }
    free(dtypes);
    free(shapes);
    (*env)->DeleteLocalRef(env, object_class);
    (*env)->DeleteLocalRef(env, dtype_array);
    (*env)->DeleteLocalRef(env, shape_array);
    if ((*env)->ExceptionCheck(env)) {
        (*env)->DeleteLocalRef(env, result);
        return NULL;
    }
    return result;
}

/* The strings of a byte[][] as malloc'd C strings (*n of them; free with free_strings); -1 with an exception
 * pending. A NULL array gives none. */
static int read_strings(JNIEnv *env, jobjectArray array, char ***out, size_t *n) {
    *out = NULL;
    *n = array ? (size_t)(*env)->GetArrayLength(env, array) : 0;
    if (!array) return 0;
    *out = calloc(*n > 0 ? *n : 1, sizeof **out);
    if (!*out) {
        tj_throw_out_of_memory(env, "tessera_jni: reading names");
        return -1;
    }
    for (size_t i = 0; i < *n; i++) {
        jbyteArray bytes = (*env)->GetObjectArrayElement(env, array, (jsize)i);
        if (!bytes) {
            tj_throw_illegal_argument(env, "tessera_jni: a null name");
            return -1;
        }
        (*out)[i] = tj_cstring(env, bytes);
        (*env)->DeleteLocalRef(env, bytes);
        if (!(*out)[i]) return -1;
    }
    return 0;
}

static void free_strings(char **strings, size_t n) {
    for (size_t i = 0; strings && i < n; i++) free(strings[i]);
    free(strings);
}

JNIEXPORT jobjectArray TJ_FN(modelRunNamed)(JNIEnv *env, jclass cls, jlong model, jbyteArray function,
                                            jobjectArray names, jintArray kinds, jintArray dtypes, jobjectArray shapes,
                                            jobjectArray data, jlongArray ints, jobjectArray output_names,
                                            jintArray status_out) {
    (void)cls;
    call_inputs in;
    memset(&in, 0, sizeof in);
    char **input_names = NULL, **wanted = NULL;
    size_t n_names = 0, n_wanted = 0;
    char *name = tj_cstring(env, function);
    jobjectArray result = NULL;
    if (name && read_strings(env, names, &input_names, &n_names) == 0 &&
        read_strings(env, output_names, &wanted, &n_wanted) == 0 &&
        read_inputs(env, &in, kinds, dtypes, shapes, data, ints) == 0) {
        tessera_model *m = TJ_HANDLE(tessera_model, model);
        /* Every output when no names are given: as many as the function has. */
        jint status = output_names ? (jint)n_wanted : tessera_model_outputs(m, name, NULL, 0);
        size_t n_outputs = status > 0 ? (size_t)status : 0;
        const tessera_tensor **outputs = status >= 0 ? calloc(n_outputs > 0 ? n_outputs : 1, sizeof *outputs) : NULL;
        tessera_tensor *copies = outputs ? calloc(n_outputs > 0 ? n_outputs : 1, sizeof *copies) : NULL;
        if (status >= 0 && !copies) tj_throw_out_of_memory(env, "tessera_jni: the outputs");
        if (n_names != in.n) {
            tj_throw_illegal_argument(env, "tessera_jni: as many input names as inputs");
        } else if (copies) {
            status = tessera_model_run_named(m, name, in.n, (const char *const *)input_names, in.values, n_outputs,
                                             (const char *const *)wanted, outputs);
            for (size_t i = 0; status >= 0 && i < n_outputs; i++) copies[i] = *outputs[i];
        }
        if (status < 0)
            (*env)->SetIntArrayRegion(env, status_out, 0, 1, &status);
        else if (copies && !(*env)->ExceptionCheck(env))
            result = copy_outputs(env, copies, n_outputs);
        free(copies);
        free(outputs);
    }
    free_inputs(&in);
    free_strings(input_names, n_names);
    free_strings(wanted, n_wanted);
    free(name);
    return result;
}
