package ai.tessera

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.channels.awaitClose
import kotlinx.coroutines.channels.trySendBlocking
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.callbackFlow
import kotlinx.coroutines.launch
import java.util.concurrent.atomic.AtomicBoolean

/** engine.chat, as in OpenAI's clients. */
class Chat internal constructor(engine: Engine) {
    val completions: Completions = Completions(engine)
}

/**
 * engine.chat.completions. create() blocks the calling thread until the reply is whole: call it off the
 * main thread (withContext(Dispatchers.IO)). stream() runs the generation on Dispatchers.IO itself.
 */
class Completions internal constructor(private val engine: Engine) {
    /** The whole reply. */
    @JvmOverloads
    fun create(messages: List<ChatMessage>, options: CompletionOptions = CompletionOptions()): ChatCompletion =
        engine.complete(messages, options, AtomicBoolean(false)) {}

    /**
     * The reply streamed to [onDelta] as it is generated (on the calling thread), then returned whole, as
     * create() without a callback returns it. An exception thrown by [onDelta] stops generation and is
     * rethrown from here.
     */
    @JvmOverloads
    fun create(
        messages: List<ChatMessage>, options: CompletionOptions = CompletionOptions(), onDelta: (String) -> Unit,
    ): ChatCompletion = engine.complete(messages, options, AtomicBoolean(false), onDelta)

    /**
     * The reply as chunks: one per piece of text (choices[0].delta.content), then a last one with the finish
     * reason and the usage. The generation runs on Dispatchers.IO; cancelling the collector stops it at the
     * next piece, and the collector's scope returns once the runtime has returned (the engine is then free).
     * A runtime error ends the flow with a TesseraException.
     */
    @JvmOverloads
    fun stream(
        messages: List<ChatMessage>, options: CompletionOptions = CompletionOptions(),
    ): Flow<ChatCompletionChunk> = callbackFlow {
        val cancel = AtomicBoolean(false)
        launch(Dispatchers.IO) {
            try {
                val completion = engine.complete(messages, options, cancel) { text ->
                    // Blocks this generating thread while the collector is behind (backpressure); fails
                    // once the collector is gone, which stops generation.
                    if (trySendBlocking(ChatCompletionChunk.content(text)).isFailure) cancel.set(true)
                }
                // Fails harmlessly when the collector is gone; reaches it when close() cancelled the reply.
                trySendBlocking(ChatCompletionChunk.finish(completion))
                channel.close()
            } catch (e: Throwable) {
                channel.close(e)
            }
        }
        awaitClose { cancel.set(true) }
    }
}
