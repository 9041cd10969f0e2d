"""Two forms the lowering passes make that the well-formedness checker once refused (docs/passes.md,
"Watching the pipeline"): storage shared by the arms of an If (plan_memory, fixed in the pass) and
an alias between two vdevices of one physical device (explicit_allocation, a legal form the rule
now accepts). The conftest checks every build here after each pass."""

from dataclasses import replace

import numpy as np
import pytest
import tessera
from modules import mlp_with_branch
from tessera.ir import BindingBlock, Function, If, ScriptError, SeqExpr, Var, VarBinding, WellFormedError, well_formed
from tessera.script import from_source
from tessera.target import Target
from tessera.transform import Pipeline
from tessera.vm import VirtualMachine

NESTED_BRANCHES = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), a: R.Tensor((), "bool"), b: R.Tensor((), "bool")):
        n = T.int64()
        R.func_attr({"tir_var_upper_bound": {"n": 16}})
        if a:
            if b:
                y = R.exp(x)
                r = R.multiply(y, y)
            else:
                r = R.negative(x)
            s = R.add(r, x)
        else:
            s = R.subtract(x, R.const(1.0, "float32"))
        return s
'''


def _storages(seq, where=()):
    """(storage variable, the arms it is allocated in) for each R.memory.alloc_storage, and each
    R.memory.alloc_tensor's storage with the arms it is in."""
    allocated, used = [], []
    for block in seq.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, If):
                for arm, branch in enumerate((value.true_branch, value.false_branch)):
                    inner = _storages(branch, where + ((binding.var.name_hint, arm),))
                    allocated += inner[0]
                    used += inner[1]
            elif getattr(getattr(value, "op", None), "name", "") == "memory.alloc_storage":
                allocated.append((binding.var, where))
            elif getattr(getattr(value, "op", None), "name", "") == "memory.alloc_tensor":
                used.append((value.args[0], where))
    return allocated, used


def test_a_storage_both_arms_use_is_allocated_before_the_if():
    mod = Pipeline.default(Target.preset("wasm"), {"batch": 16})(mlp_with_branch())
    well_formed(mod)
    allocated, used = _storages(mod["mlp"].body)
    home = dict(allocated)
    for storage, where in used:  # every use is in the arms its storage was allocated in, or deeper
        assert where[:len(home[storage])] == home[storage], storage.name_hint
    shared = {s for s, where in used if where == (("out", 0),)} & {s for s, where in used if where == (("out", 1),)}
    assert shared and all(home[s] == () for s in shared)  # the arms share a storage, allocated outside both


def test_nested_branches_run_every_path_from_their_shared_storages():
    exe = tessera.build(from_source(NESTED_BRANCHES), "wasm")
    assert exe.functions["main"]["memory"]["static"]
    vm = VirtualMachine(exe, "wasm")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    for a, b, expected in ((True, True, np.exp(x) ** 2 + x), (True, False, np.zeros_like(x)), (False, True, x - 1)):
        np.testing.assert_allclose(vm["main"](x, np.array(a), np.array(b)), expected, rtol=1e-5, atol=1e-6)


ONE_DEVICE = '''
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu", 0), I.vdevice("llvmpipe", 0)]})

    @R.function
    def main(x: R.Tensor(("n", 8), "float32"), y: R.Tensor(("n", 8), "float32")):
        R.func_attr({"tir_var_upper_bound": {"n": 16}})
        with R.dataflow():
            a = R.add(x, y)
            b = R.to_vdevice(a, "llvmpipe:0")
            c = R.exp(b)
            d = R.to_vdevice(c, "webgpu:0")
            e = R.subtract(d, x)
            R.output(e)
        return e
'''


def test_a_move_between_vdevices_of_one_device_is_a_checked_alias():
    """webgpu and llvmpipe, both device 0, are one WebGPU device: R.to_vdevice becomes ``b = a`` with
    b annotated on llvmpipe:0, which the checker accepts; the build copies nothing."""
    exe = tessera.build(from_source(ONE_DEVICE), "webgpu")
    assert exe.version == 3 and not [op for op in exe.functions["main"]["code"] if op["op"] == "to_device"]
    x, y = np.full((2, 8), 0.5, np.float32), np.full((2, 8), 0.25, np.float32)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x, y), np.exp(0.75) - x, rtol=1e-5)


ALIAS = '''
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu", 0), I.vdevice("%s", %d)]})

    @R.function
    def main(x: R.Tensor((4, 8), "float32", vdevice="webgpu:0")):
        b: R.Tensor((4, 8), "float32", vdevice="%s") = x
        return b
'''


@pytest.mark.parametrize("kind, device_id, name, one_device", [
    ("llvmpipe", 0, "llvmpipe:0", True),   # another preset of the same kind, the same device id
    ("webgpu", 0, "webgpu:1", True),       # the same device listed twice
    ("webgpu", 1, "webgpu:1", False),      # another GPU: the bytes must be copied
    ("wasm", 0, "wasm:0", False),          # another kind of device
])
def test_an_alias_may_rename_the_vdevice_only_within_one_physical_device(kind, device_id, name, one_device):
    """What explicit_allocation makes of such a move: the parser (the builder) and the checker both
    accept it within one physical device, so a --dump-ir file of a split build reads back; across two
    devices both refuse it."""
    source = ALIAS % (kind, device_id, name)
    if one_device:
        mod = from_source(source)
        well_formed(mod)
        assert from_source(mod.script()).script() == mod.script()
        return
    with pytest.raises(ScriptError, match=f"annotation mismatch.*on {name}"):
        from_source(source)
    # Built by hand past the builder, the checker refuses it too.
    mod = from_source(ALIAS % (kind, device_id, "webgpu:0"))
    func = mod["main"]
    (binding,) = func.body.blocks[0].bindings
    moved = Var("b", replace(binding.var.struct_info, vdevice=name))
    body = SeqExpr((BindingBlock((VarBinding(moved, binding.value),)),), moved)
    mod = mod.with_function("main", Function(func.params, body, moved.struct_info, func.attrs, func.pure))
    with pytest.raises(WellFormedError, match=f"'b' is annotated \\(4, 8\\) float32 on {name} but its value "
                                              "has \\(4, 8\\) float32 on webgpu:0"):
        well_formed(mod)
