"""Run one kernel as WebAssembly through wasmtime: the WASM target's counterpart of the WebGPU
kernel runner (same ``run(func, inputs, scalars)``), so tests check C kernels against numpy.

Each kernel is built alone (codegen/c, clang for wasm32) and cached by its C text. Tensors are
laid out one after another above the module's ``__heap_base``, 16-byte aligned, in a memory
that grows to fit.
"""

from __future__ import annotations

import numpy as np

from .. import arith
from ..tir.ir import PrimFunc
from ..tir.lower import lower_kernel
from .kernel_runner import _device_bytes, _from_device, _to_device

PAGE = 65536


class WasmKernelRunner:
    def __init__(self):
        import wasmtime

        self.wasmtime = wasmtime
        self.engine = wasmtime.Engine()
        self._modules: dict[str, object] = {}

    def _module(self, func: PrimFunc):
        from tessera.codegen.c import LOWERING, compile_wasm, emit_c_module

        source = emit_c_module([lower_kernel(func, LOWERING)])
        module = self._modules.get(source)
        if module is None:
            module = self.wasmtime.Module(self.engine, compile_wasm(source))
            self._modules[source] = module
        return module

    def run(self, func: PrimFunc, inputs: list[np.ndarray], scalars: dict[str, int]) -> list[np.ndarray]:
        from tessera.codegen.c import kernel_symbol

        wt = self.wasmtime
        store = wt.Store(self.engine)
        module = self._module(func)
        (wanted,) = [i.type for i in module.imports if i.name == "memory"]  # the pages its stack needs
        memory = wt.Memory(store, wt.MemoryType(wt.Limits(wanted.limits.min, None)))
        instance = wt.Instance(store, module, [memory])
        exports = instance.exports(store)
        base = exports["__heap_base"].value(store)
        datas = [_to_device(np.asarray(a), buf.storage_dtype) for a, buf in zip(inputs, func.inputs)]
        out_shapes = [tuple(arith.evaluate(d, scalars) for d in buf.shape) for buf in func.outputs]
        inplace = func.attrs.get("inplace", {})
        sizes = [len(d) for d in datas]
        for index, (shape, buf) in enumerate(zip(out_shapes, func.outputs)):
            sizes.append(len(datas[inplace[index]]) if index in inplace else
                         _device_bytes(int(np.prod(shape, dtype=np.int64)), buf.storage_dtype))
        pointers, end = [], base
        for size in sizes:
            end = (end + 15) // 16 * 16
            pointers.append(end)
            end += max(size, 4)
        grow = -(-end // PAGE) - memory.size(store)
        if grow > 0:
            memory.grow(store, grow)
        for pointer, data in zip(pointers, datas):
            memory.write(store, data, pointer)
        for index in inplace:
            memory.write(store, datas[inplace[index]], pointers[len(datas) + index])
        grid = [arith.evaluate(g, scalars) for g in func.grid]
        args = pointers + [int(scalars[s]) for s in func.scalars] + [int(g) for g in grid]
        if min(grid) > 0:
            exports[kernel_symbol(func)](store, *args)
        outputs = []
        for index, (shape, buf) in enumerate(zip(out_shapes, func.outputs)):
            pointer = pointers[len(datas) + index]
            raw = memory.read(store, pointer, pointer + sizes[len(datas) + index])
            outputs.append(_from_device(bytes(raw), shape, buf.storage_dtype))
        return outputs
