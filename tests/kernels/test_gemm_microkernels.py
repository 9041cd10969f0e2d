"""The f32 GEMM micro-kernels (codegen/c/microkernels_gemm.c) on every instruction-set path the q8
micro-kernels have (test_microkernels.py: plain C, SSSE3, AVX2, NEON under qemu, WASM SIMD128 under
wasmtime), AVX-512 where this CPU has it, plus plain C and AVX2 under ASan and UBSan, against numpy
bit for bit.

Every path sums each output over k in order, one panel after another; AVX2, AVX-512 and NEON fuse each
multiply-add, the others round the product first. numpy replays both orders exactly (the fused one in
long double, which holds a product of two floats and its sum exactly enough to round once), so each
path must equal its replay bit for bit, which also makes the paths of each group equal to one
another. Sizes are ragged on purpose: M = 13 (tiles of 6 or 4 rows and a short one, and two calls of
7 and 6 rows), N = 37 (a whole panel of 32 columns and one of 5), K = 300 (a slice of 256 and one of
44). The packers' panels are checked value by value: ggml's floats (gguf's dequantization) in their
places, zeros past the last column."""

import platform
import shutil
import subprocess

import gguf
import numpy as np
import pytest
from tessera.codegen.c import MICROKERNEL_SOURCES
from test_microkernels import WASM, paths, run_wasm

M, N, K, KQ, DEPTH, NC = 13, 37, 300, 320, 256, 32
FORMATS = {"q4_0": (gguf.GGMLQuantizationType.Q4_0, 18), "q4_1": (gguf.GGMLQuantizationType.Q4_1, 20),
           "q8_0": (gguf.GGMLQuantizationType.Q8_0, 34)}
FUSED = ("AVX2", "AVX-512", "NEON", "NEON dotprod", "AVX2 sanitized")

HARNESS = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "MICROKERNELS_C"
#include "MICROKERNELS_GEMM_C"

enum { m = MROWS, n = NCOLS, k = KVALUES, kq = KQVALUES, depth = DEPTHVALUES, nc = NCVALUES };
typedef void pack_fn(const void *, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, float *);

/* out (m x n) = a (m x kk, row stride kk) times B through `pack`, in panels of nc columns and slices of
   `depth` values of k, each panel's rows in two calls (rows 0..6, then 7..m-1). */
static void multiply(const float *a, int32_t kk, const void *b, int32_t stride, pack_fn *pack, float *out) {
  static float panel[depth * nc], tile[m * nc];
  for (int32_t n0 = 0; n0 < n; n0 += nc) {
    const int32_t columns = n - n0 < nc ? n - n0 : nc;
    for (int32_t k0 = 0; k0 < kk; k0 += depth) {
      const int32_t slice = kk - k0 < depth ? kk - k0 : depth;
      pack(b, stride, k0, slice, n0, columns, nc, panel);
      tsr_gemm_f32(a, kk, 0, 7, k0, slice, panel, nc, tile, k0 > 0);
      tsr_gemm_f32(a, kk, 7, m - 7, k0, slice, panel, nc, tile + 7 * nc, k0 > 0);
    }
    for (int32_t i = 0; i < m; i++)
      for (int32_t j = 0; j < columns; j++) out[i * n + j + n0] = tile[i * nc + j];
  }
}

static void pack_f32(const void *b, int32_t ldb, int32_t k0, int32_t slice, int32_t n0, int32_t columns, int32_t width,
                     float *panel) {
  tsr_gemm_pack_f32((const float *)b, ldb, k0, slice, n0, columns, width, panel);
}

/* argv: input file (a, b, aq, then the rows of each format), output file. */
int main(int argc, char **argv) {
  static float a[m * k], b[k * n], aq[m * kq], out[4][m * n], panels[4][64 * nc];
  static uint8_t rows[3][n * (kq / 32) * 34];
  const int bytes[3] = {18, 20, 34};
  pack_fn *packs[3] = {tsr_gemm_pack_q4_0, tsr_gemm_pack_q4_1, tsr_gemm_pack_q8_0};
  if (argc != 3) return 1;
  FILE *in = fopen(argv[1], "rb");
  if (!in || fread(a, sizeof a, 1, in) != 1 || fread(b, sizeof b, 1, in) != 1 || fread(aq, sizeof aq, 1, in) != 1)
    return 2;
  for (int f = 0; f < 3; f++)
    if (fread(rows[f], (size_t)n * (kq / 32) * bytes[f], 1, in) != 1) return 2;
  fclose(in);
  multiply(a, k, b, n, pack_f32, out[0]);
  pack_f32(b, n, 256, 44, 32, n - 32, nc, panels[0]);  /* the last panel: 44 values, 5 columns */
  for (int f = 0; f < 3; f++) {
    /* Row words: the rows are whole blocks, padded to a word (Q4_0, Q8_0 of an odd count: not here). */
    const int32_t row_words = (kq / 32) * bytes[f] / 4;
    multiply(aq, kq, rows[f], row_words, packs[f], out[f + 1]);
    packs[f](rows[f], row_words, 256, 64, 32, n - 32, nc, panels[f + 1]);
  }
  FILE *o = fopen(argv[2], "wb");
  if (!o) return 3;
  fwrite(out, sizeof out, 1, o);
  fwrite(panels, sizeof panels, 1, o);
  return fclose(o) != 0;
}
"""


def replay(a: np.ndarray, b: np.ndarray, fused: bool) -> np.ndarray:
    """a @ b summed over k in order in float32: each step fused (one rounding of c + a b, computed in
    long double) or not (the product rounded, then the sum)."""
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    wide = np.longdouble
    for kk in range(a.shape[1]):
        if fused:
            c = (c.astype(wide) + a[:, kk:kk + 1].astype(wide) * b[kk:kk + 1].astype(wide)).astype(np.float32)
        else:
            c = c + (a[:, kk:kk + 1] * b[kk:kk + 1])
    return c


def panel_of(b: np.ndarray, k0: int, depth: int, n0: int) -> np.ndarray:
    """The panel layout of B's slice: strips of 16 columns, each depth x 16, zeros past B's columns."""
    block = np.zeros((depth, NC), np.float32)
    part = b[k0:k0 + depth, n0:n0 + NC]
    block[:, :part.shape[1]] = part
    return block.reshape(depth, NC // 16, 16).transpose(1, 0, 2).reshape(-1)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    aq = rng.standard_normal((M, KQ)).astype(np.float32)
    words, dense = {}, {}
    for fmt, (kind, _) in FORMATS.items():
        blocks = gguf.quants.quantize(rng.standard_normal((N, KQ)).astype(np.float32), kind)
        words[fmt], dense[fmt] = np.ascontiguousarray(blocks), gguf.quants.dequantize(blocks, kind)
    folder = tmp_path_factory.mktemp("gemm_microkernels")
    with open(folder / "input.bin", "wb") as f:
        f.write(a.tobytes() + b.tobytes() + aq.tobytes() + b"".join(words[fmt].tobytes() for fmt in FORMATS))
    library = {name: path for path in MICROKERNEL_SOURCES for name in ("microkernels.c", "microkernels_gemm.c")
               if path.endswith("/" + name)}
    source = HARNESS.replace("MICROKERNELS_C", library["microkernels.c"])
    source = source.replace("MICROKERNELS_GEMM_C", library["microkernels_gemm.c"])
    for name, value in (("MROWS", M), ("NCOLS", N), ("KQVALUES", KQ), ("KVALUES", K), ("DEPTHVALUES", DEPTH),
                        ("NCVALUES", NC)):
        source = source.replace(name, str(value))
    (folder / "harness.c").write_text(source)
    return folder, a, b, aq, dense


def all_paths():
    found = paths()
    sanitize = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"]
    for name, compiler, runner in list(found):
        if name in ("plain C", "AVX2"):
            found.append((f"{name} sanitized", [*compiler, *sanitize], runner))
    if platform.machine() in ("x86_64", "AMD64") and _has_avx512():
        found.append(("AVX-512", ["cc", "-march=x86-64-v4"], []))
    return found


def _has_avx512() -> bool:
    with open("/proc/cpuinfo") as f:
        return " avx512f" in f.read()


@pytest.mark.parametrize("name,compiler,runner", all_paths(), ids=[p[0] for p in all_paths()])
def test_every_simd_path_packs_and_multiplies_as_numpy_replays(data, name, compiler, runner):
    folder, a, b, aq, dense = data
    for tool in (compiler[0], *(r for r in runner if r != WASM)):
        assert shutil.which(tool), f"{tool} is missing: make setup installs it"
    tag = name.replace(" ", "-")
    binary = folder / f"harness-{tag}"
    # The harness calls the GEMM micro-kernels, not the rest of microkernels.c.
    subprocess.run([*compiler, "-O2", "-std=c11", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror",
                    "-Wno-unused-function", "-o", str(binary),
                    str(folder / "harness.c"), "-lm"], check=True, capture_output=True, text=True)
    output = folder / f"output-{tag}.bin"
    if runner == [WASM]:
        run_wasm(str(binary), [str(folder / "input.bin"), str(output)], str(folder))
    else:
        subprocess.run([*runner, str(binary), str(folder / "input.bin"), str(output)], check=True, timeout=120)
    raw = np.fromfile(output, np.float32)
    out = raw[:4 * M * N].reshape(4, M, N)
    panels = raw[4 * M * N:].reshape(4, 64 * NC)
    fused = name in FUSED or (name == "native" and _native_fuses())
    np.testing.assert_array_equal(panels[0][:44 * NC], panel_of(b, 256, 44, 32), err_msg=f"{name}: f32 panel")
    np.testing.assert_array_equal(out[0], replay(a, b, fused), err_msg=f"{name}: f32")
    np.testing.assert_allclose(out[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    for index, fmt in enumerate(FORMATS, 1):
        weights = dense[fmt].T  # B: K x N
        np.testing.assert_array_equal(panels[index], panel_of(weights, 256, 64, 32), err_msg=f"{name}: {fmt} panel")
        np.testing.assert_array_equal(out[index], replay(aq, weights, fused), err_msg=f"{name}: {fmt}")


def _native_fuses() -> bool:
    return platform.machine() in ("aarch64", "arm64")
