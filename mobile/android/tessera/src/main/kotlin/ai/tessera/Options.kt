package ai.tessera

/**
 * How a model is loaded.
 *
 * [device] is "auto" (the fastest device of the build that this phone has: Vulkan, then OpenCL, then the
 * CPU, for a model that `tessera package --target android` compiled for Vulkan plus the CPU) or a device's
 * name: "vulkan", "opencl", "cpu", with ":N" for the N-th device of its kind. [threads] is the number of CPU
 * threads, 0 for one per online CPU. [cacheDir] is where GPU devices keep compiled pipelines so a second
 * load compiles no shader; null keeps them in the model's folder (on Android, pass context.cacheDir.path
 * when the model folder is read-only). [memoryLimit] is the most bytes the model may take (its plan over
 * every device, as [Engine.memory] reports it): a larger model is refused before anything is allocated;
 * 0 means what the phone has available when it loads (MemAvailable), [NO_MEMORY_LIMIT] no check.
 */
data class EngineOptions @JvmOverloads constructor(
    val device: String = "auto",
    val threads: Int = 0,
    val cacheDir: String? = null,
    val memoryLimit: Long = 0,
) {
    companion object {
        /** memoryLimit for no check at all. */
        const val NO_MEMORY_LIMIT: Long = Long.MAX_VALUE
    }
}

/**
 * Sampling for one reply. [temperature] 0 is greedy; [topP] 1 is off; [seed] null keeps the runtime's
 * default; generation stops before the first of the [stop] strings, which is not part of the reply.
 * The defaults are those of the Swift package.
 */
data class CompletionOptions @JvmOverloads constructor(
    val maxTokens: Int = 256,
    val temperature: Float = 0.7f,
    val topP: Float = 0.95f,
    val seed: Long? = null,
    val stop: List<String> = emptyList(),
)

/** What one device of a model needs, in bytes (tessera_device_memory). */
data class DeviceMemory(
    /** The device's kind: "vulkan", "opencl", "cpu". */
    val device: String,
    val weights: Long,
    val arena: Long,
    val kvCache: Long,
    val total: Long,
)

/** What a model needs on each of its devices (two for a build split between a GPU and the CPU). */
data class MemoryPlan(val devices: List<DeviceMemory>) {
    /** Bytes over every device. */
    val total: Long get() = devices.sumOf { it.total }
}
