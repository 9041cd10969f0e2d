"""Rewriting the virtual devices a module's struct infos name (docs/vdevice.md).

Struct info holds canonical vdevice names (``"webgpu:1"``). Text goes through the parser, which
canonicalizes every spec; a module built in Python may hold any spec the lookup rules accept
(``"webgpu"``, ``"vdevice:2"``), and ``resolve_vdevices`` canonicalizes it. ``VDeviceRewriter`` is the
one walk that touches every place a vdevice is named: parameters, bindings, match_cast patterns,
return annotations, call struct infos and ``sinfo_args``, and operator attributes named ``vdevice``
(``R.to_vdevice``'s target). ``transform.update_vdevice`` renames with it, ``transform.realize_vdevice``
places with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .expr import (
    Call,
    Expr,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Op,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    with_struct_info,
)
from .module import IRModule
from .struct_info import FuncStructInfo, StructInfo, TupleStructInfo, map_vdevices

# Whose struct info a tensor belongs to: a variable, ("ret", function) for a function's return
# annotation (a global's name, or the variable a local function is bound to), None for nothing.
Owner = Var | tuple | None


class VDeviceRewriter:
    """Rebuilds a module's graph functions with each tensor's vdevice replaced.

    Subclasses override ``vdevice(name, owner, path)``: the new vdevice (or None) of a tensor that
    names ``name`` (None when unplaced), belonging to ``owner`` at ``path`` inside its tuples;
    ``attribute`` maps an operator's ``vdevice`` attribute; ``call`` may replace a rebuilt call.
    Uses of a variable follow its new struct info; a GlobalVar carries its function's new signature.
    The input module is left as it is.
    """

    def __init__(self, mod: IRModule):
        self.mod = mod
        self.vars: dict[Var, Var] = {}
        self.signatures: dict[str, FuncStructInfo] = {}
        self.where = ""  # the global function being rebuilt, for messages

    def vdevice(self, name: str | None, owner: Owner, path: tuple[int, ...]) -> str | None:
        return name

    def attribute(self, name: str, owner: Owner) -> str:
        return self.vdevice(name, owner, ()) or name

    def call(self, call: Call, owner: Owner) -> Expr:
        return call

    # -- the walk ----------------------------------------------------------------------------------

    def run(self) -> IRModule:
        graph = self.mod.graph_functions()
        for name, func in graph.items():  # signatures first: calls may come before their callees
            self.where = name
            params = tuple(self.sinfo(p.struct_info, p) for p in func.params)
            self.signatures[name] = FuncStructInfo(params, self.sinfo(func.ret_struct_info, ("ret", name)), func.pure)
        functions = dict(self.mod.functions)
        for name, func in graph.items():
            self.where = name
            functions[name] = self.function(func, name)
        return IRModule(functions, self.mod.global_infos)

    def sinfo(self, sinfo: StructInfo, owner: Owner, prefix: tuple[int, ...] = ()) -> StructInfo:
        return map_vdevices(sinfo, lambda name, path: self.vdevice(name, owner, prefix + path))

    def function(self, func: Function, owner: str | Var) -> Function:
        params = tuple(self._new_var(p) for p in func.params)
        body = self._seq(func.body, ("ret", owner))
        return Function(params, body, self.sinfo(func.ret_struct_info, ("ret", owner)), func.attrs, func.pure)

    def _new_var(self, var: Var, sinfo: StructInfo | None = None) -> Var:
        sinfo = self.sinfo(var.struct_info, var) if sinfo is None else sinfo
        new = var if sinfo == var.struct_info else replace(var, struct_info=sinfo)
        self.vars[var] = new
        return new

    def _seq(self, seq: SeqExpr, owner: Owner) -> SeqExpr:
        """``owner``: whose value the sequence's result is (a function's result, an If's variable)."""
        blocks = tuple(type(block)(tuple(self._binding(b) for b in block.bindings)) for block in seq.blocks)
        return SeqExpr(blocks, self._expr(seq.body, owner))

    def _binding(self, binding):
        var, value = binding.var, binding.value
        if isinstance(value, Function):
            local = self.function(value, var)
            return VarBinding(self._new_var(var, local.struct_info), local)
        if isinstance(value, If):
            arms = (self._seq(value.true_branch, var), self._seq(value.false_branch, var))
            value = If(self._expr(value.cond, None), *arms, self._node_sinfo(value, var))
        else:
            value = self._expr(value, var)
        new_var = self._new_var(var)
        if isinstance(binding, MatchCast):
            return MatchCast(new_var, value, self.sinfo(binding.struct_info, var))
        return VarBinding(new_var, value)

    def _node_sinfo(self, expr: Expr, owner: Owner) -> StructInfo | None:
        return None if expr.struct_info is None else self.sinfo(expr.struct_info, owner)

    def _expr(self, expr: Expr, owner: Owner) -> Expr:
        if isinstance(expr, Var):
            return self.vars.get(expr, expr)
        if isinstance(expr, GlobalVar):
            signature = self.signatures.get(expr.name)
            return expr if signature is None else replace(expr, struct_info=signature)
        if isinstance(expr, Tuple):
            return Tuple(tuple(self._expr(f, None) for f in expr.fields))
        if isinstance(expr, TupleGetItem):
            whole = self._expr(expr.tuple_value, None)
            sinfo = whole.sinfo.fields[expr.index] if isinstance(whole.sinfo, TupleStructInfo) else expr.struct_info
            return with_struct_info(TupleGetItem(whole, expr.index), sinfo)
        if isinstance(expr, Call):
            op = expr.op if isinstance(expr.op, Op) else self._expr(expr.op, None)
            args = tuple(self._expr(a, None) for a in expr.args)
            attrs = tuple((k, self.attribute(v, owner) if k == "vdevice" and isinstance(v, str) else v)
                          for k, v in expr.attrs)
            # One sinfo_arg describes the whole result; several describe its tuple's fields (call_tir).
            many = len(expr.sinfo_args) > 1
            sinfo_args = tuple(self.sinfo(s, owner, (i,) if many else ()) for i, s in enumerate(expr.sinfo_args))
            return self.call(Call(op, args, attrs, sinfo_args, self._node_sinfo(expr, owner)), owner)
        return expr  # constants, shapes, prim values, strings, extern functions: nothing placed


class _Rename(VDeviceRewriter):
    def __init__(self, mod: IRModule, rename: Callable[[str], str]):
        super().__init__(mod)
        self.rename = rename

    def vdevice(self, name, owner, path):
        return None if name is None else self.rename(name)


def rename_vdevices(mod: IRModule, rename: Callable[[str], str]) -> IRModule:
    """``mod`` with every vdevice name ``n`` in its struct infos and attributes replaced by ``rename(n)``."""
    return _Rename(mod, rename).run()


def resolve_vdevices(mod: IRModule) -> IRModule:
    """``mod`` with every vdevice spec replaced by its canonical name (``"webgpu"`` -> ``"webgpu:0"``).

    For modules built in Python: struct info compares vdevices as strings, so deduction and the
    passes need one spelling per device. A spec that names no device raises UnknownVDeviceError."""
    return rename_vdevices(mod, mod.resolve_vdevice)


class _Uses(VDeviceRewriter):
    def __init__(self, mod: IRModule):
        super().__init__(mod)
        self.uses: dict[str, list[str]] = {}

    def vdevice(self, name, owner, path):
        if name is not None:
            places = self.uses.setdefault(name, [])
            text = f"{self.where}: {describe_owner(owner, path)}"
            if text not in places:
                places.append(text)
        return name


def vdevice_uses(mod: IRModule) -> dict[str, list[str]]:
    """Each vdevice name the module's struct infos and attributes use, with where: ``"main: lv0"``."""
    rewriter = _Uses(mod)
    rewriter.run()
    return rewriter.uses


def describe_owner(owner: Owner, path: tuple[int, ...] = ()) -> str:
    """How messages name the value a tensor belongs to: ``lv0``, ``t[1]``, ``the result of main``."""
    index = "".join(f"[{i}]" for i in path)
    if isinstance(owner, Var):
        return owner.name_hint + index
    if isinstance(owner, tuple) and owner[0] == "ret":
        function = owner[1].name_hint if isinstance(owner[1], Var) else owner[1]
        return f"the result of {function}{index}"
    return "a call's attributes"
