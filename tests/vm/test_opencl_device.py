"""The Python VM's OpenCL device (pyopencl; PoCL on this CPU): views at offsets, copies, the
errors a user meets, and a whole program through tessera.build -> VirtualMachine."""

import time

import numpy as np
import pytest
import tessera
from tessera.vm import DeviceError, VirtualMachine
from tessera.vm.devices import View

DOUBLE = """__kernel __attribute__((reqd_work_group_size(4, 1, 1)))
void k_double(__global float* x, __global float* y, int n) {
  int i = (int)get_global_id(0);
  if (i < n) y[i] = 2.0f * x[i];
}
"""


def record(module="kernels/000_k_double.cl", backend="opencl", entry="k_double", features=()):
    return {"name": "double", "backend": backend, "module": module, "entry_point": entry, "workgroup_size": [4, 1, 1],
            "requirements": {"features": list(features), "limits": {}}}


@pytest.fixture(scope="module")
def device():
    from tessera.vm.devices.opencl import OpenCLDevice

    return OpenCLDevice.shared()  # make setup installs PoCL: a missing device fails, never skips


def test_kernels_read_and_write_views_at_offsets_of_one_buffer(device):
    align = device.limit("minStorageBufferOffsetAlignment")
    arena = device.allocate(4 * align)
    x = np.arange(10, dtype=np.float32)
    device.upload(arena, align, x.tobytes())
    (kernel,) = device.load_kernels([record()], {"kernels/000_k_double.cl": DOUBLE.encode()})
    bound = device.bind(kernel, [View(arena, align, 40), View(arena, 3 * align, 40)])
    device.launch(bound, [10], [3, 1, 1])  # 12 work items for 10 elements
    np.testing.assert_array_equal(np.frombuffer(device.read_back(View(arena, 3 * align, 40)), np.float32), 2 * x)
    # Seconds, from the queue's profiling: the kernel's interval lies within the host's around the call, a
    # check of the units that, unlike a bound in seconds, a busy machine cannot break.
    before = time.perf_counter()
    seconds = device.timed_launch(bound, [10], [3, 1, 1])
    assert 0 < seconds <= time.perf_counter() - before, seconds
    assert device.read_back(View(arena, 0, align)) == bytes(align)  # fresh memory reads as zeros
    with pytest.raises(DeviceError, match="alignment"):
        device.bind(kernel, [View(arena, 4, 40), View(arena, 3 * align, 40)])


def test_a_launch_the_device_refuses_is_a_device_error(device):
    too_wide = DOUBLE.replace("reqd_work_group_size(4, 1, 1)", "reqd_work_group_size(8, 1, 1)")
    (kernel,) = device.load_kernels([record()], {"kernels/000_k_double.cl": too_wide.encode()})  # record says 4
    buffer = device.allocate(64)
    with pytest.raises(DeviceError, match=r"could not launch k_double over \[1, 1, 1\] workgroups of \[4, 1, 1\]"):
        device.launch(device.bind(kernel, [View(buffer, 0, 32), View(buffer, 0, 32)]), [8], [1, 1, 1])


def test_copy_between_buffers_at_offsets(device):
    source = device.allocate_with(np.arange(16, dtype=np.int32).tobytes())
    destination = device.allocate(64)
    device.copy(View(source, 8, 16), View(destination, 32, 16))
    got = np.frombuffer(device.read_back(View(destination, 0, 64)), np.int32)
    np.testing.assert_array_equal(got, [0] * 8 + [2, 3, 4, 5] + [0] * 4)


def test_a_kernel_that_does_not_build_is_an_error_with_the_build_log(device):
    broken = DOUBLE.replace("2.0f * x[i];", "2.0f * undeclared_name;")
    with pytest.raises(DeviceError, match=r"(?s)could not build kernels/000_k_double\.cl.*undeclared_name"):
        device.load_kernels([record()], {"kernels/000_k_double.cl": broken.encode()})


def test_kernels_of_another_backend_are_refused(device):
    with pytest.raises(DeviceError, match="wgsl"):
        device.load_kernels([record("kernels/000_k_double.wgsl", "wgsl")], {"kernels/000_k_double.wgsl": b""})
    exe = tessera.build(_small_module(), "llvmpipe")
    with pytest.raises(DeviceError, match="the opencl device runs opencl kernels; this executable's are wgsl"):
        VirtualMachine(exe, device)
    vulkan = tessera.build(_small_module(), "vulkan")  # a Vulkan build handed to the OpenCL VM by name
    with pytest.raises(DeviceError, match="the opencl device runs opencl kernels; this executable's are spirv "
                                          r"\(built for target 'vulkan'\)"):
        VirtualMachine(vulkan, device="opencl")


def test_a_record_the_device_cannot_run_is_refused_before_building(device):
    modules = {"kernels/000_k_double.cl": DOUBLE.encode()}
    (kernel,) = device.load_kernels([record(entry="k_triple")], modules)
    buffer = device.allocate(64)
    with pytest.raises(DeviceError, match=r"kernel 'double': kernels/000_k_double\.cl has no entry point 'k_triple' "
                                          r"\(it has k_double\)"):
        device.bind(kernel, [View(buffer, 0, 32), View(buffer, 0, 32)])
    with pytest.raises(DeviceError, match="kernel 'double' is of no backend"):
        device.load_kernels([{k: v for k, v in record().items() if k != "backend"}], modules)
    # PoCL has no cl_khr_fp16: a kernel computing in half says so rather than failing to build.
    assert "cl_khr_fp16" not in device.features
    halves = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" + DOUBLE.replace("float", "half").replace("2.0f", "2.0h")
    with pytest.raises(DeviceError, match="kernel 'double' needs cl_khr_fp16, which the OpenCL device .* lacks"):
        device.load_kernels([record(features=["shader-f16", "cl_khr_fp16"])], {"kernels/000_k_double.cl": halves.encode()})


def test_an_unknown_device_name_says_which_devices_there_are(monkeypatch):
    from tessera.vm.devices.opencl import OpenCLDevice, OpenCLUnavailable

    monkeypatch.setenv("TESSERA_OPENCL_DEVICE", "no-such-gpu")
    with pytest.raises(OpenCLUnavailable, match=r"TESSERA_OPENCL_DEVICE='no-such-gpu' names no OpenCL device; "
                                                r"there are: 0: "):
        OpenCLDevice()
    monkeypatch.setenv("TESSERA_OPENCL_DEVICE", "pthread")  # PoCL's CPU device, by a part of its name
    assert "pthread" in OpenCLDevice().name


def test_the_llama_layer_runs_on_opencl_like_the_interpreter(device):
    """A whole program: the memory plan's arena views become sub-buffers, f32 kernels built for PoCL."""
    from llama_layer import build_layer, layer_inputs
    from tessera.ir import interpret

    exe = tessera.build(build_layer(), "pocl", upper_bounds={"n": 64})
    assert {k["backend"] for k in exe.kernels} == {"opencl"}
    vm = VirtualMachine(exe)  # the first device kind that runs opencl kernels
    assert vm.device.kind == "opencl"
    for n in (1, 7, 64):
        args = layer_inputs(n, seed=n)
        np.testing.assert_allclose(vm["layer"](*args), interpret(build_layer(), "layer", *args), rtol=1e-4,
                                   atol=1e-4)


def _small_module():
    from tessera import op
    from tessera.ir import BlockBuilder, Tensor, Var

    x = Var("x", Tensor(("n",), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(op.exp(x)))
    return bb.get()
