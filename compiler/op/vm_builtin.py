"""Operators of the lowered program the VM runs: explicit allocation, storage, checks.

After legalization the pipeline makes memory explicit (docs/passes.md):

- ``R.builtin.alloc_tensor(R.shape([...]), dtype=...)``: a new tensor;
- ``R.call_tir_dps(cls.kernel, (inputs..., outputs...), tir_vars)``: run a kernel
  writing into tensors allocated before it (destination-passing style);
- ``R.memory.alloc_storage(R.shape([bytes]))``: one storage token of the memory plan;
- ``R.memory.alloc_tensor(storage, R.shape([...]), offset=..., dtype=...)``: a tensor
  placed in a storage;
- ``R.vm.check(value, sinfo_args=...)``: the run-time check of a parameter annotation,
  binding the symbolic variables of the shape heap;
- ``R.vm.call_builtin_dps("name", (inputs..., outputs...), tir_vars, outputs=k)``: a host
  function of the runtime's library registry writing its last ``k`` arguments (what
  ``R.call_dps_library`` becomes once its outputs are allocated);
- ``R.vm.to_device(src, dst)``: copy a tensor into one allocated on another device (what
  ``R.to_vdevice`` becomes in a build split across devices; the VM's ``to_device``).

All are impure (they allocate, write or check), so they live outside dataflow blocks.
"""

from __future__ import annotations

from ..ir.errors import DeductionError
from ..ir.struct_info import ObjectStructInfo
from .common import result_tensor, shape_input
from .registry import register_op


def _deduce_alloc_tensor(call, ctx):
    shape = shape_input(call, 0, ctx)
    dtype = call.attr("dtype")
    if not dtype:
        raise DeductionError("invalid attribute", "alloc_tensor needs a dtype")
    return result_tensor(shape.values, dtype, shape.ndim)


def _deduce_memory_alloc_tensor(call, ctx):
    shape = shape_input(call, 1, ctx)
    return result_tensor(shape.values, call.attr("dtype"), shape.ndim)


def _deduce_object(call, ctx):
    return ObjectStructInfo()


def _deduce_check(call, ctx):
    if len(call.sinfo_args) != 1:
        raise DeductionError("missing annotation", "vm.check needs the struct info to check against")
    return call.args[0].struct_info


register_op("builtin.alloc_tensor", inputs=("shape",), attrs={"dtype": ""}, deduce=_deduce_alloc_tensor,
            pure=False)
register_op("call_tir_dps", inputs=("func", "args", "tir_vars"), deduce=_deduce_object, pure=False,
            variadic=True)
register_op("memory.alloc_storage", inputs=("size",), attrs={"token": -1}, deduce=_deduce_object, pure=False)
register_op("memory.alloc_tensor", inputs=("storage", "shape"), attrs={"offset": 0, "dtype": ""},
            deduce=_deduce_memory_alloc_tensor, pure=False)
register_op("vm.check", inputs=("value",), deduce=_deduce_check, pure=False)
register_op("vm.call_builtin_dps", inputs=("func", "args", "tir_vars"), attrs={"outputs": 1},
            deduce=_deduce_object, pure=False, variadic=True)
register_op("vm.to_device", inputs=("src", "dst"), deduce=_deduce_object, pure=False)
