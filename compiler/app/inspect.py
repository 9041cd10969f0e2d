"""`tessera inspect DIR`: what an executable holds, for people (text) and scripts (--json).

The text is short by default: the target, each function with its parameters, launches, symbols and
arena, the kernels counted by schedule rule, what the device must offer, and the memory the model
takes. ``verbose`` adds every storage of the memory plans with the tensors that share it, and every
kernel with its workgroup and launch grid.
"""

from __future__ import annotations

from collections import Counter

from tessera.vm import Executable

from .memory import device_memory, mib, state_bytes


def summarize(exe: Executable) -> dict:
    functions = {}
    for name, f in exe.functions.items():
        memory = f["memory"]
        functions[name] = {
            "params": [{"name": p["name"], "sinfo": p["sinfo"], "state": bool(p.get("state"))} for p in f["params"]],
            "symbols": f["symbols"],
            "launches": sum(1 for op in f["code"] if op["op"] == "launch"),
            "arena_bytes": memory["arena_bytes"],
            "liveness_lower_bound_bytes": memory["liveness_lower_bound_bytes"],
            "arena_buffers": memory["buffers"],
            "storages": memory["storages"],
            "runtime_allocations": f.get("runtime_allocations", []),
            "calls": sorted({op["func"] for op in f["code"] if op["op"] == "call" and "func" in op}),
        }
    kernels = [{"name": k["name"], "backend": k["backend"], "rule": k["rule"], "pattern": k["pattern"],
                "workgroup_size": k["workgroup_size"], "grid": k["grid"],
                "scalars": [s["name"] for s in k["abi"]["scalars"]]} for k in exe.kernels]
    arena = [f["arena_bytes"] for f in functions.values() if f["arena_bytes"] is not None]
    lower = [f["liveness_lower_bound_bytes"] for f in functions.values()
             if f["liveness_lower_bound_bytes"] is not None]
    memory = device_memory(exe)
    return {
        "target": exe.target, "functions": functions, "kernels": kernels,
        "arena_bytes": max(arena, default=None), "liveness_lower_bound_bytes": max(lower, default=None),
        "required_features": exe.required_features, "required_limits": exe.required_limits,
        "weights": {name: list(array.shape) for name, array in exe.constants.items()},
        "device_memory": {"weights_bytes": memory.weights, "arena_bytes": memory.arena,
                          "kv_cache_bytes": memory.kv_cache, "state_tensors": state_bytes(exe),
                          "total_bytes": memory.total},
    }


def format_summary(summary: dict, verbose: bool = False) -> str:
    lines = [f"target: {describe_target(summary['target'])}"]
    for name, f in summary["functions"].items():
        symbols = ", ".join(f"{s} <= {v['upper_bound']}" if v["upper_bound"] is not None else f"{s} unbounded"
                            for s, v in f["symbols"].items()) or "none"
        lines.append(f"function {name}: {_count(f['launches'], 'kernel launch', 'kernel launches')}; symbols {symbols}")
        lines.append(f"  params: {_params(f['params'])}")
        lines.append(f"  arena: {_arena(f)}")
        if f["calls"]:
            lines.append(f"  calls: {', '.join(f['calls'])}")
        for allocation in f["runtime_allocations"]:
            lines.append(f"  allocated at run time: {allocation['size']} bytes (register {allocation['register']}): "
                         f"{allocation['reason']}")
        if verbose:
            for s in f["storages"]:
                place = f"buffer {s['buffer']} offset {s['offset']}" if s["buffer"] is not None else "dynamic"
                lines.append(f"  storage {s['index']}: {s['static_size'] or s['size']} bytes at {place}: "
                             f"{', '.join(s['tensors'])}")
    rules = Counter(k["rule"] for k in summary["kernels"])
    by_rule = ", ".join(f"{rule} {count}" for rule, count in sorted(rules.items(), key=lambda r: (-r[1], str(r[0]))))
    lines.append(f"kernels: {len(summary['kernels'])}" + (f" ({by_rule})" if by_rule else ""))
    if verbose:
        for k in summary["kernels"]:
            lines.append(f"  {k['name']}: {k['rule']} ({k['pattern']}), workgroup {tuple(k['workgroup_size'])}, "
                         f"grid ({', '.join(k['grid'])})")
    lines.append(f"required features: {', '.join(summary['required_features']) or 'none'}")
    lines.append("required limits: " + ", ".join(f"{k} {v}" for k, v in summary["required_limits"].items()))
    memory = summary["device_memory"]
    lines.append(f"weights: {len(summary['weights'])} tensors, {mib(memory['weights_bytes'])}")
    if memory["state_tensors"]:
        lines.append(f"KV cache: {len(memory['state_tensors'])} state tensors, {mib(memory['kv_cache_bytes'])}")
    lines.append(f"device memory: {mib(memory['total_bytes'])} (weights, the functions' arenas, the KV cache)")
    return "\n".join(lines) + "\n"


def describe_target(target: dict) -> str:
    """``llvmpipe (webgpu, wgsl; features shader-f16, subgroup)``: the preset, its kind and backend."""
    kind = ", ".join(filter(None, (target.get("kind"), target.get("backend"))))
    features = f"; features {', '.join(target['features'])}" if target.get("features") else ""
    return f"{target['name']} ({kind}{features})"


def _params(params: list[dict]) -> str:
    """Inputs with their types; state tensors (a KV cache: one per layer) as a count and a range."""
    inputs = [f"{p['name']} {_type(p['sinfo'])}" for p in params if not p["state"]]
    state = [p["name"] for p in params if p["state"]]
    text = ", ".join(inputs) or "none"
    if len(state) > 2:
        text += f"; state: {len(state)} tensors ({state[0]} ... {state[-1]})"
    elif state:
        text += f"; state: {', '.join(state)}"
    return text


def _type(sinfo: dict) -> str:
    if sinfo["kind"] == "tensor":
        shape = ", ".join(sinfo["shape"]) if sinfo.get("shape") is not None else f"ndim {sinfo.get('ndim')}"
        return f"{sinfo['dtype']}[{shape}]"
    if sinfo["kind"] == "prim":
        return sinfo["dtype"]
    return sinfo["kind"]


def _arena(f: dict) -> str:
    if not f["arena_buffers"]:
        return "none" + (" (everything is allocated at run time)" if f["runtime_allocations"] else "")
    text = f"{mib(f['arena_bytes'])} in {_count(len(f['arena_buffers']), 'buffer', 'buffers')}"
    bound = f["liveness_lower_bound_bytes"]
    if bound:
        text += f"; liveness lower bound {mib(bound)} (arena / bound = {f['arena_bytes'] / bound:.3f})"
    if f["runtime_allocations"]:
        text += "; the rest at run time"
    return text


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
