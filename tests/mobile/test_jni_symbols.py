"""Every Kotlin `external fun` of the Android library has its JNI function exported by libtessera_jni.so,
and the library exports no Java_ function that Kotlin does not declare, checked with nm on each build of
the bridge: the host's (mobile/android/scripts/build-host.sh) and the AArch64 cross builds with glibc
and with musl (the NDK's CMakeLists.txt in mobile/android/tessera/src/main/cpp, configured with
runtime-native's toolchain files and Android's warnings). A name that does not match is an
UnsatisfiedLinkError on the phone at the first call, which nothing else here would catch: the JVM tests
load the host library only.

The JNI names follow the specification's short form: Java_, the class's binary name with '/' as '_',
'_', the method name, with '_' escaped as _1, ';' as _2, '[' as _3 and any other character as _0xxxx.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import time

import pytest
from native.build import ensure_native_build

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KOTLIN = os.path.join(ROOT, "mobile", "android", "tessera", "src", "main", "kotlin")
JNI_SOURCE = os.path.join(ROOT, "mobile", "android", "tessera", "src", "main", "cpp")
BUILD_SCRIPT = os.path.join(ROOT, "mobile", "android", "scripts", "build-host.sh")
NATIVE = os.path.join(ROOT, "build", "native")
TOOLCHAINS = os.path.join(ROOT, "runtime-native", "cmake")
# name -> (the toolchain file, the build folder); the Makefile's test-native-builds builds the same folders.
CROSS = {"aarch64-glibc": ("aarch64-linux-gnu.cmake", "aarch64-jni"),
         "aarch64-musl": ("aarch64-linux-musl.cmake", "aarch64-musl-jni")}


# ---- Kotlin declarations -----------------------------------------------------------------------------

def strip_kotlin(text: str) -> str:
    """The source without comments and string literals (whose braces and words would mislead the scan)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"""(.*?)"""', '""', text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


DECLARATION = re.compile(r"(?<![\w:.])(?:(companion)\s+object(?:\s+(\w+))?|(?:class|object|interface)\s+(\w+))"
                         r"|(\{)|(\})|\bexternal\s+fun\s+(?:<[^>]*>\s*)?(\w+)\s*\(")


def external_functions(path: str, text: str) -> list[tuple[str, str]]:
    """(JVM binary class name, method) for each `external fun` of one Kotlin file, by the nesting of
    classes and objects around it: Outer$Inner for a nested one, Outer$Companion for a companion, the
    file's facade class (FileKt, or its @file:JvmName) at the top level."""
    package = re.search(r"^\s*package\s+([\w.]+)", text, flags=re.M)
    prefix = package.group(1).replace(".", "/") + "/" if package else ""
    facade = re.search(r'@file\s*:\s*JvmName\s*\(\s*"(\w+)"', text)
    facade_name = facade.group(1) if facade else os.path.basename(path)[: -len(".kt")] + "Kt"
    text = strip_kotlin(text)
    found = []
    stack: list[str | None] = []  # one entry per open brace: the class it opens, or None
    pending: str | None = None  # a class or object declared, whose body's brace has not come yet
    for match in DECLARATION.finditer(text):
        companion, companion_name, name, opening, closing, function = match.groups()
        if companion:
            pending = companion_name or "Companion"
        elif name:
            pending = name
        elif opening:
            stack.append(pending)
            pending = None
        elif closing:
            if stack:
                stack.pop()
            pending = None
        elif function:
            classes = [c for c in stack if c]
            owner = "$".join(classes) if classes else facade_name
            if classes and stack[-1] is None:
                raise AssertionError(f"{path}: external fun {function} inside a function body")
            found.append((prefix + owner, function))
    return found


def kotlin_externals() -> dict[str, str]:
    """JNI symbol -> where it is declared, for every `external fun` under tessera/src/main/kotlin."""
    declared: dict[str, str] = {}
    seen: dict[tuple[str, str], str] = {}
    for folder, _, files in os.walk(KOTLIN):
        for name in sorted(files):
            if not name.endswith(".kt"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for owner, method in external_functions(path, text):
                where = f"{os.path.relpath(path, ROOT)}: {owner.replace('/', '.')}.{method}"
                # An overloaded native needs JNI's long name (with its signature): the bridge has none.
                assert (owner, method) not in seen, f"{where} is overloaded ({seen[(owner, method)]}): " \
                                                    "give it a name of its own"
                seen[(owner, method)] = where
                declared[jni_short_name(owner, method)] = where
    return declared


def jni_escape(name: str) -> str:
    out = []
    for ch in name:
        if ch == "/":
            out.append("_")
        elif ch == "_":
            out.append("_1")
        elif ch == ";":
            out.append("_2")
        elif ch == "[":
            out.append("_3")
        elif ch.isascii() and ch.isalnum():
            out.append(ch)
        else:
            out.append(f"_0{ord(ch):04x}")
    return "".join(out)


def jni_short_name(binary_class: str, method: str) -> str:
    return f"Java_{jni_escape(binary_class)}_{jni_escape(method)}"


def test_jni_names_follow_the_specification():
    assert jni_short_name("ai/tessera/TesseraJni", "modelLoad") == "Java_ai_tessera_TesseraJni_modelLoad"
    assert jni_short_name("ai/tessera/Engine$Companion", "load_now") == \
        "Java_ai_tessera_Engine_00024Companion_load_1now"
    source = "package ai.tessera\n/* external fun commented(): Int */\nclass A {\n  companion object {\n" \
             "    @JvmStatic external fun a(): Int\n  }\n  object B { external fun b(x: String = \"}\"): Int }\n" \
             "  fun c() { val k = A::class\n  }\n  external fun d(): Int\n}\nexternal fun top(): Int\n"
    assert external_functions("/x/File.kt", source) == [
        ("ai/tessera/A$Companion", "a"), ("ai/tessera/A$B", "b"), ("ai/tessera/A", "d"),
        ("ai/tessera/FileKt", "top")]


def test_kotlin_declares_the_bridge():
    declared = kotlin_externals()
    assert declared, f"no external fun under {KOTLIN}"
    assert all(symbol.startswith("Java_ai_tessera_") for symbol in declared), sorted(declared)


# ---- the libraries -------------------------------------------------------------------------------------

def exported_functions(library: str, nm: str) -> set[str]:
    result = subprocess.run([nm, "-D", "--defined-only", library], capture_output=True, text=True)
    assert result.returncode == 0, f"{nm} {library}: {result.stderr}"
    return {parts[2] for parts in (line.split() for line in result.stdout.splitlines())
            if len(parts) == 3 and parts[1] in ("T", "t")}


def exported_java_symbols(library: str, nm: str) -> set[str]:
    return {name for name in exported_functions(library, nm) if name.startswith("Java_")}


def java_include() -> str:
    """The JDK's include folder (jni.h; include/linux/jni_md.h is the same for every Linux architecture)."""
    home = os.environ.get("JAVA_HOME")
    if not home:
        javac = shutil.which("javac")
        assert javac, "javac is missing: install openjdk-17-jdk-headless (make system-deps)"
        home = os.path.dirname(os.path.dirname(os.path.realpath(javac)))
    include = os.path.join(home, "include")
    assert os.path.isfile(os.path.join(include, "jni.h")), f"{include}/jni.h is missing: JAVA_HOME must be a JDK"
    return include


def build_cross(name: str) -> str:
    """libtessera_jni.so of one AArch64 cross build, configured once and brought up to date; one process
    at a time (make's test-native-builds and a pytest worker may both ask)."""
    toolchain, folder = CROSS[name]
    build = os.path.join(NATIVE, folder)
    os.makedirs(NATIVE, exist_ok=True)
    with open(os.path.join(NATIVE, f".{folder}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            include = java_include()
            configure = subprocess.run(
                ["cmake", "-S", JNI_SOURCE, "-B", build, f"-DCMAKE_TOOLCHAIN_FILE={os.path.join(TOOLCHAINS, toolchain)}",
                 "-DCMAKE_BUILD_TYPE=Release", "-DTESSERA_STRICT_WARNINGS=ON",
                 f"-DCMAKE_C_STANDARD_INCLUDE_DIRECTORIES={include};{include}/linux"],
                capture_output=True, text=True)
            assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
        start = time.perf_counter()
        result = subprocess.run(["cmake", "--build", build, "-j2"], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
        print(f"{name}: libtessera_jni.so up to date in {time.perf_counter() - start:.1f} s")
    return os.path.join(build, "libtessera_jni.so")


def build_host() -> str:
    ensure_native_build()
    result = subprocess.run(["bash", BUILD_SCRIPT], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return os.path.join(ROOT, "build", "android-host", "libtessera_jni.so")


def check_exports(library: str, nm: str) -> None:
    declared = kotlin_externals()
    exported = exported_java_symbols(library, nm)
    missing = sorted(f"{symbol} ({declared[symbol]})" for symbol in set(declared) - exported)
    undeclared = sorted(exported - set(declared))
    assert not missing, f"{library} lacks the JNI functions of these Kotlin declarations:\n" + "\n".join(missing)
    assert not undeclared, f"{library} exports JNI functions no Kotlin `external fun` declares: {undeclared}"


def test_host_library_exports_every_declared_function():
    check_exports(build_host(), "nm")


@pytest.mark.parametrize("name", sorted(CROSS))
def test_cross_library_exports_every_declared_function(name):
    library = build_cross(name)
    with open(library, "rb") as f:
        header = f.read(20)
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183, f"{library} is not AArch64"
    nm = shutil.which("llvm-nm") or shutil.which("aarch64-linux-gnu-nm")
    assert nm, "no nm for AArch64: install llvm or binutils-aarch64-linux-gnu (make system-deps)"
    check_exports(library, nm)
    # runtime-native is linked in statically and stays inside: an app's other copy of libtessera (or of
    # cJSON, PCRE2) cannot bind to this one's functions.
    leaked = sorted(name for name in exported_functions(library, nm) if not name.startswith(("Java_", "JNI_")))
    assert not leaked, f"{library} exports more than the JNI entry points: {leaked[:20]}"
