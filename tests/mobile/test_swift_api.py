"""The Swift package in mobile/ios cannot be compiled here (no Swift toolchain), so its use of the C API
is checked by reading it: every tessera_* function the Swift calls must be declared in tessera.h with
TESSERA_API and the same number of parameters, and must appear in runtime-native/tests/test_swift_mirror.c,
the C test that runs the Swift's call sequence. Calls of a header's type name (tessera_value()) are Swift
initializers of imported C structs, not functions."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IOS = ROOT / "mobile" / "ios"
HEADER = ROOT / "runtime-native" / "include" / "tessera.h"
MIRROR = ROOT / "runtime-native" / "tests" / "test_swift_mirror.c"

CALL = re.compile(r"(?<![\w.])(tessera_[a-z0-9_]+)\s*\(")
OPEN = {"(": ")", "[": "]", "{": "}"}


def strip_c_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_api(text: str) -> tuple[dict[str, int], set[str]]:
    """The TESSERA_API functions with their parameter counts, and the type names the header defines."""
    text = strip_c_comments(text)
    functions: dict[str, int] = {}
    for match in re.finditer(r"TESSERA_API\s+([^;{]*?)\b(tessera_\w+)\s*\(([^;]*?)\)\s*;", text, flags=re.S):
        params = match.group(3).strip()
        functions[match.group(2)] = 0 if params in ("", "void") else count_top_level(params)
    types = set(re.findall(r"}\s*(tessera_\w+)\s*;", text))
    types |= set(re.findall(r"typedef\s+(?:struct|enum)\s+\w+\s+(tessera_\w+)\s*;", text))
    types |= set(re.findall(r"typedef\s+[\w\s*]+\(\s*\*\s*(tessera_\w+)\s*\)", text))
    return functions, types


def count_top_level(params: str) -> int:
    depth = 0
    commas = 0
    for ch in params:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            commas += 1
    return commas + 1


def blank_swift(text: str) -> str:
    """The Swift text with comments removed and string literals reduced to "" (interpolations included),
    so that commas and parentheses inside them are not counted. Positions are not kept."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            depth = 0
            while i < n:  # Swift's block comments nest
                if text.startswith("/*", i):
                    depth += 1
                    i += 2
                elif text.startswith("*/", i):
                    depth -= 1
                    i += 2
                    if depth == 0:
                        break
                else:
                    i += 1
        elif text[i] == '"':
            i = skip_string(text, i)
            out.append('""')
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def skip_string(text: str, i: int) -> int:
    """The index after the string literal starting at i ("..." or \"\"\"...\"\"\")."""
    quote = '"""' if text.startswith('"""', i) else '"'
    i += len(quote)
    while i < len(text):
        if text[i] == "\\":
            if text.startswith("\\(", i):  # an interpolation: skip its balanced parentheses
                i += 2
                depth = 1
                while i < len(text) and depth:
                    if text[i] == '"':
                        i = skip_string(text, i)
                        continue
                    depth += {"(": 1, ")": -1}.get(text[i], 0)
                    i += 1
                continue
            i += 2
        elif text.startswith(quote, i):
            return i + len(quote)
        else:
            i += 1
    return i


def swift_calls(text: str) -> list[tuple[str, int]]:
    """Each tessera_* call in the Swift text with its argument count (a trailing closure counts as one)."""
    code = blank_swift(text)
    calls = []
    for match in CALL.finditer(code):
        i = match.end()
        depth = 1
        args = 0
        seen = False
        while i < len(code) and depth:
            ch = code[i]
            if ch in OPEN:
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "," and depth == 1:
                args += 1
            if depth >= 1 and not ch.isspace() and not (depth == 1 and ch == ","):
                seen = True
            i += 1
        count = args + 1 if seen else 0
        # A `{` after the call is a trailing closure, except in a condition (`if let p = f(x) {`), where
        # Swift does not allow one.
        line = code[code.rfind("\n", 0, match.start()) + 1:match.start()]
        if code[i:].lstrip().startswith("{") and not re.search(r"\b(if|guard|while|for|switch)\b", line):
            count += 1
        calls.append((match.group(1), count))
    return calls


def check(swift_sources: dict[str, str], header: str, mirror: str) -> list[str]:
    """Everything wrong, one line each."""
    functions, types = header_api(header)
    mirror_calls = {name for name, _ in CALL_C.findall(strip_c_comments(mirror))}
    problems = []
    for path, text in swift_sources.items():
        for name, count in swift_calls(text):
            if name in types:
                continue
            if name not in functions:
                problems.append(f"{path}: {name} is not a TESSERA_API function of tessera.h")
            elif functions[name] != count:
                problems.append(f"{path}: {name} is called with {count} arguments; tessera.h declares "
                                f"{functions[name]}")
            elif name not in mirror_calls:
                problems.append(f"{path}: {name} is not called by test_swift_mirror.c")
    return problems


CALL_C = re.compile(r"(?<![\w.])((tessera_[a-z0-9_]+))\s*\(")


def sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted((IOS / "Sources").rglob("*.swift"))}


def test_the_swift_calls_exist_with_their_arity_and_are_mirrored():
    swift = sources()
    assert swift, "no Swift sources under mobile/ios/Sources"
    called = {name for text in swift.values() for name, _ in swift_calls(text)}
    # The package calls at least the load, the call, the chat turn and the frees.
    for name in ("tessera_model_load", "tessera_model_call", "tessera_chat_completion", "tessera_model_free",
                 "tessera_session_new", "tessera_last_error"):
        assert name in called, name
    assert check(swift, HEADER.read_text(), MIRROR.read_text()) == []


def test_the_module_map_is_over_tessera_h():
    modulemap = (IOS / "Sources" / "CTessera" / "include" / "module.modulemap").read_text()
    assert re.search(r'header\s+"tessera\.h"', modulemap)
    linked = IOS / "Sources" / "CTessera" / "include" / "tessera.h"
    assert linked.resolve() == HEADER.resolve()
    package = (IOS / "Package.swift").read_text()
    assert package.startswith("// swift-tools-version:5.9")
    assert 'binaryTarget(name: "TesseraBinary", path: "Tessera.xcframework")' in package


def test_the_checker_sees_labels_closures_and_strings():
    text = '''
    // tessera_model_free(a, b) in a comment is not a call
    let s = "tessera_model_free(x, y)"
    let m = options.device.withCString { d -> OpaquePointer? in
        return tessera_model_load(path, &params)
    }
    let t = tessera_model_call(m, "ma,in(", args.baseAddress, f(a, b), &outputs, &count)
    let v = tessera_value()
    let e = tessera_status_name(status)
    if let p = tessera_last_error() {
    let x = "\\(tessera_last_error())"
    let n = tessera_tokenize(m, text, len, nil, 0, [1, 2].count, { a, b in 0 }())
    '''
    assert swift_calls(text) == [("tessera_model_load", 2), ("tessera_model_call", 6), ("tessera_value", 0),
                                 ("tessera_status_name", 1), ("tessera_last_error", 0), ("tessera_tokenize", 7)]


def test_the_checker_fails_on_a_mismatch():
    header = HEADER.read_text()
    mirror = MIRROR.read_text()
    wrong_arity = {"A.swift": "let m = tessera_model_load(path)"}
    assert check(wrong_arity, header, mirror) == [
        "A.swift: tessera_model_load is called with 1 arguments; tessera.h declares 2"]
    unknown = {"B.swift": "tessera_model_explode(m)"}
    assert check(unknown, header, mirror) == ["B.swift: tessera_model_explode is not a TESSERA_API function of tessera.h"]
    unmirrored = {"C.swift": "let n = tessera_detokenize(m, ids, count, buf, size)"}
    assert check(unmirrored, header, mirror) == ["C.swift: tessera_detokenize is not called by test_swift_mirror.c"]
    trailing = {"D.swift": "tessera_session_free(s) { }"}
    assert check(trailing, header, mirror) == [
        "D.swift: tessera_session_free is called with 2 arguments; tessera.h declares 1"]


def test_the_header_is_read_whole():
    functions, types = header_api(HEADER.read_text())
    assert functions["tessera_last_error"] == 0
    assert functions["tessera_model_call"] == 6
    assert functions["tessera_chat_completion"] == 7
    assert {"tessera_value", "tessera_message", "tessera_usage", "tessera_piece_callback"} <= types
