"""The JSON Schemas of the formats a model folder holds (docs/*.schema.json), and checking a document
against one with the ``jsonschema`` package.

One schema per format: executable.json, tensor-cache.json, chat-config.json and bundle.json. The
others refer to executable.schema.json's ``$defs`` (a path, a byte count, a SHA-256, a dtype) by its
``$id``. The same files are runtime-js's (vendored by runtime-js/scripts/vendor.mjs), so both runtimes
refuse the same documents. A wheel carries them as package data of ``tessera.schemas``
(pyproject.toml); a checkout reads them from docs/.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from pathlib import Path

from ..ir.errors import TesseraError
from .files import path_problem

# format name -> its schema file in docs/
SCHEMA_FILES = {"executable": "executable.schema.json", "tensor-cache": "tensor-cache.schema.json",
                "chat-config": "chat-config.schema.json", "bundle": "bundle.schema.json"}


def schema_folder() -> Path:
    """Where the schema files are: the installed package data (tessera/schemas), else the checkout's docs/
    (an editable install maps only the Python packages)."""
    installed = importlib.resources.files("tessera") / "schemas"
    if isinstance(installed, Path) and (installed / SCHEMA_FILES["executable"]).is_file():
        return installed
    return Path(__file__).resolve().parents[2] / "docs"


@functools.cache
def schemas() -> dict[str, dict]:
    """Every format's schema, by format name."""
    folder = schema_folder()
    return {name: json.loads((folder / file).read_text(encoding="utf-8")) for name, file in SCHEMA_FILES.items()}


@functools.cache
def _validator(name: str):
    import jsonschema
    from referencing import Registry, Resource

    registry = Registry().with_resources((doc["$id"], Resource.from_contents(doc)) for doc in schemas().values())
    return jsonschema.Draft202012Validator(_prepared(schemas()[name]), registry=registry)


def _prepared(schema: dict) -> dict:
    """``schema`` in a form jsonschema checks faster and that accepts exactly the same documents:
    SmolLM2's executable.json takes 0.9 s as written, 0.4 s so.

    - A local ``$ref`` to a ``$defs`` entry is replaced by that entry, except inside the entry itself
      (struct info holds struct info): each ``$ref`` costs a lookup, and there is one per register and
      shape expression.
    - ``allOf`` of ``if``/``then`` pairs that each test one value of the same member (``op`` of an
      instruction, ``kind`` of struct info) becomes one ``if``/``then``/``else`` chain: the values are
      distinct, so at most one ``if`` holds, and jsonschema builds an error object for every ``if``
      that fails."""
    defs = schema.get("$defs", {})

    def rewrite(node, expanding: frozenset = frozenset()):
        if isinstance(node, list):
            return [rewrite(item, expanding) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref", "")
        name = ref[len("#/$defs/"):]
        if len(node) == 1 and ref.startswith("#/$defs/") and name in defs and name not in expanding:
            return rewrite(defs[name], expanding | {name})  # a recursive one (struct info) stays a $ref inside
        node = {key: rewrite(value, expanding) for key, value in node.items()}
        branches = node.get("allOf", [])
        if branches and all(set(b) == {"if", "then"} and _tested_member(b["if"]) for b in branches) \
                and len({_tested_member(b["if"]) for b in branches}) == 1:
            chain = {}
            for branch in reversed(branches):
                chain = {"if": branch["if"], "then": branch["then"], **({"else": chain} if chain else {})}
            del node["allOf"]
            node.update(chain)
        return node

    return rewrite(schema)


def _tested_member(condition: dict) -> str | None:
    """The member an ``if`` tests, when it only compares one member with a value (const or enum)."""
    properties = condition.get("properties", {})
    if set(condition) != {"properties"} or len(properties) != 1:
        return None
    (member, test), = properties.items()
    return member if set(test) in ({"const"}, {"enum"}) else None


def check_against_schema(doc, name: str, what: str, error: type[TesseraError]) -> None:
    """Raise ``error`` naming the first place where ``doc`` breaks the ``name`` format's schema, and how:
    ``{what} is malformed: functions.main.code[3] lacks the field 'dst'``."""
    validator = _validator(name)
    if validator.is_valid(doc):
        return
    # The first violation in the schema's own order (runtime-js reports the same one, in the same words).
    raise error(f"{what} is malformed: {describe(next(validator.iter_errors(doc)))}")


def describe(e) -> str:
    """A jsonschema ValidationError as one sentence that names the field: its path in the document,
    what it is and what the schema wants there."""
    where = json_path(e.absolute_path) or "the document"
    kind, value, want = e.validator, e.instance, e.validator_value
    if isinstance(e.schema, dict) and "#:" in e.schema.get("pattern", "") and path_problem(value) is not None:
        # A path's schema (docs/format.md's rule): its length or its pattern, said as the rule says it.
        return f"{where} {show(value)} is not a relative path inside the folder: {path_problem(value)}"
    if kind == "required":
        missing = next(key for key in want if key not in value)
        return f"{where} lacks the field {missing!r}"
    if kind == "additionalProperties":
        known = set(e.schema.get("properties", {}))
        extra = sorted(key for key in value if key not in known)
        return f"{where} has a field the format does not have: {extra[0]!r}" if extra else e.message
    if kind == "type":
        wanted = " or ".join(_TYPE_NAMES.get(t, t) for t in ([want] if isinstance(want, str) else want))
        return f"{where} is {show(value)}, not {wanted}"
    if kind in ("minimum", "maximum"):
        return f"{where} is {value}, {'less' if kind == 'minimum' else 'more'} than the {kind} {want}"
    if kind in ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"):
        unit = "items" if kind.endswith("Items") else "characters" if kind.endswith("Length") else "members"
        return f"{where} has {len(value)} {unit}, {'fewer' if kind.startswith('min') else 'more'} than {want}"
    if kind == "enum":
        return f"{where} is {show(value)}, not one of {', '.join(show(v) for v in want)}"
    if kind == "const":
        return f"{where} is {show(value)}, not {show(want)}"
    if kind == "pattern":
        return f"{where} is {show(value)}, not {e.schema.get('title') or 'of the form ' + want}"
    if kind in ("oneOf", "anyOf"):
        # Of the forms allowed (null or an integer, say), the one of the value's type says what is wrong.
        typed = [i for i, branch in enumerate(want) if _json_type(value) in _types_of(branch)]
        if len(typed) == 1:
            inner = [sub for sub in e.context if sub.relative_schema_path[0] == typed[0]]
            if inner:
                return describe(inner[0])
        names = [" or ".join(_TYPE_NAMES.get(t, t) for t in _types_of(branch)) for branch in want]
        if all(names):
            return f"{where} is {show(value)}, not {' or '.join(names)}"
        return f"{where} is {show(value)}, which is none of the forms the format allows there"
    return f"{where}: {e.message[:300]}"


def _types_of(schema) -> list[str]:
    """The JSON types a (prepared) schema allows, when it says so with ``type`` or ``const``."""
    if not isinstance(schema, dict):
        return []
    if "type" in schema:
        return [schema["type"]] if isinstance(schema["type"], str) else list(schema["type"])
    return [_json_type(schema["const"])] if "const" in schema else []


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "?")


_TYPE_NAMES = {"integer": "an integer", "string": "a string", "object": "an object", "array": "an array",
               "boolean": "true or false", "null": "null", "number": "a number"}


def json_path(parts) -> str:
    """``functions.main.code[3].dst`` for the path ['functions', 'main', 'code', 3, 'dst']."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part.isidentifier():
            text += f".{part}" if text else part
        else:
            text += f"[{show(part)}]"
    return text


def show(value) -> str:
    """A value for a message, cut short: a file may hold anything."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"an array of {len(value)} items"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
