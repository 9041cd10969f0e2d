import CTessera

/// How a model is loaded. `device` is "auto" (the fastest device of the build that this machine has),
/// or a device's name: "metal", "cpu". On Apple platforms "auto" picks Metal for a model compiled for it
/// (tessera package --target ios compiles Metal plus the CPU), and the CPU otherwise.
public struct EngineOptions {
    public var device: String
    /// CPU threads; 0: one per online CPU.
    public var threads: Int
    /// Bytes the model may take: a model whose plan (Engine.memory) needs more is refused with a message
    /// before the weights and arenas are allocated. 0: what the app may still take now
    /// (os_proc_available_memory); UInt64.max: no check.
    public var memoryLimit: UInt64

    public init(device: String = "auto", threads: Int = 0, memoryLimit: UInt64 = 0) {
        self.device = device
        self.threads = threads
        self.memoryLimit = memoryLimit
    }
}

/// Loads a model folder with the options (tessera_model_default_params, then the options on top).
/// The device string is a C string only for the duration of the load, which is all the runtime needs.
func loadModel(_ modelPath: String, _ options: EngineOptions) throws -> OpaquePointer {
    if options.threads < 0 {
        throw TesseraError.invalid("threads must be 0 (one per CPU) or more, not \(options.threads)")
    }
    var params = tessera_model_default_params()
    params.n_threads = Int32(options.threads)
    params.memory_limit = options.memoryLimit
    let model: OpaquePointer? = options.device.withCString { device -> OpaquePointer? in
        params.device = device
        return tessera_model_load(modelPath, &params)
    }
    guard let m = model else {
        throw TesseraError.fromNull("loading " + modelPath)
    }
    return m
}

/// What a model's device needs, in bytes (tessera_device_memory).
public struct DeviceMemory {
    public let device: String
    public let weights: UInt64
    public let arena: UInt64
    public let kvCache: UInt64
    public let total: UInt64
}

/// What a GPU device did with the kernels when the model was loaded (all zero on the CPU).
public struct CompileStats {
    public let kernels: Int
    public let compiled: Int
    public let fromCache: Int
    public let seconds: Double
}

func readCompileStats(_ model: OpaquePointer) throws -> CompileStats {
    var stats = tessera_compile_stats()
    let status = tessera_model_compile_stats(model, &stats)
    if status < 0 {
        throw TesseraError.fromStatus(status)
    }
    return CompileStats(kernels: Int(stats.kernels), compiled: Int(stats.compiled),
                        fromCache: Int(stats.from_cache), seconds: stats.seconds)
}
