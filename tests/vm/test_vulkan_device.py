"""The Vulkan device runs SPIR-V compute kernels in order, under the Khronos validation layer.

The kernels are SPIR-V assembly kept here and assembled with spirv-as (Debian spirv-tools), so the
device is tested apart from the SPIR-V backend: ``out[i] = a[i] + b[i] * scale`` over a 2-D grid of
8-thread workgroups, with ``n`` and ``scale`` as push constants at offsets 0 and 4, as the backend's
ABI has them. Every test runs on one device with validation on; it must say nothing.
"""

import gc
import os
import subprocess
import sys
import time
import types

import numpy as np
import pytest
from tessera.vm.devices import DeviceError, View, device_kinds
from tessera.vm.devices.vulkan_adapter import VulkanUnavailable

AXPY = """
               OpCapability Shader
               OpMemoryModel Logical GLSL450
               OpEntryPoint GLCompute %main "axpy" %gid %groups
               OpExecutionMode %main LocalSize 8 1 1
               OpDecorate %gid BuiltIn GlobalInvocationId
               OpDecorate %groups BuiltIn NumWorkgroups
               OpDecorate %floats ArrayStride 4
               OpMemberDecorate %Buffer 0 Offset 0
               OpDecorate %Buffer Block
               OpDecorate %a DescriptorSet 0
               OpDecorate %a Binding 0
               OpDecorate %b DescriptorSet 0
               OpDecorate %b Binding 1
               OpDecorate %out DescriptorSet 0
               OpDecorate %out Binding 2
               OpMemberDecorate %Scalars 0 Offset 0
               OpMemberDecorate %Scalars 1 Offset 4
               OpDecorate %Scalars Block
       %void = OpTypeVoid
         %fn = OpTypeFunction %void
       %uint = OpTypeInt 32 0
        %int = OpTypeInt 32 1
      %float = OpTypeFloat 32
       %bool = OpTypeBool
      %uvec3 = OpTypeVector %uint 3
   %in_uvec3 = OpTypePointer Input %uvec3
        %gid = OpVariable %in_uvec3 Input
     %groups = OpVariable %in_uvec3 Input
     %floats = OpTypeRuntimeArray %float
     %Buffer = OpTypeStruct %floats
  %sb_Buffer = OpTypePointer StorageBuffer %Buffer
          %a = OpVariable %sb_Buffer StorageBuffer
          %b = OpVariable %sb_Buffer StorageBuffer
        %out = OpVariable %sb_Buffer StorageBuffer
    %Scalars = OpTypeStruct %int %int
 %pc_Scalars = OpTypePointer PushConstant %Scalars
    %scalars = OpVariable %pc_Scalars PushConstant
     %pc_int = OpTypePointer PushConstant %int
   %sb_float = OpTypePointer StorageBuffer %float
      %int_0 = OpConstant %int 0
      %int_1 = OpConstant %int 1
     %uint_8 = OpConstant %uint 8
       %main = OpFunction %void None %fn
      %entry = OpLabel
      %g = OpLoad %uvec3 %gid
      %w = OpLoad %uvec3 %groups
     %gx = OpCompositeExtract %uint %g 0
     %gy = OpCompositeExtract %uint %g 1
     %wx = OpCompositeExtract %uint %w 0
  %width = OpIMul %uint %wx %uint_8
    %row = OpIMul %uint %gy %width
      %i = OpIAdd %uint %row %gx
     %pn = OpAccessChain %pc_int %scalars %int_0
      %n = OpLoad %int %pn
     %nu = OpBitcast %uint %n
 %inside = OpULessThan %bool %i %nu
           OpSelectionMerge %end None
           OpBranchConditional %inside %body %end
   %body = OpLabel
     %pa = OpAccessChain %sb_float %a %int_0 %i
     %va = OpLoad %float %pa
     %pb = OpAccessChain %sb_float %b %int_0 %i
     %vb = OpLoad %float %pb
     %ps = OpAccessChain %pc_int %scalars %int_1
  %scale = OpLoad %int %ps
 %fscale = OpConvertSToF %float %scale
   %prod = OpFMul %float %vb %fscale
    %sum = OpFAdd %float %va %prod
     %po = OpAccessChain %sb_float %out %int_0 %i
           OpStore %po %sum
           OpBranch %end
    %end = OpLabel
           OpReturn
           OpFunctionEnd
"""

WORKGROUP = 8


def assemble(text: str, tmp_path) -> bytes:
    source, binary = tmp_path / "kernel.spvasm", tmp_path / "kernel.spv"
    source.write_text(text)
    subprocess.run(["spirv-as", "--target-env", "vulkan1.1", str(source), "-o", str(binary)], check=True)
    subprocess.run(["spirv-val", "--target-env", "vulkan1.1", str(binary)], check=True)
    return binary.read_bytes()


def axpy_record(features=()) -> dict:
    bindings = [{"index": i, "tensor": t, "dtype": "float32", "access": "read" if i < 2 else "write",
                 "role": "input" if i < 2 else "output"} for i, t in enumerate(["a", "b", "out"])]
    scalars = [{"name": name, "passed": "push_constant", "offset": 4 * i} for i, name in enumerate(["n", "scale"])]
    return {"name": "axpy", "backend": "spirv", "module": "kernels/axpy.spv", "entry_point": "axpy",
            "workgroup_size": [WORKGROUP, 1, 1], "abi": {"bindings": bindings, "scalars": scalars},
            "grid": [], "requirements": {"features": list(features), "limits": {}}}


def grid_for(n: int, columns: int = 4) -> list[int]:
    """A 2-D grid of ``columns`` workgroups a row: the kernel's index is row * columns * 8 + x."""
    return [columns, -(-n // (columns * WORKGROUP)), 1]


@pytest.fixture(scope="module", params=["mapped", "staged"])
def device(request):
    """A device under validation; "staged" keeps buffers unmapped, as on a discrete GPU, so bytes
    travel through staging buffers (lavapipe's memory is unified: every buffer could be mapped)."""
    from tessera.vm.devices.vulkan import VulkanDevice

    opened = VulkanDevice(validation=True)  # make setup installs lavapipe: a missing device fails, never skips
    opened._unified = request.param == "mapped"
    yield opened
    opened.close()
    assert opened.validation_messages == []


@pytest.fixture(scope="module")
def axpy_code(tmp_path_factory):
    return assemble(AXPY, tmp_path_factory.mktemp("spirv"))


@pytest.fixture(scope="module")
def axpy(device, axpy_code):
    (kernel,) = device.load_kernels([axpy_record()], {"kernels/axpy.spv": axpy_code})
    return kernel


@pytest.fixture(autouse=True)
def _validation_stays_quiet(device):
    yield
    assert device.validation_messages == []


def floats(device, view: View) -> np.ndarray:
    return np.frombuffer(device.read_back(view), np.float32)


def upload(device, array: np.ndarray) -> View:
    data = np.ascontiguousarray(array, np.float32).tobytes()
    return View(device.allocate_with(data), 0, len(data))


def test_upload_and_read_back_any_size(device):
    for nbytes in (0, 3, 4, 1000, 1 << 20):
        data = np.random.default_rng(nbytes).integers(0, 256, nbytes, np.uint8).tobytes()
        buffer = device.allocate_with(data)
        assert (buffer.mapped is not None) == device._unified
        assert device.read_back(View(buffer, 0, nbytes)) == data
        if nbytes >= 3:
            device.upload(buffer, 1, b"\7\7")
            assert device.read_back(View(buffer, 0, 3)) == data[:1] + b"\7\7"
        device.free(buffer)


def test_axpy_over_a_2d_grid_matches_numpy(device, axpy):
    n = 1000
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    va, vb, out = upload(device, a), upload(device, b), View(device.allocate(4 * n), 0, 4 * n)
    device.launch(device.bind(axpy, [va, vb, out]), [n, 3], grid_for(n))
    np.testing.assert_allclose(floats(device, out), a + 3 * b, rtol=1e-6)


def test_views_at_aligned_offsets_and_copies_between_them(device, axpy):
    align = device.limit("minStorageBufferOffsetAlignment")
    n = 37
    offset = -(-4 * n // align) * align  # three views side by side, each at an aligned offset
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    arena = device.allocate(3 * offset + 4 * n)
    va, vb, out = (View(arena, k * offset, 4 * n) for k in range(3))
    device.upload(arena, va.offset, a.tobytes())
    device.upload(arena, vb.offset, b.tobytes())
    device.launch(device.bind(axpy, [va, vb, out]), [n, 2], grid_for(n))
    other = View(device.allocate(8 + 4 * n), 8, 4 * n)  # copies need no alignment
    device.copy(out, other)
    np.testing.assert_array_equal(floats(device, other), a + 1)
    np.testing.assert_array_equal(floats(device, va), a)  # the neighbours are untouched
    with pytest.raises(DeviceError, match="minStorageBufferOffsetAlignment"):
        device.bind(axpy, [View(arena, 4, 4 * n), vb, out])


def test_a_launch_reads_what_the_launch_before_it_wrote(device, axpy):
    n = 300
    a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    va, vb = upload(device, a), upload(device, b)
    first, second = View(device.allocate(4 * n), 0, 4 * n), View(device.allocate(4 * n), 0, 4 * n)
    device.launch(device.bind(axpy, [va, vb, first]), [n, 2], grid_for(n))
    device.launch(device.bind(axpy, [first, vb, second]), [n, 3], grid_for(n))
    device.flush()  # one submission; the barrier between the two dispatches orders them
    np.testing.assert_array_equal(floats(device, second), a + 5)


def test_many_launches_keep_their_own_push_constants(device, axpy):
    n = 64
    a, b = np.zeros(n, np.float32), np.arange(n, dtype=np.float32)
    acc, vb = upload(device, a), upload(device, b)
    bound = device.bind(axpy, [acc, vb, acc])  # acc += b * k, in place
    for k in range(1, 21):
        device.launch(bound, [n, k], grid_for(n))
    np.testing.assert_array_equal(floats(device, acc), b * sum(range(1, 21)))


def test_an_upload_between_launches_lands_in_order(device, axpy):
    n = 16
    acc, vb = upload(device, np.zeros(n)), upload(device, np.ones(n))
    bound = device.bind(axpy, [acc, vb, acc])
    device.launch(bound, [n, 1], grid_for(n))
    device.upload(acc.buffer, 0, np.full(n, 10, np.float32).tobytes())  # after the launch, before the next
    device.launch(bound, [n, 1], grid_for(n))
    np.testing.assert_array_equal(floats(device, acc), np.full(n, 11, np.float32))
    device.fill_zero(acc.buffer, 4 * n)
    np.testing.assert_array_equal(floats(device, acc), np.zeros(n, np.float32))


def test_a_zero_grid_runs_nothing(device, axpy):
    n = 8
    va, out = upload(device, np.ones(n)), upload(device, np.full(n, 7))
    device.launch(device.bind(axpy, [va, va, out]), [0, 1], [0, 1, 1])
    np.testing.assert_array_equal(floats(device, out), np.full(n, 7, np.float32))


def test_timed_launch_measures_a_positive_time(device, axpy):
    n = 4096
    va, out = upload(device, np.ones(n)), View(device.allocate(4 * n), 0, 4 * n)
    # The kernel's interval (timestamp queries) lies within the host's around the call: a check of the units
    # and the timestamp period that, unlike a bound in seconds, a busy machine cannot break.
    before = time.perf_counter()
    seconds = device.timed_launch(device.bind(axpy, [va, va, out]), [n, 1], grid_for(n))
    assert 0 < seconds <= time.perf_counter() - before, seconds
    np.testing.assert_array_equal(floats(device, out), np.full(n, 2, np.float32))


def test_freed_and_dropped_objects_are_destroyed_once_unused(device, axpy):
    device.synchronize()
    live = len(device._owned)  # the buffers and descriptor sets not yet released
    va, out = upload(device, np.ones(8)), View(device.allocate(32), 0, 32)
    device.synchronize()  # the staged upload's staging buffer is gone
    bound = device.bind(axpy, [va, va, out])
    device.launch(bound, [8, 1], [1, 1, 1])
    device.free(va.buffer)  # still used by the queued launch: destroyed once it has run
    del bound, out  # collected: the descriptor set and the output buffer go the same way
    gc.collect()
    assert len(device._owned) == live and len(device.commands._after) == 3
    device.synchronize()
    assert device.commands._after == []
    device.allocate(64)  # dropped at once, nothing pending: destroyed at once
    gc.collect()
    assert len(device._owned) == live


def test_descriptor_pools_are_reused_and_released_when_empty(device, axpy):
    """Sets freed from any pool are reused, and an empty pool other than the newest is destroyed:
    rounds of 300 binds (more than a pool's 256 sets) then drops keep two pools at most."""
    va = upload(device, np.ones(8))
    gc.collect()
    device.synchronize()
    for _ in range(4):
        bound = [device.bind(axpy, [va, va, va]) for _ in range(300)]
        assert len(device._descriptor_pools) <= 2
        del bound
        gc.collect()
        device.synchronize()
        assert len(device._descriptor_pools) == 1 and device._descriptor_pools[0].live_sets == 0


# -- errors ------------------------------------------------------------------------------------


def test_a_kernel_needing_a_missing_feature_is_refused(device, monkeypatch):
    monkeypatch.setattr(device, "features", device.features - {"shader-f16"})
    with pytest.raises(DeviceError, match="shader-f16"):
        device.load_kernels([axpy_record(features=["shader-f16"])], {"kernels/axpy.spv": b""})
    exe = types.SimpleNamespace(backends=["spirv"], required_features=["shader-f16"], required_limits={},
                                target={"name": "vulkan"})
    with pytest.raises(DeviceError, match="shader-f16"):
        device.check(exe)


def test_an_executable_of_another_backend_is_refused(device):
    exe = types.SimpleNamespace(backends=["wgsl"], required_features=[], required_limits={},
                                target={"name": "webgpu"})
    with pytest.raises(DeviceError, match="runs spirv kernels; this executable's are wgsl"):
        device.check(exe)


def test_a_module_that_is_not_spirv_is_refused(device):
    with pytest.raises(DeviceError, match="not SPIR-V"):
        device.load_kernels([axpy_record()], {"kernels/axpy.spv": b"@compute fn main() {}"})


def test_a_truncated_module_is_refused_before_the_driver_sees_it(device, axpy_code):
    with pytest.raises(DeviceError, match="kernel axpy: the SPIR-V module .* is truncated or corrupt"):
        device.load_kernels([axpy_record()], {"kernels/axpy.spv": axpy_code[:len(axpy_code) // 2 // 4 * 4]})


def test_a_module_the_driver_refuses_is_a_device_error(device, monkeypatch):
    vk = device.vk

    def refuse(*_):
        raise vk.VkErrorOutOfHostMemory()

    monkeypatch.setattr(vk, "vkCreateShaderModule", refuse)  # lavapipe itself creates a module from any bytes
    header_only = np.array([0x07230203, 0x00010300, 0, 1, 0], "<u4").tobytes()
    with pytest.raises(DeviceError, match="kernel axpy: the Vulkan driver refused its SPIR-V module .*OutOfHostMemory"):
        device.load_kernels([axpy_record()], {"kernels/axpy.spv": header_only})


def layouts_left(device, monkeypatch) -> dict:
    """Counts of descriptor-set and pipeline layouts created and not destroyed from now on."""
    vk, left = device.vk, {"set": 0, "pipeline": 0}
    for kind, create, destroy in (("set", "vkCreateDescriptorSetLayout", "vkDestroyDescriptorSetLayout"),
                                  ("pipeline", "vkCreatePipelineLayout", "vkDestroyPipelineLayout")):
        def counted(fn, step, kind=kind):
            def call(*args):
                left[kind] += step
                return fn(*args)
            return call
        monkeypatch.setattr(vk, create, counted(getattr(vk, create), 1))
        monkeypatch.setattr(vk, destroy, counted(getattr(vk, destroy), -1))
    return left


def test_a_refused_kernel_leaves_no_layouts_behind(device, axpy_code, monkeypatch):
    vk = device.vk
    left = layouts_left(device, monkeypatch)
    record = axpy_record()
    record["entry_point"] = "not_built_yet"  # a kernel the device has not cached
    record["abi"]["scalars"] = [{"name": f"s{i}", "passed": "push_constant", "offset": 4 * i}
                                for i in range(device.adapter.max_push_constant_bytes // 4 + 1)]
    with pytest.raises(DeviceError, match="scalars; the device's push constants hold"):
        device.load_kernels([record], {"kernels/axpy.spv": axpy_code})

    def refuse(*_):
        raise vk.VkErrorOutOfDeviceMemory()

    monkeypatch.setattr(vk, "vkCreateComputePipelines", refuse)
    with pytest.raises(DeviceError, match="could not build its pipeline"):
        device.load_kernels([axpy_record() | {"entry_point": "not_built_yet"}], {"kernels/axpy.spv": axpy_code})
    assert left == {"set": 0, "pipeline": 0}


def test_an_unknown_device_name_says_what_exists(device, monkeypatch):
    from tessera.vm.devices.vulkan import VulkanDevice

    monkeypatch.setenv("TESSERA_VULKAN_DEVICE", "nonexistent")
    with pytest.raises(VulkanUnavailable, match=r"'nonexistent'.*" + device.name.split(" ")[0]):
        VulkanDevice()


def test_without_the_vulkan_package_the_error_says_what_to_install(monkeypatch):
    from tessera.vm.devices.vulkan_adapter import load_vulkan

    monkeypatch.setitem(sys.modules, "vulkan", None)  # import vulkan now raises ImportError
    with pytest.raises(VulkanUnavailable, match=r"pip install 'tessera\[vulkan\]'"):
        load_vulkan()


def test_without_a_vulkan_driver_the_error_says_so(device):
    # The loader finds no driver when its driver list names none that exists.
    env = {**os.environ, "VK_ICD_FILENAMES": "/nonexistent/icd.json", "VK_DRIVER_FILES": "/nonexistent/icd.json"}
    script = ("from tessera.vm.devices.vulkan import VulkanDevice, VulkanUnavailable\n"
              "try:\n    VulkanDevice()\nexcept VulkanUnavailable as error:\n    print('unavailable:', error)\n")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("unavailable:") and "driver" in result.stdout, result.stdout


def test_the_vulkan_kind_is_registered():
    assert device_kinds()["vulkan"] == ("spirv",)


# -- end to end: tir kernels from the spirv backend ----------------------------------------------


@pytest.fixture(scope="module")
def spirv_backend():
    from tessera import codegen

    assert "spirv" in codegen.backends()


def test_legalized_operators_run_through_the_kernel_runner(device, spirv_backend):
    from tessera import op
    from tessera.ir import BlockBuilder, Tensor, Var, interpret
    from tessera.transform import legalize_ops
    from tessera.vm.vulkan_runner import VulkanKernelRunner

    runner = VulkanKernelRunner(device)
    assert runner.target.kind == "vulkan" and runner.target.cpu_adapter == device.cpu_adapter
    x, w = Var("x", Tensor(("n", 300), "float32")), Var("w", Tensor((300, 33), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(op.matmul(op.nn.softmax(x), w), "out")
        bb.emit_func_output(out)
    mod = bb.get()
    lowered = legalize_ops(mod, runner.target)
    rng = np.random.default_rng(0)
    for n in (1, 7, 64):
        args = [rng.standard_normal((n, 300), np.float32), rng.standard_normal((300, 33), np.float32)]
        np.testing.assert_allclose(interpret(lowered, "main", *args, kernel_runner=runner),
                                   interpret(mod, "main", *args), rtol=1e-5, atol=1e-5)


def test_the_vm_runs_a_llama_layer_on_vulkan(device, spirv_backend):
    import tessera
    from llama_layer import build_layer, layer_inputs
    from tessera.ir import interpret
    from tessera.vm import VirtualMachine

    vm = VirtualMachine(tessera.build(build_layer(), "lavapipe", upper_bounds={"n": 64}), device)
    for n in (1, 7, 64):
        args = layer_inputs(n, seed=n)
        np.testing.assert_allclose(vm["layer"](*args), interpret(build_layer(), "layer", *args),
                                   rtol=1e-4, atol=1e-4)
