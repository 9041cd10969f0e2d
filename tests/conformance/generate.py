"""Build the conformance cases: one executable folder per case and target, with its case.json.

    python tests/conformance/generate.py [--root build/conformance] [--case NAME ...] [--target NAME ...] [--force]

writes ``<root>/<target>/<case>/`` (the executable as ``exe.save`` writes it, ``case.json`` and the
arrays it names under ``data/``) and ``<root>/index.json``, which lists every target with its
backend and cases. The split targets (``SPLIT_TARGETS``: "vulkan+cpu", "opencl+cpu") are builds
across two devices (format version 4) of their own cases (``cases.SPLIT_CASES``), listed in the
index under ``split_targets``. A folder is rebuilt only when its digest changes: the compiler's source, this
folder's source (cases and generator), the tiny Llama variants, numpy's and gguf's versions, and
the case and target names. The expected outputs come from the reference interpreter
(``tessera.ir.interpret``) on the unlowered module, checked against a case's numpy statement when
it has one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import time

if __package__ in (None, ""):  # run as a script: make tests/ importable, as pytest's pythonpath does
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from conformance.caseio import CASE_FILE, CASE_FORMAT, INDEX_FILE, INDEX_FORMAT, VERSION, flatten, write_array  # noqa: E402
from conformance.cases import CASES, SPLIT_CASES, Case  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_ROOT = os.path.join(REPO, "build", "conformance")
# Target folder -> preset. The GPU builds use their kind's portable preset (WebGPU's spec defaults,
# no optional feature), so the webgpu folder runs on wgpu-py (llvmpipe), in Chromium (SwiftShader)
# and on any other adapter, and the vulkan (opencl) folder on lavapipe (PoCL) and on a phone's GPU alike.
# The cpu folder is machine code: built for a portable instruction set of this machine's architecture,
# never -march=native, since its digest does not name the CPU and the folder may be run elsewhere.
AARCH64_HOST = platform.machine().lower() in ("aarch64", "arm64")
TARGETS = {"webgpu": "webgpu", "wasm": "wasm", "vulkan": "vulkan", "opencl": "opencl",
           "cpu": "cpu-armv8.2-a" if AARCH64_HOST else "cpu-x86-64-v2"}
# Machine code for a phone's CPU built on another machine, which runs it under qemu-user
# (test_native_aarch64.py): for AArch64 Linux (glibc), and for Android's arm64-v8a ABI (linked
# against bionic's names, no NDK: run by the musl build, whose loader answers to libc.so and libm.so).
# Built only when asked for by name, and left out of the index: no adapter on this machine runs them
# natively. (On AArch64 the cpu folder is the first.)
CROSS_TARGETS = {"cpu-android-aarch64": "cpu-android-arm64-v8a"} | \
    ({} if AARCH64_HOST else {"cpu-aarch64": "cpu-armv8.2-a"})
# Builds split across two devices (format version 4, as `tessera compile --gpu-layers N`): a GPU kind's
# portable preset (device 0, the build's own target) beside the cpu folder's preset, for SPLIT_CASES only.
SPLIT_TARGETS = {"vulkan+cpu": ("vulkan", TARGETS["cpu"]), "opencl+cpu": ("opencl", TARGETS["cpu"])}
PRESETS = {**TARGETS, **CROSS_TARGETS, **{name: devices[0] for name, devices in SPLIT_TARGETS.items()}}
SOURCES = [os.path.join(HERE, name) for name in ("cases.py", "caseio.py", "generate.py", "programs.py")] + \
    [os.path.join(REPO, "tests", name) for name in ("tiny_llama.py", "modules.py")]


def compiler_fingerprint() -> str:
    """The digest the chat cache keys compiles by: one definition of "the compiler changed"."""
    from tessera.app.compile import compiler_fingerprint

    return compiler_fingerprint()


def source_digest() -> str:
    import gguf

    digest = hashlib.sha256()
    digest.update(f"{compiler_fingerprint()} numpy {np.__version__} gguf {getattr(gguf, '__version__', '?')}".encode())
    for path in SOURCES:
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def case_digest(sources: str, case: str, target: str) -> str:
    return hashlib.sha256(f"{sources} {case} {target} {VERSION}".encode()).hexdigest()[:16]


def split_params(func) -> tuple[list, set[str]]:
    """A function's parameters that callers pass, and the names of its state parameters."""
    state = set(func.attr("state_params", ()) or ())
    return [p for p in func.params if p.name_hint not in state], state


def expected_outputs(spec: Case) -> list[list[np.ndarray]]:
    """The interpreter's outputs for each call in order; state parameters are arrays it writes into."""
    from tessera.ir import interpret

    state: dict[str, np.ndarray] = {}
    outputs = []
    for call in spec.calls:
        func = spec.module[call.function]
        inputs, state_names = split_params(func)
        if len(call.args) != len(inputs):
            raise ValueError(f"{call.function} takes {len(inputs)} arguments, the case gives {len(call.args)}")
        given = iter(call.args)
        args = []
        for param in func.params:
            if param.name_hint in state_names:
                sinfo = param.struct_info
                shape = tuple(int(d.value) for d in sinfo.shape)
                args.append(state.setdefault(param.name_hint, np.zeros(shape, sinfo.dtype)))
            else:
                args.append(next(given))
        if call.error:
            _expect_error(spec, call, args)
            outputs.append([])
            continue
        # Copies: a result may view a state array the next call writes into.
        results = [np.array(r, copy=True) for r in flatten(interpret(spec.module, call.function, *args,
                                                                     library=_libraries(spec)))]
        for r in results:
            if r.dtype.kind == "f" and not np.isfinite(r).all():
                raise ValueError(f"{call.function} gives a non-finite expected value: change the case's inputs")
        if spec.numpy is not None:
            for position, (got, want) in enumerate(zip(results, spec.numpy(call))):
                np.testing.assert_allclose(got, np.asarray(want, np.float64), rtol=max(spec.rtol, 1e-5),
                                           atol=max(spec.atol, 1e-5), err_msg=f"interpreter vs numpy, {call.function} "
                                           f"output {position}")
        outputs.append(results)
    return outputs


def _libraries(spec: Case) -> dict:
    from conformance.programs import TEST_LIBRARIES

    return {name: TEST_LIBRARIES[name] for name in spec.libraries}


def _expect_error(spec: Case, call, args) -> None:
    """A call that must fail fails in the reference interpreter too, with the same fragments."""
    from tessera.ir import interpret
    from tessera.ir.errors import TesseraError

    try:
        interpret(spec.module, call.function, *args, library=_libraries(spec))
    except TesseraError as error:
        missing = [f for f in call.error if f not in str(error)]
        if missing:
            raise ValueError(f"{call.function}: the interpreter's error lacks {missing}: {error}") from None
        return
    raise ValueError(f"{call.function}: the case expects an error, the interpreter gives none")


def _write_arg(folder: str, name: str, param_name: str, dtype, value) -> dict:
    if isinstance(value, (int, np.integer)):
        return {"name": param_name, "dtype": dtype, "value": int(value)}
    if isinstance(value, tuple):
        return {"name": param_name, "tuple": [_write_arg(folder, f"{name}-{i}", f"{param_name}[{i}]", None, v)
                                              for i, v in enumerate(value)]}
    return {"name": param_name, **write_array(folder, f"{name}.bin", value)}


def write_case(folder: str, name: str, target: str, spec: Case, expected, digest: str) -> float:
    """The executable, then the data, then case.json last (its presence marks a complete folder).
    Returns the seconds the compile took."""
    import tessera

    partial = folder + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    start = time.perf_counter()
    exe = tessera.build(spec.module, PRESETS[target])
    seconds = time.perf_counter() - start
    exe.save(partial)
    os.makedirs(os.path.join(partial, "data"))
    rtol, atol = spec.target_tolerance.get(target, (spec.rtol, spec.atol))
    calls = []
    for index, (call, outs) in enumerate(zip(spec.calls, expected)):
        inputs, _ = split_params(spec.module[call.function])
        args = [_write_arg(partial, f"data/call{index}-arg{position}", param.name_hint,
                           getattr(param.struct_info, "dtype", None), value)
                for position, (param, value) in enumerate(zip(inputs, call.args))]
        if call.error:
            calls.append({"function": call.function, "args": args, "error": list(call.error)})
            continue
        outputs = []
        for position, value in enumerate(outs):
            entry = write_array(partial, f"data/call{index}-out{position}.bin", value)
            exact = value.dtype.kind != "f" or (rtol == 0 and atol == 0)
            outputs.append({**entry, "exact": True} if exact else {**entry, "rtol": rtol, "atol": atol})
        calls.append({"function": call.function, "args": args, "outputs": outputs})
    record = {"format": CASE_FORMAT, "version": VERSION, "case": name, "family": spec.family,
              "description": " ".join(spec.description.split()), "target": target, "preset": PRESETS[target],
              **({"devices": list(SPLIT_TARGETS[target])} if target in SPLIT_TARGETS else {}),
              "backends": exe.backends, "digest": digest, "libraries": list(spec.libraries),
              "expected_from": "tessera.ir.interpret on the unlowered module" + (" (checked against numpy)"
                                                                                 if spec.numpy else ""),
              "calls": calls}
    with open(os.path.join(partial, CASE_FILE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    return seconds


def generate(root: str = DEFAULT_ROOT, cases=None, targets=None, force: bool = False, log=print) -> dict:
    """Bring every (target, case) folder up to date (``force``: rebuild them all) and write the
    index; returns the index. One process at a time: pytest's workers (make test runs two) may both
    ask, and the second then finds the folders up to date."""
    import fcntl

    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _generate(root, cases, targets, force, log)


def _generate(root: str, cases, targets, force: bool, log) -> dict:
    from tessera.target import Target

    targets = list(targets or [*TARGETS, *SPLIT_TARGETS])
    split_targets = [t for t in targets if t in SPLIT_TARGETS]
    targets = [t for t in targets if t not in SPLIT_TARGETS]
    names = [n for n in (cases or CASES) if n in CASES]
    split_names = [n for n in (cases or SPLIT_CASES) if n in SPLIT_CASES]
    sources = source_digest()
    built = []
    for name in names:
        digests = {t: case_digest(sources, name, t) for t in targets}
        stale = [t for t in targets if force or _stored_digest(os.path.join(root, t, name)) != digests[t]]
        if not stale:
            continue
        start = time.perf_counter()
        spec = CASES[name]()
        expected = expected_outputs(spec)
        times = {t: write_case(os.path.join(root, t, name), name, t, spec, expected, digests[t]) for t in stale}
        built.append(name)
        log(f"conformance: built {name} for {', '.join(stale)} in {time.perf_counter() - start:.1f} s "
            f"(compiles: {', '.join(f'{t} {s:.1f} s' for t, s in times.items())})")
    # A split case's module names its two devices, so each split target builds (and interprets) its own.
    for name in split_names:
        for target in split_targets:
            digest = case_digest(sources, name, target)
            folder = os.path.join(root, target, name)
            if not force and _stored_digest(folder) == digest:
                continue
            start = time.perf_counter()
            spec = SPLIT_CASES[name](SPLIT_TARGETS[target])
            seconds = write_case(folder, name, target, spec, expected_outputs(spec), digest)
            built.append(name)
            log(f"conformance: built {name} for {target} in {time.perf_counter() - start:.1f} s (compile {seconds:.1f} s)")
    for target in targets + split_targets:  # folders of cases that no longer exist would only confuse a reader
        folder = os.path.join(root, target)
        known = SPLIT_CASES if target in SPLIT_TARGETS else CASES
        for entry in os.listdir(folder) if os.path.isdir(folder) else ():
            if entry not in known:
                shutil.rmtree(os.path.join(folder, entry), ignore_errors=True)
    index = {"format": INDEX_FORMAT, "version": VERSION,
             "targets": {t: {"preset": TARGETS[t], "backend": Target.preset(TARGETS[t]).backend,
                             "cases": sorted(CASES)} for t in TARGETS},
             "split_targets": {t: {"presets": list(devices), "backends": [Target.preset(p).backend for p in devices],
                                   "cases": sorted(SPLIT_CASES)} for t, devices in SPLIT_TARGETS.items()},
             "cases": {}}
    for name in sorted(CASES) + sorted(SPLIT_CASES):
        for target in SPLIT_TARGETS if name in SPLIT_CASES else TARGETS:
            path = os.path.join(root, target, name, CASE_FILE)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    record = json.load(f)
                index["cases"][name] = {"family": record["family"], "description": record["description"]}
                break
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, INDEX_FILE), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
    if not built:
        log(f"conformance: {len(names)} cases x {len(targets)} targets and {len(split_names)} split cases x "
            f"{len(split_targets)} split targets up to date in {root}")
    return index


def _stored_digest(folder: str) -> str | None:
    try:
        with open(os.path.join(folder, CASE_FILE), encoding="utf-8") as f:
            return json.load(f).get("digest")
    except (OSError, ValueError):
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=DEFAULT_ROOT)
    parser.add_argument("--case", action="append", choices=sorted({*CASES, *SPLIT_CASES}),
                        help="only this case (repeatable)")
    parser.add_argument("--target", action="append", choices=sorted(PRESETS), help="only this target (repeatable)")
    parser.add_argument("--force", action="store_true", help="rebuild even the folders whose digest is current")
    args = parser.parse_args(argv)
    generate(args.root, args.case, args.target, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
