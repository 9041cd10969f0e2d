"""realize_vdevice: place every tensor of a module on a virtual device (TVM's RealizeVDevice).

A few places state where a value lives: a parameter's or a binding's annotation, a function's
return annotation, R.to_vdevice's result. Every other value goes where the values it is computed
with are: an operator's operands and its result share a device (deduction insists on it,
op/common.py ``same_vdevice``), a variable bound to another is that one, a tuple's fields are its
elements, an ``If``'s result is both arms', and across a call the arguments are the callee's
parameters and the bound variable is the callee's result. These relations split the module's
tensors into groups (a union-find: it propagates backward and forward, and across calls in either
direction, without iterating to a fixed point), and each group takes the one device stated in it.
Two devices stated in one group are a conflict: some value would have to live on both, with no
R.to_vdevice between them.

Hints come last, as in TVM: ``lv = R.hint_on_device(x, "gpu")`` puts lv on the hinted vdevice
(op/device.py ``hinted_vdevice``), and x there too when nothing placed x's group; the hint then
becomes ``lv = x``, or ``lv = R.to_vdevice(x, dev)`` when x lives elsewhere.

A device that deduction carried forward from an operand is not a statement: past a hint, deduction
carried the device of the hint's input, which the hint may be about to change.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir.errors import UnknownVDeviceError, VDeviceConflictError
from ..ir.expr import Call, Expr, Function, GlobalVar, If, Op, Tuple, TupleGetItem, Var, with_struct_info
from ..ir.module import IRModule
from ..ir.printer import print_binding
from ..ir.struct_info import TensorStructInfo, TupleStructInfo, tensor_paths
from ..ir.vdevice import VDeviceRewriter, describe_owner, resolve_vdevices
from ..op.device import hinted_vdevice
from ..op.registry import make_call

Key = tuple  # (owner, path): a tensor in a variable's struct info, or in ("ret", function)'s annotation
Why = Callable[[], str]  # says, for a message, what placed a group; called only on an error
MOVES = ("to_vdevice", "hint_on_device")  # the operators whose result may live elsewhere than their input


def realize_vdevice(mod: IRModule) -> IRModule:
    """``mod`` with every tensor that some annotation, call or hint places on a vdevice annotated with it."""
    mod = resolve_vdevices(mod)
    placement = _Placement(mod)
    placement.collect()
    return _Realize(mod, placement).run()


class _Placement:
    """The groups of tensors that share a device, and the device each group was placed on."""

    def __init__(self, mod: IRModule):
        self.mod = mod
        self.parent: dict[Key, Key] = {}
        self.placed: dict[Key, tuple[str, Why]] = {}  # a group's root -> its device, and why
        self.stated: dict[Key, str | None] = {}  # the device each tensor's struct info names now
        self.locals: dict[Var, Function] = {}
        self.hints: list[tuple[Expr, str, Why]] = []

    def collect(self) -> None:
        graph = self.mod.graph_functions()
        for name, func in graph.items():  # every signature first: a caller may come before its callee
            self._signature(func, name, name)
        for name, func in graph.items():
            self._body(func, name, name)
        for value, vdevice, why in self.hints:
            for key in _slots(value).values():
                if self.vdevice_of(key) is None:
                    self._place(key, vdevice, why, why)

    def vdevice_of(self, key: Key) -> str | None:
        placed = self.placed.get(self._find(key))
        return placed[0] if placed else None

    def knows(self, key: Key) -> bool:
        return key in self.parent

    # -- the union-find ------------------------------------------------------------------------------

    def _find(self, key: Key) -> Key:
        root = self.parent.setdefault(key, key)
        while self.parent[root] != root:
            root = self.parent[root]
        while key != root:
            self.parent[key], key = root, self.parent[key]
        return root

    def _place(self, key: Key, vdevice: str, why: Why, where: Why) -> None:
        root = self._find(key)
        have = self.placed.get(root)
        if have is None:
            self.placed[root] = (vdevice, why)
        elif have[0] != vdevice:
            raise _conflict(key, have, (vdevice, why), where)

    def _join(self, key: Key, other: Key, where: Why) -> None:
        """``other`` (an operand, an argument) lives where ``key`` does."""
        root, other_root = self._find(key), self._find(other)
        if root == other_root:
            return
        mine, theirs = self.placed.get(root), self.placed.get(other_root)
        if mine and theirs and mine[0] != theirs[0]:
            raise _conflict(other, mine, theirs, where)
        self.parent[other_root] = root
        if theirs and not mine:
            self.placed[root] = theirs

    # -- the walk ------------------------------------------------------------------------------------

    def _signature(self, func: Function, owner, where: str) -> None:
        for param in func.params:
            for path, tensor in tensor_paths(param.struct_info):
                self._state((param, path), tensor.vdevice, lambda p=param: f"parameter {p.name_hint} of {where}")
        for path, tensor in tensor_paths(func.ret_struct_info):
            self._state((("ret", owner), path), tensor.vdevice, lambda: f"the return annotation of {where}")

    def _state(self, key: Key, vdevice: str | None, why: Why) -> None:
        self.stated[key] = vdevice
        self._find(key)
        if vdevice:
            self._place(key, vdevice, why, why)

    def _body(self, func: Function, owner, where: str) -> None:
        self._seq(func.body, where)
        ret = {path: (("ret", owner), path) for path, _ in tensor_paths(func.ret_struct_info)}

        def at() -> str:
            return f"the result of {where}"

        moves, links, groups = self._relations(func.body.body, ret, where, at)
        for vdevice in moves:
            for key in ret.values():
                self._place(key, vdevice, at, at)
        self._join_all(links, groups, at)

    def _seq(self, seq, where: str) -> None:
        for block in seq.blocks:
            for binding in block.bindings:
                self._binding(binding, where)

    def _binding(self, binding, where: str) -> None:
        var, value = binding.var, binding.value
        if isinstance(value, Function):
            self.locals[var] = value
            inner = f"{where}, nested function {var.name_hint}"
            self._signature(value, var, inner)
            self._body(value, var, inner)
            return

        def at() -> str:
            return f"{where}: {print_binding(binding)}"

        mine = {path: (var, path) for path, _ in tensor_paths(var.struct_info)}
        moves, links, groups = self._relations(value, mine, where, at)
        for path, tensor in tensor_paths(var.struct_info):
            key = (var, path)
            self.stated[key] = tensor.vdevice
            for vdevice in moves:
                self._place(key, vdevice, at, at)
            if not moves and tensor.vdevice and not self._carried(key, tensor.vdevice, links, groups):
                self._place(key, tensor.vdevice, at, at)
        self._join_all(links, groups, at)

    def _relations(self, value: Expr, mine: dict, where: str, at: Why) -> tuple[list, list, list]:
        """How ``value``, bound to the tensors ``mine``, relates them to others: the devices a move puts
        them on; links, (one of mine, another tensor) pairs on one device; groups of tensors on one device."""
        if isinstance(value, If):  # each arm's result is the If's (an arm may end in an unbound call)
            moves, links, groups = [], [], []
            for arm in (value.true_branch, value.false_branch):
                self._seq(arm, where)
                arm_moves, arm_links, arm_groups = self._relations(arm.body, mine, where, at)
                moves, links, groups = moves + arm_moves, links + arm_links, groups + arm_groups
            return moves, links, groups
        if isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in MOVES:
            return [value.attr("vdevice") if value.op.name == "to_vdevice" else self._hint(value, at)], [], []
        if isinstance(value, Call) and isinstance(value.op, Op):
            return [], [], [list(mine.values()) + [key for arg in value.args for key in _slots(arg).values()]]
        if isinstance(value, Call):
            return [], self._call_links(value, mine), []
        return [], _matched(mine, _slots(value)), []  # a variable, a tuple, a tuple's field, a match_cast's value

    def _join_all(self, links, groups, at: Why) -> None:
        for key, other in links:
            self._join(key, other, at)
        for group in groups:
            for other in group[1:]:
                self._join(group[0], other, at)

    def _carried(self, key: Key, vdevice: str, links, groups) -> bool:
        """Whether deduction carried ``vdevice`` to ``key`` from an operand (so nothing states it anew)."""
        sources = [theirs for mine, theirs in links if mine == key]
        sources += [other for group in groups if key in group for other in group if other != key]
        return any(self.stated.get(source) == vdevice for source in sources)

    def _hint(self, call: Call, at: Why) -> str:
        try:
            vdevice = hinted_vdevice(self.mod, call.attr("device"))
        except UnknownVDeviceError as error:
            raise UnknownVDeviceError(f"{error} (in {at()})") from None
        self.hints.append((call.args[0], vdevice, at))
        return vdevice

    def _call_links(self, call: Call, mine: dict) -> list:
        """A call of a module function: arguments are its parameters, the result its result."""
        if isinstance(call.op, GlobalVar) and isinstance(self.mod.functions.get(call.op.name), Function):
            callee, owner = self.mod.functions[call.op.name], call.op.name
        elif isinstance(call.op, Var) and call.op in self.locals:
            callee, owner = self.locals[call.op], call.op
        else:
            return []  # a runtime function: nothing is known of where it puts its result
        links = []
        for param, arg in zip(callee.params, call.args):
            links += _matched({p: (param, p) for p, _ in tensor_paths(param.struct_info)}, _slots(arg))
        return links + _matched(mine, {p: (("ret", owner), p) for p, _ in tensor_paths(callee.ret_struct_info)})


def _slots(expr: Expr) -> dict[tuple, Key]:
    """The tensors an operand is made of, by their place in it."""
    if isinstance(expr, Var):
        return {path: (expr, path) for path, _ in tensor_paths(expr.struct_info)}
    if isinstance(expr, Tuple):
        return {(i,) + path: key for i, field in enumerate(expr.fields) for path, key in _slots(field).items()}
    if isinstance(expr, TupleGetItem) and isinstance(expr.tuple_value.sinfo, TupleStructInfo):
        index = expr.index % len(expr.tuple_value.sinfo.fields)
        return {path[1:]: key for path, key in _slots(expr.tuple_value).items() if path[0] == index}
    return {}  # constants and shapes live nowhere in particular


def _matched(mine: dict, theirs: dict) -> list:
    return [(key, theirs[path]) for path, key in mine.items() if path in theirs]


def _conflict(key: Key, first: tuple[str, Why], second: tuple[str, Why], where: Why) -> VDeviceConflictError:
    owner, path = key
    return VDeviceConflictError(
        f"{describe_owner(owner, path)} would have to be on both {first[0]} and {second[0]}, with no R.to_vdevice "
        f"between them (in {where()}): {first[0]} because of {first[1]()}; {second[0]} because of {second[1]()}")


class _Realize(VDeviceRewriter):
    """Writes the placement into the module's struct infos and turns hints into moves or nothing."""

    def __init__(self, mod: IRModule, placement: _Placement):
        super().__init__(mod)
        self.placement = placement

    def vdevice(self, name, owner, path):
        key = (owner, path)
        return self.placement.vdevice_of(key) if self.placement.knows(key) else name

    def attribute(self, name, owner):
        return name  # R.to_vdevice's target is where its result goes, whatever else moves

    def call(self, call, owner):
        if not (isinstance(call.op, Op) and call.op.name == "hint_on_device"):
            return call
        value = call.args[0]
        vdevice = hinted_vdevice(self.mod, call.attr("device"))
        if isinstance(value.sinfo, TensorStructInfo) and value.sinfo.vdevice == vdevice:
            return value
        return with_struct_info(make_call("to_vdevice", value, vdevice=vdevice), call.struct_info)
