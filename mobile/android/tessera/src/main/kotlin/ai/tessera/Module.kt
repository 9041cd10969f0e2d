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
                return Module(model, modelDir, ExecutableSignature.read(model), device)
            } catch (e: Throwable) {
                TesseraJni.modelFree(model)
                throw e
            }
        }
    }

    /** The functions of the executable. */
    val functions: Set<String> get() = signature.functions.toSet()

    /** [function]'s inputs: its parameters that are not state, by their names in executable.json. */
    @JvmOverloads
    fun inputs(function: String = "main"): List<ValueInfo> = describe(function) { signature.inputs(it) }

    /** [function]'s outputs: its result's values, tuples flattened, by the names the executable records (an
     *  ONNX graph's output names), else "output0", "output1" ... */
    @JvmOverloads
    fun outputs(function: String = "main"): List<ValueInfo> = describe(function) { signature.outputs(it) }

    /** The input names [function] takes ([inputs]' names). */
    @JvmOverloads
    fun inputNames(function: String = "main"): List<String> = inputs(function).map { it.name }

    /** The names of [function]'s outputs, in the order it returns them ([outputs]' names). */
    @JvmOverloads
    fun outputNames(function: String = "main"): List<String> = outputs(function).map { it.name }

    /**
     * Calls [function] with [inputs] keyed by its input names ([inputNames]); every input must be given and no
     * other key. A tensor input takes a Tensor; an integer input ([ValueInfo.isInteger]) takes a one-element
     * INT64 or INT32 Tensor (Tensor.scalar(7)). The runtime checks every input before the call (dtype, rank,
     * fixed dimensions, the bounds and agreement of symbolic ones) and its error names the input. Returns the
     * outputs named [outputNames] (null: every output, in the order the function returns them), keyed by name;
     * integer results come back as 0-d INT64 tensors. They are copies.
     */
    @JvmOverloads
    fun run(
        inputs: Map<String, Tensor>,
        function: String = "main",
        outputNames: List<String>? = null,
    ): Map<String, Tensor> {
        val integers = this.inputs(function).filter { it.isInteger }.map { it.name }.toSet()
        val names = inputs.keys.toList()
        val n = names.size
        val kinds = IntArray(n)
        val dtypes = IntArray(n)
        val shapes = arrayOfNulls<LongArray>(n)
        val data = arrayOfNulls<ByteArray>(n)
        val ints = LongArray(n)
        for ((i, input) in names.withIndex()) {
            val tensor = inputs.getValue(input)
            if (input in integers) {
                kinds[i] = 1
                ints[i] = integerOf(tensor, function, input)
            } else {
                dtypes[i] = tensor.dtype.code
                shapes[i] = tensor.shape
                data[i] = tensor.toNativeBytes()
            }
        }
        val keys = outputNames ?: outputs(function).map { it.name }
        val functionName = cString(function, "the function name")
        val nameBytes = Array(n) { cString(names[it], "an input name") }
        val wanted = outputNames?.map { cString(it, "an output name") }?.toTypedArray()
        val status = IntArray(1)
        val result = locked {
            TesseraJni.modelRunNamed(model, functionName, nameBytes, kinds, dtypes, shapes, data, ints, wanted, status)
                ?: throw TesseraException.fromStatus(status[0], "calling $function of $modelDir")
        }
        return outputsOf(result, keys)
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

    private fun <T> describe(function: String, read: (String) -> T): T = locked {
        if (function !in signature.functions) {
            throw TesseraException.invalid("$modelDir has no function '$function'; it has " +
                signature.functions.joinToString())
        }
        read(function)
    }

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

    /** [IntArray dtypes, LongArray (ndim, dims...) per output, then each output's bytes] from the bridge, keyed
     *  by [names] in order. */
    private fun outputsOf(result: Array<Any?>, names: List<String>): Map<String, Tensor> {
        val dtypes = result[0] as IntArray
        val shapes = result[1] as LongArray
        val outputs = LinkedHashMap<String, Tensor>()
        var at = 0
        for (i in dtypes.indices) {
            val ndim = shapes[at].toInt()
            val shape = shapes.copyOfRange(at + 1, at + 1 + ndim)
            at += 1 + ndim
            outputs[names[i]] = Tensor.fromNativeBytes(dtypes[i], shape, result[2 + i] as ByteArray)
        }
        return outputs
    }
}
