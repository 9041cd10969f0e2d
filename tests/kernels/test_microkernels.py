"""The c-native micro-kernels (codegen/c/microkernels.c) on every instruction set they have a path
for: plain C, SSSE3 (x86-64-v2), AVX2 (x86-64-v3, where this CPU has it), NEON (AArch64, built
by Debian's cross compiler and run under qemu-user) and WebAssembly SIMD128 (built by Debian's clang
for wasm32-wasi, run by wasmtime), against numpy. The rounding of x must be the
same bit for bit on every path; the dot products equal the rounded x times ggml's floats."""

import os
import platform
import shutil
import subprocess

import gguf
import numpy as np
import pytest
from harness import q8_blocks, rounded_to_q8
from tessera.codegen.c import MICROKERNELS

FORMATS = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q4_1": gguf.GGMLQuantizationType.Q4_1,
           "q8_0": gguf.GGMLQuantizationType.Q8_0}
BLOCK_BYTES = {"q4_0": 18, "q4_1": 20, "q8_0": 34}
N, K = 37, 320

HARNESS = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "MICROKERNELS"

/* argv: input file (K floats, then the three formats' rows), output file. */
int main(int argc, char **argv) {
  enum { n = NROWS, k = KVALUES, blocks = KVALUES / 32 };
  static float x[k], d[blocks], s[blocks], out[3][n];
  static uint32_t q[k / 4];
  static uint8_t rows[3][n * blocks * 34];
  const int block_bytes[3] = {18, 20, 34};
  if (argc != 3) return 1;
  FILE *in = fopen(argv[1], "rb");
  if (!in || fread(x, sizeof x, 1, in) != 1) return 2;
  for (int f = 0; f < 3; f++)
    if (fread(rows[f], (size_t)n * blocks * block_bytes[f], 1, in) != 1) return 2;
  fclose(in);
  tsr_quantize_q8(x, k, q, d, s);
  for (int r = 0; r < n; r++) {
    out[0][r] = tsr_dot_q4_0_q8(rows[0] + (size_t)r * blocks * 18, q, d, s, blocks);
    out[1][r] = tsr_dot_q4_1_q8(rows[1] + (size_t)r * blocks * 20, q, d, s, blocks);
    out[2][r] = tsr_dot_q8_0_q8(rows[2] + (size_t)r * blocks * 34, q, d, s, blocks);
  }
  /* The rows kernels (a decode batch) on four rows of x scaled apart, all four and the first three, must
     give each row what the one-row kernel gives it, bit for bit. */
  static float xr[4][k], dr[4][blocks], sr[4][blocks], got[4];
  static uint32_t qr[4][k / 4];
  const float scale[4] = {1.0f, -0.5f, 3.0f, 0.125f};
  int32_t mismatches = 0;
  for (int r = 0; r < 4; r++) {
    for (int i = 0; i < k; i++) xr[r][i] = x[i] * scale[r] + (float)((i * 7 + r) % 5) * 0.01f;
    tsr_quantize_q8(xr[r], k, qr[r], dr[r], sr[r]);
  }
  for (int count = 3; count <= 4; count++) {
    for (int c = 0; c < n; c++) {
      tsr_dot_q4_0_q8_rows(rows[0] + (size_t)c * blocks * 18, qr, &dr[0][0], &sr[0][0], blocks, count, got);
      for (int r = 0; r < count; r++)
        mismatches += got[r] != tsr_dot_q4_0_q8(rows[0] + (size_t)c * blocks * 18, qr[r], dr[r], sr[r], blocks);
      tsr_dot_q4_1_q8_rows(rows[1] + (size_t)c * blocks * 20, qr, &dr[0][0], &sr[0][0], blocks, count, got);
      for (int r = 0; r < count; r++)
        mismatches += got[r] != tsr_dot_q4_1_q8(rows[1] + (size_t)c * blocks * 20, qr[r], dr[r], sr[r], blocks);
      tsr_dot_q8_0_q8_rows(rows[2] + (size_t)c * blocks * 34, qr, &dr[0][0], &sr[0][0], blocks, count, got);
      for (int r = 0; r < count; r++)
        mismatches += got[r] != tsr_dot_q8_0_q8(rows[2] + (size_t)c * blocks * 34, qr[r], dr[r], sr[r], blocks);
    }
  }
  FILE *o = fopen(argv[2], "wb");
  if (!o) return 3;
  fwrite(q, sizeof q, 1, o);
  fwrite(d, sizeof d, 1, o);
  fwrite(s, sizeof s, 1, o);
  fwrite(out, sizeof out, 1, o);
  fwrite(&mismatches, sizeof mismatches, 1, o);
  return fclose(o) != 0;
}
"""


def _x86_has_avx2() -> bool:
    with open("/proc/cpuinfo") as f:
        return " avx2" in f.read()


def paths():
    """(name, compile command prefix, run prefix) of every path this machine can build and run."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return [("native", ["cc", "-march=native"], [])]
    found = [("plain C", ["cc", "-march=x86-64"], []), ("SSSE3", ["cc", "-march=x86-64-v2"], [])]
    if _x86_has_avx2():
        found.append(("AVX2", ["cc", "-march=x86-64-v3"], []))
    # make setup installs the cross compiler and qemu-user: their absence is a broken setup, not a skip.
    found.append(("NEON", ["aarch64-linux-gnu-gcc", "-march=armv8.2-a", "-static"], ["qemu-aarch64"]))
    found.append(("NEON dotprod", ["aarch64-linux-gnu-gcc", "-march=armv8.2-a+dotprod", "-static"], ["qemu-aarch64"]))
    found.append(("WASM SIMD128", WASM_CLANG, [WASM]))
    return found


WASM = "wasmtime"  # run in-process by the wasmtime package (the kernel runner's), with WASI
WASM_CLANG = ["clang", "--target=wasm32-wasi", "--sysroot=/usr", "-isystem", "/usr/include/wasm32-wasi",
              "-L/usr/lib/wasm32-wasi", "-msimd128"]


def run_wasm(binary: str, args: list[str], folder: str) -> None:
    import wasmtime

    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    wasi = wasmtime.WasiConfig()
    wasi.argv = ["harness", *args]
    wasi.preopen_dir(folder, folder)
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    instance = linker.instantiate(store, wasmtime.Module.from_file(engine, binary))
    try:
        instance.exports(store)["_start"](store)
    except wasmtime.ExitTrap as exit_:
        assert exit_.code == 0, f"the WASM harness exited with {exit_.code}"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(K).astype(np.float32)
    x[64:96] = 0  # a block of zeros: d = 0
    x[100] = 40.0  # one large value: its block's other values round coarsely
    words, dense = {}, {}
    for fmt, kind in FORMATS.items():
        w = rng.standard_normal((N, K)).astype(np.float32)
        blocks = gguf.quants.quantize(w, kind)
        words[fmt], dense[fmt] = np.ascontiguousarray(blocks), gguf.quants.dequantize(blocks, kind)
    folder = tmp_path_factory.mktemp("microkernels")
    with open(folder / "input.bin", "wb") as f:
        f.write(x.tobytes() + b"".join(words[fmt].tobytes() for fmt in FORMATS))
    source = HARNESS.replace("MICROKERNELS", MICROKERNELS).replace("NROWS", str(N)).replace("KVALUES", str(K))
    (folder / "harness.c").write_text(source)
    return folder, x, dense


@pytest.mark.parametrize("name,compiler,runner", paths(), ids=[p[0] for p in paths()])
def test_every_simd_path_rounds_and_multiplies_alike(data, name, compiler, runner):
    folder, x, dense = data
    for tool in (compiler[0], *(r for r in runner if r != WASM)):
        assert shutil.which(tool), f"{tool} is missing: make setup installs it"
    binary = folder / f"harness-{name.replace(' ', '-')}"
    subprocess.run([*compiler, "-O2", "-std=c11", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-o", str(binary),
                    str(folder / "harness.c"), "-lm"], check=True, capture_output=True, text=True)
    output = folder / f"output-{name.replace(' ', '-')}.bin"
    if runner == [WASM]:
        run_wasm(str(binary), [str(folder / "input.bin"), str(output)], str(folder))
    else:
        subprocess.run([*runner, str(binary), str(folder / "input.bin"), str(output)], check=True, timeout=60)
    raw = np.fromfile(output, np.uint8)
    blocks = K // 32
    q = raw[:K].view(np.int8)
    d, s = raw[K:K + 4 * blocks].view(np.float32), raw[K + 4 * blocks:K + 8 * blocks].view(np.float32)
    dots = raw[K + 8 * blocks:-4].view(np.float32).reshape(3, N)
    assert raw[-4:].view(np.int32)[0] == 0, f"{name}: a rows kernel differs from the one-row kernel"
    want_q, want_d = q8_blocks(x)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(d, want_d)
    np.testing.assert_allclose(s, want_d * want_q.reshape(-1, 32).astype(np.int32).sum(axis=1), rtol=1e-6)
    x_read = rounded_to_q8(x).astype(np.float64)
    for row, fmt in zip(dots, FORMATS):
        np.testing.assert_allclose(row, dense[fmt].astype(np.float64) @ x_read, rtol=1e-5, atol=1e-4,
                                   err_msg=f"{name}: {fmt}")


def test_the_backend_builds_with_the_file_it_documents():
    assert os.path.isfile(MICROKERNELS)
