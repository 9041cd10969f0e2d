package ai.tessera

import org.junit.Assert.assertEquals
import org.junit.Test

/**
 * 200 load/chat/close cycles on the tiny model. The RSS is read after a warm-up (the JIT's code, the
 * allocator's pools) and at the end, and written for pytest, which bounds the growth: a handle or buffer
 * that a cycle leaks would add up. The pytest driver runs this JVM with a fixed, pre-touched heap, so
 * that the Java heap's own growth does not count.
 */
class LeakTest {
    @Test fun loadChatCloseCyclesLeaveTheRssFlat() {
        val tiny = TestData.chatModel("tiny-cpu")
        val cycles = 200
        val warmUp = 20
        var warm = 0L
        val start = System.nanoTime()
        for (cycle in 1..cycles) {
            Engine.load(tiny.dir, tiny.options()).use { engine ->
                val reply = engine.chat.completions.create(TestData.MESSAGES, tiny.greedy(maxTokens = 4)) {}
                assertEquals(tiny.reply.take(reply.choices[0].message.content.length), reply.choices[0].message.content)
            }
            if (cycle == warmUp) {
                System.gc()
                warm = TestData.rssKiB()
            }
        }
        System.gc()
        val end = TestData.rssKiB()
        println("RSS after $warmUp cycles: $warm KiB; after $cycles: $end KiB (%.1f s)".format((System.nanoTime() - start) / 1e9))
        TestData.out("rss.txt").writeText("$warm $end $cycles\n")
    }
}
