"""realize_vdevice: TVM's RealizeVDevice cases in our script, before and after, plus numbers.

Each case of TVM's tests/python/relax/test_transform_realize_vdevice.py, with our kinds: TVM's
llvm / cuda / metal / "cuda -arch=sm_80" are cpu / webgpu / metal / vulkan here, and tvm.cpu() and
tvm.cuda() are the device types "cpu" and "gpu".
"""

import numpy as np
import pytest
from tessera.ir import (
    UnknownVDeviceError,
    VDeviceConflictError,
    assert_structural_equal,
    interpret,
    well_formed,
)
from tessera.script import from_source
from tessera.transform import realize_vdevice

HEADER = """
@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [%s]})
"""
FOUR = 'I.vdevice("cpu"), I.vdevice("webgpu", 0), I.vdevice("metal", 0, "global"), I.vdevice("vulkan", 0)'
T = 'R.Tensor((2, 3), "float32")'


def module(devices: str, body: str):
    return from_source(HEADER % devices + body)


def check(before, expected, inputs=3):
    after = realize_vdevice(before)
    assert_structural_equal(after, expected)
    well_formed(after)
    values = [np.random.default_rng(i).random((2, 3)).astype(np.float32) for i in range(inputs)]
    np.testing.assert_array_equal(interpret(after, "foo", *values), interpret(before, "foo", *values))
    return after


def test_dataflow_binding():
    before = module(FOUR, f"""
    @R.function
    def foo(x: {T}, y: {T}, z: {T}) -> {T}:
        with R.dataflow():
            x1 = x
            y1 = y
            x2 = x1
            y2 = y1
            lv0: R.Tensor((2, 3), "float32", "cpu") = R.add(x2, y2)
            gv: R.Tensor((2, 3), "float32", "cpu") = R.multiply(lv0, z)
            R.output(gv)
        return gv
""")
    C = 'R.Tensor((2, 3), "float32", "cpu")'
    expected = module(FOUR, f"""
    @R.function
    def foo(x: {C}, y: {C}, z: {C}) -> {C}:
        with R.dataflow():
            x1: {C} = x
            y1: {C} = y
            x2: {C} = x1
            y2: {C} = y1
            lv0: {C} = R.add(x2, y2)
            gv: {C} = R.multiply(lv0, z)
            R.output(gv)
        return gv
""")
    check(before, expected)


def test_binding_outside_dataflow():
    before = module('I.vdevice("cpu")', f"""
    @R.function
    def foo(x: {T}, y: {T}, z: {T}) -> {T}:
        x1 = x
        y1 = y
        x2 = x1
        y2 = y1
        s: R.Tensor((2, 3), "float32", "cpu") = R.add(x2, y2)
        m = R.multiply(s, z)
        return m
""")
    C = 'R.Tensor((2, 3), "float32", "cpu")'
    expected = module('I.vdevice("cpu")', f"""
    @R.function
    def foo(x: {C}, y: {C}, z: {C}) -> {C}:
        x1: {C} = x
        y1: {C} = y
        x2: {C} = x1
        y2: {C} = y1
        s: {C} = R.add(x2, y2)
        m: {C} = R.multiply(s, z)
        return m
""")
    check(before, expected)


def test_function_result_annotation():
    G = 'R.Tensor((2, 3), "float32", "webgpu")'
    before = module('I.vdevice("webgpu")', f"""
    @R.function
    def foo(x: {T}, y: {T}, z: {T}) -> {G}:
        with R.dataflow():
            lv0 = R.add(x, y)
            gv = R.multiply(lv0, z)
            R.output(gv)
        return gv
""")
    expected = module('I.vdevice("webgpu")', f"""
    @R.function
    def foo(x: {G}, y: {G}, z: {G}) -> {G}:
        with R.dataflow():
            lv0: {G} = R.add(x, y)
            gv: {G} = R.multiply(lv0, z)
            R.output(gv)
        return gv
""")
    check(before, expected)


def test_tuple_result_annotation():
    G = 'R.Tensor((2, 3), "float32", "webgpu")'
    before = module('I.vdevice("webgpu")', f"""
    @R.function
    def foo(x: {T}, y: {T}, z: {T}) -> R.Tuple({G}, {G}):
        with R.dataflow():
            lv0 = R.add(x, y)
            gv = R.multiply(lv0, z)
            R.output(gv)
        return (gv, gv)
""")
    expected = module('I.vdevice("webgpu")', f"""
    @R.function
    def foo(x: {G}, y: {G}, z: {G}) -> R.Tuple({G}, {G}):
        with R.dataflow():
            lv0: {G} = R.add(x, y)
            gv: {G} = R.multiply(lv0, z)
            R.output(gv)
        return (gv, gv)
""")
    check(before, expected)


def test_multi_device_with_to_vdevice():
    C, G = 'R.Tensor((2, 3), "float32", "cpu")', 'R.Tensor((2, 3), "float32", "webgpu")'
    before = module(FOUR, f"""
    @R.function
    def foo(x: {T}, y: {T}, z: {T}) -> {G}:
        with R.dataflow():
            lv0: {C} = R.add(x, y)
            lv1 = R.to_vdevice(lv0, "webgpu")
            lv2 = R.add(z, z)
            gv: {G} = R.multiply(lv1, lv2)
            R.output(gv)
        return gv
""")
    expected = module(FOUR, f"""
    @R.function
    def foo(x: {C}, y: {C}, z: {G}) -> {G}:
        with R.dataflow():
            lv0: {C} = R.add(x, y)
            lv1: {G} = R.to_vdevice(lv0, "webgpu")
            lv2: {G} = R.add(z, z)
            gv: {G} = R.multiply(lv1, lv2)
            R.output(gv)
        return gv
""")
    check(before, expected)


def test_hints_become_moves_or_nothing():
    C, G = 'R.Tensor((2, 3), "float32", "cpu")', 'R.Tensor((2, 3), "float32", "webgpu")'
    before = module(FOUR, f"""
    @R.function
    def foo(x: {T}, y: {T}, z: {T}) -> {T}:
        with R.dataflow():
            lv0 = R.hint_on_device(y, "cpu")
            lv1 = R.add(x, lv0)
            lv2 = R.hint_on_device(lv1, "gpu")
            lv3 = R.add(lv2, lv2)
            lv4 = R.hint_on_device(z, "gpu")
            gv = R.multiply(lv3, lv4)
            R.output(gv)
        return gv
""")
    expected = module(FOUR, f"""
    @R.function
    def foo(x: {C}, y: {C}, z: {G}) -> {G}:
        with R.dataflow():
            lv0: {C} = y
            lv1: {C} = R.add(x, lv0)
            lv2: {G} = R.to_vdevice(lv1, "webgpu")
            lv3: {G} = R.add(lv2, lv2)
            lv4: {G} = z
            gv: {G} = R.multiply(lv3, lv4)
            R.output(gv)
        return gv
""")
    after = check(before, expected)
    assert "R.to_vdevice(lv1, \"webgpu:0\")" in after.script()


def test_a_hint_past_an_annotated_input_moves_it():
    # Deduction carried x's wasm placement through the hint to lv1; the hint wins over that.
    W, G = 'R.Tensor((2, 3), "float32", "wasm")', 'R.Tensor((2, 3), "float32", "webgpu")'
    devices = 'I.vdevice("wasm"), I.vdevice("webgpu")'
    before = module(devices, f"""
    @R.function
    def foo(x: {W}) -> {T}:
        with R.dataflow():
            lv0 = R.hint_on_device(x, "gpu")
            lv1 = R.exp(lv0)
            R.output(lv1)
        return lv1
""")
    expected = module(devices, f"""
    @R.function
    def foo(x: {W}) -> {G}:
        with R.dataflow():
            lv0: {G} = R.to_vdevice(x, "webgpu")
            lv1: {G} = R.exp(lv0)
            R.output(lv1)
        return lv1
""")
    check(before, expected, inputs=1)


def test_input_module_is_unmodified():
    def make():
        return module('I.vdevice("cpu")', f"""
    @R.function
    def foo(x: {T}, y: {T}, z: {T}) -> {T}:
        x1 = x
        s: R.Tensor((2, 3), "float32", "cpu") = R.add(x1, y)
        m = R.multiply(s, z)
        return m
""")

    original = make()
    realize_vdevice(original)
    assert_structural_equal(original, make())


def test_placement_crosses_calls_between_functions():
    # main's bindings get the device of helper's annotated result; helper's parameters get it too,
    # and so do main's parameters, which flow into helper.
    G = 'R.Tensor((2, 3), "float32", "webgpu")'
    devices = 'I.vdevice("wasm"), I.vdevice("webgpu")'
    before = module(devices, f"""
    @R.function
    def foo(x: {T}, y: {T}) -> {T}:
        with R.dataflow():
            lv0 = R.add(x, y)
            lv1 = cls.helper(lv0, y)
            gv = R.exp(lv1)
            R.output(gv)
        return gv

    @R.function
    def helper(a: {T}, b: {T}) -> {G}:
        c = R.multiply(a, b)
        return c
""")
    expected = module(devices, f"""
    @R.function
    def foo(x: {G}, y: {G}) -> {G}:
        with R.dataflow():
            lv0: {G} = R.add(x, y)
            lv1: {G} = cls.helper(lv0, y)
            gv: {G} = R.exp(lv1)
            R.output(gv)
        return gv

    @R.function
    def helper(a: {G}, b: {G}) -> {G}:
        c: {G} = R.multiply(a, b)
        return c
""")
    check(before, expected, inputs=2)


def test_a_callee_parameter_places_the_caller_argument():
    W = 'R.Tensor((2, 3), "float32", "wasm")'
    devices = 'I.vdevice("wasm"), I.vdevice("webgpu")'
    before = module(devices, f"""
    @R.function
    def foo(x: {T}) -> {T}:
        lv0 = R.negative(x)
        lv1 = cls.helper(lv0)
        return lv1

    @R.function
    def helper(a: {W}) -> {T}:
        return a
""")
    after = realize_vdevice(before)
    well_formed(after)
    assert after["foo"].params[0].struct_info.vdevice == "wasm:0"
    assert after["foo"].ret_struct_info.vdevice == "wasm:0"
    assert after["helper"].ret_struct_info.vdevice == "wasm:0"


def test_a_value_needed_on_two_devices_is_an_error():
    C, G = 'R.Tensor((2, 3), "float32", "cpu")', 'R.Tensor((2, 3), "float32", "webgpu")'
    before = module(FOUR, f"""
    @R.function
    def foo(x: {T}, y: {T}) -> R.Tuple({T}, {T}):
        with R.dataflow():
            lv0 = R.add(x, y)
            a: {C} = R.exp(lv0)
            b: {G} = R.negative(lv0)
            R.output(a, b)
        return (a, b)
""")
    with pytest.raises(VDeviceConflictError) as error:
        realize_vdevice(before)
    message = str(error.value)
    assert "lv0 would have to be on both webgpu:0 and cpu:0, with no R.to_vdevice between them" in message
    assert '(in foo: b: R.Tensor((2, 3), dtype="float32", vdevice="webgpu:0") = R.negative(lv0))' in message
    assert 'cpu:0 because of foo: a: R.Tensor((2, 3), dtype="float32", vdevice="cpu:0") = R.exp(lv0)' in message


def test_a_hinted_value_used_with_a_value_on_another_device_is_an_error():
    G = 'R.Tensor((2, 3), "float32", "webgpu")'
    before = module(FOUR, f"""
    @R.function
    def foo(x: {T}, y: {G}) -> {T}:
        with R.dataflow():
            lv0 = R.hint_on_device(x, "cpu")
            lv1 = R.add(lv0, y)
            R.output(lv1)
        return lv1
""")
    # lv1 = R.add(lv0, y) puts its operands together: the hinted lv0 on cpu:0, the parameter y on webgpu:0.
    with pytest.raises(VDeviceConflictError, match="y would have to be on both cpu:0 and webgpu:0") as error:
        realize_vdevice(before)
    assert 'cpu:0 because of foo: lv0: R.Tensor((2, 3), dtype="float32") = R.hint_on_device(x, "cpu")' \
        in str(error.value)
    assert "webgpu:0 because of parameter y of foo" in str(error.value)


def test_a_hint_no_device_answers_is_an_error():
    before = module('I.vdevice("webgpu")', f"""
    @R.function
    def foo(x: {T}) -> {T}:
        lv0 = R.hint_on_device(x, "cpu:1")
        return lv0
""")
    with pytest.raises(UnknownVDeviceError, match="no virtual device runs on a cpu with device id 1"):
        realize_vdevice(before)


def test_placement_through_branches_tuples_and_local_functions():
    # foo's annotated result reaches back through both arms of the if (one ending in a call of a local
    # function), the tuple and split to x; a hint as a function's whole result places its parameter.
    devices = 'I.vdevice("wasm"), I.vdevice("webgpu")'
    body = """
    @R.function
    def foo(x: {X}, c: R.Prim("bool")) -> R.Tensor((2, 2), "float32", "webgpu"):
        @R.function
        def double(a: {A}) -> {A}:
            return R.add(a, a)
        parts: R.Tuple({A}, {A}) = R.split(x, indices_or_sections=2, axis=0)
        first: {A} = parts[0]
        t: R.Tuple({A}, {A}) = (first, parts[1])
        if c:
            r: {A} = double(t[1])
        else:
            r: {A} = R.exp(first)
        return r

    @R.function
    def bar(y: {Y}) -> {Y}:
        return {RESULT}
"""
    plain = {"X": 'R.Tensor((4, 2), "float32")', "A": 'R.Tensor((2, 2), "float32")', "Y": 'R.Tensor((2,), "float32")',
             "RESULT": 'R.hint_on_device(y, "cpu")'}
    placed = {"X": 'R.Tensor((4, 2), "float32", "webgpu")', "A": 'R.Tensor((2, 2), "float32", "webgpu")',
              "Y": 'R.Tensor((2,), "float32", "wasm")', "RESULT": "y"}
    before, expected = module(devices, body.format(**plain)), module(devices, body.format(**placed))
    after = realize_vdevice(before)
    assert_structural_equal(after, expected)
    well_formed(after)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    for c in (True, False):
        np.testing.assert_array_equal(interpret(after, "foo", x, c), interpret(before, "foo", x, c))
