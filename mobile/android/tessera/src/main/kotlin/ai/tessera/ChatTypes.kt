package ai.tessera

/** One message of a conversation: role "system", "user" or "assistant". */
data class ChatMessage(val role: String, val content: String)

data class CompletionUsage(val promptTokens: Int, val completionTokens: Int, val totalTokens: Int)

/** A whole reply, as OpenAI's clients shape it: the text is choices[0].message.content. */
data class ChatCompletion(val choices: List<Choice>, val usage: CompletionUsage) {
    /** [finishReason]: "stop" (end of turn or a stop string), "length" (maxTokens or the context reached)
     * or "cancelled" (the stream's collector was cancelled, or the engine closed while generating). */
    data class Choice(val index: Int, val message: ChatMessage, val finishReason: String)
}

/**
 * One streamed piece: choices[0].delta.content. The last chunk has no content, the finish reason and
 * the usage; every other chunk has content and neither.
 */
data class ChatCompletionChunk(val choices: List<Choice>, val usage: CompletionUsage?) {
    data class Delta(val role: String?, val content: String?)

    data class Choice(val index: Int, val delta: Delta, val finishReason: String?)

    internal companion object {
        fun content(text: String) =
            ChatCompletionChunk(listOf(Choice(0, Delta("assistant", text), null)), null)

        fun finish(completion: ChatCompletion) =
            ChatCompletionChunk(listOf(Choice(0, Delta(null, null), completion.choices[0].finishReason)),
                completion.usage)
    }
}
