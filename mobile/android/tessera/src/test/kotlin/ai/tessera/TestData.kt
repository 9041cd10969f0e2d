package ai.tessera

import java.io.File

/**
 * What tests/mobile/test_android_jvm.py prepared for these tests, in the folder named by the system
 * property tessera.test.data: one file per value, read as UTF-8 (a -D value would pass through the JVM's
 * locale, and a reply of the random-weight model may hold any character).
 *
 *   chat/NAME/{dir,device,max_tokens,reply,prompt_tokens,completion_tokens,plan}
 *       NAME is tiny-cpu, tiny-vulkan, smollm2-cpu or smollm2-vulkan; reply is the Python VM's greedy reply
 *       to [MESSAGES]; plan has one line per device: `DEVICE WEIGHTS ARENA KV_CACHE TOTAL` (the C plan)
 *   stop/{stop,reply}             a stop string from tiny-cpu's reply, and the reply cut before it
 *   unicode/{reply,prompt_tokens} the Python VM's greedy reply on tiny-cpu to [UNICODE_MESSAGES]
 *   damaged/NAME/{dir,words}      a broken (or missing) model folder, and words its error must contain
 *   module/CASE/{dir,calls}, module/CASE/callI/{function,inputs.txt,in-*.bin}   conformance inputs
 *   named/dir                     main(x0, x1) -> (sum, (product, difference)): recorded output names
 *   out/                          where the tests write what pytest checks (Module outputs, RSS)
 */
object TestData {
    /** The conversation of every chat test (MESSAGES in the pytest driver is the same). */
    val MESSAGES = listOf(ChatMessage("system", "You are terse."), ChatMessage("user", "Hello there"))

    /** A character outside the BMP (a surrogate pair here, four bytes in UTF-8) and accents. */
    val UNICODE_MESSAGES = listOf(ChatMessage("user", "Sea \uD83C\uDF0A and sky, na\u00EFve caf\u00E9"))

    val root: File by lazy {
        File(System.getProperty("tessera.test.data")
            ?: error("run these tests from tests/mobile/test_android_jvm.py, which sets -Dtessera.test.data"))
    }

    fun file(key: String) = File(root, key)

    fun text(key: String): String = file(key).readText(Charsets.UTF_8)

    fun int(key: String): Int = text(key).trim().toInt()

    fun out(key: String): File = File(root, "out/$key").also { it.parentFile.mkdirs() }

    /** A chat model pytest compiled, with what the Python VM said about it. */
    class ChatModel(val name: String) {
        val dir = text("chat/$name/dir")
        val device = text("chat/$name/device")
        val maxTokens = int("chat/$name/max_tokens")
        val reply = text("chat/$name/reply")
        val promptTokens = int("chat/$name/prompt_tokens")
        val completionTokens = int("chat/$name/completion_tokens")
        val plan: List<DeviceMemory> = text("chat/$name/plan").lines().filter { it.isNotBlank() }.map { line ->
            val f = line.split(" ")
            DeviceMemory(f[0], f[1].toLong(), f[2].toLong(), f[3].toLong(), f[4].toLong())
        }

        /** Greedy, as the Python VM's reply was made; two threads, as a phone's little cores would get. */
        fun options() = EngineOptions(device = device, threads = 2)

        fun greedy(maxTokens: Int = this.maxTokens, stop: List<String> = emptyList()) =
            CompletionOptions(maxTokens = maxTokens, temperature = 0f, stop = stop)
    }

    fun chatModel(name: String) = ChatModel(name)

    /** The RSS of this JVM in KiB (VmRSS of /proc/self/status). */
    fun rssKiB(): Long =
        File("/proc/self/status").readLines().first { it.startsWith("VmRSS:") }.split(Regex("\\s+"))[1].toLong()
}
