import CTessera
import Foundation

/// The element data of a tensor, row-major (numpy's layout).
public enum TensorData {
    case float32([Float])
    case int32([Int32])
    case int64([Int64])
    case uint8([UInt8])

    var count: Int {
        switch self {
        case .float32(let a): return a.count
        case .int32(let a): return a.count
        case .int64(let a): return a.count
        case .uint8(let a): return a.count
        }
    }
}

/// A tensor passed to or returned from Module.run: a shape and typed data.
public struct Tensor {
    public let shape: [Int64]
    public let data: TensorData

    /// Throws when the data's length is not the product of the shape, or the shape has too many dimensions.
    public init(shape: [Int64], data: TensorData) throws {
        if shape.count > 8 {
            throw TesseraError.invalid("a tensor has at most 8 dimensions, not \(shape.count)")
        }
        var elements: Int64 = 1
        for d in shape {
            if d < 0 {
                throw TesseraError.invalid("a tensor's shape \(shape) has a negative dimension")
            }
            elements *= d
        }
        if elements != Int64(data.count) {
            throw TesseraError.invalid("a tensor of shape \(shape) holds \(elements) elements, not \(data.count)")
        }
        self.shape = shape
        self.data = data
    }

    public init(shape: [Int64], floats: [Float]) throws {
        try self.init(shape: shape, data: .float32(floats))
    }

    public var floats: [Float]? {
        if case .float32(let a) = data { return a }
        return nil
    }

    public var int32s: [Int32]? {
        if case .int32(let a) = data { return a }
        return nil
    }

    public var int64s: [Int64]? {
        if case .int64(let a) = data { return a }
        return nil
    }

    public var uint8s: [UInt8]? {
        if case .uint8(let a) = data { return a }
        return nil
    }

    var dtype: tessera_dtype {
        switch data {
        case .float32: return TESSERA_FLOAT32
        case .int32: return TESSERA_INT32
        case .int64: return TESSERA_INT64
        case .uint8: return TESSERA_UINT8
        }
    }

    var byteCount: Int {
        switch data {
        case .float32(let a): return a.count * 4
        case .int32(let a): return a.count * 4
        case .int64(let a): return a.count * 8
        case .uint8(let a): return a.count
        }
    }

    /// Copies the data into `dst` (byteCount bytes).
    func copyBytes(to dst: UnsafeMutableRawPointer) {
        switch data {
        case .float32(let a): a.withUnsafeBytes { src in copyRaw(src, dst) }
        case .int32(let a): a.withUnsafeBytes { src in copyRaw(src, dst) }
        case .int64(let a): a.withUnsafeBytes { src in copyRaw(src, dst) }
        case .uint8(let a): a.withUnsafeBytes { src in copyRaw(src, dst) }
        }
    }

    /// A copy of a tensor the runtime owns (valid only until the model's next call).
    static func copied(from t: tessera_tensor) throws -> Tensor {
        let ndim = Int(t.ndim)
        var shape: [Int64] = []
        var dims = t.shape
        withUnsafePointer(to: &dims) { p in
            p.withMemoryRebound(to: Int64.self, capacity: 8) { q in
                for i in 0..<ndim {
                    shape.append(q[i])
                }
            }
        }
        var count = 1
        for d in shape {
            count *= Int(d)
        }
        let src = t.data
        if t.dtype == TESSERA_FLOAT32 {
            var a = [Float](repeating: 0, count: count)
            fill(&a, from: src, bytes: count * 4)
            return try Tensor(shape: shape, data: .float32(a))
        }
        if t.dtype == TESSERA_INT32 {
            var a = [Int32](repeating: 0, count: count)
            fill(&a, from: src, bytes: count * 4)
            return try Tensor(shape: shape, data: .int32(a))
        }
        if t.dtype == TESSERA_INT64 {
            var a = [Int64](repeating: 0, count: count)
            fill(&a, from: src, bytes: count * 8)
            return try Tensor(shape: shape, data: .int64(a))
        }
        if t.dtype == TESSERA_UINT8 || t.dtype == TESSERA_BOOL {
            var a = [UInt8](repeating: 0, count: count)
            fill(&a, from: src, bytes: count)
            return try Tensor(shape: shape, data: .uint8(a))
        }
        throw TesseraError(status: "TESSERA_ERROR_UNSUPPORTED",
                           message: "an output of dtype \(t.dtype.rawValue): Tensor holds float32, int32, int64, uint8")
    }
}

private func copyRaw(_ src: UnsafeRawBufferPointer, _ dst: UnsafeMutableRawPointer) {
    if let base = src.baseAddress, src.count > 0 {
        dst.copyMemory(from: base, byteCount: src.count)
    }
}

private func fill<T>(_ a: inout [T], from src: UnsafeMutableRawPointer?, bytes: Int) {
    guard let src = src, bytes > 0 else { return }
    a.withUnsafeMutableBytes { dst in
        if let base = dst.baseAddress {
            base.copyMemory(from: UnsafeRawPointer(src), byteCount: bytes)
        }
    }
}
