"""update_vdevice: append, replace or reset a module's vdevices; tensors stay on their entry.

The replace cases are TVM's tests/python/relax/test_transform_update_vdevice.py in our kinds (llvm /
cuda / metal / "cuda -arch=sm_80" are cpu / webgpu / metal / a second webgpu here).
"""

import pytest
from tessera.ir import UnknownVDeviceError, VDevice, assert_structural_equal, well_formed
from tessera.script import from_source
from tessera.transform import update_vdevice

HEADER = """
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [%s]})
"""


def module(devices: str, body: str):
    return from_source(HEADER % devices + body)


def check(after, expected):
    well_formed(after)
    assert_structural_equal(after, expected)


def test_replace_an_entry_its_tensors_follow():
    # A return annotation that names no device keeps naming none: placing is realize_vdevice's work.
    before = module('I.vdevice("cpu"), I.vdevice("webgpu", 0), I.vdevice("metal", 0), I.vdevice("webgpu", 0)', """
    @R.function
    def main(a: R.Tensor((128, 128), "float32", "webgpu:1"),
             c: R.Tensor((128, 128), "float32", "vdevice:3")) -> R.Tensor((128, 128), "float32"):
        s = R.add(a, c)
        return s
""")
    M = 'R.Tensor((128, 128), dtype="float32", vdevice="metal:1")'
    expected = module('I.vdevice("cpu"), I.vdevice("webgpu", 0), I.vdevice("metal", 0), I.vdevice("metal", 1)', f"""
    @R.function
    def main(a: {M}, c: {M}) -> R.Tensor((128, 128), "float32"):
        s: {M} = R.add(a, c)
        return s
""")
    check(update_vdevice(before, VDevice("metal", 1), 3), expected)


def test_replace_renames_a_tensor_whose_kind_changes():
    before = module('I.vdevice("cpu"), I.vdevice("webgpu", 0)', """
    @R.function
    def main(a: R.Tensor((128, 128), "float32", "webgpu:0"),
             c: R.Tensor((128, 128), "float32", "webgpu:0")) -> R.Tensor((128, 128), "float32"):
        s = R.add(a, c)
        return s
""")
    C = 'R.Tensor((128, 128), "float32", "cpu:1")'
    expected = module('I.vdevice("cpu"), I.vdevice("cpu", 1)', f"""
    @R.function
    def main(a: {C}, c: {C}) -> R.Tensor((128, 128), "float32"):
        s: {C} = R.add(a, c)
        return s
""")
    check(update_vdevice(before, VDevice("cpu", 1), 1), expected)


def test_replace_renames_untouched_entries_whose_ordinal_shifts():
    # [webgpu, wasm, webgpu] -> [wasm, wasm, webgpu]: webgpu:0 -> wasm:0, wasm:0 -> wasm:1, webgpu:1 -> webgpu:0,
    # in struct infos and in R.to_vdevice's attribute alike.
    before = module('I.vdevice("webgpu"), I.vdevice("wasm"), I.vdevice("webgpu", 1)', """
    @R.function
    def main(x: R.Tensor((4,), "float32", "webgpu:0"), y: R.Tensor((4,), "float32", "wasm:0"),
             z: R.Tensor((4,), "float32", "webgpu:1")) -> R.Tensor((4,), "float32", "wasm:0"):
        lv0 = R.exp(x)
        lv1 = R.to_vdevice(z, "wasm:0")
        lv2 = R.add(lv1, y)
        return lv2
""")
    expected = module('I.vdevice("wasm", 3), I.vdevice("wasm"), I.vdevice("webgpu", 1)', """
    @R.function
    def main(x: R.Tensor((4,), "float32", "wasm:0"), y: R.Tensor((4,), "float32", "wasm:1"),
             z: R.Tensor((4,), "float32", "webgpu:0")) -> R.Tensor((4,), "float32", "wasm:1"):
        lv0 = R.exp(x)
        lv1 = R.to_vdevice(z, "wasm:1")
        lv2 = R.add(lv1, y)
        return lv2
""")
    check(update_vdevice(before, VDevice("wasm", 3), 0), expected)


def test_append_renames_nothing():
    before = module('I.vdevice("webgpu")', """
    @R.function
    def main(x: R.Tensor((4,), "float32", "webgpu")) -> R.Tensor((4,), "float32"):
        return x
""")
    after = update_vdevice(before, VDevice("webgpu", 1))
    assert after.vdevices == (VDevice("webgpu"), VDevice("webgpu", 1))
    assert after.vdevice_names == ("webgpu:0", "webgpu:1")
    assert after["main"] is before["main"]
    well_formed(after)


def test_reset_the_list_tensors_follow_their_position():
    before = module('I.vdevice("webgpu"), I.vdevice("wasm")', """
    @R.function
    def main(x: R.Tensor((4,), "float32", "webgpu"), y: R.Tensor((4,), "float32", "wasm")
             ) -> R.Tensor((4,), "float32"):
        lv0 = R.to_vdevice(x, "wasm")
        lv1 = R.add(lv0, y)
        return lv1
""")
    expected = module('I.vdevice("vulkan"), I.vdevice("cpu")', """
    @R.function
    def main(x: R.Tensor((4,), "float32", "vulkan"), y: R.Tensor((4,), "float32", "cpu")
             ) -> R.Tensor((4,), "float32"):
        lv0 = R.to_vdevice(x, "cpu")
        lv1 = R.add(lv0, y)
        return lv1
""")
    check(update_vdevice(before, [VDevice("vulkan"), VDevice("cpu")]), expected)


def test_reset_may_drop_entries_nothing_names():
    before = module('I.vdevice("webgpu"), I.vdevice("wasm")', """
    @R.function
    def main(x: R.Tensor((4,), "float32", "webgpu")) -> R.Tensor((4,), "float32"):
        return x
""")
    after = update_vdevice(before, [VDevice("metal")])
    assert after.vdevice_names == ("metal:0",)
    assert after["main"].params[0].struct_info.vdevice == "metal:0"
    well_formed(after)


def test_reset_that_drops_a_named_entry_is_an_error():
    before = module('I.vdevice("webgpu"), I.vdevice("wasm")', """
    @R.function
    def main(x: R.Tensor((4,), "float32", "webgpu")) -> R.Tensor((4,), "float32"):
        lv0 = R.to_vdevice(x, "wasm")
        return lv0
""")
    with pytest.raises(UnknownVDeviceError) as error:
        update_vdevice(before, [VDevice("webgpu")])
    assert str(error.value) == ("update_vdevice: the new list has 1 virtual devices, but devices past its end are "
                                "still named: wasm:0 (vdevice:1) by main: lv0")


def test_an_index_out_of_range_is_an_error():
    before = module('I.vdevice("webgpu"), I.vdevice("wasm")', """
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        return x
""")
    with pytest.raises(UnknownVDeviceError, match="there is no entry 2 to replace; the module's virtual devices "
                       r"are webgpu:0 \(vdevice:0, device id 0\), wasm:0 \(vdevice:1, device id 0\)"):
        update_vdevice(before, VDevice("cpu"), 2)
