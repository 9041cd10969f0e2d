"""Real architectures through the ONNX importer: transformers' model classes built from config objects
with random weights (no download), exported by ``torch.onnx.export`` (its default dynamo path) with a
dynamic batch (and sequence, for text) axis, imported with ``from_onnx(dims=...)``, and run on the
reference interpreter and compiled for cpu, wasm and the GPU targets (vulkan on lavapipe, opencl on
PoCL, webgpu on llvmpipe through wgpu-py), compared with onnxruntime at two sizes from one build.

`make test` runs small configs of each architecture (the same code paths: the exporter writes the
same graph shape for any width or depth); ``-m long`` runs the real sizes. Exported files are cached
under build/onnx-models/, keyed by a hash of the config and the versions that write them."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

# onnxruntime, torch and transformers are dev dependencies, imported outright: a missing one fails
# make test rather than skipping it.
import numpy as np
import onnxruntime as ort
import pytest
import torch
import transformers

CACHE = Path(__file__).resolve().parents[2] / "build" / "onnx-models"
RECIPE = 2  # how the weights are made (_randomized, _calibrated): part of the cache key
RTOL, ATOL = 1e-3, 1e-4


@dataclass
class Case:
    """A model to export: its inputs' names, the dynamic axes (name -> {axis: (dim name, lo, hi)}),
    and the two sizes to run (dim name -> size)."""

    name: str
    make: object  # () -> torch.nn.Module returning a tuple of tensors
    config: object
    inputs: dict  # input name -> (kind, shape with dim names) where kind is "float", "ids" or "mask"
    dims: dict  # dim name -> (lo, hi)
    sizes: list = field(default_factory=list)  # [{dim: size}, {dim: size}]
    outputs: tuple = ("output",)


class _Outputs(torch.nn.Module):
    """The model called with keyword inputs in a fixed order, its chosen outputs as a tuple."""

    def __init__(self, model, names, picks):
        super().__init__()
        self.model, self.names, self.picks = model, names, picks

    def forward(self, *args):
        result = self.model(**dict(zip(self.names, args)))
        return tuple(result[pick] for pick in self.picks)


def _randomized(model):
    """Random weights everywhere (biases and norms included), so no parameter is trivially 0 or 1."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.add_(torch.randn(buffer.shape, generator=generator) * 0.05)
            elif name.endswith("running_var"):
                buffer.mul_(1 + torch.rand(buffer.shape, generator=generator) * 0.1)
    return model.eval()


def _calibrated(model, example: torch.Tensor):
    """Batch norms' running statistics measured on random inputs, as training would leave them: with
    random weights and the default statistics a deep CNN's activations vanish or blow up, and its
    outputs would compare as all but constant."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(example)
    return model.eval()


def _wrapped(model_class, config, names, picks, example_shape=None):
    def make():
        torch.manual_seed(0)
        model = _randomized(model_class(config))
        if example_shape is not None:
            generator = torch.Generator().manual_seed(1)
            model = _calibrated(model, torch.randn(example_shape, generator=generator))
        return _Outputs(model, names, picks).eval()
    return make


def _text_case(name, model_class, config, picks, dims, sizes, vocab):
    names = ["input_ids", "attention_mask"]
    return Case(name, _wrapped(model_class, config, names, picks), config,
                {"input_ids": ("ids", ("batch", "seq"), vocab), "attention_mask": ("mask", ("batch", "seq"), 0)},
                dims, sizes, tuple(f"output{i}" for i in range(len(picks))))


def _image_case(name, model_class, config, picks, image, channels=3):
    return Case(name, _wrapped(model_class, config, ["pixel_values"], picks, (4, channels, image, image)), config,
                {"pixel_values": ("float", ("batch", channels, image, image), 0)},
                {"batch": (1, 4)}, [{"batch": 1}, {"batch": 3}], tuple(f"output{i}" for i in range(len(picks))))


def cases(real: bool) -> list[Case]:
    t = transformers
    out = []
    if real:
        bert = t.BertConfig()
        distil = t.DistilBertConfig()
    else:
        bert = t.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=64)
        distil = t.DistilBertConfig(vocab_size=128, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                    max_position_embeddings=64)
    seq_hi = 128 if real else 32
    text_sizes = [{"batch": 1, "seq": 7}, {"batch": 3, "seq": 16}]
    out.append(_text_case("bert", t.BertModel, bert, [0, 1], {"batch": (1, 4), "seq": (2, seq_hi)}, text_sizes,
                          bert.vocab_size))
    out.append(_text_case("distilbert", t.DistilBertModel, distil, [0], {"batch": (1, 4), "seq": (2, seq_hi)},
                          text_sizes, distil.vocab_size))
    if real:
        vit = t.ViTConfig()
        clip = t.CLIPVisionConfig()  # ViT-B/32's vision tower: 224 px, patch 32
        resnet = t.ResNetConfig()  # ResNet-50
        mobile = t.MobileNetV2Config()
        whisper = t.WhisperConfig.from_dict(dict(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                                 encoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=1500))
        image, frames = 224, 3000
    else:
        vit = t.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=64)
        clip = t.CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64)
        resnet = t.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 32, 64], depths=[1, 1, 1, 1])
        mobile = t.MobileNetV2Config(image_size=32, depth_multiplier=0.35)
        whisper = t.WhisperConfig(d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64,
                                  num_mel_bins=16, max_source_positions=16)
        image, frames = 32, 32
    out.append(_image_case("vit", t.ViTModel, vit, [0, 1], image))
    out.append(_image_case("resnet", t.ResNetForImageClassification, resnet, [0], image))
    out.append(_image_case("mobilenetv2", t.MobileNetV2ForImageClassification, mobile, [0], image))
    out.append(_image_case("clip-vision", t.CLIPVisionModel, clip, [0, 1], image))
    out.append(Case("whisper-encoder", _wrapped(t.models.whisper.modeling_whisper.WhisperEncoder, whisper,
                                                ["input_features"], [0]), whisper,
                    {"input_features": ("float", ("batch", whisper.num_mel_bins, frames), 0)},
                    {"batch": (1, 4)}, [{"batch": 1}, {"batch": 2}], ("output0",)))
    return out


def _versions() -> str:
    import onnxscript

    return f"torch {torch.__version__} transformers {transformers.__version__} onnxscript {onnxscript.__version__}"


def exported(case: Case, exporter: str = "dynamo") -> Path:
    """The case exported with dynamic axes, cached by a hash of its config and the versions.
    ``exporter``: "dynamo" (torch.onnx.export's default: torch.export, then onnxscript) or
    "torchscript" (``dynamo=False``, opset 17: the Shape -> Gather -> Unsqueeze -> Concat -> Reshape
    chains of the older exporter, still what many published models hold)."""
    import contextlib
    import io
    import warnings

    key = json.dumps([RECIPE, case.name, exporter, case.config.to_dict(), case.inputs, case.dims, _versions()],
                     sort_keys=True, default=str)
    path = CACHE / f"{case.name}-{exporter}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.onnx"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    model = case.make()
    example = tuple(feeds(case, {name: max(2, lo) for name, (lo, _) in case.dims.items()}, torch_tensors=True).values())
    tmp = path.with_suffix(".tmp.onnx")
    names = dict(input_names=list(case.inputs), output_names=list(case.outputs))
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            dim_objects = {name: torch.export.Dim(name, min=lo, max=hi) for name, (lo, hi) in case.dims.items()}
            dynamic = tuple({axis: dim_objects[d] for axis, d in enumerate(shape) if isinstance(d, str)}
                            for _, shape, _ in case.inputs.values())
            program = torch.onnx.export(model, example, dynamic_shapes=(dynamic,), dynamo=True, **names)
            program.save(str(tmp), external_data=False)
        else:
            axes = {name: {axis: d for axis, d in enumerate(shape) if isinstance(d, str)}
                    for name, (_, shape, _) in case.inputs.items()}
            torch.onnx.export(model, example, str(tmp), dynamic_axes=axes, dynamo=False, opset_version=17, **names)
    os.replace(tmp, path)
    return path


def feeds(case: Case, sizes: dict, torch_tensors: bool = False, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, (kind, shape, extra) in case.inputs.items():
        dims = [sizes[d] if isinstance(d, str) else d for d in shape]
        if kind == "ids":
            value = rng.integers(0, extra, size=dims).astype(np.int64)
        elif kind == "mask":
            value = np.ones(dims, dtype=np.int64)
            if dims[-1] > 2:
                value[-1, -2:] = 0  # the last row padded: the mask matters
        else:
            value = rng.standard_normal(dims).astype(np.float32)
        out[name] = torch.from_numpy(value) if torch_tensors else value
    return out


def _atol(want) -> float:
    """1e-4, or 1e-5 of the output's largest magnitude when that is larger: a deep model's
    activations reach tens, and float32 sums of hundreds of them differ in the 1e-4s from
    onnxruntime's order of summation, which rtol alone cannot absorb where an element is near 0."""
    return max(ATOL, 1e-5 * float(np.abs(want).max())) if want.size else ATOL


def _max_error(got, want) -> float:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want) / (_atol(want) + RTOL * np.abs(want)))) if want.size else 0.0


# The build target of each device kind tested here: webgpu's kernels are built for the "llvmpipe"
# preset (Mesa's software adapter, the one wgpu-py finds on this machine).
BUILD_TARGET = {"webgpu": "llvmpipe"}
GPU_TARGETS = ("vulkan", "opencl", "webgpu")


def require_device(kind: str):
    """Skip unless this machine has ``kind``: wgpu-py's adapter for webgpu, a Vulkan or OpenCL device
    (lavapipe, PoCL) found by a one-op session for the others."""
    import tessera
    from tessera import op
    from tessera.ir import Tensor
    from tessera.vm import DeviceError, device_kinds

    if kind not in device_kinds():
        pytest.skip(f"no {kind} device kind registered")
    if kind == "webgpu":
        try:
            from tessera.vm import webgpu_adapter_infos

            if not webgpu_adapter_infos():
                pytest.skip("no WebGPU adapter here")
        except Exception as error:  # wgpu-py missing or no adapter
            pytest.skip(f"no WebGPU here: {error}")
    elif kind in ("vulkan", "opencl"):
        from conformance.cases import one_function

        probe = one_function(lambda x: op.add(x, x), [Tensor((2,), "float32")], {})
        try:
            tessera.InferenceSession(tessera.build(probe, kind), device=kind)
        except DeviceError as error:
            pytest.skip(f"no {kind} device here: {error}")


def check_case(case: Case, targets=("interpret", "cpu"), report=None, exporter="dynamo", dims=None):
    """Import once, build each target once, and compare with onnxruntime at both sizes. ``dims``: other
    bounds for the import than the case's (the exported file is the same)."""
    import tessera
    from tessera.frontend import from_onnx
    from tessera.ir import interpret

    path = exported(case, exporter)
    started = time.perf_counter()
    mod = from_onnx(str(path), dims=dims or case.dims)
    timings = {"import": time.perf_counter() - started}
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sessions = {}
    for target in targets:
        if target != "interpret":
            started = time.perf_counter()
            executable = tessera.build(mod, BUILD_TARGET.get(target, target))
            sessions[target] = tessera.InferenceSession(executable, device=target)
            timings[f"build {target}"] = time.perf_counter() - started
    errors, absolute = {}, {}
    for index, sizes in enumerate(case.sizes):
        feed = feeds(case, sizes, seed=index)
        want = reference.run(None, feed)
        for target in targets:
            started = time.perf_counter()
            if target == "interpret":
                got = interpret(mod, "main", *feed.values())
                got = list(got) if isinstance(got, tuple) else [got]
            else:
                got = sessions[target].run(None, feed)
            timings[f"run {target} {sizes}"] = time.perf_counter() - started
            assert len(got) == len(want)
            for position, (g, w) in enumerate(zip(got, want)):
                assert np.asarray(g).shape == w.shape, (case.name, target, sizes, position)
                assert 1e-2 < float(np.abs(w).max()) < 1e4, f"{case.name}'s output {position} is degenerate"
                errors[target, str(sizes), position] = _max_error(g, w)
                absolute[target, str(sizes), position] = float(np.abs(np.asarray(g, np.float64) - w).max()) \
                    if w.size else 0.0
                np.testing.assert_allclose(np.asarray(g), w, rtol=RTOL, atol=_atol(w),
                                           err_msg=f"{case.name} on {target} at {sizes}, output {position}")
    if report is not None:
        report[case.name] = {"timings": timings, "worst (as a multiple of the tolerance)": max(errors.values()),
                             "max abs error": max(absolute.values())}
    return errors


SMALL = {case.name: case for case in cases(real=False)}


def quantized(case: Case) -> Path:
    """``onnxruntime.quantization.quantize_dynamic`` of the exported case (int8 weights,
    DynamicQuantizeLinear and MatMulInteger), cached beside it."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = exported(case)
    target = path.with_name(path.stem + f"-int8-ort{ort.__version__}.onnx")
    if not target.exists():
        tmp = target.with_suffix(".tmp.onnx")
        quantize_dynamic(str(path), str(tmp), weight_type=QuantType.QInt8)
        os.replace(tmp, target)
    return target


def check_int8(case: Case, report=None):
    """The int8 model against onnxruntime's int8 outputs, within onnxruntime's own int8 tolerance:
    half the distance between its int8 and float32 outputs at most, and as close to float32 on
    average as onnxruntime's int8 is. (The two round alike, but a float difference of 1e-6 before a
    DynamicQuantizeLinear moves a value across a rounding boundary now and then; in a deep model at a
    larger batch such flips spread.)"""
    import tessera
    from tessera.frontend import from_onnx
    from tessera.ir import interpret

    path = quantized(case)
    mod = from_onnx(str(path), dims=case.dims)
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    float32 = ort.InferenceSession(str(exported(case)), providers=["CPUExecutionProvider"])
    session = tessera.InferenceSession(tessera.build(mod, "cpu"), device="cpu")
    worst = 0.0
    for index, sizes in enumerate(case.sizes):
        feed = feeds(case, sizes, seed=index)
        want, exact = reference.run(None, feed), float32.run(None, feed)
        for got in (list(interpret(mod, "main", *feed.values())), session.run(None, feed)):
            for g, w, f in zip(got, want, exact):
                g = np.asarray(g, np.float64)
                noise = float(np.abs(w - f).max())
                error = float(np.abs(g - w).max())
                worst = max(worst, error / noise)
                where = f"{case.name} int8 at {sizes}"
                assert error <= 0.5 * noise, f"{where}: {error} from onnxruntime's int8, whose own error is {noise}"
                assert np.abs(g - f).mean() <= 1.1 * np.abs(w - f).mean() + 1e-6, where
    if report is not None:
        report[case.name + " int8"] = {"worst (as a fraction of onnxruntime's int8 error)": worst}


# wasm builds take a few seconds each: in `make test` a text model and a CNN run there too.
WASM_TOO = ("bert", "resnet")


@pytest.mark.parametrize("name", list(SMALL))
def test_small_architecture_matches_onnxruntime(name):
    check_case(SMALL[name], targets=("interpret", "cpu", "wasm") if name in WASM_TOO else ("interpret", "cpu"))


@pytest.mark.parametrize("name", list(SMALL))
def test_small_architecture_from_the_torchscript_exporter(name):
    """The older exporter's graphs (shape arithmetic spelled out node by node): imported and run on
    the interpreter, and BERT's (the most shape arithmetic) on cpu too; the other models compile
    to the same IR operators as the dynamo test's."""
    targets = ("interpret", "cpu") if name == "bert" else ("interpret",)
    check_case(SMALL[name], targets=targets, exporter="torchscript")


# On the GPU targets `make test` runs a text model (attention, layer norm, gelu, embeddings) and a CNN
# (convolutions, batch norm folded, pooling): about 50 s here for the six builds, most of it
# lavapipe's and PoCL's first compile of each kernel. The others run under -m long.
GPU_TOO = ("bert", "resnet")


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("name", GPU_TOO)
def test_small_architecture_on_the_gpu_targets(name, target):
    require_device(target)
    check_case(SMALL[name], targets=(target,))


def test_int8_bert_matches_onnxruntime():
    check_int8(SMALL["bert"])


@pytest.mark.long
@pytest.mark.parametrize("name", [case.name for case in cases(real=False)])
def test_real_size_architecture_matches_onnxruntime(name):
    real = {case.name: case for case in cases(real=True)}
    report = {}
    check_case(real[name], targets=("interpret", "cpu", "wasm"), report=report)
    check_case(real[name], targets=("interpret",), exporter="torchscript")
    if name == "bert":
        check_int8(real[name], report=report)
    print(json.dumps(report, indent=1, default=str))


# Whisper's encoder at 3000 frames computes its attention scores as a tensor of batch x 6 heads x
# 1500 x 1500 float32 (nothing fuses an encoder's attention into one kernel yet): 216 MB at batch 4,
# over the GPU targets' 128 MiB maxStorageBufferBindingSize. The build refuses that bound by name, and
# the real-size GPU run takes batch up to 2 (108 MB).
GPU_REAL_DIMS = {"whisper-encoder": {"batch": (1, 2)}}


@pytest.mark.long
@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("name", [case.name for case in cases(real=False)])
def test_real_size_architecture_on_the_gpu_targets(name, target):
    """Every architecture at its real size on lavapipe, PoCL and llvmpipe: software devices, so a
    run takes minutes (the times go to the printed report)."""
    import tessera
    from tessera.frontend import from_onnx
    from tessera.ir.errors import BindingLimitError

    require_device(target)
    case = {case.name: case for case in cases(real=True)}[name]
    if name in GPU_REAL_DIMS:
        with pytest.raises(BindingLimitError, match="maxStorageBufferBindingSize"):
            tessera.build(from_onnx(str(exported(case)), dims=case.dims), BUILD_TARGET.get(target, target))
    report = {}
    check_case(case, targets=(target,), report=report, dims=GPU_REAL_DIMS.get(name))
    print(json.dumps(report, indent=1, default=str))
