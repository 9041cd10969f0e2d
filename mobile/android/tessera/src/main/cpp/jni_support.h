/* jni_support.h: what the bridge's entry points share: handles as jlongs, UTF-8 text as Java byte
 * arrays (JNI's own strings are modified UTF-8, which mangles 4-byte characters and NUL), and throwing.
 *
 * Every function that fails leaves a Java exception pending (an OutOfMemoryError from the JVM or from
 * here) and returns NULL; the caller then releases what it holds and returns at once, making no other
 * JNI call than those that are safe with an exception pending.
 */
#ifndef TESSERA_JNI_SUPPORT_H
#define TESSERA_JNI_SUPPORT_H

#include <jni.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

#define TJ_HANDLE(type, h) ((type *)(intptr_t)(h))
#define TJ_JLONG(p) ((jlong)(intptr_t)(p))

/* A NUL-terminated malloc'd copy of a byte[] holding UTF-8 (free it); NULL with an exception pending. */
char *tj_cstring(JNIEnv *env, jbyteArray bytes);
/* A new byte[] of the first n bytes of text; NULL with an exception pending. */
jbyteArray tj_bytes(JNIEnv *env, const char *text, size_t n);
/* tj_bytes of a NUL-terminated string (NULL gives an empty array). */
jbyteArray tj_bytes_of(JNIEnv *env, const char *text);
/* Throws java.lang.OutOfMemoryError naming what could not be allocated (if nothing is pending yet). */
void tj_throw_out_of_memory(JNIEnv *env, const char *what);
/* Throws java.lang.IllegalArgumentException (a mistake of the Kotlin side, which checks first). */
void tj_throw_illegal_argument(JNIEnv *env, const char *what);

#endif /* TESSERA_JNI_SUPPORT_H */
