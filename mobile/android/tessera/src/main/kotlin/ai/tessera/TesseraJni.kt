package ai.tessera

import java.util.concurrent.atomic.AtomicBoolean

/**
 * The JNI bridge (src/main/cpp/tessera_jni.c): one `external fun` per operation, each a thin call of
 * tessera.h. Text crosses as UTF-8 byte arrays, never as jstrings, because JNI's strings are modified
 * UTF-8 (an emoji or a NUL would be mangled). Handles are jlongs owned by Engine and Module. A function
 * that fails returns a negative status or 0L; the caller then reads [lastError] on the same thread.
 */
internal object TesseraJni {
    /** Where to load the bridge from instead of the library path (host builds and tests). */
    const val LIBRARY_PATH_PROPERTY = "ai.tessera.jni.library"

    @Volatile private var loaded = false

    /** Loads libtessera_jni once; a missing library becomes a TesseraException, not an Error at first use. */
    fun ensureLoaded() {
        if (loaded) return
        synchronized(this) {
            if (loaded) return
            val path = System.getProperty(LIBRARY_PATH_PROPERTY)
            try {
                if (path.isNullOrEmpty()) System.loadLibrary("tessera_jni") else System.load(path)
            } catch (e: UnsatisfiedLinkError) {
                throw TesseraException("the JNI library tessera_jni could not be loaded (${e.message}); on a " +
                    "desktop JVM set -D$LIBRARY_PATH_PROPERTY=/path/to/libtessera_jni.so or -Djava.library.path",
                    TesseraException.UNSUPPORTED, "TESSERA_ERROR_UNSUPPORTED")
            }
            loaded = true
        }
    }

    fun lastErrorText(): String = lastError()?.let { String(it, Charsets.UTF_8) } ?: ""

    fun statusNameText(status: Int): String =
        statusName(status)?.let { String(it, Charsets.UTF_8) } ?: "TESSERA_ERROR"

    @JvmStatic external fun lastError(): ByteArray?

    @JvmStatic external fun statusName(status: Int): ByteArray?

    /** tessera_model_load with the default params, then these; 0L on failure. */
    /** tessera_model_load; memoryLimit is tessera_model_params.memory_limit (not negative). */
    @JvmStatic external fun modelLoad(
        dir: ByteArray, device: ByteArray, threads: Int, cacheDir: ByteArray?, memoryLimit: Long,
    ): Long

    @JvmStatic external fun modelFree(model: Long)

    @JvmStatic external fun modelDevice(model: Long): ByteArray?

    /** Context length of a chat model (tessera_model_context_length); 0 for a plain executable. */
    @JvmStatic external fun modelContextLength(model: Long): Int

    /**
     * tessera_model_plan_devices: with null arrays, returns the number of devices; otherwise fills names
     * (the device kinds) and sizes (weights, arena, kvCache, total per device) for up to names.size devices.
     */
    @JvmStatic external fun planDevices(dir: ByteArray, names: Array<ByteArray?>?, sizes: LongArray?): Int

    /** tessera_model_memory_devices, filled as planDevices. */
    @JvmStatic external fun memoryDevices(model: Long, names: Array<ByteArray?>?, sizes: LongArray?): Int

    @JvmStatic external fun sessionNew(model: Long): Long

    @JvmStatic external fun sessionReset(session: Long)

    @JvmStatic external fun sessionFree(session: Long)

    /**
     * tessera_chat_completion: each piece goes to receiver.onPiece, which returns false to stop. usage gets
     * promptTokens, prefilledTokens, completionTokens. Returns 0 or a negative status.
     */
    @JvmStatic external fun chatCompletion(
        session: Long, roles: Array<ByteArray>, contents: Array<ByteArray>, maxTokens: Int, temperature: Float,
        topP: Float, seeded: Boolean, seed: Long, receiver: PieceReceiver, usage: IntArray,
    ): Int

    /** tessera_model_functions: the names of the executable's functions (UTF-8). */
    @JvmStatic external fun modelFunctions(model: Long): Array<ByteArray?>?

    /**
     * tessera_model_inputs (outputs false) or tessera_model_outputs of [function]: [IntArray (kind, has dtype,
     * dtype, ndim) per entry, LongArray (fixed size or -1, upper bound or -1) per dimension of each entry,
     * Array<ByteArray?> (name, an integer's value expression, then each dimension's text) per entry]; null on
     * failure, with the status in status[0].
     */
    @JvmStatic external fun modelIo(model: Long, function: ByteArray, outputs: Boolean, status: IntArray): Array<Any?>?

    /**
     * tessera_model_run_named: input i is named names[i] and is kinds[i] 0 (a tensor: dtypes[i], shapes[i],
     * data[i] in native byte order) or 1 (an integer: ints[i]); the runtime matches names to parameters and
     * checks each input. outputNames null: every output, in order. Returns [IntArray dtypes, LongArray shapes
     * (ndim, then the dims, per output), then each output's bytes], copied out of the model's buffers; null on
     * failure, with the status in status[0].
     */
    @JvmStatic external fun modelRunNamed(
        model: Long, function: ByteArray, names: Array<ByteArray>, kinds: IntArray, dtypes: IntArray,
        shapes: Array<LongArray?>, data: Array<ByteArray?>, ints: LongArray, outputNames: Array<ByteArray>?,
        status: IntArray,
    ): Array<Any?>?
}

/**
 * Called by the bridge for each piece of a reply, on the thread that runs the generation. It never lets an
 * exception reach JNI: a failure of the consumer is kept in [failure] and rethrown once the runtime returned.
 */
internal class PieceReceiver(private val filter: StopStringFilter, private val cancel: AtomicBoolean) {
    var cancelled = false
        private set
    var failure: Throwable? = null
        private set

    /** The bridge's callback (its name and signature are looked up from C: keep them). */
    fun onPiece(piece: ByteArray): Boolean {
        if (cancel.get()) {
            cancelled = true
            return false
        }
        return try {
            filter.receive(piece)
        } catch (t: Throwable) {
            failure = t
            false
        }
    }
}

/** UTF-8 bytes of a string the runtime reads as a C string (which ends at the first NUL). */
internal fun cString(text: String, what: String): ByteArray {
    if (text.indexOf('\u0000') >= 0) {
        throw TesseraException.invalid("$what contains a NUL character, which the runtime's C strings cannot carry")
    }
    return text.toByteArray(Charsets.UTF_8)
}
