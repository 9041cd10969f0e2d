"""Loop and Scan: each becomes a recursive function of the module, one iteration per call.

The IR has no loop construct; it has functions that call themselves (docs/programs.md), which is
what a loop is. A node's body graph becomes a function ``loop_<n>(i, <state>..., <captured>...)``:

    if keep(i, state):                    # Loop: i < M and cond; Scan: i < length
        <the body graph>                  # the next state and this iteration's scan outputs
        rest = loop_<n>(i + 1, <next state>..., <captured>...)
        (rest's final state, concat(this iteration's outputs, rest's outputs))
    else:
        (<state>..., empty scan outputs)

Scan outputs are concatenated on the way back out of the recursion rather than written into a
buffer of the trip count's size: the trip count of a Loop is known only when it ends (its
condition is data), and the IR has no in-place update; a concatenation needs neither. Each scan
output's leading dimension is therefore unknown to the IR (``ndim`` only). Values of the
enclosing graph that the body reads are passed as extra parameters (constants are used directly).
"""

from __future__ import annotations

import numpy as np

from ... import arith
from ... import op as R
from ...ir import BlockBuilder, Var
from ...ir.errors import TesseraError
from ...ir.expr import Call, Constant, GlobalVar, ShapeExpr, Tuple, TupleGetItem
from ...ir.struct_info import FuncStructInfo, TensorStructInfo, TupleStructInfo, describe, is_base_of
from .convert_common import axis_of, const
from .errors import OnnxImportError
from .loader import ir_dtype
from .registry import NodeContext, converter


def _free_names(graph) -> list[str]:
    """Names a graph (and the graphs nested in it) reads but does not define: the enclosing
    graph's values it captures, in first-use order."""
    defined = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    used: list[str] = []
    for node in graph.node:
        names = list(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                names.extend(_free_names(sub))
        for name in names:
            if name and name not in defined and name not in used:
                used.append(name)
        defined.update(node.output)
    used.extend(value.name for value in graph.output if value.name not in defined and value.name not in used)
    return used


def _param_sinfo(sinfo):
    """A parameter's struct info from a value's: the shape kept where each dimension is a number or
    a plain variable (which the parameter then defines), else only the rank."""
    if not isinstance(sinfo, TensorStructInfo):
        return sinfo
    if sinfo.shape is None or all(isinstance(d, arith.IntImm | arith.Var) for d in sinfo.shape):
        return sinfo
    return TensorStructInfo(None, sinfo.dtype, sinfo.ndim, sinfo.vdevice)


def _rank_only(sinfo: TensorStructInfo) -> TensorStructInfo:
    return TensorStructInfo(None, sinfo.dtype, sinfo.ndim, sinfo.vdevice)


def recursive_loop(ctx: NodeContext, state: list, fixed: list, keep, body, stack_axes: list[int],
                   reverse: list[bool]) -> list:
    """A loop of a converter's own as a recursive function (see ``_Recursion``): ``body(bb, i,
    state, fixed)`` emits one iteration into ``bb`` and gives (next state, scan slices). Returns
    the final state, then the stacked scan outputs."""
    return _Recursion(ctx, None, state, fixed, keep, body, None, None, stack_axes, reverse).build()


class _Recursion:
    """Builds the recursive function of one Loop or Scan node.

    ``state``: the initial values carried from one iteration to the next (after the counter).
    ``fixed``: values passed unchanged to every call (a Loop's M, a Scan's sequences).
    ``keep(i, state, fixed)``: the condition to run one more iteration.
    ``body_env(i, state, fixed)``: the body graph's inputs (name -> expression) for one iteration;
    with no graph, ``body_env(bb, i, state, fixed)`` is the body itself: it emits one iteration into
    ``bb`` and gives (next state, scan slices).
    ``next_state(outputs)``: from the body's outputs, the next state; ``scans(outputs)``: the
    iteration's scan outputs, each with the axis it is stacked on and whether it is stacked in
    reverse (the iteration's slice goes after the rest's)."""

    def __init__(self, ctx: NodeContext, graph, state: list, fixed: list, keep, body_env, next_state, scans,
                 stack_axes: list[int], reverse: list[bool]):
        self.ctx, self.graph = ctx, graph
        self.state, self.fixed = state, fixed
        self.keep, self.body_env, self.next_state, self.scans = keep, body_env, next_state, scans
        self.stack_axes, self.reverse = stack_axes, reverse
        importer = ctx.importer
        importer.loop_count = getattr(importer, "loop_count", 0) + 1
        self.name = f"{ctx.node.op_type.lower()}_{importer.loop_count - 1}"
        outer = ctx.env
        self.captured_names, self.captured = [], []
        self.constants = {}
        for name in _free_names(graph) if graph is not None else ():
            value = outer.get(name)
            if value is None:
                raise ctx.error(f"the body reads '{name}', which is not defined before the node", "invalid")
            if isinstance(value, Constant):
                self.constants[name] = value
            else:
                self.captured_names.append(name)
                self.captured.append(value)

    def build(self) -> list:
        """The call, emitted; its results (final state, then scan outputs) as variables."""
        ctx = self.ctx
        counter = Var("i", TensorStructInfo((), "int64"))
        state_sinfo = [_param_sinfo(v.struct_info) for v in self.state]
        # A state whose shape the body changes (a growing tensor) is carried with its rank only.
        for _ in range(len(self.state) + 1):
            probe = self._function(counter, state_sinfo, None)
            changed = [k for k, (want, got) in enumerate(zip(state_sinfo, probe.next_sinfo))
                       if not is_base_of(want, got, arith.Analyzer(nonnegative=True))]
            if not changed:
                break
            for k in changed:
                if state_sinfo[k].shape is None:
                    raise ctx.error(f"loop-carried value {k} changes its rank or dtype from "
                                    f"{describe(state_sinfo[k])} to {describe(probe.next_sinfo[k])}", "unsupported")
                state_sinfo[k] = _rank_only(state_sinfo[k])
        scan_sinfo = [TensorStructInfo(None, s.dtype, s.ndim + 1) for s in probe.scan_sinfo]
        ret = TupleStructInfo(tuple(state_sinfo) + tuple(scan_sinfo))
        built = self._function(counter, state_sinfo, ret)
        ctx.builder.add_func(built.func, self.name)
        for name, func in built.nested.items():
            ctx.builder.add_func(func, name)
        args = [const(0, "int64"), *self.state, *self.fixed, *self.captured]
        call = ctx.emit(Call(GlobalVar(self.name), tuple(args)))
        results = [ctx.emit(TupleGetItem(call, k)) for k in range(len(ret.fields))]
        # A scan output of static slices gets its shape back, the count of iterations a variable.
        for k, (sinfo, axis) in enumerate(zip(probe.scan_sinfo, self.stack_axes)):
            if sinfo.shape is not None and all(isinstance(d, arith.IntImm) for d in sinfo.shape):
                dims = list(sinfo.shape)
                dims.insert(axis, arith.Var(f"{self.name}_trips"))
                index = len(self.state) + k
                results[index] = ctx.builder.match_cast(results[index], TensorStructInfo(tuple(dims), sinfo.dtype))
        return results

    def _function(self, counter: Var, state_sinfo: list, ret):
        """The function (``ret`` given) or, ``ret`` None, a probe: the body converted once to learn
        its outputs' struct info."""
        ctx, importer = self.ctx, self.ctx.importer
        params_state = [Var(f"state{k}", s) for k, s in enumerate(state_sinfo)]
        params_fixed = [Var(f"fixed{k}", _param_sinfo(v.struct_info)) for k, v in enumerate(self.fixed)]
        params_captured = [Var(f"captured{k}", _param_sinfo(v.struct_info)) for k, v in enumerate(self.captured)]
        params = [counter, *params_state, *params_fixed, *params_captured]
        signatures = {}
        if ret is not None:
            signatures[self.name] = FuncStructInfo(tuple(p.struct_info for p in params), ret)
        bb = BlockBuilder(signatures=signatures)
        env = dict(self.constants)
        env.update(zip(self.captured_names, params_captured))
        outer_bb = importer.bb
        importer.bb = bb
        result = _Built()
        try:
            with bb.function(self.name, params):
                if ret is None:  # the probe: the body once, straight through
                    next_state, scans = self._body(bb, env, counter, params_state, params_fixed)
                    result.next_sinfo = [s.struct_info for s in next_state]
                    result.scan_sinfo = [s.struct_info for s in scans]
                    bb.emit_func_output(Tuple(tuple(next_state) + tuple(scans)) if next_state or scans
                                        else Tuple((counter,)))
                else:
                    keep = bb.emit(self.keep(counter, params_state, params_fixed), "keep")
                    with bb.branch() as then_arm:
                        next_state, scans = self._body(bb, env, counter, params_state, params_fixed)
                        scan_sinfo = [s.struct_info for s in scans]
                        then_arm.result = self._next(bb, counter, next_state, scans, params_fixed,
                                                     params_captured)
                    with bb.branch() as else_arm:
                        else_arm.result = Tuple(tuple(params_state) + tuple(
                            self._empty(s, axis) for s, axis in zip(scan_sinfo, self.stack_axes)))
                    out = bb.emit_if(keep, then_arm.seq, else_arm.seq, "result")
                    bb.emit_func_output(out)
        except OnnxImportError:
            raise
        except TesseraError as error:
            raise ctx.error(f"its body does not fit a recursive function: {error}", "unsupported") from None
        finally:
            importer.bb = outer_bb
        functions = bb.get().functions
        result.func = functions[self.name]
        result.nested = {name: f for name, f in functions.items() if name != self.name}
        return result

    def _body(self, bb, env, counter, params_state, params_fixed):
        """One iteration: (next state, scan slices), bound in ``bb``."""
        if self.graph is None:  # a body of the converter's own (an RNN over a symbolic length)
            next_state, scans = self.body_env(bb, counter, params_state, params_fixed)
        else:
            env.update(self.body_env(counter, params_state, params_fixed))
            outputs = self.ctx.importer.convert_subgraph(self.graph, env)
            next_state, scans = self.next_state(outputs), self.scans(outputs)
        scans = _bound(bb, scans)
        for k, scan in enumerate(scans):
            sinfo = scan.struct_info
            if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None:
                raise self.ctx.error(f"scan output {k} of the body is {describe(sinfo)}, whose shape is unknown; "
                                     "the stacked output needs it")
        return _bound(bb, next_state), scans

    def _next(self, bb, counter, next_state, scans, params_fixed, params_captured):
        """After an iteration's body: the call for the next iteration, or, where there is none
        and there are scan outputs, this iteration's slices alone. (Stacking them onto an empty
        tensor would hold the loop's end in one place, but zero-sized tensors are best kept for a
        loop that runs zero times.)"""
        following = bb.emit(R.add(counter, const(1, "int64")), "following")
        if not scans:
            return self._recurse(bb, following, next_state, scans, params_fixed, params_captured)
        more = bb.emit(self.keep(following, next_state, params_fixed), "more")
        with bb.branch() as recurse:
            recurse.result = self._recurse(bb, following, next_state, scans, params_fixed, params_captured)
        with bb.branch() as last:
            last.result = Tuple(tuple(next_state) + tuple(
                bb.emit(R.expand_dims(scan, axis=axis)) for scan, axis in zip(scans, self.stack_axes)))
        return bb.emit_if(more, recurse.seq, last.seq, "step")

    def _recurse(self, bb, following, next_state, scans, params_fixed, params_captured):
        state_count = len(next_state)
        # The next state is passed as its parameter's struct info says (a growing one by rank only).
        args = [following, *next_state, *params_fixed, *params_captured]
        rest = bb.emit(Call(GlobalVar(self.name), tuple(args)), "rest")
        fields = [bb.emit(TupleGetItem(rest, k)) for k in range(state_count)]
        for k, (scan, axis, reverse) in enumerate(zip(scans, self.stack_axes, self.reverse)):
            # The later iterations' count is known only at run time: a variable that match_cast binds,
            # so that the concatenation's shape (1 + count on the stacked axis) is known.
            dims = list(scan.struct_info.shape)
            dims.insert(axis, arith.Var(f"{self.name}_later{k}"))
            later = bb.match_cast(TupleGetItem(rest, state_count + k),
                                  TensorStructInfo(tuple(dims), scan.struct_info.dtype), "later")
            piece = bb.emit(R.expand_dims(scan, axis=axis))
            fields.append(bb.emit(R.concat([later, piece] if reverse else [piece, later], axis=axis)))
        return Tuple(tuple(fields))

    def _empty(self, sinfo, axis: int):
        """An iteration's scan output stacked zero times: its shape with 0 inserted at ``axis``."""
        if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None:
            raise self.ctx.error("a scan output's shape is unknown, so the output of a loop that runs "
                                 "zero times cannot be built")
        dims = list(sinfo.shape)
        dims.insert(axis, arith.IntImm(0))
        return R.zeros(ShapeExpr(tuple(dims)), dtype=sinfo.dtype)


def _bound(bb: BlockBuilder, values) -> list:
    """Values as variables or constants, whose struct info is known."""
    return [v if isinstance(v, Var | Constant) else bb.emit(v) for v in values]


class _Built:
    func = None
    nested: dict = {}
    next_sinfo: list = []
    scan_sinfo: list = []


def _scalar(ctx: NodeContext, index: int, dtype: str):
    value = ctx.input(index)
    if ctx.dtype(index) != dtype:
        raise ctx.error(f"input {index} is {ctx.dtype(index)}, not {dtype}", "invalid")
    if ctx.rank(index) != 0:
        value = ctx.emit(R.reshape(value, ShapeExpr(())))
    return value


def _graph_output_rank(graph, index: int) -> int | None:
    value = graph.output[index]
    tensor_type = value.type.tensor_type
    return len(tensor_type.shape.dim) if value.type.HasField("tensor_type") and tensor_type.HasField("shape") else None


# -- Loop -----------------------------------------------------------------------------------------


@converter("Loop", attrs=("body",))
def _loop(ctx: NodeContext):
    """for (i = 0; i < M && cond; i++) { cond, state = body(i, cond, state); scans += ... }"""
    graph = ctx.attrs["body"].g
    state = [ctx.input(k) for k in range(2, len(ctx.inputs))]
    body_inputs = [value.name for value in graph.input]
    if len(body_inputs) != 2 + len(state):
        raise ctx.error(f"the body takes {len(body_inputs)} inputs, the node carries {len(state)} values "
                        "(the body takes the iteration number, the condition, then those)", "invalid")
    if len(graph.output) < 1 + len(state):
        raise ctx.error(f"the body gives {len(graph.output)} outputs, fewer than 1 + {len(state)}", "invalid")
    for value in graph.input[:2]:  # the iteration number and the condition: scalars
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            ir_dtype(value.type.tensor_type.elem_type, f"body input '{value.name}'")
    has_max, has_cond = ctx.has_input(0), ctx.has_input(1)
    if not has_max and not has_cond:
        raise ctx.error("neither a trip count nor a condition: the loop never ends", "invalid")
    trip = _scalar(ctx, 0, "int64") if has_max else None
    cond = _scalar(ctx, 1, "bool") if has_cond else Constant(np.array(True))
    scan_count = len(graph.output) - 1 - len(state)

    def keep(i, params_state, fixed):
        running = params_state[0]
        if trip is None:
            return running
        below = R.less(i, fixed[0])
        return R.logical_and(below, running) if has_cond else below

    def body_env(i, params_state, fixed):
        env = {body_inputs[0]: i, body_inputs[1]: params_state[0]}
        env.update(zip(body_inputs[2:], params_state[1:]))
        return env

    def next_state(outputs):
        cond_out = outputs[0]
        sinfo = cond_out.struct_info
        if not isinstance(sinfo, TensorStructInfo) or sinfo.dtype != "bool":
            raise ctx.error(f"the body's condition output is {sinfo}, not a bool tensor", "invalid")
        if sinfo.ndim != 0:
            cond_out = R.reshape(cond_out, ShapeExpr(()))
        return [ctx.importer.bb.emit(cond_out) if not isinstance(cond_out, Var | Constant) else cond_out,
                *outputs[1:1 + len(state)]]

    def scans(outputs):
        return outputs[1 + len(state):]

    recursion = _Recursion(ctx, graph, [cond, *state], [trip] if trip is not None else [], keep, body_env,
                           next_state, scans, [0] * scan_count, [False] * scan_count)
    results = recursion.build()
    if isinstance(trip, Constant) and not has_cond:  # a constant count and no condition: exactly M
        for index in range(1 + len(state), len(results)):
            sinfo = results[index].struct_info
            if isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None:
                dims = (arith.IntImm(max(int(trip.data), 0)), *sinfo.shape[1:])
                results[index] = ctx.builder.match_cast(results[index], TensorStructInfo(dims, sinfo.dtype))
    return results[1:]  # the final condition is not an output


# -- Scan -----------------------------------------------------------------------------------------


@converter("Scan", attrs=("body", "num_scan_inputs", "scan_input_axes", "scan_input_directions",
                          "scan_output_axes", "scan_output_directions"))
def _scan(ctx: NodeContext):
    """Opset 11 and up: state carried across the slices of the scan inputs along their axes."""
    graph = ctx.attrs["body"].g
    count = ctx.attr("num_scan_inputs")
    if count is None or count < 1:
        raise ctx.error("num_scan_inputs must be at least 1", "invalid")
    state_count = len(ctx.inputs) - count
    if state_count < 0:
        raise ctx.error(f"num_scan_inputs is {count}, the node has {len(ctx.inputs)} inputs", "invalid")
    state = [ctx.input(k) for k in range(state_count)]
    sequences = [ctx.input(state_count + k) for k in range(count)]
    in_axes = [axis_of(ctx, a, ctx.rank(state_count + k))
               for k, a in enumerate(ctx.ints("scan_input_axes", (0,) * count))]
    in_reverse = [bool(d) for d in ctx.ints("scan_input_directions", (0,) * count)]
    scan_count = len(graph.output) - state_count
    if len(graph.input) != state_count + count or scan_count < 0:
        raise ctx.error(f"the body takes {len(graph.input)} inputs and gives {len(graph.output)} outputs; "
                        f"the node carries {state_count} values over {count} scan inputs", "invalid")
    if len(in_axes) != count or len(in_reverse) != count:
        raise ctx.error("scan_input_axes and scan_input_directions need one entry per scan input", "invalid")
    lengths = [ctx.dims(state_count + k)[axis] for k, axis in enumerate(in_axes)]
    if not all(ctx.analyzer.prove_equal(length, lengths[0]) for length in lengths):
        raise ctx.error(f"the scan inputs' lengths {', '.join(map(str, lengths))} are not the same", "invalid")
    static = ctx.analyzer.as_int(lengths[0])
    # The length as a tensor: a constant, or for a symbolic one a sum of that many ones.
    length = const(static, "int64") if static is not None else \
        ctx.emit(R.sum(R.ones(ShapeExpr((lengths[0],)), dtype="int64")))
    out_axes_attr = ctx.ints("scan_output_axes", (0,) * scan_count)
    out_reverse = [bool(d) for d in ctx.ints("scan_output_directions", (0,) * scan_count)]
    if len(out_axes_attr) != scan_count or len(out_reverse) != scan_count:
        raise ctx.error("scan_output_axes and scan_output_directions need one entry per scan output", "invalid")
    out_axes = []
    for k, axis in enumerate(out_axes_attr):
        rank = _graph_output_rank(graph, state_count + k)
        if axis < 0:
            if rank is None:
                raise ctx.error(f"scan_output_axes[{k}] is negative and the body's output rank is not declared")
            axis += rank + 1
        out_axes.append(axis)
    body_inputs = [value.name for value in graph.input]

    def keep(i, params_state, fixed):
        return R.less(i, fixed[0])

    def body_env(i, params_state, fixed):
        env = dict(zip(body_inputs[:state_count], params_state))
        for k, (sequence, axis, reverse) in enumerate(zip(fixed[1:], in_axes, in_reverse)):
            index = R.subtract(R.subtract(fixed[0], const(1, "int64")), i) if reverse else i
            env[body_inputs[state_count + k]] = ctx.importer.bb.emit(R.take(sequence, index, axis=axis))
        return env

    def next_state(outputs):
        return outputs[:state_count]

    def scans(outputs):
        return outputs[state_count:]

    recursion = _Recursion(ctx, graph, state, [length, *sequences], keep, body_env,
                           next_state, scans, out_axes, out_reverse)
    results = recursion.build()
    # A Scan runs exactly its length's iterations: its outputs get that size on their stacked axis.
    for k, axis in enumerate(out_axes):
        sinfo = results[state_count + k].struct_info
        if isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None:
            dims = list(sinfo.shape)
            dims[axis] = lengths[0]
            results[state_count + k] = ctx.builder.match_cast(results[state_count + k],
                                                              TensorStructInfo(tuple(dims), sinfo.dtype))
    return results
