package ai.tessera

import kotlinx.coroutines.flow.onEach
import kotlinx.coroutines.flow.take
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.runBlocking
import org.junit.Assert.assertEquals
import org.junit.Assert.assertFalse
import org.junit.Assert.assertNotNull
import org.junit.Assert.assertNull
import org.junit.Assert.assertTrue
import org.junit.Test

/**
 * Chat through JNI on the tiny random-weight Llama and SmolLM2, each built for the cpu and the vulkan
 * target (lavapipe here): the whole reply, the callback and the Flow all give the Python VM's greedy reply.
 */
class ChatTest {
    @Test fun tinyCpu() = repliesAsThePythonVm("tiny-cpu")

    @Test fun tinyVulkan() = repliesAsThePythonVm("tiny-vulkan")

    @Test fun smollm2Cpu() = repliesAsThePythonVm("smollm2-cpu")

    @Test fun smollm2Vulkan() = repliesAsThePythonVm("smollm2-vulkan")

    private fun repliesAsThePythonVm(name: String) {
        val model = TestData.chatModel(name)
        Engine.load(model.dir, model.options()).use { engine ->
            assertTrue(engine.device, engine.device.startsWith(model.device))
            val options = model.greedy()
            val whole = engine.chat.completions.create(TestData.MESSAGES, options)
            assertEquals(model.reply, whole.choices.single().message.content)
            assertEquals("assistant", whole.choices[0].message.role)
            val reason = if (model.completionTokens >= model.maxTokens) "length" else "stop"
            assertEquals(reason, whole.choices[0].finishReason)
            assertEquals(CompletionUsage(model.promptTokens, model.completionTokens,
                model.promptTokens + model.completionTokens), whole.usage)

            engine.reset()
            val deltas = ArrayList<String>()
            val called = engine.chat.completions.create(TestData.MESSAGES, options) { deltas.add(it) }
            assertEquals(model.reply, deltas.joinToString(""))
            assertEquals(whole, called)

            engine.reset()
            val chunks = runBlocking { engine.chat.completions.stream(TestData.MESSAGES, options).toList() }
            val pieces = chunks.dropLast(1)
            assertEquals(model.reply, pieces.joinToString("") { it.choices.single().delta.content!! })
            for (chunk in pieces) {
                assertNull(chunk.choices[0].finishReason)
                assertNull(chunk.usage)
            }
            val last = chunks.last().choices.single()
            assertNull(last.delta.content)
            assertEquals(reason, last.finishReason)
            assertEquals(whole.usage, chunks.last().usage)
        }
    }

    /** Text crosses JNI as UTF-8 both ways: the same prompt tokens and reply as the Python VM's. */
    @Test fun unicodeCrossesIntact() {
        val model = TestData.chatModel("tiny-cpu")
        Engine.load(model.dir, model.options()).use { engine ->
            val reply = engine.chat.completions.create(TestData.UNICODE_MESSAGES, model.greedy())
            assertEquals(TestData.int("unicode/prompt_tokens"), reply.usage.promptTokens)
            assertEquals(TestData.text("unicode/reply"), reply.choices[0].message.content)
        }
    }

    /** The reply ends right before the stop string, in all three forms, and the string is never streamed. */
    @Test fun stopStringsCutTheReply() {
        val model = TestData.chatModel("tiny-cpu")
        val stop = TestData.text("stop/stop")
        val cut = TestData.text("stop/reply")
        Engine.load(model.dir, model.options()).use { engine ->
            val options = model.greedy(stop = listOf("never in the reply", stop))
            val whole = engine.chat.completions.create(TestData.MESSAGES, options)
            assertEquals(cut, whole.choices[0].message.content)
            assertEquals("stop", whole.choices[0].finishReason)
            assertTrue(whole.usage.completionTokens < model.completionTokens)

            val deltas = ArrayList<String>()
            engine.chat.completions.create(TestData.MESSAGES, options) { deltas.add(it) }
            assertEquals(cut, deltas.joinToString(""))

            val chunks = runBlocking { engine.chat.completions.stream(TestData.MESSAGES, options).toList() }
            assertEquals(cut, chunks.dropLast(1).joinToString("") { it.choices[0].delta.content!! })
            assertEquals("stop", chunks.last().choices[0].finishReason)
        }
    }

    /**
     * Cancelling the collector after its first chunk stops generation: the collector's scope returns once the
     * runtime has returned, so a generation that ran on would make it last as long as a whole reply. Timed
     * on SmolLM2 on the CPU, where a long reply takes seconds; then the engine answers as before.
     */
    @Test fun cancellingTheFlowCollectorStopsGeneration() {
        val model = TestData.chatModel("smollm2-cpu")
        val long = listOf(ChatMessage("user", "Write a long story about a dragon."))
        Engine.load(model.dir, model.options()).use { engine ->
            val options = model.greedy(maxTokens = 64)
            // The first stream loads the coroutine classes: not part of what is timed.
            runBlocking { engine.chat.completions.stream(long, model.greedy(maxTokens = 1)).toList() }
            fun seconds(body: () -> Unit): Double {
                engine.reset()
                val start = System.nanoTime()
                body()
                return (System.nanoTime() - start) / 1e9
            }
            lateinit var whole: ChatCompletion
            val wholeSeconds = seconds { whole = engine.chat.completions.create(long, options) }
            assertEquals("the reply must be long enough to cancel", 64, whole.usage.completionTokens)
            // The prefill and one token; the rest of a whole reply is the 63 decode steps that cancelling saves.
            val oneTokenSeconds = seconds { engine.chat.completions.create(long, model.greedy(maxTokens = 1)) }
            val decodeSeconds = wholeSeconds - oneTokenSeconds
            var firstAt = 0L
            lateinit var first: List<ChatCompletionChunk>
            seconds {
                first = runBlocking {
                    engine.chat.completions.stream(long, options).onEach { firstAt = System.nanoTime() }.take(1).toList()
                }
            }
            // From the first chunk to the collector's return, which waits for the runtime to return.
            val stoppingSeconds = (System.nanoTime() - firstAt) / 1e9
            val report = ("a whole reply of 64 tokens: %.2f s, of which %.2f s after the first token; a stream " +
                "cancelled after its first chunk returned %.3f s after it").format(wholeSeconds, decodeSeconds, stoppingSeconds)
            println(report)
            assertEquals(1, first.size)
            assertNotNull(first[0].choices[0].delta.content)
            // Half of the 63 decode steps would have run by then, had the cancellation not stopped them.
            assertTrue(report, stoppingSeconds < decodeSeconds / 2)

            engine.reset()
            assertEquals(whole, engine.chat.completions.create(long, options))
        }
    }

    /** The tiny model too: one chunk, then the engine is free and its next reply is the greedy one. */
    @Test fun aCancelledStreamLeavesTheEngineUsable() {
        val model = TestData.chatModel("tiny-cpu")
        Engine.load(model.dir, model.options()).use { engine ->
            val first = runBlocking { engine.chat.completions.stream(TestData.MESSAGES, model.greedy()).take(1).toList() }
            assertEquals(1, first.size)
            assertFalse(first[0].choices[0].delta.content.isNullOrEmpty())
            assertEquals(model.reply, engine.chat.completions.create(TestData.MESSAGES, model.greedy())
                .choices[0].message.content)
        }
    }
}
