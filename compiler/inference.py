"""``tessera.InferenceSession``: tensors in, tensors out, in the shape ONNX Runtime users know.

    session = tessera.InferenceSession("build/mobilenet", device="auto")
    [arg.name for arg in session.get_inputs()]           # ["image"]
    probs, = session.run(None, {"image": batch})         # a list of numpy arrays

It runs one function of an executable folder (``tessera compile`` or ``tessera.build(...).save(dir)``)
on the Python VM. Inputs are the function's parameters by name (state parameters, such as a KV
cache, live on the device and are not fed); outputs are its results, nested tuples flattened, named
as the executable records them (``result_names``: an ONNX graph's output names), else ``output0``,
``output1`` ... Every feed is checked before
anything runs, and each error names the input (docs/inference.md); the VM checks again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from . import arith
from .ir.errors import TesseraError
from .vm.devices import Device, device_kinds
from .vm.executable import Executable
from .vm.program import VirtualMachine

AUTO = "auto"
# onnxruntime's type strings (NodeArg.type) for the IR's dtypes.
ORT_TYPES = {"float32": "tensor(float)", "float64": "tensor(double)", "float16": "tensor(float16)",
             "bfloat16": "tensor(bfloat16)", "int64": "tensor(int64)", "int32": "tensor(int32)",
             "int16": "tensor(int16)", "int8": "tensor(int8)", "uint64": "tensor(uint64)",
             "uint32": "tensor(uint32)", "uint16": "tensor(uint16)", "uint8": "tensor(uint8)",
             "bool": "tensor(bool)"}


class InferenceSessionError(TesseraError):
    """A session that cannot be opened, or a feed or output list that does not fit the function.
    ``input`` names the input at fault, when one is."""

    def __init__(self, message: str, input: str | None = None):
        self.input = input
        super().__init__(message)


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes one: ``shape`` lists ints for fixed dimensions and
    the symbolic expression as text (``"n"``, ``"n * 2"``) for the others, or None when only the rank is
    known; it is None altogether when not even the rank is. ``type`` is onnxruntime's string
    ("tensor(float)"); ``dtype`` the numpy name ("float32"), "" when the executable leaves it open."""

    name: str
    shape: list | None
    type: str
    dtype: str


class InferenceSession:
    def __init__(self, path, device: str | Device = AUTO, function: str = "main", libraries: dict | None = None):
        """``path``: an executable folder (or an Executable). ``device``: "auto" (the first device here
        that runs the executable's kernels), a device kind of ``tessera.vm.device_kinds()``, or a Device.
        ``libraries``: host functions the executable calls, as for ``VirtualMachine``."""
        exe = path if isinstance(path, Executable) else Executable.load(os.fspath(path))
        if function not in exe.functions:
            raise InferenceSessionError(f"the executable has no function {function!r} (functions: "
                                        f"{', '.join(sorted(exe.functions)) or 'none'}); pass function=NAME")
        kinds = device_kinds()
        if isinstance(device, str) and device != AUTO and device not in kinds:
            raise InferenceSessionError(f"unknown device {device!r}; known: {AUTO}, {', '.join(kinds)}")
        record = exe.functions[function]
        self.function = function
        self._params = [p for p in record["params"] if not p.get("state")]
        for param in self._params:
            if param["sinfo"]["kind"] not in ("tensor", "prim"):
                raise InferenceSessionError(f"{function}'s parameter {param['name']!r} is a {param['sinfo']['kind']}, "
                                            "not a tensor: call it through tessera.vm.VirtualMachine",
                                            param["name"])
        self._bounds = {name: s["upper_bound"] for name, s in record["symbols"].items()}
        self._inputs = [_node_arg(p["name"], p["sinfo"]) for p in self._params]
        leaves = _leaves(record["result"])
        names = record.get("result_names") or [f"output{i}" for i in range(len(leaves))]
        self._outputs = [_node_arg(name, s) for name, s in zip(names, leaves)]
        self.vm = VirtualMachine(exe, None if device == AUTO else device, libraries)

    @property
    def device(self) -> str:
        """The kind of device the session runs on."""
        return self.vm.device.kind

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def run(self, output_names, input_feed: dict) -> list[np.ndarray]:
        """The outputs ``output_names`` names (None: all of them, in order) of one call with the inputs of
        ``input_feed`` ({name: numpy array}); each a numpy array."""
        wanted = self._wanted(output_names)
        args = self._check_feed(input_feed)
        result = self.vm[self.function](*args)
        leaves = [np.asarray(value) for value in _leaves(result)]
        return [leaves[index] for index in wanted]

    def _wanted(self, output_names) -> list[int]:
        positions = {arg.name: index for index, arg in enumerate(self._outputs)}
        if output_names is None:
            return list(range(len(self._outputs)))
        if isinstance(output_names, str):
            raise InferenceSessionError(f"output_names is a list of names or None, not the string {output_names!r}")
        unknown = [name for name in output_names if name not in positions]
        if unknown:
            raise InferenceSessionError(f"unknown output {', '.join(map(repr, unknown))}; the outputs are "
                                        f"{', '.join(positions)}")
        return [positions[name] for name in output_names]

    def _check_feed(self, feed: dict) -> list:
        """The arguments in parameter order, once every feed fits its input (sizes agreeing and bounded)."""
        if not isinstance(feed, dict):
            raise InferenceSessionError(f"input_feed is a dict of input name to numpy array, not a "
                                        f"{type(feed).__name__}")
        names = [p["name"] for p in self._params]
        unknown = [name for name in feed if name not in names]
        if unknown:
            raise InferenceSessionError(f"unknown input {unknown[0]!r}; the inputs are {', '.join(names)}", unknown[0])
        missing = [name for name in names if name not in feed]
        if missing:
            raise InferenceSessionError(f"input {missing[0]!r} is missing (the inputs are {', '.join(names)})",
                                        missing[0])
        sizes: dict[str, tuple[int, str]] = {}  # variable -> (value, the input that set it)
        args = []
        for param in self._params:
            name, sinfo = param["name"], param["sinfo"]
            value = feed[name]
            if sinfo["kind"] == "prim":
                args.append(self._check_prim(name, sinfo, value, sizes))
            else:
                self._check_tensor(name, sinfo, value, sizes)
                args.append(value)
        for param in self._params:  # expressions such as "n + 1", once every plain variable is known
            self._check_expressions(param["name"], param["sinfo"], feed[param["name"]], sizes)
        return args

    def _check_tensor(self, name: str, sinfo: dict, value, sizes: dict) -> None:
        if not isinstance(value, np.ndarray):
            raise InferenceSessionError(f"input {name!r}: expected a numpy array, got a {type(value).__name__}", name)
        if sinfo["dtype"] and value.dtype.name != sinfo["dtype"]:
            raise InferenceSessionError(f"input {name!r}: expected dtype {sinfo['dtype']} "
                                        f"({ORT_TYPES.get(sinfo['dtype'], '?')}), got {value.dtype.name} (no implicit "
                                        f"casts: convert it with .astype(np.{sinfo['dtype']}))", name)
        if sinfo["ndim"] >= 0 and value.ndim != sinfo["ndim"]:
            shape = f" (shape {_shown(sinfo['shape'])})" if sinfo["shape"] is not None else ""
            raise InferenceSessionError(f"input {name!r}: expected rank {sinfo['ndim']}{shape}, got rank {value.ndim} "
                                        f"(shape {value.shape})", name)
        for axis, (dim, size) in enumerate(zip(sinfo["shape"] or (), value.shape)):
            self._check_dim(name, f"dimension {axis}", dim, int(size), sizes, sinfo["shape"], value.shape)

    def _check_prim(self, name: str, sinfo: dict, value, sizes: dict) -> int:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
            raise InferenceSessionError(f"input {name!r}: expected an integer, got a {type(value).__name__}", name)
        if sinfo["value"] is not None:
            self._check_dim(name, "its value", sinfo["value"], int(value), sizes, None, None)
        return int(value)

    def _check_dim(self, name: str, where: str, dim: str, size: int, sizes: dict, expected, got) -> None:
        expr = arith.parse_expr(dim)
        if isinstance(expr, arith.IntImm):
            if size != expr.value:
                shapes = "" if got is None else f"expected shape {_shown(expected)}, got {tuple(got)}: "
                raise InferenceSessionError(f"input {name!r}: {shapes}{where} is {size}, not {expr.value}", name)
            return
        if not isinstance(expr, arith.Var):
            return  # an expression: checked once its variables are known
        if expr.name in sizes and sizes[expr.name][0] != size:
            known, source = sizes[expr.name]
            raise InferenceSessionError(f"input {name!r}: {where} is {size}, but {expr.name} = {known} from input "
                                        f"{source!r}", name)
        bound = self._bounds.get(expr.name)
        if size < 0:
            raise InferenceSessionError(f"input {name!r}: {where} ({expr.name}) is {size}, not a size", name)
        if bound is not None and size > bound:
            raise InferenceSessionError(f"input {name!r}: {where} ({expr.name}) is {size}, above its upper bound "
                                        f"{bound} (the most the executable's memory was planned for)", name)
        sizes.setdefault(expr.name, (size, name))

    def _check_expressions(self, name: str, sinfo: dict, value, sizes: dict) -> None:
        if sinfo["kind"] != "tensor" or not sinfo["shape"]:
            return
        env = {var: size for var, (size, _) in sizes.items()}
        for axis, (dim, size) in enumerate(zip(sinfo["shape"], value.shape)):
            expr = arith.parse_expr(dim)
            if isinstance(expr, (arith.IntImm, arith.Var)):
                continue
            try:
                expected = arith.evaluate(expr, env)
            except KeyError:
                continue  # a variable no input fixes on its own: the VM's match checks it
            if expected != int(size):
                raise InferenceSessionError(f"input {name!r}: expected shape {_shown(sinfo['shape'])}, got "
                                            f"{value.shape}: dimension {axis} is {size}, not {dim} = {expected}", name)


def _node_arg(name: str, sinfo: dict) -> NodeArg:
    if sinfo["kind"] == "prim":
        return NodeArg(name, [], ORT_TYPES.get(sinfo["dtype"], "tensor(int64)"), sinfo["dtype"])
    if sinfo["kind"] != "tensor":
        return NodeArg(name, None, sinfo["kind"], "")
    dtype = sinfo["dtype"] or ""
    shape = None if sinfo["ndim"] < 0 else [None] * sinfo["ndim"] if sinfo["shape"] is None else \
        [_dim(d) for d in sinfo["shape"]]
    return NodeArg(name, shape, ORT_TYPES.get(dtype, "tensor(unknown)"), dtype)


def _dim(text: str):
    expr = arith.parse_expr(text)
    return expr.value if isinstance(expr, arith.IntImm) else text


def _shown(shape) -> str:
    """A recorded shape as the text format prints one: (n, 4), (n + 1,)."""
    return "(" + ", ".join(shape) + ("," if len(shape) == 1 else "") + ")"


def _leaves(value) -> list:
    """A result's struct info (a dict) or value, nested tuples flattened in order."""
    if isinstance(value, dict) and value.get("kind") == "tuple":
        return [leaf for field in value["fields"] for leaf in _leaves(field)]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]
