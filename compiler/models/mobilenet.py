"""A small MobileNet-style image classifier in tessera.nn: a model beyond LLMs.

Static shapes (one NCHW image), float32. The layers are a table (``MobileNetConfig.layers``):
convolutions with batch norm and ReLU6 or ReLU, depthwise-separable blocks (MobileNetV1), an
inverted residual block (MobileNetV2: expand, depthwise, linear projection, plus the input),
max and average pooling; then a global average pool and a dense head.

Batch norm exists only in the checkpoint. ``fold_batch_norm`` folds each one into the convolution
before it (the usual inference-time rewrite), so the graph holds convolutions with a bias and
never a normalization; ``random_checkpoint`` makes a checkpoint with PyTorch's parameter names
(``stem.conv.weight``, ``stem.bn.running_var``), which binds to ``torch.nn.functional`` as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import op
from ..ir import IRModule, Tensor
from ..ir.expr import Expr
from ..nn import Conv2d, Linear, ModelError, Module, ModuleList, export


@dataclass(frozen=True)
class ConvBN:
    """A k x k convolution, batch norm, then ``act`` ("relu6", "relu" or None)."""
    out: int
    kernel: int = 3
    stride: int = 1
    act: str | None = "relu6"


@dataclass(frozen=True)
class Separable:
    """MobileNetV1's block: a 3x3 depthwise convolution and a 1x1 pointwise one, each with BN and ReLU6."""
    out: int
    stride: int = 1


@dataclass(frozen=True)
class InvertedResidual:
    """MobileNetV2's block: 1x1 expansion to ``expand`` channels (ReLU6), 3x3 depthwise (ReLU6), a
    linear 1x1 projection; the input is added back when the shapes agree (stride 1, same width)."""
    out: int
    expand: int
    stride: int = 1


@dataclass(frozen=True)
class Pool:
    kind: str  # "max" or "avg"
    size: int
    stride: int
    padding: int = 0


LAYERS = (
    ConvBN(8, kernel=3, stride=2),       # 3x32x32 -> 8x16x16
    Separable(16),                       # -> 16x16x16
    Pool("max", 3, 2, padding=1),        # -> 16x8x8
    Separable(24, stride=2),             # -> 24x4x4
    InvertedResidual(24, expand=32),     # -> 24x4x4, with the residual
    Pool("avg", 2, 2),                   # -> 24x2x2
    ConvBN(32, kernel=1, act="relu"),    # -> 32x2x2, then global average pool and the head
)


@dataclass(frozen=True)
class MobileNetConfig:
    in_channels: int = 3
    image_size: int = 32
    num_classes: int = 10
    layers: tuple = LAYERS
    bn_eps: float = 1e-5


class ConvBNAct(Module):
    """A convolution whose weight and bias already hold the batch norm after it (``fold_batch_norm``)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: str | None = None):
        if act not in ("relu6", "relu", None):
            raise ModelError(f"unknown activation {act!r}: the MobileNet layers know relu6, relu and None")
        self.conv = Conv2d(cin, cout, kernel, stride, padding=kernel // 2, groups=groups, bias=True)
        self.act = act

    def forward(self, x: Expr) -> Expr:
        y = self.conv(x)
        if self.act == "relu6":
            return op.clip(y, min=0.0, max=6.0)
        return op.nn.relu(y) if self.act == "relu" else y


class SeparableBlock(Module):
    def __init__(self, cin: int, spec: Separable):
        self.depthwise = ConvBNAct(cin, cin, 3, spec.stride, groups=cin, act="relu6")
        self.pointwise = ConvBNAct(cin, spec.out, 1, act="relu6")

    def forward(self, x: Expr) -> Expr:
        return self.pointwise(self.depthwise(x))


class InvertedResidualBlock(Module):
    def __init__(self, cin: int, spec: InvertedResidual):
        self.expand = ConvBNAct(cin, spec.expand, 1, act="relu6")
        self.depthwise = ConvBNAct(spec.expand, spec.expand, 3, spec.stride, groups=spec.expand, act="relu6")
        self.project = ConvBNAct(spec.expand, spec.out, 1)
        self.residual = spec.stride == 1 and cin == spec.out

    def forward(self, x: Expr) -> Expr:
        y = self.project(self.depthwise(self.expand(x)))
        return op.add(x, y) if self.residual else y


class PoolLayer(Module):
    def __init__(self, spec: Pool):
        if spec.kind not in ("max", "avg"):
            raise ModelError(f"unknown pooling {spec.kind!r}: use 'max' or 'avg'")
        self.spec = spec

    def forward(self, x: Expr) -> Expr:
        s = self.spec
        pool = op.nn.max_pool2d if s.kind == "max" else op.nn.avg_pool2d
        return pool(x, pool_size=s.size, strides=s.stride, padding=s.padding)


class MobileNet(Module):
    def __init__(self, config: MobileNetConfig):
        self.config = config
        layers, width = [], config.in_channels
        for index, spec in enumerate(config.layers):
            if isinstance(spec, ConvBN):
                layers.append(ConvBNAct(width, spec.out, spec.kernel, spec.stride, act=spec.act))
            elif isinstance(spec, Separable):
                layers.append(SeparableBlock(width, spec))
            elif isinstance(spec, InvertedResidual):
                layers.append(InvertedResidualBlock(width, spec))
            elif isinstance(spec, Pool):
                layers.append(PoolLayer(spec))
            else:
                raise ModelError(f"layer {index} is {spec!r}: use ConvBN, Separable, InvertedResidual or Pool")
            width = getattr(spec, "out", width)
        self.layers = ModuleList(layers)
        self.head = Linear(width, config.num_classes, bias=True)

    def forward(self, image: Expr) -> Expr:
        """Logits (batch, classes) of NCHW images."""
        x = image
        for layer in self.layers:
            x = layer(x)
        return self.head(op.mean(x, axis=[2, 3]))  # the global average pool


def export_mobilenet(config: MobileNetConfig, checkpoint: dict[str, np.ndarray],
                     batch: int = 1) -> tuple[IRModule, dict[str, np.ndarray]]:
    """``main(image (batch, C, H, W)) -> logits`` over the model's weights as parameters, and those
    weights (batch norm folded into the convolutions) by parameter path, for ``nn.bind_weights``."""
    model = MobileNet(config)
    size = config.image_size
    mod = export(model, "main", {"image": Tensor((batch, config.in_channels, size, size), "float32")})
    weights = fold_checkpoint(checkpoint, config.bn_eps)
    missing = sorted(set(model.parameters()) - set(weights))
    if missing:
        raise ModelError(f"the checkpoint has no {', '.join(missing)}")
    return mod, {path: weights[path] for path in model.parameters()}


# -- batch norm folding ---------------------------------------------------------------------------

def fold_batch_norm(weight: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray,
                    var: np.ndarray, eps: float, bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The weight and bias of one convolution computing ``batch_norm(conv(x, weight) + bias)`` in
    inference mode: BN is ``(y - mean) * gamma / sqrt(var + eps) + beta``, an affine map per output
    channel, so it scales that channel's filter and shifts its bias. Computed in float64 so that
    folding adds no rounding of its own."""
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    folded_weight = weight.astype(np.float64) * scale[:, None, None, None]
    conv_bias = np.zeros_like(scale) if bias is None else bias.astype(np.float64)
    folded_bias = beta.astype(np.float64) + (conv_bias - mean.astype(np.float64)) * scale
    return folded_weight.astype(weight.dtype), folded_bias.astype(weight.dtype)


def fold_checkpoint(checkpoint: dict[str, np.ndarray], eps: float) -> dict[str, np.ndarray]:
    """Model weights from a checkpoint: each ``P.bn.*`` folds into ``P.conv``; the rest is copied."""
    weights = dict(checkpoint)
    for key in [k for k in checkpoint if k.endswith("bn.running_var")]:
        prefix = key[:-len("bn.running_var")]
        gamma, beta, mean, var = (weights.pop(f"{prefix}bn.{name}")
                                  for name in ("weight", "bias", "running_mean", "running_var"))
        weights.pop(f"{prefix}bn.num_batches_tracked", None)
        weights[f"{prefix}conv.weight"], weights[f"{prefix}conv.bias"] = fold_batch_norm(
            checkpoint[f"{prefix}conv.weight"], gamma, beta, mean, var, eps, checkpoint.get(f"{prefix}conv.bias"))
    return weights


def random_checkpoint(config: MobileNetConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights with PyTorch's names: convolutions without bias followed by batch norm
    (scale, shift, running statistics away from 0 and 1 so that folding is exercised), and the head."""
    rng = np.random.default_rng(seed)
    checkpoint = {}
    for path, param in MobileNet(config).named_parameters():
        if path.endswith("conv.weight"):
            fan_in = int(np.prod(param.shape[1:]))
            checkpoint[path] = rng.normal(0.0, np.sqrt(2.0 / fan_in), param.shape)
        elif path.endswith("conv.bias"):  # the folded bias: the checkpoint holds the batch norm instead
            prefix, channels = path[:-len("conv.bias")], param.shape[0]
            checkpoint[f"{prefix}bn.weight"] = rng.uniform(0.5, 1.5, channels)
            checkpoint[f"{prefix}bn.bias"] = rng.normal(0.0, 0.2, channels)
            checkpoint[f"{prefix}bn.running_mean"] = rng.normal(0.0, 0.2, channels)
            checkpoint[f"{prefix}bn.running_var"] = rng.uniform(0.5, 2.0, channels)
        else:  # the head
            checkpoint[path] = rng.normal(0.0, 1.0 / np.sqrt(param.shape[-1]), param.shape)
    return {key: value.astype(np.float32) for key, value in checkpoint.items()}
