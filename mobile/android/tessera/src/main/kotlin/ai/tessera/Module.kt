package ai.tessera

import java.util.concurrent.locks.ReentrantLock

/**
 * Any executable that is not a chat model (a CNN, a single layer): load a folder, run its functions on
 * tensors. Calls on one Module are serialized by a lock; close() waits for a run in progress, is safe to
 * call twice, and any later run throws.
 */
class Module private constructor(
    private var model: Long,
    private val modelDir: String,
    private val signature: ExecutableSignature,
    /** The device the model runs on and why it was chosen. */
    val device: String,
) : AutoCloseable {
    private val lock = ReentrantLock()
    private val name get() = "the module of $modelDir"

    companion object {
        @JvmStatic
        @JvmOverloads
        fun load(modelDir: String, options: EngineOptions = EngineOptions()): Module {
            val model = loadModel(modelDir, options)
            try {
                val device = TesseraJni.modelDevice(model)?.let { String(it, Charsets.UTF_8) } ?: ""
                // Read after the runtime checked the folder, so a broken one fails with the runtime's message.
                return Module(model, modelDir, ExecutableSignature.read(modelDir), device)
            } catch (e: Throwable) {
                TesseraJni.modelFree(model)
                throw e
            }
        }

        /** The names run()'s outputs get, in the order the function returns them (tuples flattened). */
        @JvmStatic fun outputName(index: Int) = "output$index"
    }

    /** The functions of the executable. */
    val functions: Set<String> get() = signature.functions.keys

    /** The input names [function] takes: its parameter names in executable.json, state parameters left out. */
    @JvmOverloads
    fun inputNames(function: String = "main"): List<String> = parameters(function).map { it.name }

    /**
     * Calls [function] with [inputs] keyed by its parameter names ([inputNames]); every parameter must be
     * given and no other key. A tensor parameter takes a Tensor; an integer parameter ("prim" in
     * executable.json) takes a one-element INT64 or INT32 Tensor (Tensor.scalar(7)). Tuple parameters cannot
     * be passed. The outputs are keyed "output0", "output1", ... in the order the function returns them,
     * tuples flattened depth-first; integer results come back as 0-d INT64 tensors. They are copies.
     */
    @JvmOverloads
    fun run(inputs: Map<String, Tensor>, function: String = "main"): Map<String, Tensor> {
        val params = parameters(function)
        val unknown = inputs.keys - params.map { it.name }.toSet()
        if (unknown.isNotEmpty()) {
            throw TesseraException.invalid("$function has no parameter ${unknown.sorted().joinToString()}; its " +
                "inputs are ${params.joinToString { it.name }}")
        }
        val n = params.size
        val kinds = IntArray(n)
        val dtypes = IntArray(n)
        val shapes = arrayOfNulls<LongArray>(n)
        val data = arrayOfNulls<ByteArray>(n)
        val ints = LongArray(n)
        for ((i, param) in params.withIndex()) {
            val tensor = inputs[param.name]
                ?: throw TesseraException.invalid("$function needs input '${param.name}' (its inputs are " +
                    "${params.joinToString { it.name }})")
            when (param.kind) {
                "prim" -> {
                    kinds[i] = 1
                    ints[i] = integerOf(tensor, function, param.name)
                }
                "tuple" -> throw TesseraException("input '${param.name}' of $function is a tuple, which Module.run " +
                    "cannot pass", TesseraException.UNSUPPORTED, "TESSERA_ERROR_UNSUPPORTED")
                else -> {
                    dtypes[i] = tensor.dtype.code
                    shapes[i] = tensor.shape
                    data[i] = tensor.toNativeBytes()
                }
            }
        }
        val functionName = cString(function, "the function name")
        val status = IntArray(1)
        val result = locked {
            TesseraJni.modelCall(model, functionName, kinds, dtypes, shapes, data, ints, status)
                ?: throw TesseraException.fromStatus(status[0], "calling $function of $modelDir")
        }
        return outputsOf(result)
    }

    override fun close() {
        lock.lock()
        try {
            if (model != 0L) TesseraJni.modelFree(model)
            model = 0L
        } finally {
            lock.unlock()
        }
    }

    private fun parameters(function: String): List<ExecutableSignature.Parameter> =
        signature.functions[function] ?: throw TesseraException.invalid("$modelDir has no function '$function'; " +
            "it has ${signature.functions.keys.joinToString()}")

    private fun <T> locked(body: () -> T): T {
        lock.lock()
        try {
            if (model == 0L) throw TesseraException.closed(name)
            return body()
        } finally {
            lock.unlock()
        }
    }

    private fun integerOf(tensor: Tensor, function: String, param: String): Long = when {
        tensor.size != 1 -> throw TesseraException.invalid("input '$param' of $function is an integer: give a " +
            "one-element tensor (Tensor.scalar), not $tensor")
        tensor.dtype == DType.INT64 -> tensor.longs[0]
        tensor.dtype == DType.INT32 -> tensor.ints[0].toLong()
        else -> throw TesseraException.invalid("input '$param' of $function is an integer: give an INT64 or INT32 " +
            "tensor, not $tensor")
    }

    /** [IntArray dtypes, LongArray (ndim, dims...) per output, then each output's bytes] from the bridge. */
    private fun outputsOf(result: Array<Any?>): Map<String, Tensor> {
        val dtypes = result[0] as IntArray
        val shapes = result[1] as LongArray
        val outputs = LinkedHashMap<String, Tensor>()
        var at = 0
        for (i in dtypes.indices) {
            val ndim = shapes[at].toInt()
            val shape = shapes.copyOfRange(at + 1, at + 1 + ndim)
            at += 1 + ndim
            outputs[outputName(i)] = Tensor.fromNativeBytes(dtypes[i], shape, result[2 + i] as ByteArray)
        }
        return outputs
    }
}
