"""`tessera demo`: a tour of the compiler on a small example, end to end.

Builds a small attention block over a symbolic sequence length, prints it,
reads the text back, checks it, and runs it in the reference interpreter
against plain numpy at several lengths. Then shows a bad input being caught,
and compiles the block with tessera.build and runs it in the VM on WebGPU.
"""

from __future__ import annotations

import numpy as np
import tessera
from tessera import op
from tessera.ir import BlockBuilder, Constant, IRModule, RuntimeCheckError, Tensor, Var, interpret, well_formed
from tessera.script import from_source

HIDDEN = 16


def build_attention() -> IRModule:
    """Single-head self-attention with RMSNorm, over a sequence of symbolic length n."""
    x = Var("x", Tensor(("n", HIDDEN), "float32"))
    norm_w = Var("norm_w", Tensor((HIDDEN,), "float32"))
    wq, wk, wv = (Var(name, Tensor((HIDDEN, HIDDEN), "float32")) for name in ("wq", "wk", "wv"))
    bb = BlockBuilder()
    with bb.function("attention", [x, norm_w, wq, wk, wv], attrs={"tir_var_upper_bound": {"n": 2048}}):
        with bb.dataflow():
            h = bb.emit(op.nn.rms_norm(x, norm_w), "h")
            q = bb.emit(op.matmul(h, wq), "q")
            k = bb.emit(op.matmul(h, wk), "k")
            v = bb.emit(op.matmul(h, wv), "v")
            scores = bb.emit(op.matmul(q, op.permute_dims(k)), "scores")
            probs = bb.emit(op.nn.softmax(op.multiply(scores, _scalar(HIDDEN ** -0.5))), "probs")
            out = bb.emit_output(op.add(x, op.matmul(probs, v)), "out")
        bb.emit_func_output(out)
    return bb.get()


def _scalar(value: float) -> Constant:
    return Constant(np.float32(value))


def numpy_attention(x, norm_w, wq, wk, wv):
    h = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * norm_w
    q, k, v = h @ wq, h @ wk, h @ wv
    scores = q @ k.T * HIDDEN ** -0.5
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return x + probs @ v


def _run_on_webgpu(mod: IRModule, weights, rng) -> None:
    """Compile to WGSL kernels and run them in the VM on the WebGPU device, if this machine has one."""
    from tessera.vm import DeviceError, VirtualMachine

    exe = tessera.build(mod, "llvmpipe")
    try:
        vm = VirtualMachine(exe, "webgpu")
    except DeviceError as error:  # no adapter here
        print(f"\nWebGPU is not available here ({error}); skipping the kernel run.")
        return
    x = rng.standard_normal((64, HIDDEN)).astype(np.float32)
    got = vm["attention"](x, *weights)
    want = interpret(mod, "attention", x, *weights)
    rules = ", ".join(sorted({k["rule"] for k in exe.kernels}))
    print(f"\nCompiled to {len(exe.kernels)} WGSL kernels ({rules}) and run on {vm.device.name}:")
    print(f"n =  64: max |WebGPU - interpreter| = {float(np.max(np.abs(got - want))):.2e}")


def run_demo() -> int:
    mod = build_attention()
    text = mod.script()
    print("A graph function with a symbolic sequence length n, as the compiler prints it:\n")
    print(text)
    reparsed = from_source(text)
    well_formed(reparsed)
    if reparsed.script() != text:
        print("the reparsed module prints differently")
        return 1
    print("The text parses back to the same module, and the module is well formed.\n")
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((HIDDEN,)).astype(np.float32)] + [
        (rng.standard_normal((HIDDEN, HIDDEN)) / 4).astype(np.float32) for _ in range(3)]
    for n in (1, 7, 64):
        x = rng.standard_normal((n, HIDDEN)).astype(np.float32)
        got = interpret(reparsed, "attention", x, *weights)
        want = numpy_attention(x.astype(np.float64), *(w.astype(np.float64) for w in weights))
        error = float(np.max(np.abs(got - want)))
        print(f"n = {n:3d}: output {tuple(got.shape)}, max |interpreter - numpy| = {error:.2e}")
        if error > 1e-4:
            print("mismatch against numpy")
            return 1
    try:
        interpret(reparsed, "attention", np.zeros((3, HIDDEN + 1), np.float32), *weights)
    except RuntimeCheckError as error:
        print(f"\nA wrong input is caught with a clear error:\n  {error}")
    _run_on_webgpu(reparsed, weights, rng)
    print("\nAn LLM runs the same way: `tessera chat` talks to the bundled SmolLM2 on this machine's\n"
          "WebGPU device, and `tessera bundle` then `tessera serve` chat with it in a browser.")
    return 0
