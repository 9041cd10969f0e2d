"""Modules, parameters, the usual layers, and export to an IRModule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import op
from ..ir import BlockBuilder, Constant, IRModule, StructInfo, Tensor, Var
from ..ir.errors import TesseraError
from ..ir.expr import Expr, Function, MatchCast, VarBinding
from ..op.quantized import row_words
from ..transform.pipeline import Pipeline
from ..transform.rewrite import map_graph_functions, rewrite_function, substitute_vars
from ..transform.simplify import fold_constants


class ModelError(TesseraError):
    """A model that cannot be built as described: layer sizes that do not fit, missing weights."""


class Parameter:
    """A weight: a float tensor, or a quantized one (uint32 words of GGUF blocks, ``quant`` = format)."""

    def __init__(self, shape: tuple, dtype: str = "float32", quant: str | None = None, k: int | None = None):
        self.shape, self.dtype, self.quant, self.k = tuple(shape), dtype, quant, k
        self.var: Var | None = None  # set while exporting

    @staticmethod
    def quantized(rows: int, k: int, fmt: str) -> Parameter:
        words = int(row_words(fmt, k).value)
        return Parameter((rows, words), "uint32", quant=fmt, k=k)

    @property
    def sinfo(self) -> StructInfo:
        return Tensor(self.shape, self.dtype)

    def __repr__(self) -> str:
        kind = f", {self.quant} blocks of K = {self.k}" if self.quant else ""
        return f"Parameter({self.shape}, {self.dtype}{kind})"


class Module:
    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        for name, value in vars(self).items():
            path = f"{prefix}{name}"
            if isinstance(value, Parameter):
                yield path, value
            elif isinstance(value, Module):
                yield from value.named_parameters(path + ".")

    def parameters(self) -> dict[str, Parameter]:
        return dict(self.named_parameters())

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}.forward")


class ModuleList(Module):
    def __init__(self, modules):
        self._modules = list(modules)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        for index, module in enumerate(self._modules):
            yield from module.named_parameters(f"{prefix}{index}.")

    def __iter__(self):
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, index: int) -> Module:
        return self._modules[index]


def _var(p: Parameter) -> Var:
    if p.var is None:
        raise RuntimeError("parameters are only usable inside nn.export")
    return p.var


class Linear(Module):
    """y = x W^T (+ b), W of shape (out, in) as in PyTorch; or quantized rows of W."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, quant: str | None = None,
                 dtype: str = "float32"):
        self.in_features, self.out_features, self.quant = in_features, out_features, quant
        self.weight = (Parameter.quantized(out_features, in_features, quant) if quant
                       else Parameter((out_features, in_features), dtype))
        self.bias = Parameter((out_features,), dtype) if bias else None

    def forward(self, x: Expr) -> Expr:
        if self.quant:
            y = op.quantized_matmul(x, _var(self.weight), format=self.quant, k=self.in_features)
        else:
            y = op.matmul(x, op.permute_dims(_var(self.weight)))
        return op.add(y, _var(self.bias)) if self.bias is not None else y


class Conv2d(Module):
    """y = conv2d(x, W) (+ b) over NCHW images, W of shape (out, in / groups, k, k) as in PyTorch.

    ``groups == in_channels == out_channels`` is a depthwise convolution."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 groups: int = 1, bias: bool = True, dtype: str = "float32"):
        if in_channels % groups or out_channels % groups:
            raise ModelError(f"Conv2d: {in_channels} input and {out_channels} output channels do not split "
                             f"into {groups} groups")
        self.stride, self.padding, self.groups = stride, padding, groups
        self.weight = Parameter((out_channels, in_channels // groups, kernel_size, kernel_size), dtype)
        self.bias = Parameter((out_channels,), dtype) if bias else None

    def forward(self, x: Expr) -> Expr:
        y = op.nn.conv2d(x, _var(self.weight), strides=self.stride, padding=self.padding, groups=self.groups)
        if self.bias is None:
            return y
        # One bias per channel, broadcast over the image: (C,) read as (C, 1, 1).
        return op.add(y, op.reshape(_var(self.bias), [self.bias.shape[0], 1, 1]))


class Embedding(Module):
    def __init__(self, num: int, dim: int, quant: str | None = None, dtype: str = "float32"):
        self.num, self.dim, self.quant = num, dim, quant
        self.weight = Parameter.quantized(num, dim, quant) if quant else Parameter((num, dim), dtype)

    def forward(self, ids: Expr) -> Expr:
        if self.quant:
            return op.quantized_take(_var(self.weight), ids, format=self.quant, k=self.dim)
        return op.take(_var(self.weight), ids, axis=0)


class RMSNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-5, dtype: str = "float32"):
        self.eps = eps
        self.weight = Parameter((dim,), dtype)

    def forward(self, x: Expr) -> Expr:
        return op.nn.rms_norm(x, _var(self.weight), epsilon=self.eps)


def export(model: Module, name: str, inputs: dict[str, StructInfo], method: str = "forward",
           attrs: dict[str, Any] | None = None, module: IRModule | None = None,
           options: dict[str, Any] | None = None) -> IRModule:
    """A graph function ``name(inputs..., weights...)`` computing ``model.<method>(inputs...)``;
    ``options``: keyword arguments of the method that are no inputs (a build's device placement)."""
    params = list(model.named_parameters())
    input_vars = [Var(key, sinfo) for key, sinfo in inputs.items()]
    weight_vars = []
    for path, p in params:
        p.var = Var(path.replace(".", "_"), p.sinfo)
        weight_vars.append(p.var)
    bb = BlockBuilder(module)
    try:
        with bb.function(name, input_vars + weight_vars, attrs=attrs):
            with bb.dataflow():
                result = getattr(model, method)(*input_vars, **(options or {}))
                out = bb.emit_output(result, "output") if not isinstance(result, tuple) else \
                    tuple(bb.emit_output(r, f"output{i}") for i, r in enumerate(result))
            bb.emit_func_output(out)
    finally:
        for _, p in params:
            p.var = None
    func = bb.get()[name]
    weights = {v.name_hint: path for v, (path, _) in zip(weight_vars, params)}
    return bb.get().with_function(name, func.with_attr("weight_names", weights))


def bind_weights(mod: IRModule, weights: dict[str, np.ndarray]) -> IRModule:
    """Replace weight parameters (by model path) with named constants; other parameters stay."""

    def bind(name, func):
        names = dict(func.attr("weight_names", {}) or {})
        keep, mapping = [], {}
        for param in func.params:
            path = names.get(param.name_hint)
            if path is None:
                keep.append(param)
                continue
            if path not in weights:
                raise KeyError(f"no weight for parameter {path}")
            array = np.ascontiguousarray(weights[path])
            expected = tuple(int(d.value) for d in param.struct_info.shape)
            if array.shape != expected or str(array.dtype) != param.struct_info.dtype:
                raise ValueError(f"weight {path} is {array.shape} {array.dtype}, the model expects {expected} "
                                 f"{param.struct_info.dtype}")
            mapping[param] = Constant(array, name=path)
        def rewrite(binding, dataflow):
            value = substitute_vars(binding.value, mapping)
            if isinstance(binding, MatchCast):
                return [MatchCast(binding.var, value, binding.struct_info)]
            return [VarBinding(binding.var, value)]

        body = rewrite_function(func, rewrite, lambda result: substitute_vars(result, mapping)).body
        return Function(tuple(keep), body, func.ret_struct_info, func.attrs, func.pure)

    return map_graph_functions(mod, bind)


def bind_weights_after_fusion(pipeline: Pipeline, weights: dict[str, np.ndarray]) -> Pipeline:
    """``pipeline`` binding ``weights`` (as ``bind_weights``) right after its fusion passes.

    fuse_ops leaves a call that reads a tensor constant out of every fused group, so weights bound
    before compiling leave each convolution apart from its bias and activation (three kernels where
    one does). Bound after fusion they become arguments of the fused kernels; the constants folded
    then (a Linear's transposed weight) cost nothing at run time."""
    pipeline.insert_after("fuse_tir", "bind_weights", lambda mod: bind_weights(mod, weights))
    pipeline.insert_after("bind_weights", "fold_bound_weights", fold_constants)
    return pipeline
