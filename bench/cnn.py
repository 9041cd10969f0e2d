"""The MobileNet-style CNN (tessera.models.mobilenet, 1x3x32x32, float32): latency of one image on
Tessera's Python VM (WASM in wasmtime, native C kernels on this CPU with 1 and 2 threads, and WebGPU
on the CPU adapter) beside onnxruntime's CPU execution provider on the same network with the same
weights, in one run.

    make bench        # or: .venv/bin/python bench/cnn.py [--image-size 224]   (needs onnx, onnxruntime)

At the model's 32x32 images each kernel has little work, and the launches' fixed cost dominates;
--image-size 224 gives the convolutions ImageNet's image size (the layers are unchanged: the global
average pool takes any size).

The ONNX graph is written here with onnx.helper from the model's layer table and the weights that
Tessera binds (batch norm already folded into the convolutions), so both run the same
convolutions, ReLU6, pools, global average pool and head. Every engine's logits are checked
against the others' before it is timed. Latency is the median, and the best, of many calls of one
image (the engines take turns in rounds), input from and logits to host memory, after warm-up.
onnxruntime runs with 1 and 2 threads, as the native CPU kernels do (WASM and WebGPU run on one);
ratio = Tessera's latency / onnxruntime's.
"""

from __future__ import annotations

import platform
import sys
import time

import numpy as np

RUNS = 400
ROUNDS = 8


def tessera_engine(mod, weights, target: str, threads: int = 1):
    import tessera
    from tessera import nn
    from tessera.target import Target
    from tessera.transform import Pipeline
    from tessera.vm import VirtualMachine
    from tessera.vm.devices.cpu import CPUDevice

    preset = Target.preset(target)
    exe = tessera.build(mod, preset, pipeline=nn.bind_weights_after_fusion(Pipeline.default(preset), weights))
    vm = VirtualMachine(exe, CPUDevice(threads) if target == "cpu" else None)
    return (lambda x: vm["main"](x)), vm, len(exe.kernels)


def onnx_model(config, weights):
    """The network as an ONNX graph (opset 17): Conv with the folded bias, Clip for ReLU6."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tessera.models.mobilenet import ConvBN, InvertedResidual, Separable

    nodes, inits, count = [], [], [0]

    def name(base):
        count[0] += 1
        return f"{base}_{count[0]}"

    def constant(key, value):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), key))
        return key

    def conv(x, prefix, stride, groups, act):
        w = weights[f"{prefix}conv.weight"]
        pad = w.shape[-1] // 2
        y = name("conv")
        nodes.append(helper.make_node("Conv", [x, constant(f"{prefix}conv.weight", w),
                                               constant(f"{prefix}conv.bias", weights[f"{prefix}conv.bias"])], [y],
                                      strides=[stride, stride], pads=[pad] * 4, group=groups))
        if act == "relu6":
            out = name("relu6")
            nodes.append(helper.make_node("Clip", [y, constant(f"{out}_min", np.float32(0)),
                                                   constant(f"{out}_max", np.float32(6))], [out]))
            return out
        if act == "relu":
            out = name("relu")
            nodes.append(helper.make_node("Relu", [y], [out]))
            return out
        return y

    x, width = "image", config.in_channels
    for index, spec in enumerate(config.layers):
        p = f"layers.{index}."
        if isinstance(spec, ConvBN):
            x = conv(x, p, spec.stride, 1, spec.act)
        elif isinstance(spec, Separable):
            x = conv(conv(x, p + "depthwise.", spec.stride, width, "relu6"), p + "pointwise.", 1, 1, "relu6")
        elif isinstance(spec, InvertedResidual):
            y = conv(x, p + "expand.", 1, 1, "relu6")
            y = conv(conv(y, p + "depthwise.", spec.stride, spec.expand, "relu6"), p + "project.", 1, 1, None)
            if spec.stride == 1 and width == spec.out:
                out = name("add")
                nodes.append(helper.make_node("Add", [x, y], [out]))
                y = out
            x = y
        else:
            out = name("pool")
            kind, attrs = ("MaxPool", {}) if spec.kind == "max" else ("AveragePool", {"count_include_pad": 0})
            nodes.append(helper.make_node(kind, [x], [out], kernel_shape=[spec.size] * 2,
                                          strides=[spec.stride] * 2, pads=[spec.padding] * 4, **attrs))
            x = out
        width = getattr(spec, "out", width)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"]))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["features"]))
    nodes.append(helper.make_node("Gemm", ["features", constant("head.weight", weights["head.weight"]),
                                           constant("head.bias", weights["head.bias"])], ["logits"], transB=1))
    size = config.image_size
    graph = helper.make_graph(nodes, "mobilenet", [helper.make_tensor_value_info(
        "image", TensorProto.FLOAT, [1, config.in_channels, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, config.num_classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def onnxruntime_engine(model, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(["logits"], {"image": x})[0]


def latency_ms(engines: dict, x) -> dict[str, tuple[float, float]]:
    """Median and best latency of each engine, the engines taking turns in rounds so that load from
    other work on a shared machine falls on all of them alike. The best says what a call costs when
    nothing preempts it: on a loaded machine a call longer than a scheduler slice is preempted
    more often than a short one, which inflates long calls' medians most."""
    times: dict[str, list[float]] = {label: [] for label in engines}
    for run in engines.values():
        for _ in range(20):  # warm-up
            run(x)
    for _ in range(ROUNDS):
        for label, run in engines.items():
            for _ in range(RUNS // ROUNDS):
                start = time.perf_counter()
                run(x)
                times[label].append(time.perf_counter() - start)
    return {label: (1e3 * float(np.median(t)), 1e3 * min(t)) for label, t in times.items()}


def main() -> int:
    import argparse

    import onnxruntime as ort
    import tessera
    from tessera.models.mobilenet import MobileNetConfig, export_mobilenet, random_checkpoint

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image-size", type=int, default=MobileNetConfig.image_size, help="pixels per side")
    config = MobileNetConfig(image_size=parser.parse_args().image_size)
    mod, weights = export_mobilenet(config, random_checkpoint(config, seed=0))
    size = config.image_size
    x = np.random.default_rng(1).standard_normal((1, config.in_channels, size, size)).astype(np.float32)
    model = onnx_model(config, weights)
    engines, notes = {}, {}
    for label, target, threads in (("Tessera WASM (wasmtime)", "wasm", 1), ("Tessera native CPU, 1 thread", "cpu", 1),
                                   ("Tessera native CPU, 2 threads", "cpu", 2),
                                   ("Tessera WebGPU (llvmpipe)", "llvmpipe", 1)):
        try:
            run, vm, kernels = tessera_engine(mod, weights, target, threads)
        except tessera.ir.TesseraError as error:  # e.g. no WebGPU adapter: say so, keep the rest
            print(f"{label}: cannot run ({error})")
            continue
        engines[label] = run
        notes[label] = (vm, kernels)
    for threads in (1, 2):
        engines[f"onnxruntime {ort.__version__} CPU, {threads} thread{'s' if threads > 1 else ''}"] = \
            onnxruntime_engine(model, threads)
    reference = engines[next(k for k in engines if k.startswith("onnxruntime"))](x)
    for label, run in engines.items():  # a fast wrong answer is no result
        np.testing.assert_allclose(run(x), reference, rtol=1e-4, atol=1e-4, err_msg=label)
    latency = latency_ms(engines, x)

    print(f"MobileNet-style CNN, 1x3x{size}x{size} float32, {platform.machine()}, {RUNS} calls each "
          "(ratios: median / median, best / best)")
    ort_labels = [k for k in latency if k.startswith("onnxruntime")]
    print("| engine | median ms | best ms | kernels | vs ORT 1 thread | vs ORT 2 threads |")
    print("|---|---|---|---|---|---|")
    for label, (median, best) in latency.items():
        ratios = " | ".join(f"{median / latency[o][0]:.1f}x, best {best / latency[o][1]:.1f}x" for o in ort_labels)
        kernels = notes[label][1] if label in notes else "-"
        print(f"| {label} | {median:.3f} | {best:.3f} | {kernels} | {ratios} |")
    for label, (vm, _) in notes.items():
        launches = vm.profile_kernels("main", x)
        top = sorted(launches, key=lambda item: -item[1])[:3]
        # Timed one launch at a time (with its own synchronization and host call), so the sum can
        # exceed the latency above; it says which kernels are the large ones.
        print(f"\n{label}: {len(launches)} launches; largest, each timed alone:")
        for name, seconds in top:
            print(f"  {name}: {1e3 * seconds:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
