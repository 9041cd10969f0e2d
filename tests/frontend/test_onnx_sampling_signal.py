"""GridSample, RoiAlign, DeformConv, DFT and STFT beyond the node tests' small single cases: batches,
several channels, points outside the input, symbolic batch sizes, padded and cut DFT lengths,
compared with ONNX's reference evaluator on the reference interpreter (one of each compiled for
"cpu"), and the clear errors for what is refused."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tessera
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from tessera.frontend import OnnxImportError, from_onnx
from tessera.ir import interpret
from tessera.vm import VirtualMachine

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(36)


def _model(node, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, target=None, rtol=1e-4, atol=1e-5, reference=None):
    mod = from_onnx(model)
    if target is None:
        got = interpret(mod, "main", *feeds.values())
    else:
        got = VirtualMachine(tessera.build(mod, target), "cpu")["main"](*feeds.values())
    got = np.asarray(got[0] if isinstance(got, tuple | list) else got)
    want = ReferenceEvaluator(reference or model).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _grid_sample_model(mode, padding, align, batch="N"):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding,
                            align_corners=align)
    return _model(node, [("x", F, [batch, 3, 5, 4]), ("grid", F, [batch, 3, 4, 2])],
                  [("y", F, [batch, 3, 3, 4])], 20)


def _grid_feeds(batch=2):
    # Coordinates well outside [-1, 1] too, so that every padding mode folds or clamps something.
    return {"x": RNG.standard_normal((batch, 3, 5, 4)).astype(np.float32),
            "grid": RNG.uniform(-2.5, 2.5, (batch, 3, 4, 2)).astype(np.float32)}


@pytest.mark.parametrize("mode,padding", list(itertools.product(("linear", "nearest", "cubic"),
                                                                ("zeros", "border", "reflection"))))
def test_grid_sample_every_mode_and_padding(mode, padding):
    """A symbolic batch of two, three channels, points far outside the input."""
    for align in (0, 1):
        _check(_grid_sample_model(mode, padding, align), _grid_feeds())


def test_grid_sample_volumetric_and_opset_16_names():
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", padding_mode="reflection")
    model = _model(node, [("x", F, [2, 2, 3, 4, 5]), ("grid", F, [2, 2, 3, 2, 3])], [("y", F, [2, 2, 2, 3, 2])], 20)
    _check(model, {"x": RNG.standard_normal((2, 2, 3, 4, 5)).astype(np.float32),
                   "grid": RNG.uniform(-1.8, 1.8, (2, 2, 3, 2, 3)).astype(np.float32)})
    # Opset 16 names the modes bilinear and bicubic (ONNX's evaluator knows only opset 20's names).
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode="bicubic", padding_mode="border")
    _check(_model(node, [("x", F, [2, 3, 5, 4]), ("grid", F, [2, 3, 4, 2])], [("y", F, [2, 3, 3, 4])], 16),
           _grid_feeds(), reference=_grid_sample_model("cubic", "border", 0, batch=2))


def test_grid_sample_compiled():
    _check(_grid_sample_model("cubic", "reflection", 0, batch=2), _grid_feeds(), target="cpu")


def test_grid_sample_refusals():
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear")
    model = _model(node, [("x", F, [1, 1, 4, 4]), ("grid", F, [1, 2, 2, 2])], [("y", F, [1, 1, 2, 2])], 16)
    with pytest.raises(OnnxImportError, match=r"GridSample, opset 16\): mode='linear' is not one of"):
        from_onnx(model)


def _roi_model(mode, transform, ratio=2, opset=16):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode, output_height=3, output_width=4,
                            sampling_ratio=ratio, spatial_scale=0.5,
                            **({"coordinate_transformation_mode": transform} if opset >= 16 else {}))
    return _model(node, [("x", F, [2, 3, 8, 10]), ("rois", F, [4, 4]), ("batch", I64, [4])],
                  [("y", F, [4, 3, 3, 4])], opset)


@pytest.mark.parametrize("mode,transform", list(itertools.product(("avg", "max"), ("half_pixel", "output_half_pixel"))))
def test_roi_align(mode, transform):
    """Boxes in both images, one reaching past the input and one thinner than a pixel."""
    rois = np.array([[0, 0, 19, 15], [4, 2, 10, 9], [-6, 10, 25, 22], [7, 7, 7.5, 7.2]], dtype=np.float32)
    feeds = {"x": RNG.standard_normal((2, 3, 8, 10)).astype(np.float32), "rois": rois,
             "batch": np.array([0, 1, 1, 0], dtype=np.int64)}
    _check(_roi_model(mode, transform), feeds)
    if transform == "output_half_pixel":  # before opset 16 the corners are not shifted (ONNX's
        # evaluator implements only opset 16, so it checks the older form through its equivalent)
        _check(_roi_model(mode, transform, opset=11), feeds, reference=_roi_model(mode, transform))


def test_roi_align_run_time_sample_count_is_refused():
    with pytest.raises(OnnxImportError, match=r"RoiAlign, opset 16\): sampling_ratio=0 .* is not supported"):
        from_onnx(_roi_model("avg", "half_pixel", ratio=0))


def test_deform_conv_groups_strides_dilations():
    node = helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], kernel_shape=[3, 2],
                            strides=[2, 1], dilations=[1, 2], pads=[1, 0, 1, 1], group=2, offset_group=2)
    out_h, out_w = 3, 5  # (5 + 1 + 1 - 3) // 2 + 1, (6 + 0 + 1 - 3) // 1 + 1 (dilated kernel extents 3, 3)
    model = _model(node, [("x", F, [2, 4, 5, 6]), ("w", F, [6, 2, 3, 2]), ("offset", F, [2, 24, out_h, out_w]),
                          ("b", F, [6]), ("mask", F, [2, 12, out_h, out_w])], [("y", F, [2, 6, out_h, out_w])], 19)
    feeds = {"x": RNG.standard_normal((2, 4, 5, 6)).astype(np.float32),
             "w": RNG.standard_normal((6, 2, 3, 2)).astype(np.float32),
             "offset": RNG.uniform(-2, 2, (2, 24, out_h, out_w)).astype(np.float32),
             "b": RNG.standard_normal(6).astype(np.float32),
             "mask": RNG.uniform(0, 1, (2, 12, out_h, out_w)).astype(np.float32)}
    _check(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("parts,onesided,inverse,length", [(1, 0, 0, None), (2, 0, 0, 9), (1, 1, 0, 12),
                                                           (2, 1, 0, 5), (2, 1, 1, None), (2, 1, 1, 9)])
def test_dft_lengths_and_axes(parts, onesided, inverse, length):
    """dft_length padding (12, 9 > 7) and cutting (5), on the first axis of a (7, 3, parts) signal."""
    inputs = [("x", F, [7, 3, parts])]
    names = ["x", "length" if length else "", "axis"]
    inits = [helper.make_tensor("axis", I64, [], [0])]
    if length:
        inits.append(helper.make_tensor("length", I64, [], [length]))
    node = helper.make_node("DFT", names, ["y"], onesided=onesided, inverse=inverse)
    model = _model(node, inputs, [("y", F, None)], 20, inits)
    _check(model, {"x": RNG.standard_normal((7, 3, parts)).astype(np.float32)})


def test_dft_compiled_and_full_inverse_refused():
    node = helper.make_node("DFT", ["x"], ["y"], axis=1, onesided=1)
    _check(_model(node, [("x", F, [2, 16, 1])], [("y", F, [2, 9, 2])], 17),
           {"x": RNG.standard_normal((2, 16, 1)).astype(np.float32)}, target="cpu")
    node = helper.make_node("DFT", ["x"], ["y"], axis=1, inverse=1)
    with pytest.raises(OnnxImportError, match=r"DFT, opset 17\): inverse=1 with onesided=0"):
        from_onnx(_model(node, [("x", F, [2, 16, 2])], [("y", F, [2, 16, 2])], 17))


def test_stft_hop_and_window():
    """Frames that overlap (hop 3 < 8) and leave a tail, a Hann window, a complex signal two-sided."""
    window = helper.make_tensor("window", F, [8], (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(8) / 8)).tolist())
    step = helper.make_tensor("step", I64, [], [3])
    for parts, onesided in ((1, 1), (2, 0)):
        node = helper.make_node("STFT", ["signal", "step", "window"], ["y"], onesided=onesided)
        model = _model(node, [("signal", F, [2, 30, parts])], [("y", F, None)], 17, [window, step])
        _check(model, {"signal": RNG.standard_normal((2, 30, parts)).astype(np.float32)})
