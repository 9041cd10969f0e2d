"""Run under oclgrind by test_opencl_oclgrind.py: kernels at small sizes through the OpenCL device,
whose only platform is then oclgrind's simulator. ``python oclgrind_kernels.py out-of-bounds`` runs
a kernel that writes past its buffer instead, to show that the check can fail."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kernels"))

import numpy as np  # noqa: E402
from harness import check_op  # noqa: E402
from tessera import op  # noqa: E402
from tessera.ir import PrimValue, Tensor  # noqa: E402
from tessera.target import Target  # noqa: E402
from tessera.vm.devices import View  # noqa: E402
from tessera.vm.opencl_runner import OpenCLKernelRunner  # noqa: E402

F32 = "float32"
SIZES = (1, 7)
CASES = {
    "transpose": (op.permute_dims, [Tensor(("n", 37), F32)]),
    "transpose_tiled": (lambda x: op.permute_dims(x, axes=[0, 2, 1]), [Tensor((2, "n", 33), F32)]),
    "concat_split": (lambda a, b: op.split(op.concat((a, b), axis=1), indices_or_sections=[2], axis=1),
                     [Tensor(("n", 3), F32), Tensor(("n", 4), F32)]),
    "take": (lambda w, i: op.take(w, i, axis=0), [Tensor((50, 8), F32), Tensor(("n",), "int32")]),
    "kv_cache_write": (lambda c, v: op.kv_cache_write(c, v, PrimValue(3)),
                       [Tensor(("n + 3", 2, 4), F32), Tensor(("n", 2, 4), F32)]),
    "vectorized_f16": (lambda a, b: op.add(a, b), [Tensor(("n", 8), "float16")] * 2),
    "sum": (lambda a: op.sum(a, axis=[1]), [Tensor(("n", 300), F32)]),
    "softmax": (op.nn.softmax, [Tensor(("n", 70), F32)]),
    "rms_norm": (lambda x, w: op.nn.rms_norm(x, w, axes=[-1]), [Tensor(("n", 64), F32), Tensor((64,), F32)]),
    "argmax": (lambda a: op.argmax(a, axis=1), [Tensor(("n", 30), F32)]),
    "gemv": (op.matmul, [Tensor((1, 96), F32), Tensor((96, "n"), F32)]),
}

OUT_OF_BOUNDS = """__kernel __attribute__((reqd_work_group_size(4, 1, 1)))
void k_past_the_end(__global float* x) { x[get_global_id(0) + 1] = 1.0f; }
"""


def main(mode: str) -> None:
    runner = OpenCLKernelRunner()
    print("device:", runner.device.name, flush=True)
    if mode == "out-of-bounds":
        device = runner.device
        kernel = {"name": "past", "backend": "opencl", "module": "m.cl", "entry_point": "k_past_the_end",
                  "workgroup_size": [4, 1, 1]}
        (loaded,) = device.load_kernels([kernel], {"m.cl": OUT_OF_BOUNDS.encode()})
        device.launch(device.bind(loaded, [View(device.allocate(16), 0, 16)]), [], [1, 1, 1])
        device.synchronize()
        return
    # Both kinds of schedule: a phone GPU's (workgroup memory, barriers) and a CPU's (wide threads).
    for target in (Target.preset("opencl"), Target.preset("pocl")):
        for name, (make, params) in CASES.items():
            check_op(runner, make, params, target=target, sizes=SIZES, rtol=1e-3, atol=1e-3,
                     inputs=_take_inputs if name == "take" else None)
            print("ran", name, "for", target.name, flush=True)


def _take_inputs(env, rng):
    return [rng.standard_normal((50, 8)).astype(np.float32), rng.integers(0, 50, env["n"]).astype(np.int32)]


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "kernels")
