"""tessera.build(progress=...): the contract `tessera compile` draws its progress from."""

import tessera
from llama_layer import build_layer


def test_build_reports_each_pass_then_each_kernel_as_it_starts():
    calls = []
    exe = tessera.build(build_layer(), "llvmpipe", upper_bounds={"n": 256},
                        progress=lambda stage, done, total: calls.append((stage, done, total)))
    kernels = [c for c in calls if c[0] == "kernels"]
    passes = calls[:calls.index(kernels[0])]
    # Called as a step starts: `done` steps of `total` are finished.
    assert passes[0] == ("lambda_lift", 0, len(passes)) and passes[-1] == ("plan_memory", len(passes) - 1, len(passes))
    assert [done for _, done, _ in passes] == list(range(len(passes)))
    assert kernels == [("kernels", i, len(exe.kernels)) for i in range(len(exe.kernels))]
    assert all(total == 1 for _, _, total in calls[len(passes) + len(kernels):])  # then single steps (the VM code)
