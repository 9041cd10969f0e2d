"""The benchmark models in other GGUF block formats, made by llama.cpp's own quantizer.

The demo model (SmolLM2-135M-Instruct, Q4_1) is re-quantized with llama-quantize --allow-requantize
into the formats the hubs ship (Q4_K_M: Q4_K, Q6_K, Q5_0 and Q8_0 tensors; Q5_K_M, Q6_K, Q5_0), so
that bench/native.py --model can time the same file in runtime-native and in llama.cpp. llama-quantize
is built with cmake from the llama.cpp sources vendored in the llama-cpp-python sdist of the version
installed (the same llama.cpp the benchmark's peer runs); only that target, on the CPU, no network
features. Everything is cached under build/bench/requantize/: the sdist, the build, the models.

    .venv/bin/python bench/requantize.py [--types Q4_K_M,Q5_K_M,Q6_K,Q5_0] [--sdist FILE] [--jobs 2]

prints the path of each model, one per line (a model already made is not made again). Needs cmake and
a C++ compiler (apt-get install cmake g++).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tarfile
from importlib.metadata import version

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "bench", "requantize")
TYPES = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q5_0")


def sdist(path: str | None) -> str:
    """The llama-cpp-python sdist: ``path``, or the installed version's, downloaded once by pip."""
    if path:
        return path
    wanted = version("llama_cpp_python")
    folder = os.path.join(ROOT, "sdist")
    found = glob.glob(os.path.join(folder, f"llama_cpp_python-{wanted}.tar.gz"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        f"llama-cpp-python=={wanted}", "-d", folder], check=True)
        found = glob.glob(os.path.join(folder, f"llama_cpp_python-{wanted}.tar.gz"))
    if not found:
        raise SystemExit(f"pip left no llama_cpp_python-{wanted}.tar.gz in {folder}")
    return found[0]


def llama_quantize(archive: str, jobs: int) -> str:
    """The llama-quantize binary built from the sdist's vendor/llama.cpp (built once)."""
    name = os.path.basename(archive).removesuffix(".tar.gz")
    binary = os.path.join(ROOT, name, "build", "bin", "llama-quantize")
    if os.path.exists(binary):
        return binary
    for tool in ("cmake", "c++"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing: apt-get install cmake g++")
    source = os.path.join(ROOT, name, "src")
    if not os.path.exists(os.path.join(source, "CMakeLists.txt")):
        with tarfile.open(archive) as tar:
            prefix = f"{name}/vendor/llama.cpp/"
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            for member in members:
                member.name = member.name[len(prefix):]
            tar.extractall(source, members, filter="data")
    build = os.path.join(ROOT, name, "build")
    # Portable (no -march=native: quantizing needs no speed) and without curl, OpenMP or the server.
    subprocess.run(["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF",
                    "-DGGML_OPENMP=OFF", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"], check=True)
    subprocess.run(["cmake", "--build", build, "--target", "llama-quantize", "-j", str(jobs)], check=True)
    return binary


def requantize(binary: str, source: str, kind: str) -> str:
    stem = os.path.basename(source).removesuffix(".gguf").rsplit(".", 1)[0]
    target = os.path.join(ROOT, "models", f"{stem}.{kind}.gguf")
    if not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        partial = target + ".partial"
        subprocess.run([binary, "--allow-requantize", source, partial, kind], check=True,
                       stdout=subprocess.DEVNULL)
        os.replace(partial, target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--types", default=",".join(TYPES), help=f"llama-quantize types (default {','.join(TYPES)})")
    parser.add_argument("--sdist", help="a llama-cpp-python sdist already downloaded")
    parser.add_argument("--source", help="the GGUF to re-quantize (default: the demo model)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    source = args.source
    if source is None:
        from tessera.frontend import bundled_smollm2_path

        source = bundled_smollm2_path()
    binary = llama_quantize(sdist(args.sdist), args.jobs)
    for kind in (t.strip() for t in args.types.split(",") if t.strip()):
        print(requantize(binary, source, kind))


if __name__ == "__main__":
    main()
