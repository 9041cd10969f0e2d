"""The c-native backend: every kernel in one kernels.so behind one signature (docs/format.md,
"c-native"), what it exports, that two threads may run halves of one launch, deterministic bytes,
and the cross build for AArch64. Numerics: the whole kernel suite runs on the cpu device
(tests/kernels, harness.KERNEL_DEVICES)."""

import ctypes
import shutil
import subprocess
import threading

import numpy as np
import pytest
from harness import build
from tessera import op
from tessera.codegen import get_backend
from tessera.codegen.c.native import (
    NATIVE_LOWERING,
    NativeBuildError,
    _check_android_imports,
    emit_native_module,
    host_machine,
)
from tessera.ir import Function, Tensor
from tessera.target import Target
from tessera.tir.lower import lower_kernel
from tessera.transform import legalize_ops
from tessera.vm.devices import DeviceError
from tessera.vm.devices.cpu import CPUDevice, check_machine_code

F32 = "float32"
CPU = Target.preset("cpu")
# A CPU target with cpu_adapter off: row reductions keep their workgroup-memory schedule, so the
# kernel has scratch arrays that must not be shared between threads.
WORKGROUP_MEMORY = Target("cpu", limits=dict(CPU.limits), name="cpu (workgroup reductions)", cpu="native")


def kernels_of(make, params, target=CPU):
    mod = legalize_ops(build(make, params), target)
    return [f for f in mod.functions.values() if not isinstance(f, Function)]


def compile_kernels(make, params, target=CPU):
    kernels = kernels_of(make, params, target)
    return kernels, get_backend("c-native").compile(kernels, target)


def test_every_kernel_takes_buffers_and_scalars_as_arrays_and_a_workgroup_range():
    kernels, compiled = compile_kernels(lambda x, w: op.matmul(op.nn.softmax(x), w),
                                        [Tensor(("n", 300), F32), Tensor((300, "m"), F32)])
    assert set(compiled.modules) == {"kernels.so"} and len(compiled.kernels) == 2
    for func, kernel in zip(kernels, compiled.kernels):
        assert kernel.backend == "c-native" and kernel.module == "kernels.so"
        assert kernel.abi["grid"] == "range"
        assert kernel.abi["scalars"] == [{"name": s, "passed": "array", "position": i}
                                         for i, s in enumerate(func.scalars)]
    source = emit_native_module([lower_kernel(k, NATIVE_LOWERING) for k in kernels])
    entry = compiled.kernels[0].entry_point
    assert (f"void {entry}(void *const *tsr_buffers, const int32_t *tsr_scalars, int32_t nwg_x, int32_t nwg_y, "
            "int32_t nwg_z, int64_t wg_begin, int64_t wg_end) {") in source
    assert "float *restrict in0 = (float *)tsr_buffers[0];" in source
    assert "const int32_t sym_n = tsr_scalars[0];" in source
    assert "for (int64_t tsr_wg = wg_begin; tsr_wg < wg_end; tsr_wg++) {" in source


def test_only_the_kernel_entries_are_exported(tmp_path):
    _, compiled = compile_kernels(lambda x, w: op.nn.rms_norm(op.exp(x), w, axes=[-1]),
                                  [Tensor(("n", 64), F32), Tensor((64,), F32)])
    path = tmp_path / "kernels.so"
    path.write_bytes(compiled.modules["kernels.so"])
    listing = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in listing.stdout.splitlines()}
    assert exported == {k.entry_point for k in compiled.kernels}


def test_workgroup_memory_is_per_call_so_threads_may_share_a_launch():
    """Two threads each run half of one launch's workgroups, at the same time and again and again:
    the result is the whole launch's. Static workgroup memory (the WASM spelling) would be shared
    by the threads and mix their rows."""
    (kernel,), compiled = compile_kernels(op.nn.softmax, [Tensor(("n", 999), F32)], WORKGROUP_MEMORY)
    source = emit_native_module([lower_kernel(kernel, NATIVE_LOWERING)])
    assert kernel.scratch and "static float" not in source
    rows = 64
    x = np.random.default_rng(0).standard_normal((rows, 999)).astype(np.float32)
    want = np.exp(x - x.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)

    device = CPUDevice()
    (fn,) = device.load_kernels([compiled.kernels[0].record(kernel)], compiled.modules)
    from tessera import arith

    grid = [arith.evaluate(g, {"n": rows}) for g in kernel.grid]
    total = int(np.prod(grid))
    assert total >= 2
    out = np.zeros_like(x)
    buffers = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    scalars = (ctypes.c_int32 * 1)(rows)
    for _ in range(20):
        out[:] = 0
        start = threading.Barrier(2)  # both halves at once
        halves = [threading.Thread(target=run_half, args=(start, fn, buffers, scalars, grid, 0, total // 2)),
                  threading.Thread(target=run_half, args=(start, fn, buffers, scalars, grid, total // 2, total))]
        for t in halves:
            t.start()
        for t in halves:
            t.join()
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def run_half(start, fn, buffers, scalars, grid, begin, end):
    start.wait()
    fn(buffers, scalars, *grid, begin, end)


def test_the_module_bytes_are_deterministic():
    kernels = kernels_of(lambda a, b: op.add(op.exp(a), b), [Tensor(("n", 5), F32), Tensor((5,), F32)])
    backend = get_backend("c-native")
    assert backend.compile(kernels, CPU).modules == backend.compile(kernels, CPU).modules


def test_a_failed_build_shows_the_compiler_error_and_the_source(monkeypatch):
    monkeypatch.setenv("CC", "cc -include no_such_header.h")
    kernels = kernels_of(op.exp, [Tensor(("n",), F32)])
    with pytest.raises(NativeBuildError) as error:
        get_backend("c-native").compile(kernels, CPU)
    message = str(error.value)
    assert "no_such_header.h" in message and "--- kernels.c ---" in message
    assert "void k_" in message and "tsr_buffers" in message


ARM = Target.preset("cpu-armv8.2-a")


@pytest.mark.skipif(host_machine() != "x86_64", reason="the cross build is tested from x86-64 hosts")
def test_armv8_builds_an_aarch64_shared_object_that_this_machine_refuses():
    # make setup installs gcc-aarch64-linux-gnu: without it this build, and the test, fail.
    assert shutil.which("aarch64-linux-gnu-gcc"), "no aarch64-linux-gnu-gcc: run make setup"
    kernels = kernels_of(op.exp, [Tensor(("n",), F32)], ARM)
    compiled = get_backend("c-native").compile(kernels, ARM)
    data = compiled.modules["kernels.so"]
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == 183  # EM_AARCH64
    with pytest.raises(DeviceError, match="kernels.so holds aarch64 machine code; this machine is x86_64"):
        CPUDevice().load_kernels([compiled.kernels[0].record(kernels[0])], compiled.modules)


@pytest.mark.skipif(host_machine() != "x86_64", reason="the cross build is tested from x86-64 hosts")
def test_a_missing_cross_compiler_is_named_with_its_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no compiler on it
    with pytest.raises(NativeBuildError, match="needs the cross compiler aarch64-linux-gnu-gcc: install "
                                               "gcc-aarch64-linux-gnu"):
        get_backend("c-native").compile(kernels_of(op.exp, [Tensor(("n",), F32)], ARM), ARM)


def test_a_module_that_is_not_elf_is_refused():
    with pytest.raises(DeviceError, match="not an ELF shared object"):
        check_machine_code("kernels.so", b"\0asm\1\0\0\0" + bytes(32))


def test_unknown_cpus_are_named_with_the_known_ones():
    target = Target("cpu", cpu="pentium")
    with pytest.raises(NativeBuildError, match=r"unknown CPU 'pentium'; known: native, x86-64-v2"):
        get_backend("c-native").compile(kernels_of(op.exp, [Tensor(("n",), F32)]), target)


def dynamic_section(data: bytes, tmp_path, *flags: str) -> str:
    path = tmp_path / "kernels.so"
    path.write_bytes(data)
    return subprocess.run(["readelf", *flags, "-W", str(path)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("preset, machine", [("cpu-android-arm64-v8a", 183), ("cpu-android-x86_64", 62)])
def test_android_kernels_need_only_bionics_libraries_unversioned(preset, machine, tmp_path):
    target = Target.preset(preset)
    kernels = kernels_of(op.exp, [Tensor(("n",), F32)], target)
    data = get_backend("c-native").compile(kernels, target).modules["kernels.so"]
    assert int.from_bytes(data[18:20], "little") == machine
    needed = [line.split("[")[1].rstrip("]") for line in dynamic_section(data, tmp_path, "-d").splitlines()
              if "(NEEDED)" in line]
    assert sorted(needed) == ["libc.so", "libm.so"]  # no libc.so.6: glibc's name
    imports = dynamic_section(data, tmp_path, "--dyn-syms")
    assert " UND expf" in imports and "GLIBC" not in imports
    # Every loadable segment aligned for 16 KiB pages (Android 15).
    aligns = [line.split()[-1] for line in dynamic_section(data, tmp_path, "-l").splitlines()
              if line.strip().startswith("LOAD")]
    assert aligns and all(int(a, 16) >= 0x4000 for a in aligns)


@pytest.mark.skipif(host_machine() != "x86_64", reason="the cross build is tested from x86-64 hosts")
def test_an_android_module_importing_a_glibc_symbol_is_refused(tmp_path):
    # A module linked the Linux way imports expf@GLIBC_2.x and glibc's start-up hooks, which Android's
    # loader would not find.
    kernels = kernels_of(op.exp, [Tensor(("n",), F32)], ARM)
    path = tmp_path / "kernels.so"
    path.write_bytes(get_backend("c-native").compile(kernels, ARM).modules["kernels.so"])
    with pytest.raises(NativeBuildError, match=r"import .*__cxa_finalize.*expf@GLIBC_2\.\d+, which Android's libc\.so"):
        _check_android_imports(str(path), "android-arm64-v8a")
