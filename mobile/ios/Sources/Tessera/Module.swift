import CTessera
import Foundation

/// An input or output of a function as the runtime describes it (tessera_model_inputs and
/// tessera_model_outputs): an input is a parameter that is not state; an output a value of the result, tuples
/// flattened, named as the executable records it (an ONNX graph's output names), else "output0" ...
public struct ValueInfo {
    public let name: String
    /// An integer: passed as a one-element int64 or int32 tensor, returned as a 0-d int64 one.
    public let isInteger: Bool
    /// The element type; nil when the executable leaves it open.
    public let dtype: tessera_dtype?
    /// Per dimension, its size when fixed, else nil; nil when not even the rank is known.
    public let shape: [Int64?]?
    /// Each dimension as executable.json writes it ("4", "n", "n + 1"); nil where only the rank is known.
    public let dims: [String?]?
    /// Per dimension that is one shape variable, its upper bound, else nil.
    public let upperBounds: [Int64?]?

    init(_ io: tessera_io) {
        name = String(cString: io.name)
        isInteger = io.kind == 1  // TESSERA_VALUE_INT
        dtype = io.has_dtype != 0 ? io.dtype : nil
        let ndim = Int(io.ndim)
        if ndim < 0 {
            shape = nil
            dims = nil
            upperBounds = nil
            return
        }
        let sizes = withUnsafeBytes(of: io.shape) { Array($0.bindMemory(to: Int64.self)) }
        let bounds = withUnsafeBytes(of: io.upper_bounds) { Array($0.bindMemory(to: Int64.self)) }
        let texts = withUnsafeBytes(of: io.dims) { Array($0.bindMemory(to: UnsafePointer<CChar>?.self)) }
        shape = (0..<ndim).map { sizes[$0] >= 0 ? sizes[$0] : nil }
        upperBounds = (0..<ndim).map { bounds[$0] >= 0 ? bounds[$0] : nil }
        dims = (0..<ndim).map { texts[$0].map { String(cString: $0) } }
    }
}

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

    /// `function`'s inputs (its parameters that are not state), as the runtime describes them.
    public func inputs(function: String = "main") throws -> [ValueInfo] {
        return try describe(function, outputs: false)
    }

    /// `function`'s outputs, by the names the executable records, else "output0" ...
    public func outputs(function: String = "main") throws -> [ValueInfo] {
        return try describe(function, outputs: true)
    }

    private func describe(_ function: String, outputs: Bool) throws -> [ValueInfo] {
        lock.lock()
        defer { lock.unlock() }
        guard let m = model else { throw TesseraError.closed("the module") }
        // Ask for the count, then fill an array of that many.
        let count = outputs ? tessera_model_outputs(m, function, nil, 0) : tessera_model_inputs(m, function, nil, 0)
        if count < 0 {
            throw TesseraError.fromStatus(count)
        }
        var entries = [tessera_io](repeating: tessera_io(), count: Int(count))
        let filled = entries.withUnsafeMutableBufferPointer { p -> Int32 in
            return outputs ? tessera_model_outputs(m, function, p.baseAddress, count)
                : tessera_model_inputs(m, function, p.baseAddress, count)
        }
        if filled < 0 {
            throw TesseraError.fromStatus(filled)
        }
        return entries.map { ValueInfo($0) }
    }

    /// Calls `function` with its inputs by name (the runtime checks each before the call, and its error
    /// names a bad one) and returns the outputs named `outputNames` (nil: every output), keyed by name.
    /// An integer input is a one-element int64 tensor. The outputs are copies.
    public func run(named inputs: [String: Tensor], function: String = "main",
                    outputNames: [String]? = nil) throws -> [String: Tensor] {
        let integers = Set(try self.inputs(function: function).filter { $0.isInteger }.map { $0.name })
        let keys = try outputNames ?? self.outputs(function: function).map { $0.name }
        lock.lock()
        defer { lock.unlock() }
        guard let m = model else { throw TesseraError.closed("the module") }
        let names = Array(inputs.keys)
        var buffers: [UnsafeMutableRawPointer] = []
        defer {
            for b in buffers {
                b.deallocate()
            }
        }
        var values: [tessera_value] = []
        for name in names {
            let input = inputs[name]!
            var value = tessera_value()
            if integers.contains(name) {
                guard let v = input.int64s?.first ?? input.int32s?.first.map({ Int64($0) }) else {
                    throw TesseraError.invalid("input '\(name)' of \(function) is an integer: give a one-element int64 tensor")
                }
                // TESSERA_VALUE_INT (1): the member's imported type, whatever Swift makes of the anonymous enum.
                value.kind = type(of: value.kind).init(1)
                value.value = v
            } else {
                let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(input.byteCount, 1), alignment: 64)
                buffers.append(buffer)
                input.copyBytes(to: buffer)
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
            }
            values.append(value)
        }
        // C strings for the names, alive for the call.
        let inputNames = names.map { strdup($0) }
        let wanted = outputNames?.map { strdup($0) }
        defer {
            for p in inputNames {
                free(p)
            }
            for p in wanted ?? [] {
                free(p)
            }
        }
        var outputs = [UnsafePointer<tessera_tensor>?](repeating: nil, count: keys.count)
        let inputPointers = inputNames.map { UnsafePointer<CChar>($0) }
        let wantedPointers = wanted?.map { UnsafePointer<CChar>($0) }
        let status = values.withUnsafeBufferPointer { args -> Int32 in
            return outputs.withUnsafeMutableBufferPointer { outs -> Int32 in
                return inputPointers.withUnsafeBufferPointer { ins -> Int32 in
                    if let wp = wantedPointers {
                        return wp.withUnsafeBufferPointer { w -> Int32 in
                            return tessera_model_run_named(m, function, args.count, ins.baseAddress, args.baseAddress,
                                                           outs.count, w.baseAddress, outs.baseAddress)
                        }
                    }
                    return tessera_model_run_named(m, function, args.count, ins.baseAddress, args.baseAddress,
                                                   outs.count, nil, outs.baseAddress)
                }
            }
        }
        if status < 0 {
            throw TesseraError.fromStatus(status)
        }
        var result: [String: Tensor] = [:]
        for (i, key) in keys.enumerated() {
            if let t = outputs[i] {
                result[key] = try Tensor.copied(from: t.pointee)
            }
        }
        return result
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
