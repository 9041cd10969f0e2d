package ai.tessera

import org.junit.Assert.assertEquals
import org.junit.Assert.assertThrows
import org.junit.Assert.assertTrue
import org.junit.Test
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * Module.run on conformance cases (the CNN among them): the inputs pytest wrote go in by parameter name,
 * and the outputs are written back in Module.run's order, for pytest to compare with the expected outputs
 * at each case's tolerances (tests/conformance/caseio.py).
 */
class ModuleTest {
    @Test fun runsTheConformanceCases() {
        val cases = TestData.file("module").list()!!.sorted()
        assertEquals(listOf("cnn-mobilenet", "conv-pool", "gemm", "layout", "reductions"), cases)
        for (case in cases) {
            Module.load(TestData.text("module/$case/dir"), EngineOptions(device = "cpu", threads = 2)).use { module ->
                assertEquals("main" in module.functions, true)
                for (call in 0 until TestData.int("module/$case/calls")) {
                    val folder = TestData.file("module/$case/call$call")
                    val function = File(folder, "function").readText(Charsets.UTF_8)
                    val inputs = readInputs(folder)
                    assertEquals(inputs.keys.toList(), module.inputNames(function))
                    val outputs = module.run(inputs, function)
                    // No names recorded (hand-written IR): output0, output1 ..., as outputNames lists them.
                    assertEquals(List(outputs.size) { "output$it" }, module.outputNames(function))
                    writeOutputs(TestData.out("module/$case/call$call/outputs.txt").parentFile, outputs, module,
                        function)
                }
            }
        }
    }

    /**
     * The runtime's description of a function (tessera_model_inputs/_outputs through the bridge) and a run by
     * name: main(x0: (n, 4), x1: (n, 4)) -> (sum, (product, difference)), n at most 8, whose executable records
     * its output names. Each bad input is the runtime's error naming it.
     */
    @Test fun inputsAndOutputsByTheNamesTheExecutableRecords() {
        Module.load(TestData.text("named/dir"), EngineOptions(device = "cpu", threads = 1)).use { module ->
            val (x0, x1) = module.inputs()
            assertEquals(listOf("x0", "x1"), listOf(x0.name, x1.name))
            assertEquals(ValueInfo("x0", false, DType.FLOAT32, listOf(null, 4L), listOf("n", "4"), listOf(8L, null)), x0)
            assertEquals(listOf("sum", "product", "difference"), module.outputNames())
            assertEquals(listOf(null, 4L), module.outputs()[2].shape)
            val a = Tensor.of(FloatArray(8) { it.toFloat() }, 2, 4)
            val b = Tensor.of(FloatArray(8) { 1f }, 2, 4)
            val all = module.run(mapOf("x1" to b, "x0" to a))
            assertEquals(listOf("sum", "product", "difference"), all.keys.toList())
            assertEquals(8f, all.getValue("sum").floats[7])
            assertEquals(7f, all.getValue("product").floats[7])
            val chosen = module.run(mapOf("x0" to a, "x1" to b), outputNames = listOf("difference", "sum"))
            assertEquals(listOf("difference", "sum"), chosen.keys.toList())
            assertEquals(6f, chosen.getValue("difference").floats[7])
            fun refused(inputs: Map<String, Tensor>, vararg words: String, outputs: List<String>? = null) {
                val error = assertThrows(TesseraException::class.java) { module.run(inputs, "main", outputs) }
                for (word in words) assertTrue("'$word' in ${error.message}", error.message!!.contains(word))
            }
            val nine = Tensor.of(FloatArray(36), 9, 4)
            refused(mapOf("x0" to nine, "x1" to nine), "input 'x0' of main", "above its upper bound 8")
            refused(mapOf("x0" to a, "x1" to Tensor.of(FloatArray(12), 3, 4)), "input 'x1' of main", "n = 2 from input 'x0'")
            refused(mapOf("x0" to a), "input 'x1' of main is missing")
            refused(mapOf("x0" to a, "x1" to Tensor.of(IntArray(8), 2, 4)), "input 'x1' of main: expected dtype float32")
            refused(mapOf("x0" to a, "x1" to b), "unknown output 'logits' of main", outputs = listOf("logits"))
            assertThrows(TesseraException::class.java) { module.inputs("nope") }
        }
    }

    /** inputs.txt: `NAME DTYPE DIMS FILE` per line (DIMS comma-separated, `-` for 0-d), raw little-endian data. */
    private fun readInputs(folder: File): Map<String, Tensor> {
        val inputs = LinkedHashMap<String, Tensor>()
        for (line in File(folder, "inputs.txt").readLines(Charsets.UTF_8).filter { it.isNotBlank() }) {
            val (name, dtype, dims, file) = line.split(" ")
            val shape = if (dims == "-") LongArray(0) else dims.split(",").map { it.toLong() }.toLongArray()
            val buffer = ByteBuffer.wrap(File(folder, file).readBytes()).order(ByteOrder.LITTLE_ENDIAN)
            inputs[name] = when (dtype) {
                "float32" -> Tensor(shape, FloatArray(buffer.remaining() / 4).also { buffer.asFloatBuffer().get(it) })
                "int32" -> Tensor(shape, IntArray(buffer.remaining() / 4).also { buffer.asIntBuffer().get(it) })
                "int64" -> Tensor(shape, LongArray(buffer.remaining() / 8).also { buffer.asLongBuffer().get(it) })
                "uint8" -> Tensor(shape, buffer.array())
                "bool" -> Tensor(shape, BooleanArray(buffer.remaining()) { buffer.get(it).toInt() != 0 })
                else -> error("$folder: dtype $dtype")
            }
        }
        return inputs
    }

    /** outputs.txt as inputs.txt, in the map's order (output0, output1, ...), each tensor's data beside it. */
    private fun writeOutputs(folder: File, outputs: Map<String, Tensor>, module: Module, function: String) {
        assertEquals(module.outputNames(function), outputs.keys.toList())
        val lines = StringBuilder()
        for ((name, tensor) in outputs) {
            val (dtype, bytes) = littleEndian(tensor)
            File(folder, "$name.bin").writeBytes(bytes)
            val dims = if (tensor.shape.isEmpty()) "-" else tensor.shape.joinToString(",")
            lines.append("$name $dtype $dims $name.bin\n")
        }
        File(folder, "outputs.txt").writeText(lines.toString(), Charsets.UTF_8)
    }

    private fun littleEndian(tensor: Tensor): Pair<String, ByteArray> {
        fun buffer(bytes: Int) = ByteBuffer.allocate(tensor.size * bytes).order(ByteOrder.LITTLE_ENDIAN)
        return when (tensor.dtype) {
            DType.FLOAT32 -> "float32" to buffer(4).also { it.asFloatBuffer().put(tensor.floats) }.array()
            DType.INT32 -> "int32" to buffer(4).also { it.asIntBuffer().put(tensor.ints) }.array()
            DType.INT64 -> "int64" to buffer(8).also { it.asLongBuffer().put(tensor.longs) }.array()
            DType.UINT8 -> "uint8" to tensor.bytes
            DType.BOOL -> "bool" to tensor.bytes
        }
    }
}
