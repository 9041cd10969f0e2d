"""`tessera inspect DIR`: what an executable holds, for people (text) and scripts (--json).

The text is short by default: the target, each function with its parameters, launches, symbols and
arena, the kernels counted by schedule rule, what the device must offer, and the memory the model
takes. ``verbose`` adds every storage of the memory plans with the tensors that share it, and every
kernel with its workgroup and launch grid.

A bundle's model folder (with bundle.json) is described by its builds instead: for each, the figures
bundle.json records and the browser runtime checks before it downloads anything (the bytes to
download, the device memory, the largest buffer and binding), and how much the builds share.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter

from tessera.vm import Executable

from .bundle_json import build_files, read_bundle
from .memory import device_memory, mib, state_bytes
from .weights import download_bytes


def inspect_directory(directory: str, verbose: bool = False, as_json: bool = False) -> str:
    """What `tessera inspect DIR` prints: a compiled folder (or a build in a bundle), a bundle's model
    folder, or a bundle's site (each of its models)."""
    models = sorted(os.path.join(directory, "models", name) for name in _listing(os.path.join(directory, "models")))
    bundles = [directory] if os.path.exists(os.path.join(directory, "bundle.json")) else \
        [m for m in models if os.path.exists(os.path.join(m, "bundle.json"))]
    if bundles:
        summaries = [summarize_bundle(model_dir) for model_dir in bundles]
        if as_json:
            return json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=1) + "\n"
        return "".join(format_bundle(summary) for summary in summaries)
    graph_site = os.path.join(directory, "model", "model.json")
    if os.path.isfile(graph_site) and not os.path.exists(os.path.join(directory, "executable.json")):
        return _inspect_graph_site(directory, graph_site, verbose, as_json)
    files = build_files(directory)
    exe = Executable.load(directory, files.tensor_cache)
    shared = tuple(path for path in (files.tokenizer, files.chat_config) if os.path.exists(path))
    summary = summarize(exe, download_bytes(directory, files.tensor_cache, shared) if exe.constants else None)
    return json.dumps(summary, indent=1) + "\n" if as_json else format_summary(summary, verbose)


def _inspect_graph_site(directory: str, index_path: str, verbose: bool, as_json: bool) -> str:
    """A site `tessera bundle model.onnx` wrote: each build in model/, as an executable folder."""
    try:
        with open(index_path, encoding="utf-8") as f:
            builds = json.load(f)["builds"]
        names = [str(build).rstrip("/") for build in builds]
    except (ValueError, KeyError, TypeError):
        names = None
    if not names or not all(re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", name) for name in names):
        from tessera.ir import TesseraError

        raise TesseraError(f"{index_path} is not the model.json `tessera bundle` writes (its builds are folders "
                           "inside model/)")
    folders = [os.path.join(directory, "model", name) for name in names]
    texts = {os.path.relpath(folder, directory): inspect_directory(folder, verbose, as_json) for folder in folders}
    if as_json:
        return json.dumps({name: json.loads(text) for name, text in texts.items()}, indent=1) + "\n"
    return "".join(f"build {name}:\n" + "".join(f"  {line}\n" for line in text.splitlines())
                   for name, text in texts.items())


def _listing(folder: str) -> list[str]:
    return os.listdir(folder) if os.path.isdir(folder) else []


def summarize_bundle(model_dir: str) -> dict:
    """bundle.json's builds with their figures, and the weights on disk against a copy per build."""
    index = read_bundle(model_dir)
    shards = sorted(name for name in _listing(os.path.join(model_dir, "weights")) if name.endswith(".bin"))
    on_disk = sum(os.path.getsize(os.path.join(model_dir, "weights", name)) for name in shards)
    return {"model": index["model"], "folder": model_dir, "version": index["version"],
            "builds": [{key: build[key] for key in ("name", "kind", "path", "features", "tensor_cache",
                                                    "download_bytes", "memory")} for build in index["builds"]],
            "weights_on_disk_bytes": on_disk, "weight_shards": len(shards),
            "weights_in_builds_bytes": sum(build["memory"]["weights_bytes"] for build in index["builds"])}


def format_bundle(summary: dict) -> str:
    lines = [f"bundle {summary['model']} ({summary['folder']}): {_count(len(summary['builds']), 'build', 'builds')}, "
             f"in order of preference"]
    for build in summary["builds"]:
        memory = build["memory"]
        features = f"; features {', '.join(build['features'])}" if build["features"] else ""
        lines.append(f"build {build['name']} ({build['kind']}{features}), {build['path']}, weights "
                     f"{build['tensor_cache']}")
        lines.append(f"  download: {_bytes(build['download_bytes'])}")
        lines.append(f"  device memory: {_bytes(memory['total_bytes'])}: weights {mib(memory['weights_bytes'])}, "
                     f"arenas {mib(memory['arena_bytes'])}, KV cache {mib(memory['kv_cache_bytes'])}")
        lines.append(f"  largest buffer: {_bytes(memory['largest_buffer_bytes'])} (maxBufferSize); largest binding: "
                     f"{_bytes(memory['largest_binding_bytes'])} (maxStorageBufferBindingSize)")
    lines.append(f"weights on disk: {_bytes(summary['weights_on_disk_bytes'])} in "
                 f"{_count(summary['weight_shards'], 'shard', 'shards')}, each distinct tensor once "
                 f"(the builds load {mib(summary['weights_in_builds_bytes'])} in all)")
    return "\n".join(lines) + "\n"


def _bytes(size: int | None) -> str:
    return mib(size) if size is None else f"{mib(size)} ({size} bytes)"


def summarize(exe: Executable, download: int | None = None) -> dict:
    functions = {}
    for name, f in exe.functions.items():
        memory = f["memory"]
        functions[name] = {
            "params": [{"name": p["name"], "sinfo": p["sinfo"], "state": bool(p.get("state"))} for p in f["params"]],
            "outputs": outputs_of(f),
            "symbols": f["symbols"],
            "launches": sum(1 for op in f["code"] if op["op"] == "launch"),
            "arena_bytes": memory["arena_bytes"],
            "liveness_lower_bound_bytes": memory["liveness_lower_bound_bytes"],
            "arena_over_bound": _ratio(memory["arena_bytes"], memory["liveness_lower_bound_bytes"]),
            "arena_buffers": memory["buffers"],
            "storages": memory["storages"],
            "runtime_allocations": f.get("runtime_allocations", []),
            "calls": sorted({op["func"] for op in f["code"] if op["op"] == "call" and "func" in op}),
        }
        if exe.devices:  # a split build: each device's arena, and the copies between devices
            functions[name]["device_arenas"] = memory.get("devices", [])
            functions[name]["copies"] = [{"device": op["device"], "bytes": f["tensors"][str(op["dst"])]["bytes"]}
                                         for op in f["code"] if op["op"] == "to_device"]
    kernels = [{"name": k["name"], "backend": k["backend"], "device": k.get("device", 0), "rule": k["rule"],
                "pattern": k["pattern"],
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
                          "total_bytes": memory.total, "largest_buffer_bytes": memory.largest_buffer,
                          "largest_binding_bytes": memory.largest_binding},
        "download_bytes": download,
        "devices": [{"name": d["vdevices"][0], "kind": d["kind"], "id": d["id"], "target": d["target"],
                     "kernels": sum(1 for k in exe.kernels if k.get("device", 0) == index),
                     "weights": sorted(n for n, on in exe.constant_devices.items() if index in on)}
                    for index, d in enumerate(exe.devices)],
    }


def format_summary(summary: dict, verbose: bool = False) -> str:
    lines = [f"target: {describe_target(summary['target'])}"]
    for index, device in enumerate(summary.get("devices", [])):
        lines.append(f"device {index}: {device['name']}, {describe_target(device['target'])}: "
                     f"{_count(device['kernels'], 'kernel', 'kernels')}, {len(device['weights'])} weights")
    for name, f in summary["functions"].items():
        symbols = ", ".join(f"{s} <= {v['upper_bound']}" if v["upper_bound"] is not None else f"{s} unbounded"
                            for s, v in f["symbols"].items()) or "none"
        lines.append(f"function {name}: {_count(f['launches'], 'kernel launch', 'kernel launches')}; symbols {symbols}")
        lines.append(f"  params: {_params(f['params'])}")
        lines.append(f"  arena: {_arena(f)}")
        for index, arena in enumerate(f.get("device_arenas", [])):
            bound = arena["liveness_lower_bound_bytes"]
            lines.append(f"    on {summary['devices'][index]['name']}: {mib(arena['arena_bytes'])}"
                         + (f"; liveness lower bound {mib(bound)}" if bound is not None else ""))
        if "copies" in f:
            moved = ", ".join(f"{c['bytes']} bytes to {summary['devices'][c['device']]['name']}" for c in f["copies"])
            lines.append(f"  copies between devices: {len(f['copies'])} per call" + (f" ({moved})" if moved else ""))
        if f["calls"]:
            lines.append(f"  calls: {', '.join(f['calls'])}")
        lines.append(f"  outputs: {', '.join(_io(o) for o in f['outputs']) or 'none'}")
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
    lines.append(f"largest buffer: {_bytes(memory['largest_buffer_bytes'])} (maxBufferSize); largest binding: "
                 f"{_bytes(memory['largest_binding_bytes'])} (maxStorageBufferBindingSize)")
    if summary["download_bytes"] is not None:
        lines.append(f"download: {_bytes(summary['download_bytes'])} (executable, kernels, weights, tokenizer)")
    return "\n".join(lines) + "\n"


def describe_target(target: dict) -> str:
    """``llvmpipe (webgpu, wgsl; features shader-f16, subgroup)``: the preset, its kind and backend."""
    kind = ", ".join(filter(None, (target.get("kind"), target.get("backend"))))
    features = f"; features {', '.join(target['features'])}" if target.get("features") else ""
    activations = f"; {target['activations']} activations" if target.get("activations") else ""
    return f"{target['name']} ({kind}{features}{activations})"


def outputs_of(record: dict) -> list[dict]:
    """A function's outputs as the tensor APIs name them: its result, nested tuples flattened, each named by
    the record's result_names where the compiler wrote them (an importer's graph outputs), else output0 ..."""
    def leaves(sinfo: dict) -> list[dict]:
        return [leaf for field in sinfo["fields"] for leaf in leaves(field)] if sinfo["kind"] == "tuple" else [sinfo]

    results = leaves(record["result"])
    names = record.get("result_names")
    if not isinstance(names, list) or len(names) != len(results):
        names = [f"output{i}" for i in range(len(results))]
    return [{"name": str(name), "sinfo": sinfo} for name, sinfo in zip(names, results)]


def io_lines(record: dict) -> list[str]:
    """A function's inputs (its parameters less the state) and outputs with their types and shapes, and the
    bounds of the shape variables they use: what `tessera compile` prints for a graph model."""
    inputs = [p for p in record["params"] if not p.get("state")]
    bounds = ", ".join(f"{s} <= {v['upper_bound']}" if v["upper_bound"] is not None else f"{s} unbounded"
                       for s, v in record["symbols"].items())
    return [f"inputs:        {', '.join(_io(p) for p in inputs) or 'none'}",
            f"outputs:       {', '.join(_io(o) for o in outputs_of(record)) or 'none'}"] + \
        ([f"symbols:       {bounds}"] if bounds else [])


def _io(value: dict) -> str:
    return f"{value['name']} {_type(value['sinfo'])}"


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
        text += f"; liveness lower bound {mib(bound)} (arena / bound = {f['arena_over_bound']:.3f})"
    if f["runtime_allocations"]:
        text += "; the rest at run time"
    return text


def _ratio(arena: int | None, bound: int | None) -> float | None:
    """Arena over liveness lower bound, 1.0 for a perfect packing; None without a bound."""
    return round(arena / bound, 4) if arena is not None and bound else None


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
