package ai.tessera

import org.junit.Assert.assertEquals
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
                    writeOutputs(TestData.out("module/$case/call$call/outputs.txt").parentFile,
                        module.run(inputs, function))
                }
            }
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
    private fun writeOutputs(folder: File, outputs: Map<String, Tensor>) {
        assertEquals(List(outputs.size) { Module.outputName(it) }, outputs.keys.toList())
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
