package ai.tessera

import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.runBlocking
import org.junit.Assert.assertEquals
import org.junit.Assert.assertThrows
import org.junit.Assert.assertTrue
import org.junit.Test

/** Every bad folder, option or input is a TesseraException in the runtime's words, never a crash. */
class ErrorTest {
    private val tiny = TestData.chatModel("tiny-cpu")

    private fun assertMessageHas(error: TesseraException, vararg words: String) {
        for (word in words) assertTrue("'$word' is not in: ${error.message}", word in error.message!!)
    }

    private fun damaged(name: String): Pair<String, Array<String>> =
        TestData.text("damaged/$name/dir") to TestData.text("damaged/$name/words").lines().filter { it.isNotEmpty() }
            .toTypedArray()

    @Test fun aTruncatedShard() = refusedEverywhere("truncated-shard", plans = true)

    @Test fun aBrokenExecutableJson() = refusedEverywhere("broken-executable-json", plans = false)

    @Test fun aMissingFolder() = refusedEverywhere("missing", plans = false)

    /** Engine.load, Module.load and (where the plan reads what is broken) Engine.memory all refuse it. */
    private fun refusedEverywhere(name: String, plans: Boolean) {
        val (dir, words) = damaged(name)
        assertMessageHas(assertThrows(TesseraException::class.java) { Engine.load(dir, tiny.options()) }, *words)
        assertMessageHas(assertThrows(TesseraException::class.java) { Module.load(dir, tiny.options()) }, *words)
        if (plans) {
            // The plan reads executable.json and tensor-cache.json only: a truncated shard is not its business.
            assertEquals(tiny.plan, Engine.memory(dir, tiny.options()).devices)
        } else {
            assertMessageHas(assertThrows(TesseraException::class.java) { Engine.memory(dir, tiny.options()) }, *words)
        }
    }

    @Test fun anUnknownDevice() {
        val error = assertThrows(TesseraException::class.java) { Engine.load(tiny.dir, EngineOptions(device = "nonsense")) }
        assertMessageHas(error, "device 'nonsense' is not in this build of libtessera")
    }

    @Test fun aDeviceTheBuildIsNotFor() {
        val error = assertThrows(TesseraException::class.java) { Engine.load(tiny.dir, EngineOptions(device = "vulkan")) }
        assertMessageHas(error, "compile the model with --target vulkan")
    }

    @Test fun negativeThreads() {
        val error = assertThrows(TesseraException::class.java) { Engine.load(tiny.dir, EngineOptions(threads = -5)) }
        assertMessageHas(error, "threads", "-5")
        assertThrows(TesseraException::class.java) { Module.load(tiny.dir, EngineOptions(threads = -5)) }
    }

    @Test fun aModelLargerThanTheMemoryLimit() {
        val total = tiny.plan.sumOf { it.total }
        val error = assertThrows(TesseraException::class.java) {
            Engine.load(tiny.dir, tiny.options().copy(memoryLimit = total - 1))
        }
        // The runtime's refusal, before anything is allocated: the plan, and the limit it broke.
        assertMessageHas(error, "model needs", "but only", "(memory_limit)")
        Engine.load(tiny.dir, tiny.options().copy(memoryLimit = total)).close()
        Engine.load(tiny.dir, tiny.options().copy(memoryLimit = EngineOptions.NO_MEMORY_LIMIT)).close()
        assertMessageHas(assertThrows(TesseraException::class.java) {
            Engine.load(tiny.dir, tiny.options().copy(memoryLimit = -1))
        }, "memoryLimit", "-1")
    }

    @Test fun badCompletionOptions() {
        Engine.load(tiny.dir, tiny.options()).use { engine ->
            assertMessageHas(assertThrows(TesseraException::class.java) {
                engine.chat.completions.create(TestData.MESSAGES, CompletionOptions(maxTokens = 0))
            }, "maxTokens")
            assertThrows(TesseraException::class.java) { engine.chat.completions.create(emptyList()) }
            // A prompt longer than the tiny model's 64 positions: the runtime refuses it by name.
            val long = listOf(ChatMessage("user", "word ".repeat(200)))
            val error = assertThrows(TesseraException::class.java) { engine.chat.completions.create(long, tiny.greedy()) }
            assertEquals("TESSERA_ERROR_CONTEXT_FULL", error.statusName)
            // In a stream, the same error ends the flow.
            val streamed = assertThrows(TesseraException::class.java) {
                runBlocking { engine.chat.completions.stream(long, tiny.greedy()).toList() }
            }
            assertEquals("TESSERA_ERROR_CONTEXT_FULL", streamed.statusName)
            // A NUL cannot cross into the runtime's C strings: refused by name, not cut short.
            assertMessageHas(assertThrows(TesseraException::class.java) {
                engine.chat.completions.create(listOf(ChatMessage("user", "a\u0000b")), tiny.greedy())
            }, "NUL")
            // The engine goes on after each.
            assertEquals(tiny.reply, engine.chat.completions.create(TestData.MESSAGES, tiny.greedy()).choices[0].message.content)
        }
    }

    @Test fun aModuleIsNotAChatModel() {
        val gemm = TestData.text("module/gemm/dir")
        assertThrows(TesseraException::class.java) { Engine.load(gemm, tiny.options()) }
    }

    @Test fun badModuleInputs() {
        Module.load(TestData.text("module/gemm/dir"), tiny.options()).use { module ->
            assertEquals(listOf("x0"), module.inputNames())
            assertMessageHas(assertThrows(TesseraException::class.java) {
                module.run(mapOf("nope" to Tensor.of(FloatArray(70), 1, 70)))
            }, "nope")
            assertMessageHas(assertThrows(TesseraException::class.java) { module.run(emptyMap()) }, "x0")
            // A shape that breaks the function's (n, 70): the runtime's own check.
            val error = assertThrows(TesseraException::class.java) {
                module.run(mapOf("x0" to Tensor.of(FloatArray(69), 1, 69)))
            }
            assertTrue(error.toString(), error.status < 0)
            assertThrows(TesseraException::class.java) { module.run(mapOf("x0" to Tensor.of(IntArray(70), 1, 70))) }
            assertThrows(TesseraException::class.java) { module.run(mapOf("x0" to Tensor.of(FloatArray(70), 1, 70)), "nope") }
            // Still usable.
            assertEquals(listOf(1L, 33L), module.run(mapOf("x0" to Tensor.of(FloatArray(70), 1, 70)))["output0"]!!.shape.toList())
        }
    }
}
