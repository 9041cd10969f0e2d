"""Memory of a Llama decoder layer at n = 2048: Tessera's arena, the liveness lower bound, and
Apache TVM's StaticPlanBlockMemory for the same layer, in one run.

    make bench        # or: .venv/bin/python bench/memory.py   (needs the bench extra: apache-tvm)

The layer (tests/llama_layer.py: hidden 64, 4 query heads, 2 KV heads, head_dim 16, FFN 128) is
built once with Tessera's operators and once with Relax's, both with the upper bound n <= 2048,
float32. TVM's total is the sum of the storages StaticPlanBlockMemory allocates plus the function's
result, which TVM allocates outside the plan; Tessera's arena holds the result too.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from llama_layer import FFN, HEAD_DIM, HEADS, HIDDEN, KV_HEADS, build_layer  # noqa: E402
from tessera.target import Target  # noqa: E402
from tessera.transform import fuse_ops, fuse_tir, legalize_ops  # noqa: E402
from tessera.transform.plan_memory import plan_function  # noqa: E402

N = 2048


def tessera_plan(fuse: bool):
    target = Target.preset("llvmpipe")
    mod = build_layer(upper_bound=N)
    if fuse:
        mod = fuse_tir(fuse_ops(mod, target), target)
    return plan_function(legalize_ops(mod, target)["layer"])


def tvm_layer():
    import tvm
    from tvm import relax

    tir = _tir(tvm)
    n = tir.Var("n", "int64")

    # TVM 0.27 calls struct info "types": relax.TensorType (TensorStructInfo before).
    tensor_info = getattr(relax, "TensorStructInfo", None) or relax.TensorType

    def tensor(*shape):
        return tensor_info(list(shape), "float32")

    shapes = {"x": (n, HIDDEN), "cos": (n, 1, HEAD_DIM), "sin": (n, 1, HEAD_DIM), "mask": (n, n),
              "attn_norm": (HIDDEN,), "wq": (HIDDEN, HEADS * HEAD_DIM), "wk": (HIDDEN, KV_HEADS * HEAD_DIM),
              "wv": (HIDDEN, KV_HEADS * HEAD_DIM), "wo": (HEADS * HEAD_DIM, HIDDEN), "ffn_norm": (HIDDEN,),
              "wg": (HIDDEN, FFN), "wu": (HIDDEN, FFN), "wd": (FFN, HIDDEN)}
    p = {name: relax.Var(name, tensor(*shape)) for name, shape in shapes.items()}
    op = relax.op
    bb = relax.BlockBuilder()

    def rope(x):
        half = HEAD_DIM // 2
        first = op.strided_slice(x, axes=[2], begin=[0], end=[half])
        second = op.strided_slice(x, axes=[2], begin=[half], end=[HEAD_DIM])
        rotated = op.concat([op.negative(second), first], axis=2)
        return bb.emit(op.add(op.multiply(x, p["cos"]), op.multiply(rotated, p["sin"])))

    def repeat_kv(x):
        expanded = op.broadcast_to(op.expand_dims(x, axis=2), (n, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM))
        return bb.emit(op.reshape(expanded, (n, HEADS, HEAD_DIM)))

    with bb.function("layer", list(p.values())):
        with bb.dataflow():
            h = bb.emit(op.nn.rms_norm(p["x"], p["attn_norm"], axes=[-1], epsilon=1e-5))
            q = bb.emit(op.reshape(bb.emit(op.matmul(h, p["wq"])), (n, HEADS, HEAD_DIM)))
            k = bb.emit(op.reshape(bb.emit(op.matmul(h, p["wk"])), (n, KV_HEADS, HEAD_DIM)))
            v = bb.emit(op.reshape(bb.emit(op.matmul(h, p["wv"])), (n, KV_HEADS, HEAD_DIM)))
            q = rope(q)
            k = repeat_kv(rope(k))
            v = repeat_kv(v)
            scores = bb.emit(op.matmul(bb.emit(op.permute_dims(q, [1, 0, 2])), bb.emit(op.permute_dims(k, [1, 2, 0]))))
            scores = bb.emit(op.add(op.multiply(scores, relax.const(HEAD_DIM ** -0.5, "float32")), p["mask"]))
            probs = bb.emit(op.nn.softmax(scores, axis=-1))
            attn = bb.emit(op.matmul(probs, bb.emit(op.permute_dims(v, [1, 0, 2]))))
            attn = bb.emit(op.reshape(bb.emit(op.permute_dims(attn, [1, 0, 2])), (n, HEADS * HEAD_DIM)))
            hidden = bb.emit(op.add(bb.emit(op.matmul(attn, p["wo"])), p["x"]))
            h2 = bb.emit(op.nn.rms_norm(hidden, p["ffn_norm"], axes=[-1], epsilon=1e-5))
            act = bb.emit(op.multiply(op.nn.silu(bb.emit(op.matmul(h2, p["wg"]))), bb.emit(op.matmul(h2, p["wu"]))))
            out = bb.emit_output(op.add(bb.emit(op.matmul(act, p["wd"])), hidden))
        bb.emit_func_output(out)
    mod = bb.get()
    mod["layer"] = mod["layer"].with_attr("tir_var_upper_bound", {"n": N})
    passes = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps(),
              relax.transform.FuseTIR(), relax.transform.ToNonDataflow(), relax.transform.RemovePurityChecking(),
              relax.transform.CallTIRRewrite(), relax.transform.StaticPlanBlockMemory()]
    return tvm.transform.Sequential(passes)(mod), tvm


def _tir(tvm):
    """TVM 0.27 names its loop-level IR module tirx (tir before)."""
    import importlib

    for name in ("tirx", "tir"):
        try:
            return importlib.import_module(f"tvm.{name}")
        except ImportError:
            continue
    raise ImportError("neither tvm.tirx nor tvm.tir")


def tvm_bytes():
    mod, tvm = tvm_layer()
    from tvm import relax

    storages, outside = [], []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            if expr.op.name == "relax.memory.alloc_storage":
                storages.append(int(expr.args[0].values[0]))
            elif expr.op.name == "relax.builtin.alloc_tensor":
                shape = [int(v) if isinstance(v, _tir(tvm).IntImm) else N for v in expr.args[0].values]
                size = 4
                for dim in shape:
                    size *= dim
                outside.append(size)

    relax.analysis.post_order_visit(mod["layer"], visit)
    return sum(storages), len(storages), sum(outside)


def main() -> None:
    unfused, fused = tessera_plan(False), tessera_plan(True)
    tvm_planned, tvm_storages, tvm_outside = tvm_bytes()
    mib = 1 << 20
    print(f"Llama decoder layer, n <= {N}, float32\n")
    print("| plan | arena / planned bytes | storages | liveness lower bound | arena / lower bound | vs TVM |")
    print("|---|---|---|---|---|---|")
    tvm_total = tvm_planned + tvm_outside
    for name, plan in (("Tessera, unfused", unfused), ("Tessera, fused", fused)):
        print(f"| {name} | {plan.arena_bytes / mib:.2f} MiB | {len(plan.tokens)} | "
              f"{plan.liveness_lower_bound / mib:.2f} MiB | {plan.arena_bytes / plan.liveness_lower_bound:.3f} | "
              f"{plan.arena_bytes / tvm_total:.3f} |")
    print(f"| TVM 0.27 StaticPlanBlockMemory (fused) | {tvm_planned / mib:.2f} MiB planned + {tvm_outside / mib:.2f} "
          f"MiB result = {tvm_total / mib:.2f} MiB | {tvm_storages} | - | - | 1.000 |")


if __name__ == "__main__":
    main()
