"""One decode GEMV per block format through the c-native micro-kernels (codegen/c/microkernels.c and
microkernels_kquant.c), timed in one C process: the cost of each format's integer dot product per
weight, beside Q4_0's. Random blocks (their f16 scales set to a small normal number), x rounded once
by tsr_quantize_q8 as a kernel does; the best of --repeats runs of N rows of K values per format,
one-row kernels, and the rows kernels for a decode batch of 4.

    .venv/bin/python bench/kquant_gemv.py [--n 1536] [--k 1536] [--repeats 30] [--march native]

K must be a multiple of 256 (the K-quants' super-blocks).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

# name, bytes per block, values per block
FORMATS = [("q4_0", 18, 32), ("q4_1", 20, 32), ("q8_0", 34, 32), ("q5_0", 22, 32), ("q5_1", 24, 32),
           ("q2_k", 84, 256), ("q3_k", 110, 256), ("q4_k", 144, 256), ("q5_k", 176, 256), ("q6_k", 210, 256)]
# Where each format's f16 d (and dmin) sit in a block: random bits there could be infinities.
HALVES = {"q4_0": (0,), "q4_1": (0, 2), "q8_0": (0,), "q5_0": (0,), "q5_1": (0, 2), "q2_k": (80, 82),
          "q3_k": (108,), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}

HARNESS = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "MAIN"
#include "KQUANT"
typedef float (*one_row)(const void *, const void *, const float *, const float *, int32_t);
typedef void (*rows_kernel)(const void *, const void *, const float *, const float *, int32_t, int32_t, float *);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  const int n = atoi(argv[1]), k = atoi(argv[2]), repeats = atoi(argv[3]), blocks = k / 32;
  float *x = malloc(sizeof(float) * 4 * k), *d = malloc(sizeof(float) * 4 * blocks);
  float *s = malloc(sizeof(float) * 4 * blocks);
  int8_t *q = malloc(4 * (size_t)k);
  for (int i = 0; i < 4 * k; i++) x[i] = (float)((i * 37) % 101 - 50) / 50.0f;
  for (int r = 0; r < 4; r++) tsr_quantize_q8(x + r * k, k, q + (size_t)r * k, d + r * blocks, s + r * blocks);
  struct { const char *name; one_row one; rows_kernel rows; int bytes, values, halves[2]; } formats[] = {TABLE};
  srand(1);
  for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
    const size_t row = (size_t)k / formats[f].values * formats[f].bytes;
    uint8_t *w = malloc(row * n);
    for (size_t i = 0; i < row * n; i++) w[i] = (uint8_t)rand();
    for (size_t b = 0; b < row * n; b += formats[f].bytes)
      for (int h = 0; h < 2; h++)
        if (formats[f].halves[h] >= 0) w[b + formats[f].halves[h]] = 0, w[b + formats[f].halves[h] + 1] = 0x20;
    volatile float sink = 0.0f;
    float out[4];
    double one = 1e9, rows = 1e9;
    for (int t = 0; t < repeats; t++) {
      double start = now();
      for (int c = 0; c < n; c++) sink += formats[f].one(w + c * row, q, d, s, blocks);
      double middle = now();
      for (int c = 0; c < n; c++) formats[f].rows(w + c * row, q, d, s, blocks, 4, out), sink += out[0];
      double end = now();
      one = middle - start < one ? middle - start : one;
      rows = end - middle < rows ? end - middle : rows;
    }
    printf("%s %.1f %.1f\n", formats[f].name, one * 1e6, rows * 1e6);
    free(w);
  }
  return 0;
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1536)
    parser.add_argument("--k", type=int, default=1536)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--march", default="native")
    args = parser.parse_args()
    if args.k % 256:
        raise SystemExit(f"--k must be a multiple of 256, got {args.k}")
    from tessera.codegen.c import MICROKERNEL_SOURCES

    table = ", ".join(f'{{"{name}", tsr_dot_{name}_q8, tsr_dot_{name}_q8_rows, {size}, {values}, '
                      f'{{{", ".join(str(h) for h in (HALVES[name] + (-1,))[:2])}}}}}'
                      for name, size, values in FORMATS)
    source = (HARNESS.replace("MAIN", MICROKERNEL_SOURCES[0]).replace("KQUANT", MICROKERNEL_SOURCES[1])
              .replace("TABLE", table))
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "gemv.c"), "w") as f:
            f.write(source)
        binary = os.path.join(folder, "gemv")
        # The backends' flags (codegen/c/native.py): -O3, no fused multiply-adds.
        subprocess.run(["cc", "-O3", f"-march={args.march}", "-std=c11", "-ffp-contract=off", "-Wno-unused-function",
                        "-o", binary, os.path.join(folder, "gemv.c"), "-lm"], check=True)
        lines = subprocess.run([binary, str(args.n), str(args.k), str(args.repeats)], check=True,
                               capture_output=True, text=True).stdout.split("\n")
    times = {name: (float(one), float(rows)) for name, one, rows in (line.split() for line in lines if line)}
    base = times["q4_0"]
    print(f"{args.n} x {args.k} GEMV, -march={args.march}, best of {args.repeats}\n")
    print("| format | bits / weight | one row of x, us | / Q4_0 | 4 rows (rows kernel), us | / Q4_0 |")
    print("|---|---|---|---|---|---|")
    for name, size, values in FORMATS:
        one, rows = times[name]
        print(f"| {name} | {8 * size / values:.2f} | {one:.1f} | {one / base[0]:.2f} | {rows:.1f} | "
              f"{rows / base[1]:.2f} |")


if __name__ == "__main__":
    main()
