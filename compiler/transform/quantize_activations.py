"""quantize_activations: let a model's quantized GEMVs read activations rounded to 8 bits.

On a CPU, a GEMV over 4-bit weights runs several times faster when x is rounded to int8 blocks
and the dot products run in integer SIMD (llama.cpp's CPU kernels all do this). The rounding
changes results by about 0.5% of a dot product's size, so it is a decision of the graph, not of
a kernel: this pass writes it into each call (``quantized_matmul(..., activations="q8")``), where
the printed IR shows it and the reference interpreter computes it too (op/quantized.py).

Only calls whose activations are one row change, only for the block formats that meet q8
activations (``Q8_ACTIVATION_FORMATS``: every format the GGUF loader reads, each with an integer
micro-kernel), and only in the ``functions`` named (all when None). A model export names its decode step: prefill, whose
last position's logits choose the first token of a reply, reads x as it is. (SmolLM2's first
token for "What is the capital of France?" is a near tie, 25.33 against 25.24, that rounding x
flips: llama.cpp, which rounds everywhere, answers "L'Etoile, ..." where the f32 model says
"The capital of France is Paris.") ``export_llm`` runs the pass for targets whose kind asks for
it (``Target.quantized_activations``).
"""

from __future__ import annotations

from dataclasses import replace

from .. import arith
from ..ir.expr import Call, Op, VarBinding
from ..ir.module import IRModule
from ..ir.struct_info import TensorStructInfo
from ..op.quantized import ACTIVATIONS, Q8_ACTIVATION_FORMATS
from .rewrite import map_graph_functions, rewrite_function


def quantize_activations(mod: IRModule, mode: str = "q8", functions=None, batched: bool = False,
                         vdevice: str | None = None) -> IRModule:
    """``batched``: also calls whose activations are several rows (a decode batch: models/llama.py's
    decode_batch, whose rows are one token of each sequence, not a prompt). ``vdevice``: only calls
    whose activations are placed on that virtual device (the CPU part of a split build)."""
    if mode not in ACTIVATIONS:
        raise ValueError(f"quantize_activations: {mode!r} is not one of {', '.join(repr(a) for a in ACTIVATIONS)}")

    def rewrite(binding, dataflow):
        value = binding.value
        if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
                and value.op.name == "quantized_matmul" and (batched or _one_row(value.args[0].struct_info))
                and value.attr("format") in Q8_ACTIVATION_FORMATS
                and (vdevice is None or getattr(value.args[0].struct_info, "vdevice", None) == vdevice)):
            return [binding]
        attrs = tuple((key, mode if key == "activations" else v) for key, v in value.attrs)
        if "activations" not in dict(attrs):
            attrs += (("activations", mode),)
        return [VarBinding(binding.var, replace(value, attrs=attrs))]

    chosen = None if functions is None else set(functions)
    return map_graph_functions(mod, lambda name, func: func if chosen is not None and name not in chosen
                               else rewrite_function(func, rewrite))


def _one_row(info) -> bool:
    """Whether x is statically a single row: every dimension but the last is 1."""
    if not isinstance(info, TensorStructInfo) or info.shape is None:
        return False
    analyzer = arith.Analyzer()
    return all(analyzer.as_int(dim) == 1 for dim in info.shape[:-1])
