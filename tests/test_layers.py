"""The layers close: no module of ``tessera`` imports a module of a layer above its own.

docs/architecture.md, "The layers": "A module may import its own layer and the layers below it,
never one above." This test states the layers as data and checks every import of every module of
the ``tessera`` package (compiler/ is ``tessera``, codegen/ is ``tessera.codegen``: pyproject's
package-dir). It reads the source with ``ast``, so it sees every import at any depth: at module
top, inside functions (the lazy imports that keep start-up fast), under ``if TYPE_CHECKING``;
relative imports are resolved to absolute names, and ``from package import name`` counts as an
import of the submodule ``package.name`` when there is one.

The layers, lowest first. A module may import its own layer and any layer below it. A module
belongs to the layer that lists the longest prefix of its dotted name (``tessera.tir.schedule``
before ``tessera.tir``); the root package ``tessera`` matches only itself.

  facts      the numbers every runtime shares, read from compiler/facts.json (docs/facts.md).
  target     targets: kind, features, limits. A leaf that legalization, schedule rules and
             backends ask by capability, so it imports only facts.
  arith      symbolic integer expressions.
  tir        loop-level IR: buffers and statements, compute definitions with their pattern hints,
             pattern analysis, quantized-block decoding, tir->tir lowering, verification. It
             knows nothing of the graph IR.
  ir         graph IR: struct info, expressions, builder, deduction, printer, well-formedness.
             A module holds kernels (tir) next to graph functions and ``call_tir`` names them,
             so ir may use tir, as Relax uses TIR (the printer prints a module's kernels).
             The reference interpreter runs an operator call through the numpy reference its
             ``Op`` node carries and a library call through ``tessera.ir.library`` (a table the
             op layer fills): it needs no operator module.
  op         operators: signature, struct-info deduction, numpy reference, and legalization to
             a tir computation (``ComputeDef``, ``RowDef`` or ``OpaqueDef`` with a pattern kind);
             never a schedule.
  schedule   ``tessera.tir.schedule``: the default schedule rule for each pattern, chosen from
             the computation and the target's limits by the legalizing transform.
  script     the text-format parser: graph IR now, tir kernels soon; it builds operator calls
             by name.
  transform  graph passes; ``legalize_ops`` is where an operator's computation (op) meets its
             schedule rule (schedule).
  codegen    the backend registry ``tessera.codegen`` and one renderer per language.
  vm         the Python runtime: the executable format, its checks, and the VM over its devices.
             It imports nothing of the passes (``NARROWER_RULES``).
  native     ``tessera.native``: runtime-native's C API from Python, a runtime beside the VM.
  vm_build   the VM's back end on the compiler side: emits the VM's bytecode from a lowered
             module (it imports passes: ``lower_vm``, ``plan_memory``, ``device_targets``) and
             checks its tensors against the devices' binding limits. It writes the format of vm.
  model      frontend (GGUF reader, tokenizer), ``nn``, ``models``.
  driver     ``tessera.build`` (``tessera.driver`` and the root package that exports it): the one
             place where the compiler's layers meet.
  app        applications over the public APIs: ``tessera.app`` (compile, chat, bundle, serve,
             demo, inspect).
  cli        the ``tessera`` command line.

``NARROWER_RULES`` forbids imports that the order allows but the layering does not: the VM imports
the executable format and its devices, never a pass; the VM reaches backends only through the
registry ``tessera.codegen``, never a language's renderer; schedule rules know patterns, not
operators.
"""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "tessera"

# (layer, module prefixes), lowest layer first.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("facts", ("tessera.facts",)),  # the numbers every runtime shares (compiler/facts.json): imports nothing of tessera
    ("target", ("tessera.target",)),
    ("arith", ("tessera.arith",)),
    ("tir", ("tessera.tir",)),
    ("ir", ("tessera.ir",)),
    ("op", ("tessera.op",)),
    ("schedule", ("tessera.tir.schedule",)),
    ("script", ("tessera.script",)),
    ("transform", ("tessera.transform",)),
    ("codegen", ("tessera.codegen",)),
    ("vm", ("tessera.vm",)),
    ("native", ("tessera.native",)),  # runtime-native's C API from Python: a runtime beside the VM
    ("vm_build", ("tessera.vm_build",)),  # the bytecode emitter: passes and the executable format meet
    ("model", ("tessera.frontend", "tessera.nn", "tessera.models")),
    ("driver", ("tessera", "tessera.driver", "tessera.inference")),  # tessera.build; InferenceSession over the VM
    ("app", ("tessera.app",)),
    ("cli", ("tessera.cli",)),
]

# (importing layer, imported-module patterns (fnmatch), why): imports the order allows but the layering does not.
NARROWER_RULES: list[tuple[str, tuple[str, ...], str]] = [
    ("vm", ("tessera.transform", "tessera.transform.*"),
     "tessera.vm, the Python runtime, imports the executable format and the devices and nothing of the passes: "
     "compile-side code belongs in tessera.vm_build"),
    ("vm", ("tessera.codegen.*",),
     "the VM reaches a backend through the registry tessera.codegen, never a language's renderer"),
    ("schedule", ("tessera.op", "tessera.op.*"),
     "schedule rules choose by a computation's pattern and the target, never by operator"),
    # tessera.ir.* is left out: tessera.ir exports functions named like its modules (well_formed).
    ("app", ("tessera.driver", "tessera.arith.*", "tessera.tir", "tessera.tir.*", "tessera.op.*", "tessera.script.*",
             "tessera.transform", "tessera.transform.*", "tessera.codegen.*", "tessera.vm.*",
             "tessera.vm_build", "tessera.vm_build.*"),
     "applications use the public APIs: tessera.build, the names a package exports (tessera.vm, tessera.ir ...), "
     "tessera.frontend, tessera.nn and tessera.models"),
]



@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


@dataclass(frozen=True)
class Import:
    importer: Module
    line: int
    imported: str  # absolute dotted name

    def where(self) -> str:
        return f"{self.importer.path.relative_to(ROOT)}:{self.line}"


def package_modules(root: Path = ROOT) -> dict[str, Module]:
    """Every module of the package, by dotted name, from pyproject's package-dir."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"]["package-dir"]
    modules: dict[str, Module] = {}
    for package, folder in package_dir.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join([package, *parts])
            modules.setdefault(name, Module(name, path, is_package))
    return modules


def imports_of(module: Module, source: str, known: set[str]) -> list[Import]:
    """The package's modules that ``source`` imports, at any depth, as absolute names."""
    found = []
    for node in ast.walk(ast.parse(source, str(module.path))):
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node.module, node.level)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append(Import(module, node.lineno, submodule if submodule in known else base))
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            found.append(Import(module, node.lineno, node.args[0].value))
    ours = [i for i in found if i.imported == PACKAGE or i.imported.startswith(PACKAGE + ".")]
    return list(dict.fromkeys(ours))  # ``from .x import a, b`` is one import of x


def _absolute(module: Module, name: str | None, level: int) -> str:
    if level == 0:
        return name or ""
    parts = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    if level - 1 >= len(parts):
        raise ValueError(f"{module.path}: relative import beyond the top-level package")
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def _is_dynamic_import(node: ast.Call) -> bool:
    """``importlib.import_module("tessera.x")`` or ``__import__("tessera.x")`` with a literal name."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return (called in ("import_module", "__import__") and len(node.args) >= 1
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


def layer_of(name: str) -> str | None:
    best, best_length = None, -1
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            matches = name == prefix or (prefix != PACKAGE and name.startswith(prefix + "."))
            if matches and len(prefix) > best_length:
                best, best_length = layer, len(prefix)
    return best


RANK = {layer: rank for rank, (layer, _) in enumerate(LAYERS)}


def all_imports() -> list[Import]:
    modules = package_modules()
    found = []
    for module in modules.values():
        found += imports_of(module, module.path.read_text(), set(modules))
    return found


def broken_rule(imp: Import) -> str | None:
    """Why ``imp`` breaks the layering, or None."""
    low, high = layer_of(imp.importer.name), layer_of(imp.imported)
    if low is None or high is None:
        return None  # test_every_module_has_a_layer reports these
    if RANK[high] > RANK[low]:
        return (f"{imp.where()}: {imp.importer.name} (layer {low}) imports {imp.imported} "
                f"(layer {high}, which is above {low})")
    for layer, patterns, why in NARROWER_RULES:
        if low == layer and any(fnmatch.fnmatchcase(imp.imported, p) for p in patterns):
            return (f"{imp.where()}: {imp.importer.name} (layer {low}) imports {imp.imported} "
                    f"(layer {high}): {why}")
    return None


def test_every_module_has_a_layer():
    modules = package_modules()
    assert len(modules) > 50, "the walk found too few modules: is pyproject's package-dir still read right?"
    missing = sorted(name for name in modules if layer_of(name) is None)
    imported = sorted({f"{i.where()}: {i.imported}" for i in all_imports() if layer_of(i.imported) is None})
    assert not missing and not imported, (
        "modules with no layer (add them to LAYERS in tests/test_layers.py):\n  "
        + "\n  ".join(missing + imported))


def test_no_module_imports_a_higher_layer():
    broken = []
    for imp in all_imports():
        reason = broken_rule(imp)
        if reason:
            broken.append(reason)
    assert not broken, "imports against the layers (docs/architecture.md, section 'The layers'):\n  " + "\n  ".join(sorted(broken))


def test_the_vm_rule_keeps_passes_on_the_compiler_side():
    """The rule itself, on made-up imports: the Python VM may not import a pass or the bytecode emitter;
    the emitter may import both the passes and the executable format."""
    vm = Module("tessera.vm.program", ROOT / "compiler/vm/program.py", False)
    emitter = Module("tessera.vm_build.bytecode", ROOT / "compiler/vm_build/bytecode.py", False)
    assert "nothing of the passes" in broken_rule(Import(vm, 1, "tessera.transform.plan_memory"))
    assert "above vm" in broken_rule(Import(vm, 1, "tessera.vm_build.bytecode"))
    assert broken_rule(Import(vm, 1, "tessera.vm.executable")) is None
    assert broken_rule(Import(emitter, 1, "tessera.transform.plan_memory")) is None
    assert broken_rule(Import(emitter, 1, "tessera.vm.executable")) is None


def test_the_architecture_page_lists_these_layers():
    """docs/architecture.md's table of layers names the layers of LAYERS, in the same order."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## The layers", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    assert rows[0] == "layer", "the section 'The layers' lost its table"
    assert rows[1:] == [layer for layer, _ in LAYERS], (
        "docs/architecture.md's table of layers differs from LAYERS in tests/test_layers.py")
