"""What a loader checks of a function's memory plan and launches beyond their cross-references (docs/format.md,
"What a loader checks"). runtime-js (plan-checks.js) and runtime-native (plan_checks.c) check the same, alike,
so that the three refuse the same files.

- At load: no two tensors of different storages of an arena share bytes while both are live. A plan that
  breaks this runs and answers garbage, which no later check would notice.
- Once the device is known: every storage's offset a multiple of the device's storage alignment, and every
  launch's grid at the upper bounds within the device's workgroups per dimension. A device would refuse
  either only inside the first launch that meets it (WebGPU: a GPUValidationError).

When a tensor is live. The plan says which tensors each storage holds, one after another (the ``arena``
locations of their registers), and the code says where each register is used. A tensor holds bytes still to
be read from the first instruction that uses its register, or a value that may hold it, to the last such
instruction; a register the function returns is live past its end. ``move``, ``tuple`` and ``get`` read no
bytes, they only pass a tensor on, so they are not uses: the value they make is followed instead (a ``get``
of a register one ``tuple`` built takes that field alone, as the compiler's planner does), and so is a
``call``'s result, which may be one of its arguments. A function's instructions run in order except where a
jump says otherwise; code that jumps back (a loop) is not bounded this way, and then every storage counts as
live for the whole function, as it does when values pass each other on in more rounds than a loader follows.
Two tensors of different storages may share bytes only while at most one of them is live.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from .. import arith, facts
from .schema import json_path

# Rounds of following values passed on (``move``, ``tuple``, ``get``, ``call``) from the last instruction to the
# first. The compiler's code needs one (a value is made before it is passed on) and a second to see nothing
# changed; past this many, the storages are taken to be live for the whole function. Every kernel reads and
# writes its tensors in 4-byte words (docs/kernels.md), whatever its device. Both are shared facts
# (compiler/facts.json): the three runtimes' loaders must give the same verdicts.
MAX_ALIAS_ROUNDS = facts.MAX_ALIAS_ROUNDS
WORD_BYTES = facts.WORD_BYTES
# A grid is passed to a kernel as 32-bit integers: what a device without a stated limit takes.
MOST_WORKGROUPS = 2**31 - 1


@dataclass(frozen=True)
class DeviceFit:
    """What one device asks of an executable's plan and launches."""

    storage_alignment: int  # bytes: minStorageBufferOffsetAlignment
    workgroups: int  # per grid dimension: maxComputeWorkgroupsPerDimension
    name: str = "device"  # for messages


def register_spans(record: dict) -> dict[int, tuple[int, int]] | None:
    """(first, last) instruction at which each register's value is live, ``len(code)`` for a result; registers
    no instruction uses are left out. None when the code is not bounded this way (module docstring)."""
    code = record["code"]
    end = len(code)
    for pc, op in enumerate(code):
        if op["op"] == "goto" and op["target"] <= pc or op["op"] == "if" and op["else"] <= pc:
            return None
    first: dict[int, int] = {}
    last: dict[int, int] = {}

    def use(reg: int, pc: int) -> None:
        first[reg] = min(first.get(reg, pc), pc)
        last[reg] = max(last.get(reg, pc), pc)

    writers: dict[int, int] = {}
    built: dict[int, list[int]] = {}
    for op in code:
        if op.get("dst") is not None:
            writers[op["dst"]] = writers.get(op["dst"], 0) + 1
            if op["op"] == "tuple":
                built[op["dst"]] = op["fields"]
    passed: list[tuple[int, int]] = []  # (source, value made from it), in program order
    for pc, op in enumerate(code):
        kind = op["op"]
        if kind == "move":
            passed.append((op["src"], op["dst"]))
        elif kind == "tuple":
            passed += [(field, op["dst"]) for field in op["fields"]]
        elif kind == "get":
            fields = built.get(op["src"]) if writers.get(op["src"]) == 1 else None
            source = fields[op["index"]] if fields is not None and op["index"] < len(fields) else op["src"]
            passed.append((source, op["dst"]))
        else:
            for key in ("reg", "dst", "src", "cond", "callee"):
                if op.get(key) is not None:
                    use(op[key], pc)
            for key in ("args", "outs", "fields"):
                for reg in op.get(key, ()):
                    use(reg, pc)
            if kind == "call":
                passed += [(arg, op["dst"]) for arg in op["args"]]
            elif kind == "ret":
                use(op["src"], end)
    for _ in range(MAX_ALIAS_ROUNDS):
        changed = False
        for source, made in reversed(passed):
            if made not in first:
                continue
            low, high = min(first.get(source, first[made]), first[made]), max(last.get(source, last[made]), last[made])
            if (low, high) != (first.get(source), last.get(source)):
                first[source], last[source] = low, high
                changed = True
        if not changed:
            return {reg: (first[reg], last[reg]) for reg in first}
    return None


def arena_tensors(record: dict) -> list[tuple[int, int, int, int, int, int]]:
    """(first, last, storage, buffer, first byte, end byte) of each tensor of the arena while it is live, by its
    storage's position in ``memory.storages``, in the order they become live. A storage holds several tensors
    one after another, each its own size (at the upper bounds) and lifetime; registers of one storage live at
    once (a ``get`` that names its field's place) are one tensor, as large as the largest. Where the code is not
    bounded, each storage is one tensor of its whole size, live throughout."""
    memory = record["memory"]
    position = {s["index"]: i for i, s in enumerate(memory["storages"])}
    spans = register_spans(record)
    found: list[tuple[int, int, int, int]] = []  # (storage, first, last, bytes)
    if spans is None:
        found = [(i, 0, len(record["code"]), s["static_size"]) for i, s in enumerate(memory["storages"])
                 if s["buffer"] is not None]
    else:
        bounds = {name: s["upper_bound"] for name, s in record["symbols"].items() if s["upper_bound"] is not None}
        for key, location in record["locations"].items():
            if location["kind"] != "arena" or int(key) not in spans:
                continue
            storage = position[location["token"]]
            size = memory["storages"][storage]["static_size"]
            try:
                size = min(size, arith.evaluate(arith.parse_expr(record["tensors"][key]["bytes"]), bounds))
            except (KeyError, ZeroDivisionError):  # no bound: as large as its storage
                pass
            found.append((storage, *spans[int(key)], size))
    merged: list[list[int]] = []
    for storage, low, high, size in sorted(found):
        if merged and merged[-1][0] == storage and low <= merged[-1][2]:
            merged[-1][2:] = [max(merged[-1][2], high), max(merged[-1][3], size)]
        else:
            merged.append([storage, low, high, size])
    tensors = []
    for storage, low, high, size in merged:
        buffer, offset = memory["storages"][storage]["buffer"], memory["storages"][storage]["offset"]
        if size > 0:
            tensors.append((low, high, storage, buffer, offset, offset + size))
    return sorted(tensors)


def live_overlap(record: dict) -> tuple[int, int, int, int, int] | None:
    """(storage, other storage, first byte, end byte, instruction) of the first tensor of the arena, in the order
    they become live, that shares bytes of its buffer with a tensor of another storage while both are live;
    None when there is none. A sweep over the instructions keeps the live tensors by place, where each new one
    need only be compared with its two neighbours: tensors live at once share no byte, else the sweep stops."""
    tensors = arena_tensors(record)
    by_end = sorted(tensors, key=lambda t: (t[1], t[2], t[0]))
    live_places: list[tuple[int, int]] = []  # (buffer, first byte) of each live tensor, in order
    live: list[tuple] = []
    ended = 0
    for item in tensors:
        start, _, storage, buffer, begin, stop = item
        while ended < len(by_end) and by_end[ended][1] < start:
            gone = by_end[ended]
            index = bisect.bisect_left(live_places, (gone[3], gone[4]))
            del live_places[index], live[index]
            ended += 1
        index = bisect.bisect_left(live_places, (buffer, begin))
        for other in live[max(index - 1, 0):index + 1]:
            if other[3] == buffer and other[4] < stop and begin < other[5]:
                return storage, other[2], max(begin, other[4]), min(stop, other[5]), start
        live_places.insert(index, (buffer, begin))
        live.insert(index, item)
    return None


def check_live_storages(record: dict, where: list, fail) -> None:
    """``fail(path, problem)`` for two storages of the function ``record`` that share bytes while both are live."""
    overlap = live_overlap(record)
    if overlap is None:
        return
    storage, other, begin, end, pc = overlap
    buffer = record["memory"]["storages"][storage]["buffer"]
    fail(where + ["memory", "storages", storage], f"shares bytes {begin} to {end} of buffer {buffer} with "
                                                  f"storages[{other}] while both are live (at code[{pc}])")


def check_device_fit(exe, fits: list[DeviceFit], what: str, error) -> None:
    """Raise ``error`` naming the first storage offset of ``exe`` that is not a multiple of its device's storage
    alignment, or the first kernel grid that is larger at the upper bounds of a launch than its device takes
    along one dimension. ``fits``: per device of the executable (one unless it is split)."""
    parsed: dict[str, arith.PrimExpr] = {}

    def value(text: str, env: dict) -> int | None:
        expr = parsed.get(text)
        if expr is None:
            expr = parsed[text] = arith.parse_expr(text)
        try:
            return arith.evaluate(expr, env)
        except (KeyError, ZeroDivisionError):  # a symbol without a bound; what divides by 0 fails when run
            return None

    def fit(device) -> DeviceFit:
        return fits[device if isinstance(device, int) and device < len(fits) else 0]

    for name, record in exe.functions.items():
        memory = record["memory"]
        placed = memory.get("buffer_devices") or [0] * len(memory["buffers"])
        for index, storage in enumerate(memory["storages"]):
            if storage["buffer"] is None:
                continue
            device = fit(placed[storage["buffer"]])
            if storage["offset"] % device.storage_alignment:
                where = json_path(["functions", name, "memory", "storages", index, "offset"])
                raise error(f"{what} does not fit the {device.name}: {where} is {storage['offset']}, not a multiple "
                            f"of {device.storage_alignment}, the {device.name}'s storage alignment "
                            "(minStorageBufferOffsetAlignment)")
        bounds = {symbol: s["upper_bound"] for symbol, s in record["symbols"].items() if s["upper_bound"] is not None}
        for pc, op in enumerate(record["code"]):
            if op["op"] != "launch":
                continue
            kernel = exe.kernels[op["kernel"]]
            scalars = [value(text, bounds) for text in op["scalars"]]
            if None in scalars:
                continue
            env = {s["name"]: v for s, v in zip(kernel["abi"]["scalars"], scalars)}
            device = fit(kernel.get("device", 0))
            for axis, text in enumerate(kernel["grid"]):
                count = value(text, env)
                if count is not None and count > device.workgroups:
                    where = json_path(["kernels", op["kernel"], "grid", axis])
                    raise error(f"{what} does not fit the {device.name}: {where} is {text!r}, {count} workgroups at "
                                f"the upper bounds of {json_path(['functions', name, 'code', pc])}, more than the "
                                f"{device.name}'s {device.workgroups} (maxComputeWorkgroupsPerDimension)")
