package ai.tessera

/**
 * Every failure of the runtime, in the runtime's own words.
 *
 * [message] is tessera_last_error() read right after the failing call (or, for a mistake the Kotlin side
 * catches before calling the runtime, a sentence naming it). [status] is the C status code (a negative
 * tessera_status; 0 when the runtime returned NULL, which carries a message but no code) and [statusName]
 * its name ("TESSERA_ERROR_FORMAT").
 */
class TesseraException(
    message: String,
    val status: Int,
    val statusName: String,
) : RuntimeException(message) {
    override fun toString(): String = "TesseraException($statusName): $message"

    internal companion object {
        const val INVALID_ARGUMENT = -1
        const val UNSUPPORTED = -6

        fun invalid(message: String) = TesseraException(message, INVALID_ARGUMENT, "TESSERA_ERROR_INVALID_ARGUMENT")

        /** A call on an engine or module after close(): `what` names it ("the engine (model /data/smollm2)"). */
        fun closed(what: String) = invalid("$what is closed")

        /** After a C call returned a negative status: the runtime's message and the status's name. */
        fun fromStatus(status: Int, doing: String): TesseraException {
            val message = TesseraJni.lastErrorText()
            return TesseraException(message.ifEmpty { "$doing failed" }, status, TesseraJni.statusNameText(status))
        }

        /** After a C call returned NULL: the runtime gives a message, not a status. */
        fun fromNull(doing: String): TesseraException {
            val message = TesseraJni.lastErrorText()
            return TesseraException(message.ifEmpty { "$doing failed" }, 0, "TESSERA_ERROR")
        }
    }
}
