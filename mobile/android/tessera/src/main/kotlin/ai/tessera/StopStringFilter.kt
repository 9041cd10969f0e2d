package ai.tessera

/**
 * Receives the reply's pieces (whole UTF-8 characters, as the runtime hands them out) and decides what may
 * be shown. It keeps the whole reply as UTF-8 bytes, cuts it at the first stop string, and holds back a tail
 * that could be the start of a stop string, so no part of a stop string is ever streamed.
 *
 * Working on bytes is safe: a stop string that is valid UTF-8 begins on a character boundary wherever it
 * matches, so every cut and every held-back tail falls between characters. [emit] gets the safe text.
 */
internal class StopStringFilter(stop: List<String>, private val emit: (String) -> Unit) {
    private val stops: List<ByteArray> = stop.filter { it.isNotEmpty() }.map { it.toByteArray(Charsets.UTF_8) }
    private var bytes = ByteArray(256)
    private var length = 0
    private var emitted = 0

    /** True once a stop string was found: the reply ends before it. */
    var stopped = false
        private set

    /** Adds a piece; false when generation should stop (a stop string is complete). */
    fun receive(piece: ByteArray): Boolean {
        append(piece)
        val cut = firstStop()
        if (cut >= 0) {
            length = cut
            flush(length)
            stopped = true
            return false
        }
        flush(length - heldBack())
        return true
    }

    /** After generation: what was held back is part of the reply after all. */
    fun finish() = flush(length)

    val text: String get() = String(bytes, 0, length, Charsets.UTF_8)

    private fun append(piece: ByteArray) {
        if (length + piece.size > bytes.size) bytes = bytes.copyOf(maxOf(bytes.size * 2, length + piece.size))
        piece.copyInto(bytes, length)
        length += piece.size
    }

    private fun flush(end: Int) {
        if (end > emitted) {
            emit(String(bytes, emitted, end - emitted, Charsets.UTF_8))
            emitted = end
        }
    }

    /** The earliest start of a stop string, or -1. Only bytes after what was emitted can complete one. */
    private fun firstStop(): Int {
        var best = -1
        for (stop in stops) {
            var i = maxOf(0, emitted - stop.size)
            while (i + stop.size <= length && (best < 0 || i < best)) {
                if (matches(i, stop, stop.size)) {
                    best = i
                    break
                }
                i++
            }
        }
        return best
    }

    /** The length of the longest tail of the reply that is a proper prefix of a stop string. */
    private fun heldBack(): Int {
        var longest = 0
        for (stop in stops) {
            var n = minOf(stop.size - 1, length)
            while (n > longest) {
                if (matches(length - n, stop, n)) {
                    longest = n
                    break
                }
                n--
            }
        }
        return longest
    }

    private fun matches(at: Int, stop: ByteArray, n: Int): Boolean {
        for (k in 0 until n) if (bytes[at + k] != stop[k]) return false
        return true
    }
}
