/* tessera_jni.h: the JNI entry points of ai.tessera.TesseraJni, one per `external fun` of TesseraJni.kt
 * (what `javac -h` would write). Declared here so that each definition is checked against its declaration
 * (-Wmissing-prototypes) and so that the whole native surface of the Kotlin API reads in one place.
 */
#ifndef TESSERA_JNI_H
#define TESSERA_JNI_H

#include <jni.h>

#define TJ_FN(name) JNICALL Java_ai_tessera_TesseraJni_##name

JNIEXPORT jbyteArray TJ_FN(lastError)(JNIEnv *env, jclass cls);
JNIEXPORT jbyteArray TJ_FN(statusName)(JNIEnv *env, jclass cls, jint status);
JNIEXPORT jlong TJ_FN(modelLoad)(JNIEnv *env, jclass cls, jbyteArray dir, jbyteArray device, jint threads,
                                 jbyteArray cache_dir, jlong memory_limit);
JNIEXPORT void TJ_FN(modelFree)(JNIEnv *env, jclass cls, jlong model);
JNIEXPORT jbyteArray TJ_FN(modelDevice)(JNIEnv *env, jclass cls, jlong model);
JNIEXPORT jint TJ_FN(modelContextLength)(JNIEnv *env, jclass cls, jlong model);
JNIEXPORT jint TJ_FN(planDevices)(JNIEnv *env, jclass cls, jbyteArray dir, jobjectArray names, jlongArray sizes);
JNIEXPORT jint TJ_FN(memoryDevices)(JNIEnv *env, jclass cls, jlong model, jobjectArray names, jlongArray sizes);
JNIEXPORT jlong TJ_FN(sessionNew)(JNIEnv *env, jclass cls, jlong model);
JNIEXPORT void TJ_FN(sessionReset)(JNIEnv *env, jclass cls, jlong session);
JNIEXPORT void TJ_FN(sessionFree)(JNIEnv *env, jclass cls, jlong session);
JNIEXPORT jint TJ_FN(chatCompletion)(JNIEnv *env, jclass cls, jlong session, jobjectArray roles,
                                     jobjectArray contents, jint max_tokens, jfloat temperature, jfloat top_p,
                                     jboolean seeded, jlong seed, jobject receiver, jintArray usage_out);
JNIEXPORT jobjectArray TJ_FN(modelFunctions)(JNIEnv *env, jclass cls, jlong model);
JNIEXPORT jobjectArray TJ_FN(modelIo)(JNIEnv *env, jclass cls, jlong model, jbyteArray function, jboolean outputs,
                                      jintArray status_out);
JNIEXPORT jobjectArray TJ_FN(modelRunNamed)(JNIEnv *env, jclass cls, jlong model, jbyteArray function,
                                            jobjectArray names, jintArray kinds, jintArray dtypes, jobjectArray shapes,
                                            jobjectArray data, jlongArray ints, jobjectArray output_names,
                                            jintArray status_out);

#endif /* TESSERA_JNI_H */
