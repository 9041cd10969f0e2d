package ai.tessera

import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.locks.ReentrantLock

/**
 * A chat model loaded on a device, with one conversation (a session). Close it when done (`use { }`).
 *
 * Threads: calls from several threads on one engine are serialized by a lock (a second create waits for
 * the first to finish). Calling the engine from inside its own delta callback is refused with a
 * TesseraException naming the busy engine, except close(), which is allowed anywhere: it cancels a
 * generation in progress (its reply ends with finishReason "cancelled"), waits for it to return, and
 * frees the session, then the model. close() twice is a no-op; any other call after close() throws.
 */
class Engine private constructor(
    private var model: Long,
    private var session: Long,
    private val modelDir: String,
    /** The device the model runs on and why it was chosen ("vulkan:0 (Mali-G715): auto: ..."). */
    val device: String,
) : AutoCloseable {
    private val lock = ReentrantLock()
    /** The cancel flag of the generation in progress, and whether close() was called: read across threads. */
    @Volatile private var running: AtomicBoolean? = null
    @Volatile private var closing = false
    private var closeRequested = false
    private val contextLength = TesseraJni.modelContextLength(model)

    /** engine.chat.completions, as in OpenAI's clients. */
    val chat: Chat = Chat(this)

    private val name get() = "the engine of $modelDir"

    companion object {
        /** Loads a model folder (one `tessera compile` or `tessera package` wrote) and opens a session. */
        @JvmStatic
        @JvmOverloads
        fun load(modelDir: String, options: EngineOptions = EngineOptions()): Engine {
            val model = loadModel(modelDir, options)
            val session = TesseraJni.sessionNew(model)
            if (session == 0L) {
                // Not a chat model (a plain executable has no tokenizer): say why, then free the model.
                val error = TesseraException.fromNull("starting a chat session on $modelDir")
                TesseraJni.modelFree(model)
                throw error
            }
            try {
                val device = TesseraJni.modelDevice(model)?.let { String(it, Charsets.UTF_8) } ?: ""
                return Engine(model, session, modelDir, device)
            } catch (e: Throwable) { // an OutOfMemoryError from JNI: the handles must not leak
                TesseraJni.sessionFree(session)
                TesseraJni.modelFree(model)
                throw e
            }
        }

        /**
         * What the model in [modelDir] needs on each device, read from its folder before anything is loaded
         * (tessera_model_plan_devices). [options] are checked as load would check them.
         */
        @JvmStatic
        @JvmOverloads
        fun memory(modelDir: String, options: EngineOptions = EngineOptions()): MemoryPlan {
            checkOptions(options)
            TesseraJni.ensureLoaded()
            val dir = cString(modelDir, "the model folder's path")
            return readDevices("planning the memory of $modelDir") { names, sizes ->
                TesseraJni.planDevices(dir, names, sizes)
            }
        }
    }

    /** What the loaded model holds on each device (tessera_model_memory_devices). */
    fun memory(): MemoryPlan = locked {
        readDevices("reading the memory of $modelDir") { names, sizes ->
            TesseraJni.memoryDevices(model, names, sizes)
        }
    }

    /** Forgets the conversation: the next reply prefills from the start. */
    fun reset() = locked { TesseraJni.sessionReset(session) }

    override fun close() {
        closing = true
        running?.set(true)
        if (lock.isHeldByCurrentThread) {
            // From inside a delta callback: the generation frees the engine once the runtime returns.
            closeRequested = true
            return
        }
        lock.lock()
        try {
            release()
        } finally {
            lock.unlock()
        }
    }

    private fun release() {
        if (session != 0L) TesseraJni.sessionFree(session)
        session = 0L
        if (model != 0L) TesseraJni.modelFree(model)
        model = 0L
    }

    /** Runs [body] holding the lock, on an engine that is open. */
    private fun <T> locked(body: () -> T): T {
        if (lock.isHeldByCurrentThread) {
            throw TesseraException.invalid("$name is busy: it was called from inside its own delta callback")
        }
        lock.lock()
        try {
            if (model == 0L) throw TesseraException.closed(name)
            return body()
        } finally {
            lock.unlock()
        }
    }

    /**
     * One turn, on the calling thread. [cancel] stops it at the next piece (a stream's collector was
     * cancelled); [onText] gets the text that is safe to show, stop strings held back.
     */
    internal fun complete(
        messages: List<ChatMessage>, options: CompletionOptions, cancel: AtomicBoolean, onText: (String) -> Unit,
    ): ChatCompletion {
        if (messages.isEmpty()) throw TesseraException.invalid("a chat completion needs at least one message")
        if (options.maxTokens < 1) {
            throw TesseraException.invalid("maxTokens must be at least 1, not ${options.maxTokens}")
        }
        val roles = Array(messages.size) { cString(messages[it].role, "the role of message $it") }
        val contents = Array(messages.size) { cString(messages[it].content, "the content of message $it") }
        val filter = StopStringFilter(options.stop, onText)
        val receiver = PieceReceiver(filter, cancel)
        val usage = IntArray(3)
        return locked {
            running = cancel
            // close() may have looked for a running generation just before this one set `running`.
            if (closing) cancel.set(true)
            try {
                // A stream cancelled while it waited for the lock does not start (its prefill may be long).
                if (cancel.get()) return@locked cancelledBeforeStart()
                val status = TesseraJni.chatCompletion(session, roles, contents, options.maxTokens,
                    options.temperature, options.topP, options.seed != null, options.seed ?: 0L, receiver, usage)
                receiver.failure?.let { throw it }
                if (status < 0 && !receiver.cancelled) {
                    throw TesseraException.fromStatus(status, "the chat completion")
                }
                filter.finish()
                finished(filter, receiver, usage, options)
            } finally {
                running = null
                if (closeRequested) release()
            }
        }
    }

    private fun cancelledBeforeStart() = ChatCompletion(
        listOf(ChatCompletion.Choice(0, ChatMessage("assistant", ""), "cancelled")), CompletionUsage(0, 0, 0))

    private fun finished(filter: StopStringFilter, receiver: PieceReceiver, usage: IntArray,
                         options: CompletionOptions): ChatCompletion {
        val prompt = usage[0]
        val completion = usage[2]
        val reason = when {
            receiver.cancelled -> "cancelled"
            filter.stopped -> "stop"
            completion >= options.maxTokens -> "length"
            // The runtime also ends a reply when the context window is full.
            contextLength > 0 && prompt + completion >= contextLength -> "length"
            else -> "stop"
        }
        val choice = ChatCompletion.Choice(0, ChatMessage("assistant", filter.text), reason)
        return ChatCompletion(listOf(choice), CompletionUsage(prompt, completion, prompt + completion))
    }
}

internal fun checkOptions(options: EngineOptions) {
    if (options.threads < 0) {
        throw TesseraException.invalid("threads must be 0 (one per CPU) or more, not ${options.threads}")
    }
    if (options.memoryLimit < 0) {
        throw TesseraException.invalid("memoryLimit must be 0 (what is available) or a number of bytes, " +
            "not ${options.memoryLimit}")
    }
}

/** tessera_model_load; the handle belongs to the Engine or Module made from it. */
internal fun loadModel(modelDir: String, options: EngineOptions): Long {
    checkOptions(options)
    TesseraJni.ensureLoaded()
    val dir = cString(modelDir, "the model folder's path")
    val device = cString(options.device, "the device option")
    val cacheDir = options.cacheDir?.let { cString(it, "the cacheDir option") }
    val model = TesseraJni.modelLoad(dir, device, options.threads, cacheDir, options.memoryLimit)
    if (model == 0L) throw TesseraException.fromNull("loading $modelDir")
    return model
}

/** Asks [fill] for the number of devices, then for their entries (names and four sizes each). */
internal fun readDevices(doing: String, fill: (Array<ByteArray?>?, LongArray?) -> Int): MemoryPlan {
    val count = fill(null, null)
    if (count < 0) throw TesseraException.fromStatus(count, doing)
    val names = arrayOfNulls<ByteArray>(count)
    val sizes = LongArray(4 * count)
    val filled = fill(names, sizes)
    if (filled < 0) throw TesseraException.fromStatus(filled, doing)
    val devices = (0 until minOf(count, filled)).map { i ->
        DeviceMemory(String(names[i] ?: ByteArray(0), Charsets.UTF_8), sizes[4 * i], sizes[4 * i + 1],
            sizes[4 * i + 2], sizes[4 * i + 3])
    }
    return MemoryPlan(devices)
}
