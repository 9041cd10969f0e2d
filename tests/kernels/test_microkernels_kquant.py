"""The K-quant, Q5_0 and Q5_1 micro-kernels (codegen/c/microkernels_kquant.c) on every instruction
set test_microkernels.py builds for (plain C, SSSE3, AVX2, NEON with and without dotprod under
qemu-user, WebAssembly SIMD128 under wasmtime): each format's dot products of weight rows with x
rounded to q8 blocks equal ggml's dequantized floats times the rounded x, to float rounding; every
path agrees with the plain C one as closely; and the rows kernels (a decode batch) give each row
exactly what the one-row kernel gives it."""

import shutil
import subprocess

import numpy as np
import pytest
from fixtures.quantized_blocks import quantized_blocks
from harness import rounded_to_q8
from tessera.codegen.c import MICROKERNEL_SOURCES
from test_microkernels import WASM, paths, run_wasm

FORMATS = ("q4_k", "q6_k", "q5_0", "q5_k", "q5_1", "q2_k", "q3_k")
BYTES = {"q4_k": 144, "q6_k": 210, "q5_0": 22, "q5_k": 176, "q5_1": 24, "q2_k": 84, "q3_k": 110}
VALUES = {"q5_0": 32, "q5_1": 32}
N, K = 37, 768  # 3 super-blocks of 256 values, 24 q8 blocks of x

HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "MICROKERNELS"
#include "KQUANT"

typedef float (*one_row)(const void *, const void *, const float *, const float *, int32_t);
typedef void (*rows_kernel)(const void *, const void *, const float *, const float *, int32_t, int32_t, float *);
enum { n = NROWS, k = KVALUES, blocks = KVALUES / 32, formats = NFORMATS };
static const one_row one[formats] = {ONE_ROW};
static const rows_kernel batch[formats] = {ROWS};
static const int row_bytes[formats] = {ROW_BYTES};

/* argv: input file (K floats, then each format's N rows), output file (dots, then mismatches). */
int main(int argc, char **argv) {
  static float x[k], d[blocks], s[blocks], out[formats][n];
  static uint32_t q[k / 4];
  static uint8_t *rows[formats];
  if (argc != 3) return 1;
  FILE *in = fopen(argv[1], "rb");
  if (!in || fread(x, sizeof x, 1, in) != 1) return 2;
  for (int f = 0; f < formats; f++) {
    rows[f] = malloc((size_t)n * row_bytes[f]);
    if (!rows[f] || fread(rows[f], (size_t)n * row_bytes[f], 1, in) != 1) return 2;
  }
  fclose(in);
  tsr_quantize_q8(x, k, q, d, s);
  for (int f = 0; f < formats; f++)
    for (int r = 0; r < n; r++) out[f][r] = one[f](rows[f] + (size_t)r * row_bytes[f], q, d, s, blocks);
  /* Four rows of x scaled apart, through the rows kernels with all four and with the first three:
     each row must get what the one-row kernel gives it, bit for bit. */
  static float xr[4][k], dr[4][blocks], sr[4][blocks], got[4];
  static uint32_t qr[4][k / 4];
  const float scale[4] = {1.0f, -0.5f, 3.0f, 0.125f};
  int32_t mismatches = 0;
  for (int r = 0; r < 4; r++) {
    for (int i = 0; i < k; i++) xr[r][i] = x[i] * scale[r] + (float)((i * 7 + r) % 5) * 0.01f;
    tsr_quantize_q8(xr[r], k, qr[r], dr[r], sr[r]);
  }
  for (int f = 0; f < formats; f++)
    for (int count = 3; count <= 4; count++)
      for (int c = 0; c < n; c++) {
        const uint8_t *w = rows[f] + (size_t)c * row_bytes[f];
        batch[f](w, qr, &dr[0][0], &sr[0][0], blocks, count, got);
        for (int r = 0; r < count; r++) mismatches += got[r] != one[f](w, qr[r], dr[r], sr[r], blocks);
      }
  FILE *o = fopen(argv[2], "wb");
  if (!o) return 3;
  fwrite(out, sizeof out, 1, o);
  fwrite(&mismatches, sizeof mismatches, 1, o);
  return fclose(o) != 0;
}
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(K).astype(np.float32)
    x[64:96] = 0  # a block of zeros: d = 0
    x[300] = 40.0  # one large value: its block's other values round coarsely
    blocks, dense = {}, {}
    for i, fmt in enumerate(FORMATS):
        blocks[fmt], dense[fmt] = quantized_blocks(fmt, N, K, seed=20 + i)
        assert blocks[fmt].shape[1] == K // VALUES.get(fmt, 256) * BYTES[fmt]
    folder = tmp_path_factory.mktemp("microkernels_kquant")
    with open(folder / "input.bin", "wb") as f:
        f.write(x.tobytes() + b"".join(np.ascontiguousarray(blocks[fmt]).tobytes() for fmt in FORMATS))
    main, kquant = MICROKERNEL_SOURCES[:2]
    source = (HARNESS.replace("MICROKERNELS", main).replace("KQUANT", kquant).replace("NROWS", str(N))
              .replace("KVALUES", str(K)).replace("NFORMATS", str(len(FORMATS)))
              .replace("ONE_ROW", ", ".join(f"tsr_dot_{fmt}_q8" for fmt in FORMATS))
              .replace("ROWS", ", ".join(f"tsr_dot_{fmt}_q8_rows" for fmt in FORMATS))
              .replace("ROW_BYTES", ", ".join(str(K // VALUES.get(fmt, 256) * BYTES[fmt]) for fmt in FORMATS)))
    (folder / "harness.c").write_text(source)
    return folder, x, dense


def _run(folder, name, compiler, runner) -> tuple[np.ndarray, int]:
    for tool in (compiler[0], *(r for r in runner if r != WASM)):
        assert shutil.which(tool), f"{tool} is missing: make setup installs it"
    binary = folder / f"harness-{name.replace(' ', '-')}"
    # The harness calls none of microkernels.c's own dot products.
    subprocess.run([*compiler, "-O2", "-std=c11", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function",
                    "-o", str(binary), str(folder / "harness.c"), "-lm"], check=True, capture_output=True, text=True)
    output = folder / f"output-{name.replace(' ', '-')}.bin"
    if runner == [WASM]:
        run_wasm(str(binary), [str(folder / "input.bin"), str(output)], str(folder))
    else:
        subprocess.run([*runner, str(binary), str(folder / "input.bin"), str(output)], check=True, timeout=120)
    raw = np.fromfile(output, np.uint8)
    return raw[:-4].view(np.float32).reshape(len(FORMATS), N), int(raw[-4:].view(np.int32)[0])


@pytest.fixture(scope="module")
def plain(data):
    folder, _, _ = data
    return _run(folder, "plain C", *paths()[0][1:])[0]


@pytest.mark.parametrize("name,compiler,runner", paths(), ids=[p[0] for p in paths()])
def test_every_simd_path_multiplies_every_format(data, plain, name, compiler, runner):
    folder, x, dense = data
    dots, mismatches = _run(folder, name, compiler, runner)
    assert mismatches == 0, f"{name}: a rows kernel differs from the one-row kernel"
    x_read = rounded_to_q8(x).astype(np.float64)
    for got, base, fmt in zip(dots, plain, FORMATS):
        want = dense[fmt].astype(np.float64) @ x_read
        scale = np.abs(dense[fmt]).astype(np.float64) @ np.abs(x_read)  # the size of the terms summed
        assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-5), f"{name}: {fmt} against numpy"
        assert np.all(np.abs(got - base) <= 1e-5 * scale + 1e-5), f"{name}: {fmt} against plain C"
        assert np.abs(want).max() > 1, f"{fmt}: the test's dot products are too small to tell"
