import CTessera

/// Every failure of the runtime, with the runtime's own words: `status` is the name of the C status code
/// ("TESSERA_ERROR_FORMAT"), `message` is tessera_last_error() read right after the failing call.
public struct TesseraError: Error, CustomStringConvertible {
    public let status: String
    public let message: String

    public init(status: String, message: String) {
        self.status = status
        self.message = message
    }

    public var description: String {
        return status + ": " + message
    }

    /// The error of a C call that returned a (negative) status.
    static func fromStatus(_ status: Int32) -> TesseraError {
        var name = "TESSERA_ERROR"
        if let p = tessera_status_name(status) {
            name = String(cString: p)
        }
        return TesseraError(status: name, message: lastMessage())
    }

    /// The error of a C call that returned NULL (a load, a new session): the message says why; there is
    /// no status code to name.
    static func fromNull(_ what: String) -> TesseraError {
        let message = lastMessage()
        return TesseraError(status: "TESSERA_ERROR", message: message.isEmpty ? what + " failed" : message)
    }

    static func invalid(_ message: String) -> TesseraError {
        return TesseraError(status: "TESSERA_ERROR_INVALID_ARGUMENT", message: message)
    }

    static func closed(_ what: String) -> TesseraError {
        return TesseraError(status: "TESSERA_ERROR_INVALID_ARGUMENT", message: what + " is closed")
    }

    private static func lastMessage() -> String {
        if let p = tessera_last_error() {
            return String(cString: p)
        }
        return ""
    }
}
