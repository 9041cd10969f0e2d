"""The facts every runtime shares, read from one file: compiler/facts.json (docs/facts.md).

Format limits, element sizes, WebGPU's default limits and the chat-template budget are numbers that the
Python loaders, runtime-js and runtime-native must agree on: a folder that one runtime loads and another
refuses, or a buffer sized by one table and read by another, is a bug. So each is written once, with
why it is what it is, in facts.json. Python reads that file here; the other runtimes include files
generated from it, which are committed so that neither needs Python to build:

    python -m tessera.facts --write    # runtime-js/src/facts.js and runtime-native/src/facts.h (make facts)
    python -m tessera.facts --check    # exit status 1, naming the stale files, when they differ

(tessera.facts.render writes them.) This package is the lowest layer of Tessera: it imports nothing else
of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

# Beside this package, in the package `tessera` (compiler/ in a checkout), where pyproject ships it.
FACTS_FILE = Path(__file__).resolve().parents[1] / "facts.json"


class FactsError(ValueError):
    """facts.json is not a set of facts, each a value (an integer, or an object of them) and its why."""


def load(path: Path = FACTS_FILE) -> dict[str, dict]:
    """The facts of ``path`` by name, each {"value": ..., "why": "..."}, checked for their shape."""
    facts = json.loads(path.read_text(encoding="utf-8")).get("facts")
    if not isinstance(facts, dict) or not facts:
        raise FactsError(f"{path} has no \"facts\" object")
    for name, fact in facts.items():
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise FactsError(f"{path}: the fact {name!r} is not named in snake_case")
        if not isinstance(fact, dict) or set(fact) != {"value", "why"}:
            raise FactsError(f"{path}: the fact {name!r} must hold exactly \"value\" and \"why\"")
        if not isinstance(fact["why"], str) or not fact["why"].strip():
            raise FactsError(f"{path}: the fact {name!r} does not say why")
        _check_value(fact["value"], f"{path}: the fact {name!r}")
    return facts


def _check_value(value, where: str, depth: int = 0) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        return
    if isinstance(value, dict) and value and depth < 2:
        for key, item in value.items():
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key):
                raise FactsError(f"{where} has the key {key!r}, which is not an identifier")
            _check_value(item, f"{where}[{key!r}]", depth + 1)
        return
    raise FactsError(f"{where} is {value!r}: a value is an integer or an object of them (two levels at most)")


def _frozen(value):
    return MappingProxyType({k: _frozen(v) for k, v in value.items()}) if isinstance(value, dict) else value


FACTS: Mapping[str, dict] = load()


def _value(name: str):
    return _frozen(FACTS[name]["value"])


# One constant per fact, named as in the generated files (without runtime-native's TSR_ prefix).
MAX_BUFFER_BYTES: int = _value("max_buffer_bytes")
MAX_MODULE_BYTES: int = _value("max_module_bytes")
MAX_JSON_BYTES: Mapping[str, int] = _value("max_json_bytes")
MAX_JSON_DEPTH: int = _value("max_json_depth")
MAX_PATH_CHARS: int = _value("max_path_chars")
MAX_EXPRESSION_NESTING: int = _value("max_expression_nesting")
MAX_SINFO_NESTING: int = _value("max_sinfo_nesting")
MAX_NDIM: int = _value("max_ndim")
MAX_REGISTERS: int = _value("max_registers")
MAX_INSTRUCTIONS: int = _value("max_instructions")
MAX_ALIAS_ROUNDS: int = _value("max_alias_rounds")
WORD_BYTES: int = _value("word_bytes")
DTYPE_BYTES: Mapping[str, Mapping[str, int]] = _value("dtype_bytes")
WEBGPU_DEFAULT_LIMITS: Mapping[str, int] = _value("webgpu_default_limits")
CHAT_TEMPLATE_BUDGET: Mapping[str, int] = _value("chat_template_budget")
