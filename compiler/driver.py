"""tessera.build: a graph module in, an executable out (the one place where the layers meet)."""

from __future__ import annotations

from dataclasses import replace

from . import codegen
from .ir.module import IRModule
from .target import Target
from .tir.ir import PrimFunc
from .transform.device_targets import DeviceTargets
from .transform.instruments import DumpIR
from .transform.pipeline import Pipeline
from .vm.executable import Executable
from .vm_build import check_binding_limits, compile_vm, record_binding_needs


def build(mod: IRModule, target: Target | str = "webgpu", upper_bounds: dict[str, int] | None = None,
          pipeline: Pipeline | None = None, progress=None, instruments=(), dump_ir: str | None = None) -> Executable:
    """Compile ``mod`` for ``target``; ``upper_bounds`` ({"n": 2048}) lets memory be planned ahead.

    A module whose tensors are placed on virtual devices (``vdevice`` global infos) is split: each
    device's kernels are compiled for its own target (``target`` for the vdevice of its kind, the
    preset of that name for the others) and the executable moves tensors between devices.

    ``progress(stage, done, total)``, if given, hears of each pass and each kernel, for a progress bar.
    ``instruments`` (tessera.transform's ``PassTimings``, ``PrintAfter`` ...) watch the passes, beside
    those the pipeline has; ``dump_ir``, a folder: the module before the passes and after each one
    (``DumpIR``; `tessera compile --dump-ir`)."""
    if isinstance(target, str):
        target = Target.preset(target)
    pipeline = pipeline or Pipeline.default(target, upper_bounds)
    instruments = [*instruments, *([DumpIR(dump_ir)] if dump_ir else [])]
    if instruments:
        pipeline = replace(pipeline, instruments=[*pipeline.instruments, *instruments])
    lowered = pipeline(mod, progress)
    devices = DeviceTargets.of(lowered, target) if lowered.vdevices else None
    kernels = [f for f in lowered.functions.values() if isinstance(f, PrimFunc)]
    compiled = _compile_kernels(kernels, target, devices, progress)
    if progress is not None:
        progress("vm", 0, 1)
    exe = compile_vm(lowered, target, compiled, upper_bounds, devices)
    check_binding_limits(exe, _binding_limits(target, devices))
    record_binding_needs(exe)
    return exe


def _binding_limits(target: Target, devices: DeviceTargets | None) -> list[int]:
    """maxStorageBufferBindingSize of each physical device of the build, in the executable's order."""
    key = "maxStorageBufferBindingSize"
    if devices is None or len(devices.physical_devices) < 2:
        return [target.limit(key)]
    return [min(devices.target(name).limit(key) for name in devices.names if devices.placement(name) == index)
            for index in range(len(devices.physical_devices))]


def _compile_kernels(kernels: list[PrimFunc], target: Target, devices: DeviceTargets | None, progress):
    """Each kernel by its device's backend, in module order; a split build keeps each device's module
    files in a folder of their own (``webgpu_0/kernels/...``, ``wasm_0/kernels.wasm``)."""
    if devices is None or not devices.split:
        return codegen.backend_for(target).compile(kernels, target, progress)
    groups: dict[str, list[int]] = {}
    for index, func in enumerate(kernels):
        groups.setdefault(devices.device(func.attrs.get("device")), []).append(index)
    result = codegen.CompiledKernels(kernels=[None] * len(kernels))
    for name, members in groups.items():
        device_target = devices.target(name)
        part = codegen.backend_for(device_target).compile([kernels[i] for i in members], device_target, progress)
        folder = name.replace(":", "_") + "/"
        result.modules.update({folder + path: data for path, data in part.modules.items()})
        for index, kernel in zip(members, part.kernels):
            result.kernels[index] = replace(kernel, module=folder + kernel.module)
    return result
