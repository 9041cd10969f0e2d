"""unalias_kernel_args: no kernel launch binds one tensor to two of its storage bindings.

Browsers reject a dispatch whose writable storage bindings overlap (Chrome: "writable storage
buffer binding aliasing"), and every binding here is writable (docs/kernels.md). Two graph
patterns would bind one tensor twice: a call that passes the same tensor twice (RoPE's
``concat((angles, angles))``) and an in-place kernel, whose output is its input
(``kv_cache_write``). This pass gives each such call a kernel that takes the tensor once:

- a repeated input is merged into its first occurrence;
- an in-place output is merged into the input it updates; the kernel then has no output of its
  own, and ``attrs["result_is_input"]`` names the input that holds the result
  (explicit_allocation binds the call's value to that input). A kernel of several results
  (``rope_append``) keeps the others; ``attrs["results_in_inputs"]`` maps each merged result's
  position to its input.

Runs after legalization (and fusion), before explicit_allocation.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.expr import Call, GlobalVar, Op, Tuple, VarBinding, with_struct_info
from ..ir.module import IRModule
from ..tir.ir import PrimFunc
from ..tir.substitute import substitute_buffers
from .rewrite import map_graph_functions, rewrite_function


def unalias_kernel_args(mod: IRModule) -> IRModule:
    originals, functions = dict(mod.functions), dict(mod.functions)
    made: dict[tuple, str] = {}

    def specialize(name: str, fields: tuple) -> tuple[str, tuple] | None:
        func = originals[name]
        if not isinstance(func, PrimFunc):
            return None
        first: dict[int, int] = {}
        merged_inputs = {}
        for index, arg in enumerate(fields):
            key = id(arg)
            if key in first:
                merged_inputs[index] = first[key]
            else:
                first[key] = index
        inplace = func.attrs.get("inplace") or {}
        if not merged_inputs and not inplace:
            return None
        signature = (name, tuple(sorted(merged_inputs.items())))
        if signature not in made:
            mapping = {func.inputs[i]: func.inputs[j] for i, j in merged_inputs.items()}
            mapping.update({func.outputs[o]: func.inputs[i] for o, i in inplace.items()})
            inputs = tuple(b for i, b in enumerate(func.inputs) if i not in merged_inputs)
            outputs = tuple(b for o, b in enumerate(func.outputs) if o not in inplace)
            attrs = {k: v for k, v in func.attrs.items() if k != "inplace"}
            if len(func.outputs) == 1 and inplace:
                (target,) = inplace.values()  # one in-place output: the kernel's result
                attrs["result_is_input"] = inputs.index(func.inputs[merged_inputs.get(target, target)])
            elif inplace:  # a tuple of results, some of them inputs updated in place
                attrs["results_in_inputs"] = {o: inputs.index(func.inputs[merged_inputs.get(i, i)])
                                              for o, i in inplace.items()}
            new_name = f"{name}_unaliased" if merged_inputs else name
            while new_name in functions and new_name != name:
                new_name += "_"
            functions[new_name] = replace(func, name=new_name, inputs=inputs, outputs=outputs, attrs=attrs,
                                          body=substitute_buffers(func.body, mapping))
            made[signature] = new_name
        kept = tuple(f for i, f in enumerate(fields) if i not in merged_inputs)
        return made[signature], kept

    def rewrite(binding, dataflow):
        value = binding.value
        if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
                and value.op.name == "call_tir"):
            return [binding]
        special = specialize(value.args[0].name, value.args[1].fields)
        if special is None:
            return [binding]
        name, kept = special
        args = (GlobalVar(name), Tuple(kept)) + tuple(value.args[2:])
        return [VarBinding(binding.var, with_struct_info(Call(value.op, args, value.attrs, value.sinfo_args),
                                                         value.struct_info))]

    graph = map_graph_functions(mod, lambda n, f: rewrite_function(f, rewrite) if not f.attr("Primitive") else f)
    functions.update(graph.graph_functions())  # the rewritten graph, plus the kernels made on the way
    return IRModule(functions, mod.global_infos)
