import CTessera
import Foundation

/// One message of a conversation: role "system", "user" or "assistant".
public struct ChatMessage {
    public var role: String
    public var content: String

    public init(role: String, content: String) {
        self.role = role
        self.content = content
    }
}

/// Sampling for one reply. temperature 0 is greedy; topP 1 is off; seed nil keeps the runtime's default;
/// generation stops before the first of the `stop` strings (which is not part of the reply).
public struct CompletionOptions {
    public var maxTokens: Int
    public var temperature: Float
    public var topP: Float
    public var seed: UInt64?
    public var stop: [String]

    public init(maxTokens: Int = 256, temperature: Float = 0.7, topP: Float = 0.95, seed: UInt64? = nil,
                stop: [String] = []) {
        self.maxTokens = maxTokens
        self.temperature = temperature
        self.topP = topP
        self.seed = seed
        self.stop = stop
    }
}

public struct CompletionUsage {
    public let promptTokens: Int
    public let completionTokens: Int
    public let totalTokens: Int
}

public struct ChatCompletion {
    public struct Choice {
        public let index: Int
        public let message: ChatMessage
        /// "stop" (end of turn or a stop string), "length" (maxTokens reached) or "cancelled".
        public let finishReason: String
    }

    public let choices: [Choice]
    public let usage: CompletionUsage
}

/// One streamed piece: choices[0].delta.content; the last chunk has an empty delta, the finish reason and
/// the usage.
public struct ChatCompletionChunk {
    public struct Delta {
        public let role: String?
        public let content: String?
    }

    public struct Choice {
        public let index: Int
        public let delta: Delta
        public let finishReason: String?
    }

    public let choices: [Choice]
    public let usage: CompletionUsage?

    init(content: String) {
        choices = [Choice(index: 0, delta: Delta(role: "assistant", content: content), finishReason: nil)]
        usage = nil
    }

    init(finishReason: String, usage: CompletionUsage) {
        choices = [Choice(index: 0, delta: Delta(role: nil, content: nil), finishReason: finishReason)]
        self.usage = usage
    }
}

/// Set from any thread (a cancelled task, a terminated stream); read by the piece callback.
final class CancelFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelled = false

    func cancel() {
        lock.lock()
        cancelled = true
        lock.unlock()
    }

    var isCancelled: Bool {
        lock.lock()
        defer { lock.unlock() }
        return cancelled
    }
}

/// Receives the reply's pieces from the C callback. It keeps the whole reply as UTF-8 bytes, cuts it at
/// the first stop string, and holds back a tail that could be the start of a stop string, so a stop string
/// is never streamed. `emit` gets the text that is safe to show.
final class PieceSink {
    private let stops: [[UInt8]]
    private let cancel: CancelFlag
    private let emit: (String) -> Void
    private(set) var bytes: [UInt8] = []
    private var emitted = 0
    private(set) var stopped = false
    private(set) var cancelled = false

    init(stop: [String], cancel: CancelFlag, emit: @escaping (String) -> Void) {
        var s: [[UInt8]] = []
        for one in stop where !one.isEmpty {
            s.append(Array(one.utf8))
        }
        stops = s
        self.cancel = cancel
        self.emit = emit
    }

    /// Returns false to stop generation (the callback then returns non-zero).
    func receive(_ piece: UnsafePointer<CChar>) -> Bool {
        if cancel.isCancelled {
            cancelled = true
            return false
        }
        let count = strlen(piece)
        piece.withMemoryRebound(to: UInt8.self, capacity: count) { p in
            bytes.append(contentsOf: UnsafeBufferPointer(start: p, count: count))
        }
        if let cut = firstStop() {
            bytes.removeSubrange(cut..<bytes.count)
            flush(upTo: bytes.count)
            stopped = true
            return false
        }
        flush(upTo: bytes.count - heldBack())
        return true
    }

    /// After the C call: what was held back is part of the reply after all.
    func finish() {
        flush(upTo: bytes.count)
    }

    var text: String {
        return String(decoding: bytes, as: UTF8.self)
    }

    private func flush(upTo end: Int) {
        if end > emitted {
            emit(String(decoding: bytes[emitted..<end], as: UTF8.self))
            emitted = end
        }
    }

    private func firstStop() -> Int? {
        var best: Int? = nil
        for stop in stops where stop.count <= bytes.count {
            // Only the last piece can complete a stop string that was not there before.
            let from = max(0, emitted - stop.count)
            var i = from
            while i + stop.count <= bytes.count {
                if Array(bytes[i..<(i + stop.count)]) == stop {
                    if best == nil || i < best! {
                        best = i
                    }
                    break
                }
                i += 1
            }
        }
        return best
    }

    /// The length of the longest tail of the reply that is a proper prefix of a stop string.
    private func heldBack() -> Int {
        var longest = 0
        for stop in stops {
            var n = min(stop.count - 1, bytes.count)
            while n > longest {
                if Array(bytes[(bytes.count - n)...]) == Array(stop[0..<n]) {
                    longest = n
                    break
                }
                n -= 1
            }
        }
        return longest
    }
}

/// The C callback: `user` is the PieceSink, unretained (the sink outlives the call).
let pieceCallback: tessera_piece_callback = { piece, user in
    guard let piece = piece, let user = user else {
        return 1
    }
    let sink = Unmanaged<PieceSink>.fromOpaque(user).takeUnretainedValue()
    return sink.receive(piece) ? 0 : 1
}

/// engine.chat.completions, as in OpenAI's clients.
public final class Chat {
    public let completions: Completions

    init() {
        completions = Completions()
    }
}

public final class Completions {
    weak var engine: Engine?

    init() {}

    private func liveEngine() throws -> Engine {
        guard let e = engine else {
            throw TesseraError.closed("the engine")
        }
        return e
    }

    /// The whole reply. Cancelling the task stops generation; the reply so far comes back with
    /// finishReason "cancelled".
    public func create(messages: [ChatMessage],
                       options: CompletionOptions = CompletionOptions()) async throws -> ChatCompletion {
        let engine = try liveEngine()
        let flag = CancelFlag()
        return try await withTaskCancellationHandler {
            return try await withCheckedThrowingContinuation {
                (continuation: CheckedContinuation<ChatCompletion, Error>) in
                engine.queue.async {
                    let sink = PieceSink(stop: options.stop, cancel: flag, emit: { _ in })
                    do {
                        let result = try engine.complete(messages, options, sink)
                        continuation.resume(returning: result)
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            }
        } onCancel: {
            flag.cancel()
        }
    }

    /// The reply piece by piece. Cancelling the consuming task (or dropping the stream) stops generation:
    /// the next piece's callback returns non-zero.
    public func stream(messages: [ChatMessage], options: CompletionOptions = CompletionOptions())
        -> AsyncThrowingStream<ChatCompletionChunk, Error> {
        let engine = self.engine
        return AsyncThrowingStream { continuation in
            guard let engine = engine else {
                continuation.finish(throwing: TesseraError.closed("the engine"))
                return
            }
            let flag = CancelFlag()
            continuation.onTermination = { _ in
                flag.cancel()
            }
            engine.queue.async {
                let sink = PieceSink(stop: options.stop, cancel: flag, emit: { text in
                    continuation.yield(ChatCompletionChunk(content: text))
                })
                do {
                    let result = try engine.complete(messages, options, sink)
                    continuation.yield(ChatCompletionChunk(finishReason: result.choices[0].finishReason,
                                                           usage: result.usage))
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
        }
    }
}
