"""What a loader checks in executable.json and tensor-cache.json after their JSON Schemas
(docs/format.md, "What a loader checks"): the facts a schema cannot state, because they relate one
value to another. runtime-js (format.js) checks the same.

After these checks, nothing the VM reads from a record can be missing, of the wrong type or out of
range: every register is below the function's count, every kernel index names a kernel and binds as
many tensors and scalars as its ABI lists, every jump lands inside the code and the code ends with
``ret`` or ``goto``, every location names a parameter, a constant, a placed storage or a register,
every storage lies inside its arena buffer, and every shape expression parses and uses only the
variables it may. No tensor dimension is negative at the upper bounds, and no two tensors of different
storages share bytes while both are live (plan_checks.py).
"""

from __future__ import annotations

from .. import arith, facts
from ..ir.errors import TesseraError
from .files import check_relative_path
from .plan_checks import check_live_storages
from .schema import json_path

# Bytes per element of each dtype in a tensor cache record (the host layout: numpy's itemsize), the most
# bytes one buffer may need at its upper bounds, how deep shape expressions and struct info nest: facts every
# runtime shares (compiler/facts.json).
ITEM_BYTES = {dtype: size["host"] for dtype, size in facts.DTYPE_BYTES.items()}
MAX_BUFFER_BYTES = facts.MAX_BUFFER_BYTES
MAX_EXPRESSION_NESTING = facts.MAX_EXPRESSION_NESTING
MAX_SINFO_NESTING = facts.MAX_SINFO_NESTING
# Names every JavaScript object already has (Object.prototype's): runtime-js keeps shape variables in plain
# objects, where a variable named so would read the prototype's member. Refused everywhere, so that a file
# loads the same in every runtime.
JS_OBJECT_MEMBERS = frozenset({"constructor", "__defineGetter__", "__defineSetter__", "hasOwnProperty",
                               "__lookupGetter__", "__lookupSetter__", "isPrototypeOf", "propertyIsEnumerable",
                               "toString", "valueOf", "__proto__", "toLocaleString"})


def check_executable(doc: dict, what: str, error: type[TesseraError]) -> None:
    """Raise ``error`` naming the first cross-reference of ``doc`` (which matches the schema) that is wrong."""
    Checker(doc, what, error).run()


class Checker:
    def __init__(self, doc: dict, what: str, error: type[TesseraError]):
        self.doc, self.what, self.error = doc, what, error
        self.exprs: dict[str, arith.PrimExpr] = {}

    def fail(self, where: list, problem: str):
        raise self.error(f"{self.what} is malformed: {json_path(where)} {problem}")

    def unique(self, names: list, where: list, kind: str) -> None:
        seen = set()
        for index, name in enumerate(names):
            if name in seen:
                self.fail(where + [index], f"names the {kind} {name!r} a second time")
            seen.add(name)

    def expr(self, text: str, where: list, names, kind: str = "a variable of the function") -> arith.PrimExpr:
        """The parsed expression; it may use only ``names``."""
        parsed = self.exprs.get(text)
        if parsed is None:
            if _nesting(text) > MAX_EXPRESSION_NESTING:
                self.fail(where, f"nests parentheses deeper than {MAX_EXPRESSION_NESTING}")
            try:
                parsed = arith.parse_expr(text)
            except (ValueError, RecursionError, MemoryError):
                self.fail(where, f"is {text!r}, not a shape expression")
            self.exprs[text] = parsed
        for var in arith.free_vars(parsed):
            if var.name not in names:
                self.fail(where, f"uses {var.name!r}, which is not {kind}")
        if _divides_by_zero(parsed):
            self.fail(where, f"is {text!r}, which divides by zero")
        return parsed

    def run(self) -> None:
        doc = self.doc
        modules = [m["path"] for m in doc["modules"]]
        for index, path in enumerate(modules):
            check_relative_path(path, f"module (modules[{index}].path)", self.error)
        self.unique(modules, ["modules"], "module")
        self.unique(doc["constants"], ["constants"], "constant")
        self.unique(doc["libraries"], ["libraries"], "library function")
        for index, kernel in enumerate(doc["kernels"]):
            self.kernel(kernel, ["kernels", index], set(modules))
        self.devices()
        for name, record in doc["functions"].items():
            Function(self, name, record).run()

    def devices(self) -> None:
        """Version 4 (a split build) lists its devices, version 3 none; every ``device`` names one of them."""
        doc = self.doc
        count = len(doc.get("devices", ()))
        if (doc["version"] == 4) != (count > 0):
            self.fail(["devices"], "must list the devices of a version 4 executable, and only of one")

        most = max(count, 1)

        def check(where: list, device) -> None:
            if isinstance(device, int) and device >= most:
                self.fail(where, f"is {device}, but the executable has {most} device(s)")

        # Where the schema lets a "device" stand: kernels, parameters, tensors, storages, instructions.
        for index, kernel in enumerate(doc["kernels"]):
            check(["kernels", index, "device"], kernel.get("device"))
        for name, record in doc["functions"].items():
            at = ["functions", name]
            for index, param in enumerate(record["params"]):
                check(at + ["params", index, "device"], param.get("device"))
            for reg, tensor in record["tensors"].items():
                check(at + ["tensors", reg, "device"], tensor.get("device"))
            for index, storage in enumerate(record["memory"]["storages"]):
                check(at + ["memory", "storages", index, "device"], storage.get("device"))
            for pc, op in enumerate(record["code"]):
                check(at + ["code", pc, "device"], op.get("device"))
        for name, record in doc["functions"].items():
            memory, where = record["memory"], ["functions", name, "memory", "buffer_devices"]
            placed = memory.get("buffer_devices")
            if placed is None:
                continue
            if len(placed) != len(memory["buffers"]):
                self.fail(where, f"lists {len(placed)} devices for {len(memory['buffers'])} buffers")
            for index, device in enumerate(placed):
                check(where + [index], device)
        for name, devices in doc.get("constant_devices", {}).items():
            if name not in doc["constants"] or any(d >= count for d in devices):
                self.fail(["constant_devices", name], "names a weight or device the executable does not have")

    def kernel(self, kernel: dict, where: list, modules: set) -> None:
        if kernel["module"] not in modules:
            self.fail(where + ["module"], f"is {kernel['module']!r}, which the executable's modules do not list")
        for index, binding in enumerate(kernel["abi"]["bindings"]):
            if binding["index"] != index:
                self.fail(where + ["abi", "bindings", index, "index"], f"is {binding['index']}, not {index}")
        scalars = [s["name"] for s in kernel["abi"]["scalars"]]
        self.unique(scalars, where + ["abi", "scalars"], "scalar")
        for axis, text in enumerate(kernel["grid"]):
            self.expr(text, where + ["grid", axis], set(scalars), "one of the kernel's scalars")


class Function:
    """The checks of one function record."""

    def __init__(self, checker: Checker, name: str, record: dict):
        self.checker, self.name, self.record = checker, name, record
        self.where = ["functions", name]
        self.registers = record["registers"]
        self.symbols = set(record["symbols"])
        self.bounds = {name: s["upper_bound"] for name, s in record["symbols"].items() if s["upper_bound"] is not None}

    def fail(self, where: list, problem: str):
        self.checker.fail(self.where + where, problem)

    def register(self, reg: int, where: list) -> None:
        if reg >= self.registers:
            self.fail(where, f"is register {reg}, but the function has {self.registers} registers")

    def expr(self, text: str, where: list) -> arith.PrimExpr:
        return self.checker.expr(text, self.where + where, self.symbols)

    def dimension(self, text: str, where: list) -> None:
        """A tensor's dimension: a shape expression, not negative (where its symbols have upper bounds, at them)."""
        parsed = self.expr(text, where)
        try:
            value = arith.evaluate(parsed, self.bounds)
        except (KeyError, ZeroDivisionError):  # a symbol without a bound; what divides by 0 fails when run
            return
        if value < 0:
            at = f", {value} at the upper bounds" if arith.free_vars(parsed) else ""
            self.fail(where, f"is {text!r}{at}: a negative dimension")

    def sinfo(self, sinfo: dict, where: list, depth: int = 0) -> None:
        """A struct info and its fields, ``depth`` tuples below the top (which a refusal names)."""
        if depth > MAX_SINFO_NESTING:
            self.fail(where[:len(where) - 2 * depth], f"is struct info nested deeper than {MAX_SINFO_NESTING} levels")
        for key in ("shape", "values"):
            for axis, text in enumerate(sinfo.get(key) or ()):
                if key == "shape" and sinfo["kind"] == "tensor":
                    self.dimension(text, where + [key, axis])
                else:
                    self.expr(text, where + [key, axis])
        if sinfo.get("value") is not None:
            self.expr(sinfo["value"], where + ["value"])
        for index, field in enumerate(sinfo.get("fields", ())):
            self.sinfo(field, where + ["fields", index], depth + 1)

    def run(self) -> None:
        record = self.record
        for symbol in record["symbols"]:
            if symbol in JS_OBJECT_MEMBERS:
                self.fail(["symbols", symbol], "is a name every JavaScript object already has")
        bounds = {name: s["upper_bound"] for name, s in record["symbols"].items()}
        for index, name in enumerate(record["unbounded_symbols"]):
            if bounds.get(name, 0) is not None:
                self.fail(["unbounded_symbols", index], f"is {name!r}, which is not a symbol without an upper bound")
        if sum(bound is None for bound in bounds.values()) != len(set(record["unbounded_symbols"])):
            self.fail(["unbounded_symbols"], "does not list every symbol whose upper_bound is null")
        params = record["params"]
        for index, param in enumerate(params):
            self.register(param["register"], ["params", index, "register"])
            self.sinfo(param["sinfo"], ["params", index, "sinfo"])
            if param["state"] and str(param["register"]) not in record["tensors"]:
                self.fail(["params", index], "is state without an entry in 'tensors' (a state tensor has a known "
                                             "shape)")
        self.checker.unique([p["register"] for p in params], self.where + ["params"], "register")
        self.sinfo(record["result"], ["result"])
        if "result_names" in record:  # one distinct name per value of the result, tuples flattened
            self.checker.unique(record["result_names"], self.where + ["result_names"], "result")
            if len(record["result_names"]) != _leaves(record["result"]):
                self.fail(["result_names"], f"has {len(record['result_names'])} names for a result of "
                                            f"{_leaves(record['result'])} values")
        storages = self.memory(bounds)
        for key, tensor in record["tensors"].items():
            self.register(int(key), ["tensors", key])
            for axis, text in enumerate(tensor["shape"]):
                self.dimension(text, ["tensors", key, "shape", axis])
            self.expr(tensor["bytes"], ["tensors", key, "bytes"])
        for key, location in record["locations"].items():
            self.location(key, location, storages, bounds)
        for index, allocation in enumerate(record["runtime_allocations"]):
            self.register(allocation["register"], ["runtime_allocations", index, "register"])
            self.expr(allocation["size"], ["runtime_allocations", index, "size"])
        self.code()
        # Last: it follows registers and jumps, which the checks above found in range.
        check_live_storages(record, self.where, self.checker.fail)

    def memory(self, bounds: dict) -> dict[int, dict]:
        """The function's storages by token, each checked to lie inside its buffer."""
        memory = self.record["memory"]
        buffers = memory["buffers"]
        storages = {}
        for index, storage in enumerate(memory["storages"]):
            where = ["memory", "storages", index]
            if storage["index"] in storages:
                self.fail(where + ["index"], f"is {storage['index']}, the token of an earlier storage too")
            storages[storage["index"]] = storage
            self.expr(storage["size"], where + ["size"])
            if storage["buffer"] is None:
                continue
            if storage["buffer"] >= len(buffers):
                self.fail(where + ["buffer"], f"is {storage['buffer']}, but the plan has {len(buffers)} buffers")
            if storage["offset"] is None or storage["static_size"] is None:
                self.fail(where, "is placed in a buffer without an offset and a static_size")
            if storage["offset"] + storage["static_size"] > buffers[storage["buffer"]]:
                self.fail(where, f"lies outside its buffer: bytes {storage['offset']} to "
                                 f"{storage['offset'] + storage['static_size']} of {buffers[storage['buffer']]}")
        for index, size in enumerate(buffers):
            if size > MAX_BUFFER_BYTES:
                self.fail(["memory", "buffers", index], f"is {size} bytes, more than any device holds")
        return storages

    def location(self, key: str, location: dict, storages: dict, bounds: dict) -> None:
        record, where = self.record, ["locations", key]
        self.register(int(key), where)
        tensor = record["tensors"].get(key)
        if tensor is None:
            self.fail(where, "gives a place to a register without an entry in 'tensors'")
        kind = location["kind"]
        if kind == "param":
            index = location["index"]
            if index >= len(record["params"]) or record["params"][index]["register"] != int(key):
                self.fail(where + ["index"], f"is {index}, which is not the parameter in register {key}")
        elif kind == "constant" and location["name"] not in self.checker.doc["constants"]:
            self.fail(where + ["name"], f"is {location['name']!r}, which the executable's constants do not list")
        elif kind == "arena":
            storage = storages.get(location["token"])
            if storage is None or storage["buffer"] is None:
                self.fail(where + ["token"], f"is {location['token']}, which is not a storage the plan places in "
                                             "its arena")
            if all(bound is not None for bound in bounds.values()):
                nbytes = self.at_bounds(tensor["bytes"], bounds, ["tensors", key, "bytes"])
                if nbytes > storage["static_size"]:
                    self.fail(where, f"puts {nbytes} bytes (tensors[{key!r}].bytes at the upper bounds) in storage "
                                     f"{location['token']} of {storage['static_size']} bytes")
        elif kind == "storage":
            self.register(location["register"], where + ["register"])

    def at_bounds(self, text: str, bounds: dict, where: list) -> int:
        try:
            value = int(arith.evaluate(self.expr(text, where), bounds))
        except (KeyError, ZeroDivisionError) as problem:
            self.fail(where, f"cannot be evaluated at the upper bounds: {problem}")
        if not 0 <= value <= MAX_BUFFER_BYTES:
            self.fail(where, f"is {value} bytes at the upper bounds")
        return value

    def code(self) -> None:
        doc, record = self.checker.doc, self.record
        code, kernels = record["code"], doc["kernels"]
        if code[-1]["op"] not in ("ret", "goto"):
            self.fail(["code", len(code) - 1], "is the last instruction but not a ret or goto: the code would run "
                                               "past its end")
        tuples: dict[int, list[int]] = {}
        for pc, op in enumerate(code):
            where = ["code", pc]
            kind = op["op"]
            for key in ("reg", "dst", "src", "cond", "callee"):
                if op.get(key) is not None:
                    self.register(op[key], where + [key])
            for key in ("args", "outs", "fields"):
                for index, reg in enumerate(op.get(key, ())):
                    self.register(reg, where + [key, index])
            for key in ("scalars", "shape", "values"):
                for index, text in enumerate(op.get(key, ())):
                    if key == "shape":  # alloc_tensor's
                        self.dimension(text, where + [key, index])
                    else:
                        self.expr(text, where + [key, index])
            for key in ("size", "value"):
                if isinstance(op.get(key), str):
                    self.expr(op[key], where + [key])
            for key in ("else", "target"):
                if key in op and op[key] >= len(code):
                    self.fail(where + [key], f"is {op[key]}, past the function's {len(code)} instructions")
            if kind == "match":
                self.sinfo(op["sinfo"], where + ["sinfo"])
            elif kind == "launch":
                if op["kernel"] >= len(kernels):
                    self.fail(where + ["kernel"], f"is {op['kernel']}, but the executable has {len(kernels)} kernels")
                abi = kernels[op["kernel"]]["abi"]
                if len(op["args"]) + len(op["outs"]) != len(abi["bindings"]):
                    self.fail(where, f"binds {len(op['args']) + len(op['outs'])} tensors to kernel {op['kernel']}, "
                                     f"whose ABI lists {len(abi['bindings'])}")
                if len(op["scalars"]) != len(abi["scalars"]):
                    self.fail(where + ["scalars"], f"has {len(op['scalars'])} scalars for kernel {op['kernel']}, "
                                                   f"whose ABI lists {len(abi['scalars'])}")
                device = kernels[op["kernel"]].get("device", 0)
                for reg in op["args"] + op["outs"]:
                    if record["tensors"].get(str(reg), {}).get("device", device) != device:
                        self.fail(where, f"binds register {reg}, on device {record['tensors'][str(reg)]['device']}, "
                                         f"to kernel {op['kernel']}, which runs on device {device}")
            elif kind == "to_device":
                if record["tensors"].get(str(op["dst"]), {}).get("device", op["device"]) != op["device"]:
                    self.fail(where + ["dst"], f"is not a tensor on device {op['device']}")
            elif kind == "call_builtin" and op["name"] not in doc["libraries"]:
                self.fail(where + ["name"], f"is {op['name']!r}, which the executable's libraries do not list")
            elif kind in ("call", "func"):
                callee = op.get("func", op.get("name"))
                if callee is not None and callee not in doc["functions"]:
                    self.fail(where + ["func" if kind == "call" else "name"],
                              f"is {callee!r}, which is not a function of the executable")
            elif kind == "tuple":
                tuples.setdefault(op["dst"], op["fields"])
        self.acyclic(tuples)

    def acyclic(self, tuples: dict[int, list[int]]) -> None:
        """No tuple holds itself, directly or through others: a runtime follows tuples to a result's tensors."""
        done: set[int] = set()
        for start in tuples:
            path, stack = set(), [(start, iter(tuples[start]))]
            path.add(start)
            while stack:
                reg, fields = stack[-1]
                field = next(fields, None)
                if field is None:
                    stack.pop()
                    path.discard(reg)
                    done.add(reg)
                elif field in path:
                    self.fail(["code"], f"builds a tuple in register {field} that holds itself")
                elif field in tuples and field not in done:
                    path.add(field)
                    stack.append((field, iter(tuples[field])))


def _nesting(text: str) -> int:
    depth = deepest = 0
    for c in text:
        depth += (c == "(") - (c == ")")
        deepest = max(deepest, depth)
    return deepest


def _divides_by_zero(expr: arith.PrimExpr) -> bool:
    """Whether ``expr`` divides by a constant 0 somewhere ("n // 0", "n % (2 - 2)"); a divisor that is 0 only
    at run time is the VM's to report."""
    stack = [expr]
    while stack:
        node = stack.pop()
        divisor = node.b if isinstance(node, (arith.FloorDiv, arith.FloorMod)) else None
        if divisor is not None and not arith.free_vars(divisor):
            try:
                if arith.evaluate(divisor) == 0:
                    return True
            except ZeroDivisionError:
                return True
        stack += [child for child in (getattr(node, "a", None), getattr(node, "b", None)) if child is not None]
    return False


def check_tensor_cache(doc: dict, what: str, error: type[TesseraError]) -> None:
    """Raise ``error`` naming the first record of ``doc`` (which matches the schema) that lies outside its shard,
    is misaligned, overlaps another record, disagrees with its shape, or repeats a name."""
    names: set[str] = set()
    paths: set[str] = set()

    def fail(where: list, problem: str):
        raise error(f"{what} is malformed: {json_path(where)} {problem}")

    for s, shard in enumerate(doc["records"]):
        check_relative_path(shard["dataPath"], f"weight shard (records[{s}].dataPath)", error)
        if shard["dataPath"] in paths:
            fail(["records", s, "dataPath"], f"is {shard['dataPath']!r}, the path of an earlier shard too")
        paths.add(shard["dataPath"])
        ranges = []
        for r, record in enumerate(shard["records"]):
            where = ["records", s, "records", r]
            if record["name"] in names:
                fail(where + ["name"], f"is {record['name']!r}, the name of an earlier record too")
            names.add(record["name"])
            item = ITEM_BYTES[record["dtype"]]
            count = 1
            for dim in record["shape"]:
                count *= dim
            if count * item != record["nbytes"]:
                fail(where + ["nbytes"], f"is {record['nbytes']}, but a {record['dtype']} tensor of shape "
                                         f"{record['shape']} has {count * item} bytes")
            begin, end = record["byteOffset"], record["byteOffset"] + record["nbytes"]
            if begin % item:
                fail(where + ["byteOffset"], f"is {begin}, not a multiple of {item}, the size of a {record['dtype']} "
                                             "element (misaligned)")
            if end > shard["nbytes"]:
                fail(where, f"lies outside its shard: bytes {begin} to {end} of {shard['nbytes']}")
            ranges.append((begin, end, r))
        # Records may name the very same bytes (a bundle shares them between names), never part of another's.
        widest = None  # of the records seen in order of their first byte, the one reaching furthest
        for begin, end, r in sorted(x for x in ranges if x[1] > x[0]):
            if widest is not None and begin < widest[1] and (begin, end) != widest[:2]:
                fail(["records", s, "records", r], f"overlaps records[{s}].records[{widest[2]}]: bytes {begin} to "
                                                   f"{end} and {widest[0]} to {widest[1]}")
            if widest is None or end > widest[1]:
                widest = (begin, end, r)


def _leaves(sinfo: dict) -> int:
    """How many values a result of this struct info is, nested tuples flattened."""
    return sum(_leaves(f) for f in sinfo["fields"]) if sinfo.get("kind") == "tuple" else 1
