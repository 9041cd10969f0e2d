"""from_exported_program: a ``torch.export`` program as an IRModule whose ``main`` takes its user inputs.

The program is first reduced with ``run_decompositions`` (see ``_decomposed``). Parameters, buffers
and lifted constant tensors become named constants (weights, as ``nn.bind_weights`` makes them);
user inputs become ``main``'s parameters under their placeholder names; each of torch's shape
symbols becomes one shape variable, named after its ``torch.export.Dim`` when torch still knows the
name, and bounded by the program's range constraints (the function's ``tir_var_lower_bound`` /
``tir_var_upper_bound``, so that memory is still planned into one arena). Nodes convert one by one
through the converters of ``registry``; anything they do not implement is one ``TorchImportError``
naming the node and its op."""

from __future__ import annotations

import os
import re

import numpy as np

from ... import arith
from ...ir import BlockBuilder, IRModule, Var
from ...ir.errors import TesseraError
from ...ir.expr import Constant, Expr
from ...ir.result_names import output_names_attr
from ...ir.struct_info import TensorStructInfo
from . import converters  # noqa: F401  (registers the converters)
from .errors import TorchImportError
from .registry import NodeContext, find_converter, ir_dtype, supported_ops
from .shapes import is_symint, sym_to_prim, symbol_name


def from_exported_program(ep, dims: dict | None = None) -> IRModule:
    """``ep``: a ``torch.export.ExportedProgram`` or the path of a ``.pt2`` file that
    ``torch.export.save`` wrote (loading one runs pickled code: only open files you trust).
    ``dims``: shape variable name -> (lowest, highest), narrowing the bounds torch recorded."""
    ep = _load(ep)
    return _Importer(_decomposed(ep), dict(dims or {})).run()


def _load(ep):
    import torch

    if isinstance(ep, str | os.PathLike):
        path = os.fspath(ep)
        if not os.path.isfile(path):
            raise TorchImportError(f"{path}: no such file", "invalid")
        try:
            ep = torch.export.load(path)
        except Exception as error:  # torch raises many kinds on a bad archive; all mean the same here
            raise TorchImportError(f"{path} is not a program torch.export.save wrote: "
                                   f"{type(error).__name__}: {error}", "invalid") from None
    if not isinstance(ep, torch.export.ExportedProgram):
        raise TorchImportError(f"from_exported_program takes a torch.export.ExportedProgram or a .pt2 path, "
                               f"not {type(ep).__name__}", "invalid")
    return ep


def _decomposed(ep):
    """The program in core ATen, except the ops the importer converts whole.

    ``torch.export.export`` gives the training IR: any of some two thousand aten ops, and in-place
    ones (``detach_``) among them. ``run_decompositions`` functionalizes the graph and lowers it to
    core ATen, a closed set of about 180 ops, so that an op no converter knows is rarer. But core
    ATen also breaks up ops the IR has whole (scaled_dot_product_attention into a dozen bmm,
    expand and clone nodes, linear into permute and addmm); those are taken out of the table, so
    that they stay as they are."""
    import torch

    table = torch.export.default_decompositions()
    kept = set(supported_ops())
    for op in list(table.keys()):
        if str(op) in kept:
            table.pop(op)
    try:
        return ep.run_decompositions(table)
    except Exception as error:  # a program torch itself cannot lower
        raise TorchImportError(f"torch could not decompose the program: {type(error).__name__}: {error}",
                               "invalid") from None


def _identifier(name: str) -> str:
    text = re.sub(r"\W", "_", name) or "v"
    return text if not text[0].isdigit() else f"v{text}"


class _Importer:
    def __init__(self, ep, dims: dict):
        self.ep, self.dims = ep, dims
        self.signature = ep.graph_signature
        self.symbols: dict[str, arith.PrimExpr] = {}  # torch's symbol name -> its shape expression
        self.defined: dict[str, arith.Var] = {}  # a derived input dimension (str of torch's expr) -> its variable
        self.ranges: dict[str, tuple[int, int | None]] = {}  # shape variable -> torch's range for it
        self.weights: dict[tuple, Constant] = {}  # a tensor's storage and view -> its constant

    def run(self) -> IRModule:
        from torch.export.graph_signature import InputKind

        env: dict = {}
        params = []
        placeholders = {node.name: node for node in self.ep.graph.nodes if node.op == "placeholder"}
        user_inputs = [placeholders[spec.arg.name] for spec in self.signature.input_specs
                       if spec.kind == InputKind.USER_INPUT]
        self._name_symbols(user_inputs)
        for spec in self.signature.input_specs:
            node = placeholders[spec.arg.name]
            if spec.kind == InputKind.USER_INPUT:
                var = Var(_identifier(node.name), self._input_sinfo(node))
                env[node] = var
                params.append(var)
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                env[node] = self._weight(spec)
            else:
                raise TorchImportError(f"input '{node.name}' is a {spec.kind.name.lower()}, which the importer "
                                       "does not take (only tensors, parameters, buffers and constants)")
        bb = BlockBuilder()
        with bb.function("main", params, attrs={**self._bounds(), **output_names_attr(self._output_names())}):
            with bb.dataflow():
                for node in self.ep.graph.nodes:
                    if node.op == "call_function":
                        env[node] = self._convert(bb, node, env)
                    elif node.op == "output":
                        outputs = self._outputs(bb, node, env)
                    elif node.op != "placeholder":
                        raise TorchImportError(f"node '{node.name}' is a {node.op}, which the importer does not take")
            bb.emit_func_output(outputs[0] if len(outputs) == 1 else outputs)
        return bb.get()

    # -- shape variables ---------------------------------------------------------

    def _name_symbols(self, user_inputs) -> None:
        """One variable per symbol that is a whole dimension of a user input: the Dim's name where
        torch kept it (not after torch.export.load), else '<input>_dim<axis>'. A derived dimension
        (``2*n``, ``n + 1`` from ``Dim`` arithmetic) whose symbol is no whole dimension gets a
        variable of its own, and the symbol becomes its inverse ((d - 1) // 2)."""
        used = {_identifier(node.name) for node in user_inputs}

        def fresh(size, node, axis) -> arith.Var:
            name = _identifier(_dim_name(size) or f"{node.name}_dim{axis}")
            while name in used:
                name += "_"
            used.add(name)
            return arith.Var(name)

        sizes = [(node, axis, size) for node in user_inputs
                 for axis, size in enumerate(getattr(node.meta.get("val"), "shape", ())) if is_symint(size)]
        for node, axis, size in sizes:
            symbol = symbol_name(size)
            if symbol is not None and symbol not in self.symbols:
                var = fresh(size, node, axis)
                self.symbols[symbol] = var
                self.ranges[var.name] = self._range(size.node.expr, 1, 0)
        for node, axis, size in sizes:
            expr = size.node.expr
            free = list(getattr(expr, "free_symbols", ()))
            if symbol_name(size) is not None or str(expr) in self.defined or len(free) != 1 \
                    or str(free[0]) in self.symbols:
                continue
            linear = _linear(expr, free[0])
            if linear is None:
                continue
            scale, offset = linear
            var = fresh(size, node, axis)
            self.defined[str(expr)] = var
            self.symbols[str(free[0])] = (var - offset) // scale
            self.ranges[var.name] = self._range(free[0], scale, offset)

    def _range(self, symbol, scale: int, offset: int) -> tuple[int, int | None]:
        """The range torch exported ``scale * symbol + offset`` for: (lowest, highest or None)."""
        for key, bounds in self.ep.range_constraints.items():
            if str(key) == str(symbol):
                low, high = bounds.lower, bounds.upper
                finite = getattr(high, "is_finite", True) and high is not None and int(high) < 2**62
                return scale * int(low) + offset, (scale * int(high) + offset if finite else None)
        return 0, None

    def _input_sinfo(self, node) -> TensorStructInfo:
        import torch

        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise TorchImportError(f"input '{node.name}' is a {type(val).__name__}; only tensor inputs are supported")
        where = f"input '{node.name}'"
        shape = tuple(self.defined.get(str(size.node.expr)) or sym_to_prim(size.node.expr, self.symbols, where)
                      if is_symint(size) else arith.IntImm(int(size)) for size in val.shape)
        return TensorStructInfo(shape, ir_dtype(val.dtype, where))

    def _bounds(self) -> dict:
        lower, upper = {}, {}
        for name, (low, high) in self.ranges.items():
            lower[name] = low
            if high is not None:
                upper[name] = high
        names = set(self.ranges)
        for name, bounds in self.dims.items():
            if name not in names:
                raise TorchImportError(f"dims= bounds '{name}', which is no shape variable of the program "
                                       f"(shape variables: {', '.join(sorted(names)) or 'none'})")
            try:
                low, high = (int(b) for b in bounds)
            except (TypeError, ValueError):
                raise TorchImportError(f"dims= for '{name}' must be (lowest, highest), got {bounds!r}") from None
            was_low, was_high = lower.get(name, 0), upper.get(name)
            if low < was_low or high < low or (was_high is not None and high > was_high):
                raise TorchImportError(f"dims= for '{name}' is {low}..{high}, outside the range torch exported "
                                       f"({was_low}..{was_high if was_high is not None else 'unbounded'}): "
                                       "the program is only valid there")
            lower[name], upper[name] = low, high
        if not upper:
            return {}
        return {"tir_var_lower_bound": lower, "tir_var_upper_bound": upper}

    # -- weights -------------------------------------------------------------------

    def _weight(self, spec) -> Constant:
        target = spec.target
        tensor = self.ep.state_dict.get(target)
        if tensor is None:
            tensor = self.ep.constants.get(target)
        if tensor is None:
            raise TorchImportError(f"weight '{target}' of input '{spec.arg.name}' is missing from the program",
                                   "invalid")
        where = f"weight '{target}'"
        ir_dtype(tensor.dtype, where)
        # Tied weights (an embedding shared with the output head) are one tensor under two names:
        # one constant, so that the executable stores it once.
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
               tuple(tensor.stride()), str(tensor.dtype))
        if key not in self.weights:
            self.weights[key] = Constant(np.ascontiguousarray(tensor.detach().cpu().numpy()), name=target)
        return self.weights[key]

    # -- nodes ---------------------------------------------------------------------

    def _convert(self, bb: BlockBuilder, node, env: dict):
        import operator

        import torch

        val = node.meta.get("val")
        if node.target is operator.getitem:
            source, index = node.args
            return env[source][index]
        if is_symint(val) or (isinstance(val, int) and not isinstance(val, bool)):
            # A size computed from sizes (sym_size.int, operator.mul ...): its expression, directly.
            expr = val.node.expr if is_symint(val) else int(val)
            return sym_to_prim(expr, self.symbols, f"node '{node.name}'")
        if isinstance(val, torch.SymBool | torch.SymFloat | bool | float) \
                and not isinstance(node.target, torch._ops.OpOverload):
            return None  # a condition or a float torch computed from sizes, for its own runtime asserts
        if not isinstance(node.target, torch._ops.OpOverload):
            raise TorchImportError(f"node '{node.name}' ({_target_name(node.target)}): the op is not supported")
        overload = str(node.target)
        fn = find_converter(overload)
        if fn is None:
            raise TorchImportError(f"node '{node.name}' ({overload}): the op is not supported")
        args = _schema_args(node, lambda value: _resolve(value, env))
        ctx = NodeContext(node, overload, args, bb._require_frame().analyzer, bb.emit)
        try:
            result = fn(ctx)
            if result is None:
                return None
            if isinstance(result, list | tuple):
                return [self._bind(bb, node, value, f"{node.name}_{i}", ctx) for i, value in enumerate(result)]
            return self._bind(bb, node, result, node.name, ctx)
        except TorchImportError:
            raise
        except TesseraError as error:  # a deduction error: shapes or dtypes the IR does not accept
            raise TorchImportError(f"node '{node.name}' ({overload}): {error}", "invalid") from None

    def _bind(self, bb, node, value, name: str, ctx: NodeContext):
        if not isinstance(value, Expr):
            return value  # a size or a Python value: no binding
        if not isinstance(value, Constant | Var):
            value = bb.emit(value, _identifier(name))
        return value

    def _output_names(self) -> list[str]:
        """Names for the outputs where the module returns a dict or a dataclass (transformers'
        ModelOutput: 'last_hidden_state', 'pooler_output'); none for a tuple or a lone tensor."""
        import torch.utils._pytree as pytree

        try:
            spec = self.ep.call_spec.out_spec
            tree = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
            paths = [path for path, _ in pytree.tree_flatten_with_path(tree)[0]]
        except Exception:  # an output structure pytree cannot walk: the outputs stay unnamed
            return []
        outputs = [spec for spec in self.signature.output_specs if spec.kind.name == "USER_OUTPUT"]
        if len(paths) != len(outputs):
            return []
        names = []
        for path in paths:
            keys = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", "")))) for k in path]
            if not any(hasattr(k, "key") or hasattr(k, "name") for k in path):
                return []
            names.append(".".join(keys))
        return names

    def _outputs(self, bb: BlockBuilder, node, env: dict) -> list:
        from torch.export.graph_signature import OutputKind

        results = node.args[0]
        outputs = []
        for spec, arg in zip(self.signature.output_specs, results):
            if spec.kind != OutputKind.USER_OUTPUT:
                raise TorchImportError(f"the program's output '{spec.arg.name}' is a {spec.kind.name.lower()} "
                                       f"(of '{spec.target}'): state updates are not supported; export the "
                                       "module in eval mode")
            value = env.get(arg) if hasattr(arg, "op") else None
            if not isinstance(value, Expr):
                raise TorchImportError(f"the program's output '{spec.arg.name}' is not a tensor")
            outputs.append(bb.emit_output(value, _identifier(f"out_{spec.arg.name}")))
        if not outputs:
            raise TorchImportError("the program has no outputs", "invalid")
        return outputs


def _dim_name(size) -> str | None:
    """The name of the torch.export.Dim a size symbol came from, while torch still knows it."""
    try:
        env = size.node.shape_env
        for source in env.var_to_sources.get(size.node.expr, ()):
            source_name = source.name() if callable(source.name) else source.name
            name = env.source_name_to_debug_name.get(source_name)
            if name:
                return name
    except AttributeError:
        return None
    return None


def _linear(expr, symbol) -> tuple[int, int] | None:
    """(scale, offset) with expr == scale * symbol + offset, scale > 0, or None."""
    try:
        import sympy

        poly = sympy.Poly(expr, symbol)
        if poly.degree() != 1:
            return None
        scale, offset = (int(c) for c in poly.all_coeffs())
    except Exception:  # not a polynomial in the symbol, or not integer coefficients
        return None
    return (scale, offset) if scale > 0 else None


def _target_name(target) -> str:
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def _resolve(value, env: dict):
    """An argument as converters see it: FX nodes as their IR values, lists element by element."""
    if hasattr(value, "op") and hasattr(value, "target"):  # an fx.Node
        if value not in env:
            raise TorchImportError(f"node '{value.name}' is used before it is defined", "invalid")
        return env[value]
    if isinstance(value, list | tuple):
        return type(value)(_resolve(v, env) for v in value)
    return value


def _schema_args(node, resolve) -> dict:
    """The node's arguments by their schema names, defaults filled in."""
    out = {}
    positional = list(node.args)
    for index, argument in enumerate(node.target._schema.arguments):
        if index < len(positional) and not argument.kwarg_only:
            value = positional[index]
        elif argument.name in node.kwargs:
            value = node.kwargs[argument.name]
        elif argument.has_default_value():
            value = argument.default_value
        else:
            value = None
        out[argument.name] = resolve(value)
    return out
