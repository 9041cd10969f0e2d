"""A model beyond LLMs: the MobileNet-style CNN (tessera.models.mobilenet), compiled for WebGPU and
WASM and run in the Python VM, against PyTorch computing the same network from the unfolded
checkpoint (conv2d, batch_norm in eval mode, relu6, pooling, linear), and against the reference
interpreter. Batch-norm folding is checked on its own against convolution then batch norm."""

import numpy as np
import pytest
import tessera
import torch
import torch.nn.functional as F
from tessera import nn
from tessera.ir import interpret
from tessera.models.mobilenet import (
    ConvBN,
    InvertedResidual,
    MobileNetConfig,
    Pool,
    Separable,
    export_mobilenet,
    fold_batch_norm,
    random_checkpoint,
)
from tessera.target import Target
from tessera.transform import Pipeline
from tessera.vm import VirtualMachine

CONFIG = MobileNetConfig()
TOL = {"rtol": 1e-4, "atol": 1e-4}


def torch_forward(config: MobileNetConfig, checkpoint: dict, images: np.ndarray) -> np.ndarray:
    """The network as PyTorch writes it, walking the same layer table, batch norm not folded."""
    t = {key: torch.from_numpy(value) for key, value in checkpoint.items()}

    def conv_bn(x, prefix, stride, groups, act):
        weight = t[f"{prefix}conv.weight"]
        y = F.conv2d(x, weight, stride=stride, padding=weight.shape[-1] // 2, groups=groups)
        y = F.batch_norm(y, t[f"{prefix}bn.running_mean"], t[f"{prefix}bn.running_var"], t[f"{prefix}bn.weight"],
                         t[f"{prefix}bn.bias"], training=False, eps=config.bn_eps)
        return {"relu6": F.relu6, "relu": F.relu, None: lambda v: v}[act](y)

    x = torch.from_numpy(images)
    with torch.no_grad():
        for index, spec in enumerate(config.layers):
            p = f"layers.{index}."
            if isinstance(spec, ConvBN):
                x = conv_bn(x, p, spec.stride, 1, spec.act)
            elif isinstance(spec, Separable):
                x = conv_bn(x, p + "depthwise.", spec.stride, x.shape[1], "relu6")
                x = conv_bn(x, p + "pointwise.", 1, 1, "relu6")
            elif isinstance(spec, InvertedResidual):
                y = conv_bn(x, p + "expand.", 1, 1, "relu6")
                y = conv_bn(y, p + "depthwise.", spec.stride, spec.expand, "relu6")
                y = conv_bn(y, p + "project.", 1, 1, None)
                x = x + y if spec.stride == 1 and x.shape[1] == spec.out else y
            elif spec.kind == "max":
                x = F.max_pool2d(x, spec.size, spec.stride, spec.padding)
            else:
                x = F.avg_pool2d(x, spec.size, spec.stride, spec.padding, count_include_pad=False)
        return F.linear(x.mean(dim=(2, 3)), t["head.weight"], t["head.bias"]).numpy()


def images(batch: int, seed: int) -> np.ndarray:
    size = CONFIG.image_size
    return np.random.default_rng(seed).standard_normal((batch, CONFIG.in_channels, size, size)).astype(np.float32)


def compile_cnn(mod, weights, target: str):
    preset = Target.preset(target)
    return tessera.build(mod, preset, pipeline=nn.bind_weights_after_fusion(Pipeline.default(preset), weights))


@pytest.fixture(scope="module")
def cnn():
    checkpoint = random_checkpoint(CONFIG, seed=7)
    mod, weights = export_mobilenet(CONFIG, checkpoint)
    return checkpoint, mod, weights


# -- batch-norm folding -------------------------------------------------------------------------------

def conv_nchw(x, w, stride, padding, groups):
    """Grouped 2-D convolution in float64, tap by tap: the numpy side of the folding check."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out_channels, per_group, k, _ = w.shape
    height = (x.shape[2] - k) // stride + 1
    width = (x.shape[3] - k) // stride + 1
    out = np.zeros((x.shape[0], out_channels, height, width))
    for o in range(out_channels):
        first = o // (out_channels // groups) * per_group
        for i in range(k):
            for j in range(k):
                window = x[:, first:first + per_group, i:i + stride * height:stride, j:j + stride * width:stride]
                out[:, o] += np.einsum("nchw,c->nhw", window, w[o, :, i, j])
    return out


@pytest.mark.parametrize("groups,with_bias", [(1, False), (1, True), (6, False)], ids=["dense", "bias", "depthwise"])
def test_folded_convolution_equals_convolution_then_batch_norm(groups, with_bias):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 9, 9))
    w = rng.standard_normal((6, 6 // groups, 3, 3))
    bias = rng.standard_normal(6) if with_bias else None
    gamma, beta = rng.uniform(0.5, 1.5, 6), rng.standard_normal(6)
    mean, var, eps = rng.standard_normal(6), rng.uniform(0.2, 2.0, 6), 1e-3
    y = conv_nchw(x, w, 2, 1, groups) + (0 if bias is None else bias[:, None, None])
    want = (y - mean[:, None, None]) / np.sqrt(var[:, None, None] + eps) * gamma[:, None, None] + beta[:, None, None]
    folded_w, folded_b = fold_batch_norm(w, gamma, beta, mean, var, eps, bias)
    got = conv_nchw(x, folded_w, 2, 1, groups) + folded_b[:, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_graph_holds_convolutions_with_bias_and_no_batch_norm(cnn):
    checkpoint, mod, weights = cnn
    assert any(k.endswith("bn.running_var") for k in checkpoint)
    assert not any(".bn." in k for k in weights)
    text = mod.script()
    assert "R.nn.conv2d(" in text and "batch_norm" not in text
    assert 'R.clip(' in text and "groups=16" in text  # ReLU6 and a depthwise convolution


# -- against PyTorch ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target,device", [("wasm", "wasm"), ("webgpu", "webgpu")])
def test_the_cnn_matches_torch_on_the_python_vm(cnn, target, device):
    checkpoint, mod, weights = cnn
    vm = VirtualMachine(compile_cnn(mod, weights, target), device=device)
    for seed in (0, 1):
        x = images(1, seed)
        want = torch_forward(CONFIG, checkpoint, x)
        got = vm["main"](x)
        assert got.shape == (1, CONFIG.num_classes)
        np.testing.assert_allclose(got, want, **TOL)
    assert np.abs(want).max() > 0.1  # logits of a size where 1e-4 means something


def test_each_convolution_is_one_kernel_with_its_bias_and_activation(cnn):
    _, mod, weights = cnn
    exe = compile_cnn(mod, weights, "wasm")
    # conv, 2 separable blocks (2 each), the inverted residual (3, its add fused), the 1x1 conv;
    # 2 pools; the global average pool; the head (its bias fused, its transposed weight folded).
    convolutions, pools = 1 + 2 * 2 + 3 + 1, 2
    assert len(exe.kernels) == convolutions + pools + 1 + 1
    # Weights bound before fusion fuse alike: fuse_ops takes constants as the fused function's parameters.
    bound_first = tessera.build(nn.bind_weights(mod, weights), "wasm")
    assert len(bound_first.kernels) == len(exe.kernels)


def test_the_interpreter_and_a_batch_of_two_agree_with_torch(cnn):
    checkpoint, _, _ = cnn
    mod, weights = export_mobilenet(CONFIG, checkpoint, batch=2)
    x = images(2, 5)
    want = torch_forward(CONFIG, checkpoint, x)
    np.testing.assert_allclose(interpret(nn.bind_weights(mod, weights), "main", x), want, **TOL)
    np.testing.assert_allclose(VirtualMachine(compile_cnn(mod, weights, "wasm"))["main"](x), want, **TOL)


# -- errors a user can hit ----------------------------------------------------------------------------

def test_model_errors_name_the_problem():
    with pytest.raises(nn.ModelError, match="8 input and 12 output channels do not split into 8 groups"):
        nn.Conv2d(8, 12, 3, groups=8)
    with pytest.raises(nn.ModelError, match="layer 1 is 'conv': use ConvBN, Separable, InvertedResidual or Pool"):
        export_mobilenet(MobileNetConfig(layers=(ConvBN(8), "conv")), {})
    with pytest.raises(nn.ModelError, match="unknown pooling 'min'"):
        export_mobilenet(MobileNetConfig(layers=(Pool("min", 2, 2),)), {})
    checkpoint = random_checkpoint(CONFIG)
    del checkpoint["head.bias"]
    with pytest.raises(nn.ModelError, match="the checkpoint has no head.bias"):
        export_mobilenet(CONFIG, checkpoint)
