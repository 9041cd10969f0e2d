package ai.tessera

import org.junit.Assert.assertEquals
import org.junit.Assert.assertThrows
import org.junit.Assert.assertTrue
import org.junit.Test
import java.lang.reflect.Modifier
import java.util.Collections
import java.util.concurrent.CountDownLatch
import kotlin.concurrent.thread

/** The engine on the tiny model: memory, device, reset, threads, close. */
class EngineTest {
    private val tiny = TestData.chatModel("tiny-cpu")

    /** Engine.memory reads the folder as the C plan does (tessera_model_plan_devices), before loading. */
    @Test fun memoryBeforeLoadingIsTheRuntimesPlan() {
        for (name in listOf("tiny-cpu", "tiny-vulkan", "smollm2-cpu")) {
            val model = TestData.chatModel(name)
            val plan = Engine.memory(model.dir, model.options())
            assertEquals(name, model.plan, plan.devices)
            assertEquals(model.plan.sumOf { it.total }, plan.total)
            for (device in plan.devices) {
                assertEquals(device.weights + device.arena + device.kvCache, device.total)
            }
        }
        // The default options, as an app would call it.
        assertEquals(tiny.plan, Engine.memory(tiny.dir).devices)
    }

    @Test fun theLoadedEngineHoldsWhatWasPlanned() {
        Engine.load(tiny.dir, tiny.options()).use { engine ->
            val held = engine.memory().devices.single()
            val planned = tiny.plan.single()
            assertEquals(planned.device, held.device)
            assertEquals(planned.kvCache, held.kvCache)
            assertEquals(planned.arena, held.arena)
        }
    }

    @Test fun theDeviceSaysWhichAndWhy() {
        Engine.load(tiny.dir, tiny.options()).use { engine ->
            assertTrue(engine.device, engine.device.startsWith("cpu") && "2 threads" in engine.device)
        }
        val vulkan = TestData.chatModel("tiny-vulkan")
        Engine.load(vulkan.dir, EngineOptions(device = "auto", threads = 2)).use { engine ->
            assertTrue(engine.device, engine.device.startsWith("vulkan") && "auto" in engine.device)
        }
    }

    @Test fun loadAndMemoryAreStaticForJava() {
        for (method in listOf(Engine::class.java.getMethod("load", String::class.java),
                Engine::class.java.getMethod("load", String::class.java, EngineOptions::class.java),
                Engine::class.java.getMethod("memory", String::class.java))) {
            assertTrue(method.toString(), Modifier.isStatic(method.modifiers))
        }
        assertTrue(AutoCloseable::class.java.isAssignableFrom(Engine::class.java))
    }

    /** After reset the next turn prefills from the start; it must answer as the cached conversation did. */
    @Test fun resetForgetsTheConversation() {
        Engine.load(tiny.dir, tiny.options()).use { engine ->
            val first = engine.chat.completions.create(TestData.MESSAGES, tiny.greedy())
            val conversation = TestData.MESSAGES + first.choices[0].message + ChatMessage("user", "And then?")
            val cached = engine.chat.completions.create(conversation, tiny.greedy(maxTokens = 6))
            engine.reset()
            val fresh = engine.chat.completions.create(conversation, tiny.greedy(maxTokens = 6))
            assertEquals(cached, fresh)
            engine.reset()
            assertEquals(first, engine.chat.completions.create(TestData.MESSAGES, tiny.greedy()))
        }
    }

    @Test fun closeTwiceIsFineAndAnyUseAfterThrows() {
        val engine = Engine.load(tiny.dir, tiny.options())
        engine.close()
        engine.close()
        val calls = listOf<() -> Any>(
            { engine.chat.completions.create(TestData.MESSAGES, tiny.greedy()) },
            { engine.chat.completions.create(TestData.MESSAGES, tiny.greedy()) {} },
            { engine.reset() },
            { engine.memory() },
        )
        for (call in calls) {
            val error = assertThrows(TesseraException::class.java) { call() }
            assertTrue(error.message, "closed" in error.message!!)
        }
    }

    /** Engine's doc: calls from several threads are serialized, so each gets the whole greedy reply. */
    @Test fun createsFromSeveralThreadsAreSerialized() {
        Engine.load(tiny.dir, tiny.options()).use { engine ->
            val replies = Collections.synchronizedList(ArrayList<String>())
            val failures = Collections.synchronizedList(ArrayList<Throwable>())
            val go = CountDownLatch(1)
            val threads = (1..4).map {
                thread {
                    go.await()
                    try {
                        engine.reset()
                        replies.add(engine.chat.completions.create(TestData.MESSAGES, tiny.greedy()) {}
                            .choices[0].message.content)
                    } catch (t: Throwable) {
                        failures.add(t)
                    }
                }
            }
            go.countDown()
            threads.forEach { it.join() }
            assertEquals(listOf<Throwable>(), failures)
            assertEquals(List(4) { tiny.reply }, replies)
        }
    }

    /** Engine's doc: a call from inside the engine's own delta callback is refused by name, not deadlocked. */
    @Test fun aCallFromInsideTheCallbackIsRefusedByName() {
        Engine.load(tiny.dir, tiny.options()).use { engine ->
            var refused: TesseraException? = null
            val reply = engine.chat.completions.create(TestData.MESSAGES, tiny.greedy()) {
                if (refused == null) refused = assertThrows(TesseraException::class.java) { engine.reset() }
            }
            assertTrue(refused?.message, "busy" in refused!!.message!!)
            assertEquals(tiny.reply, reply.choices[0].message.content)
        }
    }

    /** An exception thrown by the callback stops generation, comes out of create, and the engine goes on. */
    @Test fun anExceptionInTheCallbackComesOutOfCreate() {
        Engine.load(tiny.dir, tiny.options()).use { engine ->
            val error = assertThrows(IllegalStateException::class.java) {
                engine.chat.completions.create(TestData.MESSAGES, tiny.greedy()) { error("the app's own failure") }
            }
            assertEquals("the app's own failure", error.message)
            engine.reset()
            assertEquals(tiny.reply, engine.chat.completions.create(TestData.MESSAGES, tiny.greedy()).choices[0].message.content)
        }
    }

    /** close() from inside the callback cancels the generation; the engine is closed once create returns. */
    @Test fun closeFromInsideTheCallbackCancels() {
        val engine = Engine.load(tiny.dir, tiny.options())
        var pieces = 0
        val reply = engine.chat.completions.create(TestData.MESSAGES, tiny.greedy()) {
            pieces++
            engine.close()
        }
        assertEquals(1, pieces)
        assertEquals("cancelled", reply.choices[0].finishReason)
        assertThrows(TesseraException::class.java) { engine.reset() }
        engine.close()
    }
}
