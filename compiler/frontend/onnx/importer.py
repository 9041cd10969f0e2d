"""from_onnx: an ONNX model as an IRModule whose ``main`` takes the graph's inputs.

Graph inputs become parameters (an initializer listed among the inputs is a weight, not a
parameter); each ``dim_param`` becomes one shape variable shared by every input that names it, an
unnamed dimension a fresh variable, and ``shapes=`` fixes an input's shape. ``dims=`` bounds shape
variables (the function's ``tir_var_lower_bound``/``tir_var_upper_bound``, as the LLM exports
declare them) so that memory is still planned into one arena. Initializers become named constants
(weights, as ``nn.bind_weights`` makes them). Nodes convert one by one through the converters of
``registry``; anything they do not implement is one ``OnnxImportError`` naming the node."""

from __future__ import annotations

import contextlib
import re

import numpy as np

from ... import arith
from ...ir import BlockBuilder, IRModule, Var
from ...ir.errors import TesseraError
from ...ir.expr import Constant
from ...ir.result_names import output_names_attr
from ...ir.struct_info import TensorStructInfo
from . import converters  # noqa: F401  (registers the converters)
from .errors import OnnxImportError, node_label
from .loader import ir_dtype, load_model, tensor_to_array
from .registry import MIN_OPSET, NodeContext, find_converter
from .shape_values import SymbolicInts, propagate

DEFAULT_DOMAINS = ("", "ai.onnx")


def from_onnx(model, shapes: dict | None = None, dims: dict | None = None) -> IRModule:
    """``model``: a path to a .onnx file or an ``onnx.ModelProto``. ``shapes``: input name -> a
    tuple of ints fixing its shape. ``dims``: shape variable name -> (lowest, highest)."""
    proto, folder = load_model(model)
    return _Importer(proto, folder, dict(shapes or {}), dict(dims or {})).run()


def default_opset(proto) -> int:
    versions = [entry.version for entry in proto.opset_import if entry.domain in DEFAULT_DOMAINS]
    if not versions:
        raise OnnxImportError("the model imports no default-domain opset")
    opset = max(versions)
    if opset < MIN_OPSET:
        raise OnnxImportError(f"the model's opset is {opset}; the importer takes opsets {MIN_OPSET} and up "
                              "(onnx.version_converter can upgrade it)")
    return opset


def identifier(name: str, fallback: str) -> str:
    """An ONNX value name as a variable name ('onnx::Add_3' -> 'onnx__Add_3')."""
    text = re.sub(r"\W", "_", name)
    if not text:
        return fallback
    return text if not text[0].isdigit() else f"v{text}"


class _Importer:
    def __init__(self, proto, folder, shapes: dict, dims: dict):
        self.proto, self.folder, self.shapes, self.dims = proto, folder, shapes, dims
        self.graph = proto.graph
        self.opset = default_opset(proto)
        self.shape_vars: dict[str, arith.Var] = {}
        self.used_names: set[str] = set()

    def run(self) -> IRModule:
        env = self._initializers()
        params = self._parameters(env)
        unknown = sorted(set(self.shapes) - {p.name for p in self.graph.input})
        if unknown:
            raise OnnxImportError(f"shapes= names {', '.join(unknown)}, which the graph has no input of "
                                  f"(inputs: {', '.join(p.name for p in self.graph.input)})")
        attrs = {**self._bounds(), **output_names_attr(value.name for value in self.graph.output)}
        bb = BlockBuilder()
        self.bb = bb
        # Control flow (If) cannot sit in a dataflow block: such a graph is built without one.
        dataflow = bb.dataflow() if not _has_subgraphs(self.graph) else contextlib.nullcontext()
        with bb.function("main", [var for _, var in params], attrs=attrs):
            with dataflow:
                for index, node in enumerate(self.graph.node):
                    self._convert(bb, node, index, env)
                outputs = [self._output(bb, value, env, isinstance(dataflow, contextlib.nullcontext))
                           for value in self.graph.output]
            bb.emit_func_output(outputs[0] if len(outputs) == 1 else outputs)
        return bb.get()

    def convert_subgraph(self, graph, outer_env: dict) -> list:
        """A branch's graph converted into the builder's current block, seeing the enclosing
        graph's values; its outputs as expressions."""
        env = dict(outer_env)
        for tensor in graph.initializer:
            env[tensor.name] = Constant(tensor_to_array(tensor, self.folder, f"initializer '{tensor.name}'"),
                                        name=tensor.name)
        for index, node in enumerate(graph.node):
            self._convert(self.bb, node, index, env)
        missing = [value.name for value in graph.output if value.name not in env]
        if missing:
            raise OnnxImportError(f"subgraph '{graph.name}' output {missing[0]} is produced by no node", "invalid")
        return [env[value.name] for value in graph.output]

    # -- weights and parameters ------------------------------------------------

    def _initializers(self) -> dict:
        env = {}
        for tensor in self.graph.initializer:
            array = tensor_to_array(tensor, self.folder, f"initializer '{tensor.name}'")
            env[tensor.name] = Constant(array, name=tensor.name)
        if len(self.graph.sparse_initializer):
            raise OnnxImportError("sparse initializers are not supported")
        return env

    def _parameters(self, env: dict) -> list[tuple[str, Var]]:
        params = []
        for value in self.graph.input:
            if value.name in env:  # an initializer listed among the inputs: a weight with a default
                continue
            sinfo = self._input_sinfo(value)
            name = self._unique(identifier(value.name, f"input{len(params)}"))
            var = Var(name, sinfo)
            env[value.name] = var
            params.append((value.name, var))
        return params

    def _input_sinfo(self, value) -> TensorStructInfo:
        where = f"graph input '{value.name}'"
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            raise OnnxImportError(f"{where} is a {kind or 'value of no type'}; only tensors are supported")
        tensor_type = value.type.tensor_type
        dtype = ir_dtype(tensor_type.elem_type, where)
        if value.name in self.shapes:
            fixed = tuple(self.shapes[value.name])
            declared = tensor_type.shape.dim if tensor_type.HasField("shape") else None
            if declared is not None and len(declared) != len(fixed):
                raise OnnxImportError(f"shapes= gives {where} rank {len(fixed)}, the model declares {len(declared)}")
            for axis, (dim, size) in enumerate(zip(declared or (), fixed)):
                if dim.HasField("dim_value") and dim.dim_value != size:
                    raise OnnxImportError(f"shapes= gives {where} size {size} on axis {axis}, "
                                          f"the model declares {dim.dim_value}")
            return TensorStructInfo(tuple(arith.IntImm(int(d)) for d in fixed), dtype)
        if not tensor_type.HasField("shape"):
            raise OnnxImportError(f"{where} has no declared rank; give its shape with shapes=")
        out = []
        for axis, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value >= 0:
                out.append(arith.IntImm(int(dim.dim_value)))
            elif dim.HasField("dim_param") and dim.dim_param:
                out.append(self._shape_var(dim.dim_param))
            else:
                out.append(self._shape_var(None, f"{identifier(value.name, 'x')}_dim{axis}"))
        return TensorStructInfo(tuple(out), dtype)

    def _shape_var(self, dim_param: str | None, fresh: str = "") -> arith.Var:
        if dim_param is not None and dim_param in self.shape_vars:
            return self.shape_vars[dim_param]
        var = arith.Var(self._unique(identifier(dim_param or fresh, "dim")))
        self.shape_vars[dim_param if dim_param is not None else var.name] = var
        return var

    def _unique(self, name: str) -> str:
        base, count = name, 0
        while name in self.used_names:
            count += 1
            name = f"{base}_{count}"
        self.used_names.add(name)
        return name

    def _bounds(self) -> dict:
        lower, upper = {}, {}
        for name, bounds in self.dims.items():
            var = self.shape_vars.get(name)
            if var is None:
                known = ", ".join(sorted(self.shape_vars)) or "none"
                raise OnnxImportError(f"dims= bounds '{name}', which no input dimension is named "
                                      f"(shape variables: {known})")
            try:
                low, high = (int(b) for b in bounds)
            except (TypeError, ValueError):
                raise OnnxImportError(f"dims= for '{name}' must be (lowest, highest), got {bounds!r}") from None
            if not 0 <= low <= high:
                raise OnnxImportError(f"dims= for '{name}' must have 0 <= lowest <= highest, got {bounds!r}")
            lower[var.name], upper[var.name] = low, high
        return {"tir_var_lower_bound": lower, "tir_var_upper_bound": upper} if upper else {}

    # -- nodes -----------------------------------------------------------------

    def _convert(self, bb: BlockBuilder, node, index: int, env: dict) -> None:
        label = f"{node_label(node, index)} ({node.op_type}, opset {self.opset})"
        if node.domain not in DEFAULT_DOMAINS:
            raise OnnxImportError(f"{label}: domain '{node.domain}' is not supported (only the default domain)")
        entry = find_converter(node.op_type, self.opset)
        if entry is None:
            raise OnnxImportError(f"{label}: the op is not supported")
        attrs = _attributes(node, label)
        extra = sorted(set(attrs) - entry.attrs)
        if extra:
            raise OnnxImportError(f"{label}: attribute {', '.join(extra)} is not supported")
        inputs = []
        for name in node.input:
            if not name:
                inputs.append(None)
            elif name in env:
                inputs.append(env[name])
            else:
                raise OnnxImportError(f"{label}: input '{name}' is not produced before this node", "invalid")
        analyzer = bb._require_frame().analyzer
        if self._shape_value(node, inputs, attrs, analyzer, env):
            return
        ctx = NodeContext(node, index, self.opset, inputs, attrs, analyzer, bb.emit)
        ctx.importer, ctx.builder, ctx.env = self, bb, env
        ctx.block_key = bb._require_frame().blocks
        try:
            results = entry.fn(ctx)
            results = results if isinstance(results, list) else [results]
            if inputs and all(isinstance(value, Constant) for value in inputs if value is not None):
                results = _fold(results)
            outputs = [name for name in node.output]
            if len([o for o in outputs if o]) > len(results):
                raise ctx.error(f"only {len(results)} of its {len(outputs)} outputs are supported")
            for name, result in zip(outputs, results):
                if not name:
                    continue
                if not isinstance(result, Constant | Var):
                    result = bb.emit(result, self._unique(identifier(name, "lv")))
                env[name] = result
        except OnnxImportError:
            raise
        except TesseraError as error:  # a deduction error: the graph's shapes or dtypes disagree
            raise OnnxImportError(f"{label}: {error}", "invalid") from None

    def _shape_value(self, node, inputs, attrs, analyzer, env) -> bool:
        """Bind the node's result as a shape value (shape_values) when it is one; False to convert it."""
        symbolic = any(isinstance(value, SymbolicInts) for value in inputs)
        if not symbolic and node.op_type not in ("Shape", "Size"):
            return False
        if len(node.output) != 1:
            return False
        result = propagate(node.op_type, inputs, attrs, analyzer, self.opset)
        if result is None:
            return False
        env[node.output[0]] = result
        return True

    def _output(self, bb: BlockBuilder, value, env: dict, plain: bool):
        if value.name not in env:
            raise OnnxImportError(f"graph output '{value.name}' is produced by no node", "invalid")
        result = env[value.name]
        if isinstance(result, SymbolicInts):
            result = result.materialize(bb.emit, bb._require_frame().blocks)
        self._check_declared(value, result.struct_info, bb._require_frame().analyzer)
        name = self._unique(identifier(value.name, "out"))
        return bb.emit(result, name) if plain else bb.emit_output(result, name)


    def _check_declared(self, value, sinfo, analyzer) -> None:
        """A graph output's declared dtype and shape against the deduced ones: a contradiction (a
        size, a rank, a dtype, or a named dimension provably another) is an invalid model. What is
        unknown on either side is not checked."""
        if not isinstance(sinfo, TensorStructInfo) or value.type.WhichOneof("value") != "tensor_type":
            return
        where = f"graph output '{value.name}'"
        tensor_type = value.type.tensor_type
        if tensor_type.elem_type:
            declared = ir_dtype(tensor_type.elem_type, where)
            if sinfo.dtype and sinfo.dtype != declared:
                raise OnnxImportError(f"{where} is declared {declared}, but the graph computes {sinfo.dtype}",
                                      "invalid")
        if not tensor_type.HasField("shape") or sinfo.shape is None:
            return
        dims = tensor_type.shape.dim
        shown = "(" + ", ".join(str(d) for d in sinfo.shape) + ")"
        if len(dims) != len(sinfo.shape):
            raise OnnxImportError(f"{where} is declared of rank {len(dims)}, but the graph computes shape {shown}",
                                  "invalid")
        for axis, (dim, deduced) in enumerate(zip(dims, sinfo.shape)):
            if dim.HasField("dim_value"):
                want = arith.IntImm(int(dim.dim_value))
            elif dim.HasField("dim_param") and dim.dim_param in self.shape_vars:
                want = self.shape_vars[dim.dim_param]
            else:
                continue
            if analyzer.prove_less(deduced, want) or analyzer.prove_less(want, deduced):
                declared = dim.dim_value if dim.HasField("dim_value") else dim.dim_param
                raise OnnxImportError(f"{where} is declared with {declared} on axis {axis}, but the graph computes "
                                      f"shape {shown}", "invalid")


def _has_subgraphs(graph) -> bool:
    from onnx import AttributeProto

    return any(attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for node in graph.node
               for attr in node.attribute)


FOLD_LIMIT = 1 << 20  # elements: bigger results stay computations (a weight transposed at run time)


def _fold(results: list) -> list:
    """Results computed from constants alone, computed now: shape subgraphs (Shape, arithmetic,
    Concat, Expand's shape) become constants that converters needing a compile-time value can read.
    Anything that cannot be folded is left as it was."""
    from ...ir import interpret

    pending = [r for r in results if not isinstance(r, Constant | Var)]
    if not pending:
        return results
    bb = BlockBuilder()
    try:
        with bb.function("fold", []):
            values = [bb.emit(r) for r in pending]
            bb.emit_func_output(values)
        mod = bb.get()
        sizes = [v.struct_info.shape for v in values]
        if any(s is None or not all(isinstance(d, arith.IntImm) for d in s) for s in sizes):
            return results
        if any(int(np.prod([d.value for d in s])) > FOLD_LIMIT for s in sizes):
            return results
        folded = iter(interpret(mod, "fold"))
    except (TesseraError, ValueError, TypeError, ArithmeticError):
        return results
    return [r if isinstance(r, Constant | Var) else Constant(np.asarray(next(folded))) for r in results]


def _attributes(node, label: str) -> dict:
    from onnx import AttributeProto, helper

    out = {}
    for attr in node.attribute:
        if attr.ref_attr_name:
            raise OnnxImportError(f"{label}: attribute {attr.name} refers to a function attribute")
        if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            out[attr.name] = attr  # subgraphs: the converter reads them (If, Loop, Scan)
            continue
        out[attr.name] = helper.get_attribute_value(attr)
    return out
