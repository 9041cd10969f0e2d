"""Files of a model folder, read as an attacker may have written them (docs/format.md, "Paths and files").

Every name a folder's JSON gives is a relative path inside that folder: ``check_relative_path`` refuses
any other before anything is opened, by the same rules as runtime-js (format.js) and runtime-native
(files.c). ``resolve_inside`` then follows symlinks and requires the result to stay in the folder, and
``read_inside`` reads only a regular file (never a FIFO, a device or a directory: a FIFO would block and
/dev/zero never ends) whose size, taken before reading, is what the caller allows. ``read_json``
parses a file's text as every runtime must read it: no member named twice (cJSON keeps the first,
Python's json the last), no NaN or Infinity (JavaScript has none), no nesting deeper than runtime-native
takes, and a number without a fraction an integer however it is written (1.0, 1e3), as JavaScript reads it.
"""

from __future__ import annotations

import json
import os
import stat

from .. import facts
from ..ir.errors import TesseraError

# The longest path the format allows, in characters (compiler/facts.json).
MAX_PATH_CHARS = facts.MAX_PATH_CHARS
# Characters a path may not hold: a browser fetches it as a URL, where '%' is decoded, '?' and '#' end
# the path, ':' makes a scheme and '\\' is '/'; control characters are dropped by URL parsing or end
# a C string (and a space at either end is stripped). A folder must load the same in every runtime, so
# all of them refuse these.
FORBIDDEN = frozenset("\\%?#:") | frozenset(map(chr, range(0x20))) | {"\x7f"}
# The deepest JSON nesting a runtime reads, and the largest executable.json (compiler/facts.json).
MAX_JSON_DEPTH = facts.MAX_JSON_DEPTH
MAX_JSON_BYTES = facts.MAX_JSON_BYTES["executable"]


class FileCheckError(TesseraError):
    """A path or file of a model folder that a loader refuses (the loaders raise their own subclasses)."""


def path_problem(path) -> str | None:
    """Why ``path`` is not a relative path inside a folder, or None if it is one."""
    if not isinstance(path, str):
        return f"it is a {type(path).__name__}, not a string"
    if not path:
        return "it is empty"
    if len(path) > MAX_PATH_CHARS:
        return f"it is longer than {MAX_PATH_CHARS} characters"
    if path.startswith("/"):
        return "it starts with '/'"
    if path[0] == " " or path[-1] == " ":  # URL parsing strips them: " /etc/passwd" would become absolute
        return "it starts or ends with a space"
    bad = next((c for c in path if c in FORBIDDEN), None)
    if bad is not None:
        return ("it contains a control character" if bad < " " or bad == "\x7f" else
                "it contains a backslash" if bad == "\\" else "it contains '%', '?', '#' or ':'")
    parts = path.split("/")
    if "" in parts:
        return "it has an empty part"
    if "." in parts or ".." in parts:
        return "it has a '.' or '..' part"
    return None


def check_relative_path(path, what: str, error: type[TesseraError] = FileCheckError) -> str:
    """``path`` if it names a file inside the folder (docs/format.md), else ``error`` naming ``what`` and why."""
    problem = path_problem(path)
    if problem:
        raise error(f"the {what} path {_quote(path)} is not a relative path inside the folder: {problem}")
    return path


def resolve_inside(directory: str, path: str, what: str, error: type[TesseraError] = FileCheckError) -> str:
    """``directory/path`` with every symlink followed, which must still lie inside ``directory``."""
    check_relative_path(path, what, error)
    root = os.path.realpath(directory)
    full = os.path.realpath(os.path.join(root, path))
    if os.path.commonpath([root, full]) != root:
        raise error(f"the {what} {os.path.join(directory, path)} leaves the folder (it resolves to {full})")
    return full


def read_inside(directory: str, path: str, what: str, max_bytes: int = MAX_JSON_BYTES, expected_size: int | None = None,
                error: type[TesseraError] = FileCheckError) -> bytes:
    """The bytes of ``directory/path`` (``resolve_inside``): a regular file, at most ``max_bytes`` long and,
    when ``expected_size`` is given, exactly that long, both known before anything is read."""
    return read_regular(resolve_inside(directory, path, what, error), what, max_bytes, expected_size, error,
                        shown=os.path.join(directory, path))


def read_regular(path: str, what: str, max_bytes: int = MAX_JSON_BYTES, expected_size: int | None = None,
                 error: type[TesseraError] = FileCheckError, shown: str | None = None) -> bytes:
    """The bytes of the regular file ``path`` (a file the caller named, not one a file named: see
    ``read_inside``), with the same checks."""
    shown = shown or path
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # refused before it is opened: opening a FIFO waits for a writer
            raise error(f"the {what} {shown} is {_kind(info.st_mode)}, not a regular file")
        _check_size(info.st_size, shown, what, max_bytes, expected_size, error)
        # O_NONBLOCK: should a FIFO replace the file between stat and open, the open does not wait.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise error(f"the {what} {shown} is {_kind(info.st_mode)}, not a regular file")
            _check_size(info.st_size, shown, what, max_bytes, expected_size, error)
            data = f.read(info.st_size + 1)
    except OSError as oserror:
        raise error(f"cannot read {what} {shown}: {oserror.strerror}") from None
    if len(data) != info.st_size:
        raise error(f"the {what} {shown} changed size while it was read")
    return data


def parse_json(data: bytes, what: str, error: type[TesseraError] = FileCheckError):
    """JSON text as every runtime reads it, else ``error`` saying what is wrong and where."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as decode:
        raise error(f"{what} is not UTF-8 text (byte {decode.start})") from None
    try:
        doc = json.loads(text, object_pairs_hook=_members, parse_constant=_no_constant, parse_float=_number)
    except json.JSONDecodeError as decode:
        raise error(f"{what} is not valid JSON (truncated or corrupted?): {decode.msg} at line {decode.lineno}") \
            from None
    except ValueError as value:  # a member named twice, NaN, an integer of more than 4300 digits
        raise error(f"{what} is not valid JSON: {value}") from None
    except RecursionError:  # the parser's own limit, deeper still than ours
        raise error(f"{what} is JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    if _nesting_depth(doc) > MAX_JSON_DEPTH:
        raise error(f"{what} is JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return doc


def read_json(directory: str, path: str, what: str, max_bytes: int = MAX_JSON_BYTES,
              error: type[TesseraError] = FileCheckError):
    """``read_inside`` then ``parse_json``: the JSON document ``directory/path``."""
    return parse_json(read_inside(directory, path, what, max_bytes, error=error), os.path.join(directory, path),
                      error)


def _members(pairs):
    doc = {}
    for key, value in pairs:
        if key in doc:
            raise ValueError(f"the member {key!r} appears twice in one object (runtimes would read different values)")
        doc[key] = value
    return doc


def _number(text: str):
    """A JSON number with a fraction or exponent, as JavaScript reads it: 1.0 and 1e3 are the integers 1 and
    1000 (JSON.parse cannot tell them apart), anything else a float."""
    value = float(text)
    return int(value) if value.is_integer() else value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _nesting_depth(doc) -> int:
    """The deepest nesting of arrays and objects in a parsed document, counted level by level (no recursion)."""
    deepest, level = 0, [doc] if isinstance(doc, (dict, list)) else []
    while level and deepest <= MAX_JSON_DEPTH:
        deepest += 1
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, (dict, list))]
    return deepest


def _check_size(size: int, shown: str, what: str, max_bytes: int, expected_size: int | None, error) -> None:
    if expected_size is not None and size != expected_size:
        raise error(f"the {what} {shown} has {size} bytes, expected {expected_size} "
                    f"({'truncated' if size < expected_size else 'too long'}?)")
    if size > max_bytes:
        raise error(f"the {what} {shown} has {size} bytes, more than the {max_bytes} such a file may have")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _quote(path) -> str:
    """``path`` for a message: repr() escapes control characters, so a hostile name cannot forge the rest
    of the line; a long one is cut."""
    text = repr(path)
    return text if len(text) <= 200 else text[:200] + "..."
