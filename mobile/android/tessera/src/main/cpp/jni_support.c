/* jni_support.c: text and exceptions for the JNI bridge (jni_support.h). */
#include "jni_support.h"

#include <stdlib.h>
#include <string.h>

static void throw_new(JNIEnv *env, const char *class_name, const char *message) {
    if ((*env)->ExceptionCheck(env)) return;
    jclass cls = (*env)->FindClass(env, class_name);
    if (!cls) return; /* FindClass left its own error pending */
    (*env)->ThrowNew(env, cls, message);
    (*env)->DeleteLocalRef(env, cls);
}

void tj_throw_out_of_memory(JNIEnv *env, const char *what) { throw_new(env, "java/lang/OutOfMemoryError", what); }

void tj_throw_illegal_argument(JNIEnv *env, const char *what) {
    throw_new(env, "java/lang/IllegalArgumentException", what);
}

char *tj_cstring(JNIEnv *env, jbyteArray bytes) {
    if (!bytes) {
        tj_throw_illegal_argument(env, "tessera_jni: a NULL byte array where text was expected");
        return NULL;
    }
    jsize n = (*env)->GetArrayLength(env, bytes);
    char *text = malloc((size_t)n + 1);
    if (!text) {
        tj_throw_out_of_memory(env, "tessera_jni: copying text for the runtime");
        return NULL;
    }
    (*env)->GetByteArrayRegion(env, bytes, 0, n, (jbyte *)text);
    if ((*env)->ExceptionCheck(env)) {
        free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

jbyteArray tj_bytes(JNIEnv *env, const char *text, size_t n) {
    if (n > (size_t)INT32_MAX) {
        tj_throw_out_of_memory(env, "tessera_jni: a text longer than a Java array");
        return NULL;
    }
    jbyteArray bytes = (*env)->NewByteArray(env, (jsize)n);
    if (!bytes) return NULL; /* OutOfMemoryError pending */
    if (n) (*env)->SetByteArrayRegion(env, bytes, 0, (jsize)n, (const jbyte *)text);
    return bytes;
}

jbyteArray tj_bytes_of(JNIEnv *env, const char *text) {
    return tj_bytes(env, text ? text : "", text ? strlen(text) : 0);
}
