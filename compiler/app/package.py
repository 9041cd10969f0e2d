"""`tessera package MODEL --target android|ios -o DIR`: what an app developer opens (docs/mobile.md).

The model is compiled for the phone's backends (the compile cache of ``cached_compile``, shared with
`tessera chat` and `tessera bundle`) and laid out inside a copy of this checkout's mobile library, with
runtime-native's sources, so the folder builds on its own:

- android: DIR is the Gradle project of mobile/android; the builds go under
  ``tessera/src/main/assets/<model>/<build>/`` and runtime-native under ``tessera/src/main/cpp/runtime-native``.
- ios: DIR is the Swift package of mobile/ios, with a ``TesseraModel`` target whose resource is
  ``Sources/TesseraModel/Resources/<model>/<build>/``, and runtime-native under ``runtime-native/``.

Beside the builds, ``tessera-package.json`` lists them in the order an app tries them, and each build's
``memory.json`` holds the plan the runtime checks at load (tessera_model_plan_devices).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from tessera.frontend import check_gguf_file
from tessera.ir import TesseraError
from tessera.target import MOBILE_BUILDS, MOBILE_SPLIT

from .bundle import model_id
from .compile import cached_compile
from .memory import device_memory
from .paths import check_output_folder

ROOT = Path(__file__).resolve().parents[2]
PLATFORMS = tuple(MOBILE_BUILDS)
PLATFORM_NAMES = {"android": "Android", "ios": "iOS"}  # for people
MANIFEST = "tessera-package.json"
MEMORY = "memory.json"
LIBRARY_README = "README-library.md"
PACKAGE_VERSION = 1
# Never copied into a package: build outputs, IDE state, and the host-only tests and scripts of this checkout.
SKIP = shutil.ignore_patterns("build", ".build", ".gradle", ".cxx", ".idea", "local.properties", "*.iml",
                              "__pycache__", ".tessera-cache", ".build-xcframework", "Tessera.xcframework")
SKIP_RUNTIME = shutil.ignore_patterns("build", "tests", "fuzz", "__pycache__", "*.o", "*.a", "*.so")


class PackageError(TesseraError):
    """A `tessera package` request that cannot be carried out (an unknown target, an output in the way)."""


@dataclass(frozen=True)
class Build:
    """One compiled folder of a package."""

    folder: str  # its name under the model's folder
    target: str  # the `tessera compile --target` preset
    device: str  # what EngineOptions.device names to load it
    abi: str | None = None  # the Android ABI whose CPU runs its kernels.so; None: any
    gpu_layers: int | None = None
    split_cpu: str | None = None  # a split build's CPU preset


def package_builds(platform: str, split: bool, gpu_layers: int | None) -> list[Build]:
    """The builds of a package, in the order an app tries them."""
    if split:
        if platform not in MOBILE_SPLIT:
            name = PLATFORM_NAMES.get(platform, platform)
            raise PackageError(f"--split puts the layers after --gpu-layers on the CPU, and an {name} app cannot "
                               "load a CPU build's kernels.so (it runs only code signed into the app, and does not "
                               f"dlopen a resource): package --whole for {name}")
        gpu, cpu, abi = MOBILE_SPLIT[platform]
        return [Build(f"{gpu}-gpu{gpu_layers}", gpu, "auto", abi=abi, gpu_layers=gpu_layers, split_cpu=cpu)]
    return [Build(folder, preset, device, abi=abi or None) for folder, preset, device, abi in MOBILE_BUILDS[platform]]


def check_request(platform: str, model: str, output: str, split: bool, whole: bool, gpu_layers: int | None,
                  force: bool) -> bool:
    """Refuse a request before anything is compiled; whether the package is split."""
    if platform not in PLATFORMS:
        raise PackageError(f"unknown --target {platform!r}: tessera package writes {' or '.join(PLATFORMS)}")
    if split and whole:
        raise PackageError("--split and --whole exclude each other")
    if whole and gpu_layers is not None:
        raise PackageError("--gpu-layers splits the model; it does not go with --whole")
    split = split or gpu_layers is not None
    if split and gpu_layers is None:
        raise PackageError("--split needs --gpu-layers N: the decoder layers that run on the GPU")
    check_gguf_file(model)
    _check_sources(platform)
    check_output_folder(output, "the package")
    if os.path.isdir(output) and os.listdir(output):
        if not force:
            raise PackageError(f"{output} is not empty: give a new folder, or --force to replace a package written "
                               "there before")
        if not os.path.isfile(os.path.join(output, MANIFEST)):
            raise PackageError(f"{output} is not empty and holds no {MANIFEST}, so it is no package of tessera "
                               "package: --force replaces only a package, give a new folder")
    return split


def package_model(model: str, platform: str, output: str, context_length: int = 1024, split: bool = False,
                  whole: bool = False, gpu_layers: int | None = None, force: bool = False, progress=None) -> str:
    """Write the package; returns the folder that holds the model's builds."""
    split = check_request(platform, model, output, split, whole, gpu_layers, force)
    builds = package_builds(platform, split, gpu_layers)
    compiled = [cached_compile(model, b.target, context_length, progress, gpu_layers=b.gpu_layers,
                               split_cpu=b.split_cpu) for b in builds]
    memories = [memory_plan(folder) for folder in compiled]  # before anything is written: it may refuse
    if os.path.isdir(output):
        shutil.rmtree(output)
    name = model_id(model)
    model_dir = (_android_project if platform == "android" else _ios_package)(output, name)
    records = []
    for build, folder, memory in zip(builds, compiled, memories):
        destination = os.path.join(model_dir, build.folder)
        shutil.copytree(folder, destination, ignore=shutil.ignore_patterns(".tessera-cache"))
        with open(os.path.join(destination, MEMORY), "w", encoding="utf-8") as f:
            json.dump(memory, f, indent=1)
        records.append({**{k: v for k, v in asdict(build).items() if v is not None}, "memory_total": memory["total"]})
    manifest = {"format": "tessera-package", "version": PACKAGE_VERSION, "model": name, "platform": platform,
                "context_length": context_length, "split": split, "builds": records}
    for where in (model_dir, output):  # the app reads the first; --force looks for the second
        with open(os.path.join(where, MANIFEST), "w", encoding="utf-8") as f:
            json.dump({**manifest, "folder": os.path.relpath(model_dir, where)}, f, indent=1)
    readme_path = os.path.join(output, "README.md")
    library_readme = os.path.exists(readme_path)
    if library_readme:  # the library's own README, kept beside the package's
        os.replace(readme_path, os.path.join(output, LIBRARY_README))
    with open(readme_path, "w", encoding="utf-8") as f:
        f.write(readme(platform, name, os.path.relpath(model_dir, output), records))
        if library_readme:
            f.write(f"\nThe library itself: {LIBRARY_README}.\n")
    return model_dir


def memory_plan(folder: str) -> dict:
    """What memory.json holds: each device's weights, arena, KV cache and total in bytes, and the total, from the plan
    libtessera checks at load (tessera_model_plan_devices). Without the built library (make native) a
    build on one device gets the compiler's own plan of the same executable; a split one needs the library."""
    from tessera.native import load_library, plan_devices

    try:
        load_library()
    except (OSError, TesseraError) as error:  # not built here: the compiler's plan, for a build on one device
        from tessera.vm import Executable

        exe = Executable.load(folder)
        if exe.devices:
            raise PackageError(f"the memory plan of a split build needs libtessera (make native): {error}") from None
        plan = device_memory(exe)
        rows = [{"device": exe.target["kind"], "weights": plan.weights, "arena": plan.arena,
                 "kv_cache": plan.kv_cache, "total": plan.total}]
        source = "tessera.app.memory"
    else:
        rows = plan_devices(folder)
        source = "tessera_model_plan_devices"
    return {"devices": [{k: row[k] for k in ("device", "weights", "arena", "kv_cache", "total")} for row in rows],
            "total": sum(row["total"] for row in rows), "plan": source}


# What a package is copied from: the platform's library in this checkout, and runtime-native's sources.
SOURCES = {"android": ("mobile/android/settings.gradle.kts", "mobile/android/tessera/build.gradle.kts"),
           "ios": ("mobile/ios/Package.swift", "mobile/ios/scripts/build-xcframework.sh")}


def _check_sources(platform: str) -> None:
    """Refuse, before compiling or touching the output, an installation without the sources to copy (a
    wheel carries the compiler, not mobile/ and runtime-native/)."""
    needed = (*SOURCES[platform], "runtime-native/CMakeLists.txt", "runtime-native/include/tessera.h")
    missing = [name for name in needed if not (ROOT / name).is_file()]
    if missing:
        raise PackageError(f"tessera package copies the {PLATFORM_NAMES[platform]} library and runtime-native from "
                           f"a Tessera checkout, and {ROOT} lacks {', '.join(missing)}: run it from a clone of the "
                           "repository (pip install -e .)")


def _android_project(output: str, name: str) -> str:
    """mobile/android as a Gradle project of its own (no JVM tests, no host scripts), runtime-native's
    sources in its cpp folder; the folder for the model's builds."""
    source = ROOT / "mobile" / "android"
    missing = [name for name in ("settings.gradle.kts", "tessera/build.gradle.kts") if not (source / name).is_file()]
    if missing:
        raise PackageError(f"{source} lacks {', '.join(missing)}: this checkout has no Gradle build of the Android "
                           "library to package")
    shutil.copytree(source, output, ignore=_skip_android)
    cpp = os.path.join(output, "tessera", "src", "main", "cpp")
    os.makedirs(cpp, exist_ok=True)
    shutil.copytree(ROOT / "runtime-native", os.path.join(cpp, "runtime-native"), ignore=SKIP_RUNTIME)
    _point_cmake_at(os.path.join(cpp, "CMakeLists.txt"), "${CMAKE_CURRENT_SOURCE_DIR}/runtime-native")
    model_dir = os.path.join(output, "tessera", "src", "main", "assets", name)
    os.makedirs(model_dir)
    return model_dir


def _skip_android(folder: str, names: list[str]) -> set[str]:
    skipped = set(SKIP(folder, names))
    if os.path.basename(folder) == "src":
        skipped |= {"test"} & set(names)  # the JVM tests of this checkout
    if os.path.abspath(folder) == str(ROOT / "mobile" / "android"):
        skipped |= {"scripts"} & set(names)  # the host build (build-host.sh) runs in this checkout only
    return skipped


def _point_cmake_at(cmake_lists: str, runtime: str) -> None:
    """Where the NDK build finds runtime-native: in this checkout a path up to the repository's folder, in
    a package the copy beside the CMakeLists.txt. Every relative path ending in runtime-native is replaced."""
    if not os.path.isfile(cmake_lists):
        return  # no NDK build in this checkout's library yet; the README says so
    with open(cmake_lists, encoding="utf-8") as f:
        text = f.read()
    pointed = re.sub(r'\$\{CMAKE_CURRENT_(?:SOURCE|LIST)_DIR\}(?:/\.\.)+/runtime-native', lambda _: runtime, text)
    with open(cmake_lists, "w", encoding="utf-8") as f:
        f.write(pointed)


def _ios_package(output: str, name: str) -> str:
    """mobile/ios as a Swift package of its own: tessera.h copied (not a link out of the package), the build
    script pointed at the package's runtime-native, and a TesseraModel target whose resource is the model."""
    source = ROOT / "mobile" / "ios"
    shutil.copytree(source, output, ignore=SKIP, symlinks=True)
    header = os.path.join(output, "Sources", "CTessera", "include", "tessera.h")
    if os.path.lexists(header):
        os.remove(header)
    shutil.copy(ROOT / "runtime-native" / "include" / "tessera.h", header)
    shutil.copytree(ROOT / "runtime-native", os.path.join(output, "runtime-native"), ignore=SKIP_RUNTIME)
    script = os.path.join(output, "scripts", "build-xcframework.sh")
    _replace(script, 'ROOT="$(cd "$IOS/../.." && pwd)"', 'ROOT="$IOS"  # the package holds runtime-native/')
    _add_model_target(os.path.join(output, "Package.swift"), name)
    target = os.path.join(output, "Sources", "TesseraModel")
    os.makedirs(os.path.join(target, "Resources"))
    with open(os.path.join(target, "TesseraModel.swift"), "w", encoding="utf-8") as f:
        f.write(MODEL_SWIFT.replace("@MODEL@", name).replace("@BUILD@", MOBILE_BUILDS["ios"][0][0]))
    return os.path.join(target, "Resources", name)


MODEL_SWIFT = """import Foundation

/// The model `tessera package` put in this package: its folder among the app's resources.
public enum TesseraModel {
    /// The model's name (its folder under Resources/).
    public static let name = "@MODEL@"

    /// The folder of one build ("@BUILD@"), to pass to Engine(modelPath:): a real folder on disk inside the
    /// app bundle, which the runtime reads in place.
    public static func path(build: String = "@BUILD@") -> String? {
        Bundle.module.url(forResource: name, withExtension: nil)?.appendingPathComponent(build).path
    }
}
"""


def _add_model_target(package_swift: str, name: str) -> None:
    _replace(package_swift, '        .library(name: "Tessera", targets: ["Tessera"]),\n',
             '        .library(name: "Tessera", targets: ["Tessera"]),\n'
             '        .library(name: "TesseraModel", targets: ["TesseraModel"]),\n')
    _replace(package_swift, '        .target(name: "Tessera", dependencies: ["CTessera"], path: "Sources/Tessera"),\n',
             '        .target(name: "Tessera", dependencies: ["CTessera"], path: "Sources/Tessera"),\n'
             '        // The model tessera package compiled, copied into the app bundle as a folder.\n'
             '        .target(name: "TesseraModel", path: "Sources/TesseraModel",\n'
             f'                resources: [.copy("Resources/{name}")]),\n')


def _replace(path: str, old: str, new: str) -> None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if old not in text:
        raise PackageError(f"{path} is not the file tessera package knows how to adapt (no {old.strip()!r}): "
                           "this checkout's mobile library changed without tessera/app/package.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new, 1))


def readme(platform: str, name: str, model_folder: str, builds: list[dict]) -> str:
    rows = "\n".join(f"| `{b['folder']}` | {b['target']} | `{b['device']}` | {b.get('abi', 'any')} | "
                     f"{b['memory_total'] / (1 << 20):.1f} MiB |" for b in builds)
    table = f"| build | target | EngineOptions.device | ABI | memory |\n|---|---|---|---|---|\n{rows}\n"
    steps = ANDROID_STEPS if platform == "android" else IOS_STEPS
    if any(b.get("gpu_layers") is not None for b in builds):
        steps += SPLIT_NOTE
    fallback = (", falling back to the CPU build of the phone's ABI (`cpu-arm64-v8a`) when it throws"
                if len(builds) > 1 else "")
    steps = steps.replace("@FIRST@", builds[0]["folder"]).replace("@FALLBACK@", fallback)
    return (f"# {name} for {platform}\n\nWritten by `tessera package --target {platform}`. The model's builds are in "
            f"`{model_folder}/`, in the order an app tries them ({MANIFEST} lists them; each build's {MEMORY} is "
            f"what the runtime checks before it loads):\n\n{table}\n{steps.replace('@MODEL@', name)}")


ANDROID_STEPS = """## Next steps

1. Open this folder in Android Studio (File > Open) to build the library: a Gradle project whose `tessera`
   module's NDK build (`tessera/src/main/cpp/CMakeLists.txt`) compiles the copy of runtime-native in
   `tessera/src/main/cpp/runtime-native` for arm64-v8a and x86_64.
2. In your app's project, include the module (settings.gradle.kts: `include(":tessera")` and
   `project(":tessera").projectDir = file("<this folder>/tessera")`) and depend on it
   (`implementation(project(":tessera"))`). Keep your app outside this folder: `tessera package --force`
   replaces all of it.
3. The runtime reads a real folder and an APK's assets are not one: `val dir = ModelAssets.install(context,
   "@MODEL@")` copies assets/@MODEL@/ to the app's files folder once (off the main thread).
4. `Engine.load("$dir/@FIRST@")`@FALLBACK@; then `engine.chat.completions.stream(messages)`.

The CPU builds' `kernels.so` are linked for Android without an NDK: no C library inside, bionic's `libc.so`
and `libm.so` named, 16 KiB pages (docs/mobile.md, "The CPU builds and Android"). They are checked here
under qemu-user with a musl loader, not yet on a phone.
"""

IOS_STEPS = """## Next steps

1. On a Mac, build the runtime: `scripts/build-xcframework.sh` (Xcode's command line tools and CMake) writes
   `Tessera.xcframework` from the copy of runtime-native in `runtime-native/`.
2. Add this folder to your Xcode project as a local Swift package and link the `Tessera` and `TesseraModel`
   libraries to your app (keep the app outside this folder: `tessera package --force` replaces all of it).
3. `let engine = try Engine(modelPath: TesseraModel.path()!)`, then
   `for try await chunk in engine.chat.completions.stream(messages: ...)`.

Only the Metal build is packaged: an iOS app cannot load a CPU build's `kernels.so` (docs/mobile.md).
"""

SPLIT_NOTE = """
The split build's CPU half is compiled for arm64-v8a (cpu-android-arm64-v8a): it runs on an arm64 phone's
Vulkan GPU and CPU together, not in the x86_64 emulator.
"""
