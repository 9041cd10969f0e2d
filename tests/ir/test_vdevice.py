"""Virtual devices in the IR: the lookup rules, canonical names, the text format, forward
propagation in deduction and its conflicts, R.to_vdevice and R.hint_on_device (docs/vdevice.md)."""

import numpy as np
import pytest
from tessera import op
from tessera.ir import (
    BlockBuilder,
    Constant,
    DeductionError,
    IRModule,
    PrimValue,
    ScriptError,
    Tensor,
    UnknownVDeviceError,
    Var,
    VDevice,
    WellFormedError,
    assert_structural_equal,
    interpret,
    resolve_vdevices,
    well_formed,
)
from tessera.ir.struct_info import tensor_paths
from tessera.script import from_source
from tessera.target import Target, device_type
from tessera.transform import fuse_ops, legalize_ops

THREE = IRModule({}, {"vdevice": [VDevice("webgpu"), VDevice("wasm"), VDevice("webgpu", 1)]})


# -- the lookup rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, canonical, position", [
    ("webgpu", "webgpu:0", 0),       # a bare kind is its first device
    ("webgpu:0", "webgpu:0", 0),
    ("webgpu:1", "webgpu:1", 2),     # the second webgpu, third in the list
    ("wasm", "wasm:0", 1),
    ("vdevice:0", "webgpu:0", 0),    # by position in the list
    ("vdevice:1", "wasm:0", 1),
    ("vdevice:2", "webgpu:1", 2),
])
def test_specs_name_devices_by_kind_ordinal_or_position(spec, canonical, position):
    assert THREE.resolve_vdevice(spec) == canonical
    assert THREE.lookup_vdevice(spec) is THREE.vdevices[position]


def test_canonical_names_count_devices_of_one_kind():
    assert THREE.vdevice_names == ("webgpu:0", "wasm:0", "webgpu:1")
    assert THREE.vdevice_name(2) == "webgpu:1"
    assert THREE.vdevice_name(VDevice("wasm")) == "wasm:0"
    # The ordinal is not the device id: a module's only webgpu is webgpu:0 whatever its id.
    assert IRModule({}, {"vdevice": [VDevice("webgpu", 3)]}).vdevice_names == ("webgpu:0",)


@pytest.mark.parametrize("spec", ["webgpu:2", "vdevice:3", "metal", "wasm:1"])
def test_a_spec_that_names_nothing_lists_the_devices(spec):
    with pytest.raises(UnknownVDeviceError) as error:
        THREE.resolve_vdevice(spec)
    assert str(error.value) == (f"no virtual device matches {spec!r}: the module's virtual devices are "
                                "webgpu:0 (vdevice:0, device id 0), wasm:0 (vdevice:1, device id 0), "
                                "webgpu:1 (vdevice:2, device id 1)")
    assert isinstance(error.value, WellFormedError)


def test_a_module_without_devices_says_how_to_declare_them():
    with pytest.raises(UnknownVDeviceError, match=r"the module declares none \(I.module_global_infos"):
        IRModule({}).resolve_vdevice("webgpu")


def test_device_types_of_kinds_and_presets():
    assert [device_type(k) for k in ("cpu", "wasm", "cpu-x86-64-v3")] == ["cpu"] * 3
    assert [device_type(k) for k in ("webgpu", "vulkan", "opencl", "metal", "llvmpipe", "swiftshader")] == ["gpu"] * 6
    assert device_type("some-future-gpu-api") == "gpu"


# -- the text format -------------------------------------------------------------------------------

MIXED = """
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu", 0, "global"), I.vdevice("wasm", 0, "global"),
                                      I.vdevice("webgpu", 1, "global")]})

    @R.function
    def main(x: R.Tensor(("n", 4), "float32", "webgpu"), y: R.Tensor(("n", 4), dtype="float32", vdevice="vdevice:2"),
             w: R.Tensor((4,), "float32")) -> R.Tuple(R.Tensor(("n", 4), "float32", "wasm"), R.Tensor(("n", 4), "float32")):
        n = T.int64()
        with R.dataflow():
            lv0 = R.multiply(x, w)
            lv1 = R.to_vdevice(lv0, "wasm")
            lv2 = R.hint_on_device(y, "gpu:1")
            lv3: R.Tensor((n, 4), "float32", "webgpu:1") = R.exp(lv2)
            R.output(lv1, lv3)
        return (lv1, lv3)
"""

PRINTED = '''# from tessera.script import ir as I, relax as R, tir as T


@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu", 0, "global"), I.vdevice("wasm", 0, "global"), I.vdevice("webgpu", 1, "global")]})

    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32", vdevice="webgpu:0"), y: R.Tensor(("n", 4), dtype="float32", vdevice="webgpu:1"), w: R.Tensor((4,), dtype="float32")) -> R.Tuple(R.Tensor(("n", 4), dtype="float32", vdevice="wasm:0"), R.Tensor(("n", 4), dtype="float32")):
        n = T.int64()
        with R.dataflow():
            lv0: R.Tensor((n, 4), dtype="float32", vdevice="webgpu:0") = R.multiply(x, w)
            lv1: R.Tensor((n, 4), dtype="float32", vdevice="wasm:0") = R.to_vdevice(lv0, "wasm:0")
            lv2: R.Tensor((n, 4), dtype="float32", vdevice="webgpu:1") = R.hint_on_device(y, "gpu:1")
            lv3: R.Tensor((n, 4), dtype="float32", vdevice="webgpu:1") = R.exp(lv2)
            R.output(lv1, lv3)
        return (lv1, lv3)
'''


def test_three_devices_parse_print_and_round_trip():
    mod = from_source(MIXED)
    well_formed(mod)
    assert mod.script() == PRINTED
    again = from_source(mod.script())
    assert_structural_equal(again, mod)
    assert again.script() == PRINTED
    x, y, w = (np.random.default_rng(i).random(s).astype(np.float32) for i, s in enumerate([(3, 4), (3, 4), (4,)]))
    moved, hinted = interpret(mod, "main", x, y, w)
    np.testing.assert_array_equal(moved, x * w)
    np.testing.assert_allclose(hinted, np.exp(y), rtol=1e-6)


def test_an_unknown_spec_in_the_text_fails_at_its_line():
    text = MIXED.replace('"vdevice:2"', '"vdevice:7"')
    with pytest.raises(ScriptError, match=r"line 8, column \d+: no virtual device matches 'vdevice:7'"):
        from_source(text)
    with pytest.raises(ScriptError, match="no virtual device matches 'metal'"):
        from_source(MIXED.replace('R.to_vdevice(lv0, "wasm")', 'R.to_vdevice(lv0, "metal")'))


def test_forward_propagation_in_deduction():
    before = """
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu")]})

    @R.function
    def main(x: R.Tensor((2, 3), "float32", "webgpu"), y: R.Tensor((2, 3), "float32")) -> R.Tensor((2, 3), "float32"):
        lv0 = R.add(x, y)
        return lv0
"""
    after = """
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu")]})

    @R.function
    def main(x: R.Tensor((2, 3), "float32", "webgpu"), y: R.Tensor((2, 3), "float32")) -> R.Tensor((2, 3), "float32"):
        lv0: R.Tensor((2, 3), "float32", "webgpu:0") = R.add(x, y)
        return lv0
"""
    assert_structural_equal(from_source(before), from_source(after))


# -- deduction: operands share a device --------------------------------------------------------------

G, W = "webgpu:0", "wasm:0"


def deduced_device(make, *sinfos):
    params = [Var(f"x{i}", s) for i, s in enumerate(sinfos)]
    bb = BlockBuilder(IRModule({}, {"vdevice": [VDevice("webgpu"), VDevice("wasm")]}))
    with bb.function("main", params):
        out = bb.emit(make(*params), "out")
        bb.emit_func_output(out)
    devices = {tensor.vdevice for _, tensor in tensor_paths(out.struct_info)}  # a tuple's fields go together
    assert len(devices) == 1
    return devices.pop()


def test_operands_on_two_devices_are_an_error_naming_both():
    with pytest.raises(DeductionError) as error:
        deduced_device(op.add, Tensor((2,), "float32", vdevice=G), Tensor((2,), "float32", vdevice=W))
    assert str(error.value) == ("device mismatch in out = R.add(x0, x1): operands are on different devices: "
                                "webgpu:0 (x0) and wasm:0 (x1); move one with R.to_vdevice")


def test_an_unplaced_operand_goes_where_the_other_is():
    assert deduced_device(op.add, Tensor((2,), "float32"), Tensor((2,), "float32", vdevice=W)) == W
    assert deduced_device(lambda x: op.multiply(x, Constant(np.ones(2, np.float32))),
                          Tensor((2,), "float32", vdevice=G)) == G


F = "float32"
MERGING = [  # every op that reads several tensors on one device: (name, call, operand infos)
    ("matmul", op.matmul, [(2, 3), (3, 4)], F),
    ("where", op.where, [(2,), (2,), (2,)], ["bool", F, F]),
    ("concat", lambda a, b: op.concat((a, b)), [(2,), (3,)], F),
    ("take", op.take, [(4, 2), (3,)], [F, "int32"]),
    ("nn.rms_norm", op.nn.rms_norm, [(2, 8), (8,)], F),
    ("nn.layer_norm", op.nn.layer_norm, [(2, 8), (8,), (8,)], F),
    ("nn.conv2d", op.nn.conv2d, [(1, 3, 8, 8), (4, 3, 3, 3)], F),
    ("masked_select", op.masked_select, [(4,), (4,)], [F, "bool"]),
    ("kv_cache_write", lambda c, v: op.kv_cache_write(c, v, PrimValue(0)), [(8, 2, 4), (1, 2, 4)], F),
    ("sample_token", op.sample_token, [(1, 16), (4,), (5,)], [F, "int32", F]),
    ("quantized_matmul", lambda x, w: op.quantized_matmul(x, w, format="q4_1", k=576), [(1, 576), (1536, 90)],
     [F, "uint32"]),
    ("quantized_take", lambda w, i: op.quantized_take(w, i, format="q8_0", k=576), [(8, 153), (2,)],
     ["uint32", "int32"]),
    ("nn.attention", lambda q, k, v: op.nn.attention(q, k, v, PrimValue(5)), [(1, 9, 64), (16, 3, 64), (16, 3, 64)],
     F),
    ("nn.attention_partial", lambda q, k, v: op.nn.attention_partial(q, k, v, PrimValue(5), splits=2),
     [(1, 9, 64), (16, 3, 64), (16, 3, 64)], F),
    ("nn.paged_attention", lambda q, k, v, p, t: op.nn.paged_attention(q, k, v, p, t, page_size=16),
     [(3, 9, 64), (64, 3, 64), (64, 3, 64), (3,), (3, 4)], [F, F, F, "int32", "int32"]),
    ("rope_append", lambda qkv, c, s, k, v: op.rope_append(qkv, c, s, k, v, PrimValue(0)),
     [(2, 960), (2, 1, 64), (2, 1, 64), (64, 3, 64), (64, 3, 64)], F),
    ("paged_rope_append", lambda qkv, c, s, k, v, p, t: op.paged_rope_append(qkv, c, s, k, v, p, t, page_size=16),
     [(3, 960), (3, 1, 64), (3, 1, 64), (64, 3, 64), (64, 3, 64), (3,), (3, 4)], [F] * 5 + ["int32"] * 2),
]


def _infos(shapes, dtypes, devices):
    dtypes = dtypes if isinstance(dtypes, list) else [dtypes] * len(shapes)
    return [Tensor(s, d, vdevice=v) for s, d, v in zip(shapes, dtypes, devices)]


@pytest.mark.parametrize("name, make, shapes, dtypes", MERGING, ids=[m[0] for m in MERGING])
def test_ops_that_read_several_tensors_place_them_together(name, make, shapes, dtypes):
    count = len(shapes)
    # The last operand alone placed: the result goes there.
    assert deduced_device(make, *_infos(shapes, dtypes, [None] * (count - 1) + [W])) == W
    with pytest.raises(DeductionError, match="operands are on different devices: webgpu:0 .* and wasm:0"):
        deduced_device(make, *_infos(shapes, dtypes, [G] + [W] * (count - 1)))


def test_an_argument_on_another_device_than_the_parameter_is_an_error():
    text = """
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu"), I.vdevice("wasm")]})

    @R.function
    def main(x: R.Tensor((2,), "float32", "wasm")) -> R.Tensor((2,), "float32"):
        lv0 = cls.helper(x)
        return lv0

    @R.function
    def helper(a: R.Tensor((2,), "float32", "webgpu")) -> R.Tensor((2,), "float32", "webgpu"):
        return a
"""
    with pytest.raises(ScriptError, match="argument 0 of cls.helper: x has \\(2,\\) float32 on wasm:0, .* \\(it is "
                       "on wasm:0, not webgpu:0; move it with R.to_vdevice\\)"):
        from_source(text)


# -- R.to_vdevice and R.hint_on_device ----------------------------------------------------------------


def test_to_vdevice_places_its_result_and_a_hint_changes_nothing_yet():
    x = Tensor((2,), "float32", vdevice=G)
    assert deduced_device(lambda v: op.to_vdevice(v, W), x) == W
    assert deduced_device(lambda v: op.hint_on_device(v, "cpu"), x) == G
    assert op.to_vdevice(Var("x", x), "wasm:0").attr("vdevice") == "wasm:0"  # positional, like the text


@pytest.mark.parametrize("device", ["tpu", "gpu:x", "", 1])
def test_a_hint_names_a_device_type(device):
    with pytest.raises(DeductionError, match='takes a device type, "cpu" or "gpu"'):
        deduced_device(lambda v: op.hint_on_device(v, device), Tensor((2,), "float32"))


def test_builder_path_resolve_vdevices_canonicalizes_specs():
    x = Var("x", Tensor((2,), "float32", vdevice="wasm"))  # a spec, not the canonical "wasm:0"
    bb = BlockBuilder(IRModule({}, {"vdevice": [VDevice("webgpu"), VDevice("wasm")]}))
    with bb.function("main", [x]):
        moved = bb.emit(op.to_vdevice(x, "vdevice:0"), "moved")
        bb.emit_func_output(moved)
    mod = bb.get()
    with pytest.raises(WellFormedError, match="virtual device 'wasm' is not a canonical name; write 'wasm:0'"):
        well_formed(mod)
    resolved = resolve_vdevices(mod)
    well_formed(resolved)
    assert resolved["main"].params[0].struct_info.vdevice == "wasm:0"
    assert "R.to_vdevice(x, \"webgpu:0\")" in resolved.script()
    assert resolved["main"].ret_struct_info.vdevice == "webgpu:0"


def test_an_annotation_may_place_a_value_but_not_move_it():
    text = """
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("webgpu"), I.vdevice("wasm")]})

    @R.function
    def main(x: R.Tensor((2,), "float32", "webgpu")) -> R.Tensor((2,), "float32"):
        lv0: R.Tensor((2,), "float32", "wasm") = R.exp(x)
        return lv0
"""
    with pytest.raises(ScriptError, match="annotation mismatch in lv0 = R.exp\\(x\\): deduced \\(2,\\) float32 on "
                       "webgpu:0, annotated \\(2,\\) float32 on wasm:0"):
        from_source(text)


def test_legalization_and_fusion_leave_device_moves_alone():
    mod = from_source(MIXED)
    target = Target("webgpu")
    for lowered in (legalize_ops(mod, target), fuse_ops(mod, target)):
        names = [b.value.op.name for b in lowered["main"].body.blocks[0].bindings if hasattr(b.value.op, "name")]
        assert "to_vdevice" in names and "hint_on_device" in names
