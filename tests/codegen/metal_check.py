"""check_metal(source): Metal Shading Language type-checked on Linux, where no Metal compiler runs.

clang compiles the kernel as C++17 for an arm64 target against ``metal_shim/metal_stdlib`` (a
small header modelling the part of MSL that codegen/metal emits) and nothing else (``-nostdinc``).
clang does not know Metal's attributes (``[[buffer(0)]]``), so their names are checked here and
clang is told to ignore them; every warning is an error.
"""

from __future__ import annotations

import os
import re
import subprocess

SHIM = os.path.join(os.path.dirname(__file__), "metal_shim")
CLANG = ["clang++", "-std=c++17", "-fsyntax-only", "--target=aarch64-linux-gnu", "-nostdinc", "-I", SHIM,
         "-Werror", "-Wno-unknown-attributes", "-x", "c++", "-"]

# The attributes the renderer may write, with whether they take an integer argument.
KNOWN_ATTRIBUTES = {"buffer": True, "max_total_threads_per_threadgroup": True, "thread_position_in_threadgroup": False,
                    "threadgroup_position_in_grid": False, "threadgroups_per_grid": False,
                    "thread_index_in_simdgroup": False, "threads_per_simdgroup": False}
ATTRIBUTE = re.compile(r"\[\[\s*(\w+)\s*(?:\(\s*([^)]*)\))?\s*\]\]")


class MetalCheckError(AssertionError):
    """The source is not valid MSL as far as the shim can tell; the message quotes clang."""


def check_attributes(source: str) -> None:
    """Every [[attribute]] is one Metal knows, spelled with its argument, and buffer indices are distinct."""
    buffers: list[int] = []
    for match in ATTRIBUTE.finditer(source):
        name, argument = match.group(1), match.group(2)
        if name not in KNOWN_ATTRIBUTES:
            raise MetalCheckError(f"unknown Metal attribute [[{name}]]")
        if KNOWN_ATTRIBUTES[name] != (argument is not None) or (argument is not None and not argument.isdigit()):
            raise MetalCheckError(f"attribute {match.group(0)} needs {'an index' if KNOWN_ATTRIBUTES[name] else 'no argument'}")
        if name == "buffer":
            buffers.append(int(argument))
    if len(set(buffers)) != len(buffers):
        raise MetalCheckError(f"buffer indices repeat: {buffers}")


def check_metal(source: str) -> None:
    """Raise MetalCheckError with clang's diagnostics when ``source`` does not compile."""
    check_attributes(source)
    result = subprocess.run(CLANG, input=source, capture_output=True, text=True)
    if result.returncode != 0:
        raise MetalCheckError(f"clang rejects the kernel:\n{result.stderr[-4000:]}")
