import CTessera
import Foundation

/// Any executable that is not a chat model: load a folder, run its function on tensors.
/// Calls on one Module are serialized by a lock; the outputs are copies, so they outlive the next call.
public final class Module {
    private var model: OpaquePointer?
    private let lock = NSLock()
    /// The device the model runs on and why it was chosen.
    public let device: String

    public init(modelPath: String, options: EngineOptions = EngineOptions()) throws {
        let m = try loadModel(modelPath, options)
        model = m
        device = String(cString: tessera_model_device(m))
    }

    deinit {
        if let m = model {
            tessera_model_free(m)
        }
    }

    /// Frees the model now. Safe to call twice: the handle is nulled, and later calls throw.
    public func close() {
        lock.lock()
        defer { lock.unlock() }
        if let m = model {
            tessera_model_free(m)
        }
        model = nil
    }

    public func compileStats() throws -> CompileStats {
        lock.lock()
        defer { lock.unlock() }
        guard let m = model else { throw TesseraError.closed("the module") }
        return try readCompileStats(m)
    }

    /// Calls `function` (positional inputs, as tessera_model_call takes them) and returns its outputs,
    /// tuples flattened depth-first; integer results come back as 0-d int64 tensors.
    public func run(_ inputs: [Tensor], function: String = "main") throws -> [Tensor] {
        lock.lock()
        defer { lock.unlock() }
        guard let m = model else { throw TesseraError.closed("the module") }
        // Each input's bytes are copied into a buffer that lives until the call returns; simpler to get
        // right than nesting one withUnsafeBytes per input.
        var buffers: [UnsafeMutableRawPointer] = []
        defer {
            for b in buffers {
                b.deallocate()
            }
        }
        var values: [tessera_value] = []
        for input in inputs {
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(input.byteCount, 1), alignment: 64)
            buffers.append(buffer)
            input.copyBytes(to: buffer)
            // A zeroed tessera_value is kind TESSERA_VALUE_TENSOR (0).
            var value = tessera_value()
            value.tensor.data = buffer
            value.tensor.dtype = input.dtype
            value.tensor.ndim = Int32(input.shape.count)
            let shape = input.shape
            withUnsafeMutablePointer(to: &value.tensor.shape) { p in
                p.withMemoryRebound(to: Int64.self, capacity: 8) { q in
                    for i in 0..<shape.count {
                        q[i] = shape[i]
                    }
                }
            }
            values.append(value)
        }
        var outputs: UnsafePointer<tessera_tensor>? = nil
        var count: Int = 0
        let status = values.withUnsafeBufferPointer { args -> Int32 in
            return tessera_model_call(m, function, args.baseAddress, args.count, &outputs, &count)
        }
        if status < 0 {
            throw TesseraError.fromStatus(status)
        }
        var result: [Tensor] = []
        if let outs = outputs {
            for i in 0..<count {
                result.append(try Tensor.copied(from: outs[i]))
            }
        }
        return result
    }
}
