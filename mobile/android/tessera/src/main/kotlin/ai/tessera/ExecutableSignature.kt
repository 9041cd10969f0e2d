package ai.tessera

/**
 * An input or an output of a function, as the runtime describes it (tessera.h: tessera_model_inputs and
 * tessera_model_outputs). An input is a parameter that is not state (a KV cache stays in the runtime); an
 * output is a value of the result, tuples flattened depth-first, named as the executable records it (an ONNX
 * graph's output names), else "output0", "output1" ...
 */
data class ValueInfo(
    val name: String,
    /** An integer: passed as a one-element INT64 or INT32 tensor (Tensor.scalar), returned as a 0-d INT64 one. */
    val isInteger: Boolean,
    /** The element type; null when the executable leaves it open or it is one Kotlin has no DType for. */
    val dtype: DType?,
    /** One entry per dimension: its size when fixed, else null; null when not even the rank is known. */
    val shape: List<Long?>?,
    /** Each dimension as executable.json writes it ("4", "n", "n + 1"); an entry is null where only the rank is known. */
    val dims: List<String?>?,
    /** Per dimension that is one shape variable, its upper bound (the memory plan holds that many), else null. */
    val upperBounds: List<Long?>?,
)

/**
 * What each function of a loaded model takes and returns, asked of the runtime through the JNI bridge (the
 * runtime read executable.json at load; nothing is parsed here). Descriptions are read once per function.
 * The caller serializes calls on the model handle (Module's lock).
 */
internal class ExecutableSignature private constructor(private val model: Long, val functions: List<String>) {
    private val inputs = HashMap<String, List<ValueInfo>>()
    private val outputs = HashMap<String, List<ValueInfo>>()

    fun inputs(function: String): List<ValueInfo> = inputs.getOrPut(function) { describe(function, false) }

    fun outputs(function: String): List<ValueInfo> = outputs.getOrPut(function) { describe(function, true) }

    private fun describe(function: String, outputs: Boolean): List<ValueInfo> {
        val status = IntArray(1)
        val encoded = TesseraJni.modelIo(model, cString(function, "the function name"), outputs, status)
            ?: throw TesseraException.fromStatus(status[0], "describing the ${if (outputs) "outputs" else "inputs"} " +
                "of $function")
        return decode(encoded)
    }

    companion object {
        fun read(model: Long): ExecutableSignature {
            val names = TesseraJni.modelFunctions(model)
                ?: throw TesseraException.fromStatus(TesseraException.INVALID_ARGUMENT, "listing the functions")
            return ExecutableSignature(model, names.map { String(it!!, Charsets.UTF_8) })
        }

        /** TesseraJni.modelIo's arrays: (kind, has dtype, dtype, ndim) per entry, (size, bound) per dimension,
         *  and (name, value, each dimension's text) per entry. */
        private fun decode(encoded: Array<Any?>): List<ValueInfo> {
            val fields = encoded[0] as IntArray
            val sizes = encoded[1] as LongArray
            @Suppress("UNCHECKED_CAST") val texts = encoded[2] as Array<ByteArray?>
            fun text(i: Int) = texts[i]?.let { String(it, Charsets.UTF_8) }
            val result = ArrayList<ValueInfo>()
            var d = 0
            var t = 0
            for (i in 0 until fields.size / 4) {
                val ndim = fields[4 * i + 3]
                val name = text(t)!!
                t += 2 // the name, and an integer's value expression (not exposed)
                val shape = if (ndim < 0) null else List(ndim) { k -> sizes[2 * (d + k)].takeIf { it >= 0 } }
                val bounds = if (ndim < 0) null else List(ndim) { k -> sizes[2 * (d + k) + 1].takeIf { it >= 0 } }
                val dims = if (ndim < 0) null else List(ndim) { k -> text(t + k) }
                if (ndim > 0) {
                    d += ndim
                    t += ndim
                }
                val dtype = if (fields[4 * i + 1] != 0) DType.fromCode(fields[4 * i + 2]) else null
                result.add(ValueInfo(name, fields[4 * i] == 1, dtype, shape, dims, bounds))
            }
            return result
        }
    }
}
