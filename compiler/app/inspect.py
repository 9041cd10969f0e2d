"""`tessera inspect DIR`: what an executable holds, for people (text) and scripts (--json)."""

from __future__ import annotations

from tessera.vm import Executable


def summarize(exe: Executable) -> dict:
    functions = {}
    for name, f in exe.functions.items():
        memory = f["memory"]
        launches = [op for op in f["code"] if op["op"] == "launch"]
        functions[name] = {
            "params": [p["name"] for p in f["params"]],
            "symbols": f["symbols"],
            "launches": len(launches),
            "arena_bytes": memory["arena_bytes"],
            "liveness_lower_bound_bytes": memory["liveness_lower_bound_bytes"],
            "arena_buffers": memory["buffers"],
            "storages": memory["storages"],
        }
    kernels = [{"name": k["name"], "backend": k["backend"], "rule": k["rule"], "pattern": k["pattern"],
                "workgroup_size": k["workgroup_size"], "grid": k["grid"],
                "scalars": [s["name"] for s in k["abi"]["scalars"]]} for k in exe.kernels]
    arena = [f["arena_bytes"] for f in functions.values() if f["arena_bytes"] is not None]
    lower = [f["liveness_lower_bound_bytes"] for f in functions.values()
             if f["liveness_lower_bound_bytes"] is not None]
    return {
        "target": exe.target, "functions": functions, "kernels": kernels,
        "arena_bytes": max(arena, default=None), "liveness_lower_bound_bytes": max(lower, default=None),
        "required_features": exe.required_features, "required_limits": exe.required_limits,
        "weights": {name: list(array.shape) for name, array in exe.constants.items()},
    }


def format_summary(summary: dict) -> str:
    lines = [f"target: {summary['target']['name']} ({summary['target']['kind']})"]
    for name, f in summary["functions"].items():
        symbols = ", ".join(f"{s} <= {v['upper_bound']}" for s, v in f["symbols"].items()) or "none"
        lines.append(f"function {name}({', '.join(f['params'])}): {f['launches']} kernel launches; symbols {symbols}")
        if f["arena_bytes"] is not None:
            ratio = f["arena_bytes"] / f["liveness_lower_bound_bytes"] if f["liveness_lower_bound_bytes"] else 0
            lines.append(f"  arena: {f['arena_bytes']} bytes in {len(f['arena_buffers'])} buffer(s); liveness lower "
                         f"bound {f['liveness_lower_bound_bytes']} bytes (arena / bound = {ratio:.3f})")
        else:
            lines.append("  arena: not static (some symbolic variable has no upper bound)")
        for s in f["storages"]:
            place = f"buffer {s['buffer']} offset {s['offset']}" if s["buffer"] is not None else "dynamic"
            lines.append(f"  storage {s['index']}: {s['static_size'] or s['size']} bytes at {place}: "
                         f"{', '.join(s['tensors'])}")
    lines.append(f"kernels: {len(summary['kernels'])}")
    for k in summary["kernels"]:
        lines.append(f"  {k['name']}: {k['rule']} ({k['pattern']}), workgroup {tuple(k['workgroup_size'])}, "
                     f"grid ({', '.join(k['grid'])})")
    lines.append(f"required features: {', '.join(summary['required_features']) or 'none'}")
    lines.append("required limits: " + ", ".join(f"{k} {v}" for k, v in summary["required_limits"].items()))
    if summary["weights"]:
        lines.append(f"weights: {len(summary['weights'])} tensors")
    return "\n".join(lines) + "\n"
