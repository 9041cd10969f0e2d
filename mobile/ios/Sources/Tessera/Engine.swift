import CTessera
import Foundation

/// A chat model loaded on a device, with one conversation (session). Every call runs on the engine's serial
/// queue, so calls from several tasks or threads on one engine run one after another.
public final class Engine {
    let queue = DispatchQueue(label: "ai.tessera.engine")
    private var model: OpaquePointer?
    private var session: OpaquePointer?
    /// The device the model runs on and why it was chosen ("metal:0 (Apple M2): auto: ...").
    public let device: String
    public let chat: Chat

    public init(modelPath: String, options: EngineOptions = EngineOptions()) throws {
        let m = try loadModel(modelPath, options)
        let d = String(cString: tessera_model_device(m))
        guard let s = tessera_session_new(m) else {
            // Not a chat model (a plain executable has no tokenizer): say why, and free what was loaded.
            let error = TesseraError.fromNull("starting a chat session on " + modelPath)
            tessera_model_free(m)
            throw error
        }
        model = m
        session = s
        device = d
        chat = Chat()
        chat.completions.engine = self
    }

    deinit {
        release()
    }

    /// What each device of the model needs, from its folder alone (nothing is loaded).
    public static func memory(modelPath: String) throws -> [DeviceMemory] {
        let count = tessera_model_plan_devices(modelPath, nil, 0)
        if count < 0 {
            throw TesseraError.fromStatus(count)
        }
        var entries = [tessera_device_memory](repeating: tessera_device_memory(), count: Int(count))
        let filled = tessera_model_plan_devices(modelPath, &entries, count)
        if filled < 0 {
            throw TesseraError.fromStatus(filled)
        }
        var result: [DeviceMemory] = []
        for e in entries {
            var name = e.device
            let kind = withUnsafePointer(to: &name) { p in
                p.withMemoryRebound(to: CChar.self, capacity: 16) { q in String(cString: q) }
            }
            result.append(DeviceMemory(device: kind, weights: e.weights, arena: e.arena, kvCache: e.kv_cache,
                                       total: e.total))
        }
        return result
    }

    public func compileStats() throws -> CompileStats {
        return try queue.sync { () throws -> CompileStats in
            guard let m = model else { throw TesseraError.closed("the engine") }
            return try readCompileStats(m)
        }
    }

    /// Forgets the conversation: the next reply prefills from the start.
    public func reset() {
        queue.sync {
            if let s = session {
                tessera_session_reset(s)
            }
        }
    }

    /// Frees the model now. Safe to call twice: the handles are nulled, and later calls throw.
    public func close() {
        queue.sync {
            release()
        }
    }

    private func release() {
        if let s = session {
            tessera_session_free(s)
        }
        session = nil
        if let m = model {
            tessera_model_free(m)
        }
        model = nil
    }

    /// One turn, on the queue. The messages' C strings are copies that live until the call returns.
    func complete(_ messages: [ChatMessage], _ options: CompletionOptions, _ sink: PieceSink) throws -> ChatCompletion {
        guard let s = session else {
            throw TesseraError.closed("the engine")
        }
        if messages.isEmpty {
            throw TesseraError.invalid("a chat completion needs at least one message")
        }
        if options.maxTokens < 1 {
            throw TesseraError.invalid("maxTokens must be at least 1, not \(options.maxTokens)")
        }
        var sp = tessera_sampling_default_params()
        sp.max_tokens = Int32(clamping: options.maxTokens)
        sp.temperature = options.temperature
        sp.top_p = options.topP
        if let seed = options.seed {
            sp.seed = seed
        }
        var strings: [UnsafeMutablePointer<CChar>] = []
        defer {
            for p in strings {
                free(p)
            }
        }
        var msgs: [tessera_message] = []
        for m in messages {
            guard let role = strdup(m.role), let content = strdup(m.content) else {
                throw TesseraError(status: "TESSERA_ERROR_OUT_OF_MEMORY", message: "copying a message")
            }
            strings.append(role)
            strings.append(content)
            msgs.append(tessera_message(role: UnsafePointer(role), content: UnsafePointer(content)))
        }
        var usage = tessera_usage()
        let user = Unmanaged.passUnretained(sink).toOpaque()
        let status = msgs.withUnsafeBufferPointer { buf -> Int32 in
            return tessera_chat_completion(s, buf.baseAddress, buf.count, &sp, pieceCallback, user, &usage)
        }
        withExtendedLifetime(sink) {}
        if status < 0 && !sink.cancelled {
            throw TesseraError.fromStatus(status)
        }
        sink.finish()
        var reason = "stop"
        if sink.cancelled {
            reason = "cancelled"
        } else if !sink.stopped && Int(usage.completion_tokens) >= options.maxTokens {
            reason = "length"
        }
        let prompt = Int(usage.prompt_tokens)
        let completion = Int(usage.completion_tokens)
        let choice = ChatCompletion.Choice(index: 0, message: ChatMessage(role: "assistant", content: sink.text),
                                           finishReason: reason)
        return ChatCompletion(choices: [choice],
                              usage: CompletionUsage(promptTokens: prompt, completionTokens: completion,
                                                     totalTokens: prompt + completion))
    }
}
