package ai.tessera

import java.nio.ByteBuffer
import java.nio.ByteOrder

/** The element types a Tensor holds; [code] is the runtime's tessera_dtype. */
enum class DType(internal val code: Int, internal val bytes: Int) {
    FLOAT32(0, 4), INT32(2, 4), INT64(4, 8), BOOL(5, 1), UINT8(7, 1);

    internal companion object {
        fun fromCode(code: Int): DType? = values().firstOrNull { it.code == code }
    }
}

/**
 * A tensor passed to or returned from Module.run: a row-major [shape] and typed data (numpy's layout).
 * The data is a FloatArray (FLOAT32), IntArray (INT32), LongArray (INT64) or ByteArray (UINT8, and BOOL
 * with one byte 0 or 1 per element). Tensors that Module.run returns are copies: they outlive the module.
 */
class Tensor private constructor(val shape: LongArray, val dtype: DType, private val array: Any, size: Int) {
    constructor(shape: LongArray, data: FloatArray) : this(shape, DType.FLOAT32, data, data.size)
    constructor(shape: LongArray, data: IntArray) : this(shape, DType.INT32, data, data.size)
    constructor(shape: LongArray, data: LongArray) : this(shape, DType.INT64, data, data.size)
    constructor(shape: LongArray, data: ByteArray) : this(shape, DType.UINT8, data, data.size)
    constructor(shape: LongArray, data: BooleanArray) :
        this(shape, DType.BOOL, ByteArray(data.size) { if (data[it]) 1 else 0 }, data.size)

    init {
        if (shape.size > MAX_DIMENSIONS) {
            throw TesseraException.invalid("a tensor has at most $MAX_DIMENSIONS dimensions, not ${shape.size}")
        }
        if (shape.any { it < 0 }) {
            throw TesseraException.invalid("the shape ${shape.contentToString()} has a negative dimension")
        }
        val elements = shape.fold(1L) { product, d -> product * d }
        if (elements != size.toLong()) {
            throw TesseraException.invalid(
                "a tensor of shape ${shape.contentToString()} holds $elements elements, not $size")
        }
    }

    val size: Int get() = shape.fold(1L) { product, d -> product * d }.toInt()

    val floats: FloatArray get() = array as? FloatArray ?: throw wrongType(DType.FLOAT32)
    val ints: IntArray get() = array as? IntArray ?: throw wrongType(DType.INT32)
    val longs: LongArray get() = array as? LongArray ?: throw wrongType(DType.INT64)

    /** The bytes of a UINT8 or BOOL tensor. */
    val bytes: ByteArray get() = array as? ByteArray ?: throw wrongType(DType.UINT8)
    val booleans: BooleanArray
        get() = if (dtype == DType.BOOL) BooleanArray(size) { bytes[it].toInt() != 0 } else throw wrongType(DType.BOOL)

    override fun toString(): String = "Tensor($dtype, shape=${shape.contentToString()})"

    private fun wrongType(wanted: DType) =
        TesseraException.invalid("this tensor holds $dtype, not $wanted (shape ${shape.contentToString()})")

    /** The data in native byte order, as the bridge copies it into the runtime. */
    internal fun toNativeBytes(): ByteArray {
        val buffer = ByteBuffer.allocate(size * dtype.bytes).order(ByteOrder.nativeOrder())
        when (val a = array) {
            is FloatArray -> buffer.asFloatBuffer().put(a)
            is IntArray -> buffer.asIntBuffer().put(a)
            is LongArray -> buffer.asLongBuffer().put(a)
            is ByteArray -> buffer.put(a)
        }
        return buffer.array()
    }

    companion object {
        const val MAX_DIMENSIONS = 8

        @JvmStatic fun of(data: FloatArray, vararg shape: Long) = Tensor(shape, data)
        @JvmStatic fun of(data: IntArray, vararg shape: Long) = Tensor(shape, data)
        @JvmStatic fun of(data: LongArray, vararg shape: Long) = Tensor(shape, data)
        @JvmStatic fun of(data: ByteArray, vararg shape: Long) = Tensor(shape, data)
        @JvmStatic fun of(data: BooleanArray, vararg shape: Long) = Tensor(shape, data)

        /** A 0-d INT64 tensor: how an integer (a shape variable) goes in and comes back out. */
        @JvmStatic fun scalar(value: Long) = Tensor(LongArray(0), longArrayOf(value))

        /** A tensor from bytes in native order that the bridge copied out of the runtime. */
        internal fun fromNativeBytes(dtypeCode: Int, shape: LongArray, bytes: ByteArray): Tensor {
            val dtype = DType.fromCode(dtypeCode) ?: throw TesseraException("an output has dtype code $dtypeCode; " +
                "Tensor holds float32, int32, int64, uint8 and bool", TesseraException.UNSUPPORTED,
                "TESSERA_ERROR_UNSUPPORTED")
            val buffer = ByteBuffer.wrap(bytes).order(ByteOrder.nativeOrder())
            val count = bytes.size / dtype.bytes
            return when (dtype) {
                DType.FLOAT32 -> Tensor(shape, FloatArray(count).also { buffer.asFloatBuffer().get(it) })
                DType.INT32 -> Tensor(shape, IntArray(count).also { buffer.asIntBuffer().get(it) })
                DType.INT64 -> Tensor(shape, LongArray(count).also { buffer.asLongBuffer().get(it) })
                DType.UINT8 -> Tensor(shape, bytes)
                DType.BOOL -> Tensor(shape, DType.BOOL, bytes, bytes.size)
            }
        }
    }
}
