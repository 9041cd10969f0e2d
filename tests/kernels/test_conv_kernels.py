"""Convolution and pooling on C targets (tir/schedule/conv.py, codegen/c/microkernels_conv.c), on the
c-native CPU and in WebAssembly (wasmtime), against numpy: odd channel counts, strides 1 and 2,
asymmetric padding, dilation, groups (depthwise with and without a channel multiplier), batches
above 1, images wider than a workgroup's band, symbolic sizes, and fused epilogues (bias, ReLU,
ReLU6, a residual add) built through the whole pipeline. Also that the rule takes what it should
and leaves the rest to the generic rules."""

import os
import platform
import shutil
import subprocess

import numpy as np
import pytest
import tessera
from harness import build, check_op
from tessera import op
from tessera.codegen.c import HERE
from tessera.ir import Constant, Function, Tensor, interpret
from tessera.target import Target
from tessera.transform import legalize_ops
from tessera.vm import VirtualMachine
from tessera.vm.cpu_runner import CPUKernelRunner
from tessera.vm.wasm_runner import WasmKernelRunner

F32 = "float32"
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
PRESETS = {"cpu": "cpu", "wasm": "wasm"}


@pytest.fixture(scope="module", params=sorted(PRESETS))
def c_runner(request):
    """(runner, the target its kernels are built for)."""
    runner = (CPUKernelRunner if request.param == "cpu" else WasmKernelRunner)()
    return runner, Target.preset(PRESETS[request.param])


def rules(kernels):
    return sorted(k.attrs["rule"] for k in kernels)


def conv(**attrs):
    return lambda x, w: op.nn.conv2d(x, w, **attrs)


# (make, x shape, w shape, sizes swept for the symbolic dimension)
CONVS = {
    "3x3_same_odd_channels_batch": (conv(padding=1), ("n", 5, 9, 11), (7, 5, 3, 3), (1, 2, 3)),
    "3x3_stride2": (conv(strides=2, padding=1), (2, 3, "n", 9), (6, 3, 3, 3), (1, 7, 16)),
    "asymmetric_padding_dilation": (conv(strides=(2, 1), padding=(1, 0, 2, 1), dilation=(2, 1)),
                                    (1, 3, "n", 10), (5, 3, 3, 2), (5, 8, 13)),
    "groups": (conv(groups=2, padding=1), (1, 6, 7, "n"), (10, 3, 3, 3), (1, 7, 20)),
    "depthwise": (conv(groups=7, strides=2, padding=1), (2, 7, "n", 13), (7, 1, 3, 3), (1, 6, 15)),
    "depthwise_multiplier": (conv(groups=5, padding=1), (1, 5, 8, "n"), (10, 1, 3, 3), (2, 9)),
    "pointwise_whole_rows": (conv(), (1, 13, "n", 11), (9, 13, 1, 1), (1, 11, 12, 30)),
    "pointwise_bottom_padding": (conv(padding=(0, 0, 1, 1)), (2, 4, 6, 6), (17, 4, 1, 1), ((),)),
    "pointwise_stride2": (conv(strides=2), (1, 6, 9, 9), (5, 6, 1, 1), ((),)),
    "wide_rows_in_chunks": (conv(padding=1), (1, 2, 3, "n"), (3, 2, 3, 3), (127, 129, 300)),
    "long_reduction": (conv(), (1, 64, 5, 5), (2, 64, 3, 3), ((),)),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_convolution(c_runner, name):
    make, x_shape, w_shape, sizes = CONVS[name]
    runner, target = c_runner
    _, kernels = check_op(runner, make, [Tensor(x_shape, F32), Tensor(w_shape, F32)], sizes=sizes, target=target,
                          **TOLERANCE)
    assert rules(kernels) == ["conv2d"]


POOLS = {
    "max_3x3_stride2_padding": (lambda x: op.nn.max_pool2d(x, pool_size=3, strides=2, padding=1), (2, 3, "n", 9),
                                (1, 7, 16)),
    "max_ceil_mode_dilation": (lambda x: op.nn.max_pool2d(x, pool_size=2, strides=2, dilation=2, ceil_mode=True),
                               (1, 3, 9, "n"), (4, 7, 10)),
    "avg_excluding_padding": (lambda x: op.nn.avg_pool2d(x, pool_size=3, strides=2, padding=1), (1, 5, "n", 7),
                              (1, 7, 12)),
    "avg_including_padding": (lambda x: op.nn.avg_pool2d(x, pool_size=2, strides=2, padding=1,
                                                         count_include_pad=True), (2, 3, 6, 6), ((),)),
    "avg_dilated_asymmetric": (lambda x: op.nn.avg_pool2d(x, pool_size=3, strides=1, padding=(2, 1, 0, 2),
                                                          dilation=(2, 3)), (1, 2, "n", 9), (4, 7)),
    "max_wide_rows": (lambda x: op.nn.max_pool2d(x, pool_size=3, strides=1, padding=1), (1, 2, 2, "n"), (200,)),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pooling(c_runner, name):
    make, x_shape, sizes = POOLS[name]
    runner, target = c_runner
    _, kernels = check_op(runner, make, [Tensor(x_shape, F32)], sizes=sizes, target=target, **TOLERANCE)
    assert rules(kernels) == ["pool2d"]


def test_what_the_rule_leaves_to_the_generic_rules(c_runner):
    """Integer data and a kernel of symbolic size: the generic rules, still right."""
    runner, target = c_runner
    _, kernels = check_op(runner, conv(padding=1), [Tensor((1, 3, 5, 5), "int32"), Tensor((4, 3, 3, 3), "int32")],
                          sizes=((),), target=target)
    assert "conv2d" not in rules(kernels)
    _, kernels = check_op(runner, conv(), [Tensor((1, 2, 6, 6), F32), Tensor((3, 2, "k", "k"), F32)],
                          sizes=(1, 3), target=target, **TOLERANCE)
    assert "conv2d" not in rules(kernels)


def test_gpu_targets_keep_their_rules():
    mod = build(conv(padding=1), [Tensor((1, 3, 8, 8), F32), Tensor((4, 3, 3, 3), F32)])
    lowered = legalize_ops(mod, Target.preset("llvmpipe"))
    assert "conv2d" not in rules(f for f in lowered.functions.values() if not isinstance(f, Function))


# Fused epilogues: the graph built and run whole (fusion gives the convolution its bias, activation
# and residual add), against the same graph interpreted by numpy.
def conv_bias_relu6(x, w, b):
    return op.clip(op.add(op.nn.conv2d(x, w, padding=1), op.reshape(b, (1, -1, 1, 1))), min=0.0, max=6.0)


def depthwise_bias_relu(x, w, b):
    return op.nn.relu(op.add(op.nn.conv2d(x, w, strides=2, padding=1, groups=6), op.reshape(b, (1, -1, 1, 1))))


def pointwise_residual(x, w, b):
    return op.add(op.add(op.nn.conv2d(x, w), op.reshape(b, (1, -1, 1, 1))), x)


def pool_then_relu(x):
    return op.nn.relu(op.nn.avg_pool2d(op.subtract(x, Constant(np.array(0.5, np.float32))), pool_size=3, strides=2,
                                       padding=1))


FUSED = {
    "conv_bias_relu6": (conv_bias_relu6, [(2, 5, 9, 10), (7, 5, 3, 3), (7,)], "conv2d"),
    "depthwise_bias_relu": (depthwise_bias_relu, [(1, 6, 11, 11), (6, 1, 3, 3), (6,)], "conv2d"),
    "pointwise_bias_residual": (pointwise_residual, [(2, 6, 7, 7), (6, 6, 1, 1), (6,)], "conv2d"),
    # The input's subtraction is fused into the pool's reads: the pool's operand is not in memory.
    "computed_input_declines": (pool_then_relu, [(1, 3, 8, 8)], None),
}


@pytest.mark.parametrize("name", sorted(FUSED))
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_fused_epilogues(preset, name):
    make, shapes, rule = FUSED[name]
    mod = build(make, [Tensor(s, F32) for s in shapes])
    exe = tessera.build(mod, Target.preset(preset))
    rng = np.random.default_rng(3)
    args = [rng.uniform(-2, 2, s).astype(np.float32) for s in shapes]
    got = VirtualMachine(exe)["main"](*args)
    want = interpret(mod, "main", *args)
    np.testing.assert_allclose(np.asarray(got), want, **TOLERANCE)
    assert len(exe.kernels) == 1, [k["name"] for k in exe.kernels]  # one launch, the epilogue inside
    assert (exe.kernels[0]["rule"] == rule) if rule else exe.kernels[0]["rule"] not in ("conv2d", "pool2d")


# The micro-kernels alone, called by a C harness against sums in double: every block that ends where
# the input ends, over a sweep of small geometries, then random geometries (blocks at any offset,
# pitches wider than the block); on each vector path this CPU runs (128-bit vectors with plain
# x86-64, 256-bit with AVX2, the widest with -march=native) and under ASan and UBSan, which catch a
# load past the input's end. -ffp-contract=off: clang would otherwise fuse multiplies and adds.
HARNESS = r"""#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "MICROKERNELS"

/* A fixed generator: the same draws on every run. */
static uint32_t state = 12345u;
static int32_t draw(int32_t lo, int32_t hi) {
  state = state * 1664525u + 1013904223u;
  return lo + (int32_t)((state >> 8) % (uint32_t)(hi - lo + 1));
}

/* One block of outputs from the micro-kernels against sums in double, every tap inside the image
 * checked. The input is allocated to its exact size, so a load past its end (the last plane of the
 * last image) is an error under ASan; pooling reads the last plane. Returns the wrong outputs. */
static int32_t check(int32_t channels, int32_t height, int32_t width, int32_t count, int32_t kh, int32_t kw,
                     int32_t sh, int32_t sw, int32_t dh, int32_t dw, int32_t top, int32_t left, int32_t y0,
                     int32_t rows, int32_t x0, int32_t cols, int32_t pitch, int32_t block, int32_t first,
                     int32_t is_max) {
  int32_t failures = 0;
  const int32_t size = channels * height * width, plane = height * width;
  float *x = malloc(sizeof(float) * (size_t)size);
  float *w = malloc(sizeof(float) * (size_t)((first + count) * channels * kh * kw));
  float *acc = malloc(sizeof(float) * (size_t)(count * block));
  for (int32_t i = 0; i < size; i++) x[i] = (float)draw(-64, 64) / 16.0f;
  for (int32_t i = 0; i < (first + count) * channels * kh * kw; i++) w[i] = (float)draw(-64, 64) / 32.0f;
  tsr_conv2d_f32(x, channels, height, width, w, first, count, kh, kw, sh, sw, dh, dw, top, left, y0, rows, x0, cols,
                 pitch, block, acc);
  for (int32_t o = 0; o < count; o++)
    for (int32_t r = 0; r < rows; r++)
      for (int32_t c = 0; c < cols; c++) {
        double sum = 0.0;
        for (int32_t ci = 0; ci < channels; ci++)
          for (int32_t i = 0; i < kh; i++)
            for (int32_t j = 0; j < kw; j++) {
              const int32_t row = (y0 + r) * sh + i * dh - top, col = (x0 + c) * sw + j * dw - left;
              if (row >= 0 && row < height && col >= 0 && col < width)
                sum += (double)w[(((first + o) * channels + ci) * kh + i) * kw + j] *
                       x[(ci * height + row) * width + col];
            }
        if (fabs(acc[o * block + r * pitch + c] - sum) > 1e-3) failures++;
      }
  const float *last = x + (channels - 1) * plane;
  tsr_pool2d_f32(last, height, width, kh, kw, sh, sw, dh, dw, top, left, y0, rows, x0, cols, pitch, is_max, acc);
  for (int32_t r = 0; r < rows; r++)
    for (int32_t c = 0; c < cols; c++) {
      double want = is_max ? -INFINITY : 0.0;
      for (int32_t i = 0; i < kh; i++)
        for (int32_t j = 0; j < kw; j++) {
          const int32_t row = (y0 + r) * sh + i * dh - top, col = (x0 + c) * sw + j * dw - left;
          if (row < 0 || row >= height || col < 0 || col >= width) continue;
          const double v = last[row * width + col];
          want = is_max ? (v > want ? v : want) : want + v;
        }
      if (!(acc[r * pitch + c] == (float)want || fabs(acc[r * pitch + c] - want) <= 1e-4)) failures++;
    }
  free(x);
  free(w);
  free(acc);
  return failures;
}

static int32_t output_size(int32_t size, int32_t k, int32_t stride, int32_t dilation, int32_t padding) {
  return (size + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
}

int main(void) {
  int32_t failures = 0;
  /* The blocks that end where the input ends: the last band of rows (whole rows, as a workgroup
   * takes them: a pointwise layer's are one long row), the last row, the last column, at widths
   * around and below a register tile's, with channels left over after the 4- and 8-channel tiles. */
  static const int32_t widths[] = {1, 3, 5, 7, 14, 17, 33}, heights[] = {1, 2, 3, 6}, counts[] = {1, 5, 9, 13};
  for (int32_t k = 1; k <= 3; k += 2)
    for (int32_t s = 1; s <= 2; s++)
      for (int32_t p = 0; p <= 1; p++)
        for (int32_t d = 1; d <= 2; d++)
          for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
            for (size_t hi = 0; hi < sizeof heights / sizeof *heights; hi++)
              for (int32_t channels = 1; channels <= 3; channels += 2)
                for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
                  const int32_t width = widths[wi], height = heights[hi], count = counts[ci];
                  const int32_t out_h = output_size(height, k, s, d, p), out_w = output_size(width, k, s, d, p);
                  if (out_h < 1 || out_w < 1) continue;
                  for (int32_t y0 = 0; y0 < out_h; y0++) {
                    failures += check(channels, height, width, count, k, k, s, s, d, d, p, p, y0, out_h - y0, 0,
                                      out_w, out_w, (out_h - y0) * out_w, 0, (int32_t)(y0 & 1));
                    failures += check(channels, height, width, count, k, k, s, s, d, d, p, p, y0, 1, out_w - 1, 1,
                                      1, 1, 1, 1);
                  }
                }
  /* Random geometries: blocks at any offset, pitches wider than the block. */
  for (int32_t trial = 0; trial < 400; trial++) {
    const int32_t channels = draw(1, 9), height = draw(1, 12), width = draw(1, 40), count = draw(1, 11);
    const int32_t kh = draw(1, 3), kw = draw(1, 3), sh = draw(1, 2), sw = draw(1, 2), dh = draw(1, 2), dw = draw(1, 2);
    const int32_t top = draw(0, 2), left = draw(0, 2), bottom = draw(0, 2), right = draw(0, 2);
    const int32_t out_h = (height + top + bottom - dh * (kh - 1) - 1) / sh + 1;
    const int32_t out_w = (width + left + right - dw * (kw - 1) - 1) / sw + 1;
    if (out_h < 1 || out_w < 1) continue;
    const int32_t y0 = draw(0, out_h - 1), rows = draw(1, out_h - y0), x0 = draw(0, out_w - 1), cols = draw(1, out_w - x0);
    const int32_t pitch = cols + draw(0, 3), block = rows * pitch + draw(0, 3), first = draw(0, 2);
    failures += check(channels, height, width, count, kh, kw, sh, sw, dh, dw, top, left, y0, rows, x0, cols, pitch,
                      block, first, draw(0, 1));
  }
  printf("%d\n", failures);
  return failures != 0;
}
"""


def c_paths():
    x86 = platform.machine() in ("x86_64", "AMD64")
    sanitize = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"]
    paths = [("native", ["-march=native"]), ("native sanitized", ["-march=native", *sanitize])]
    if x86:
        paths += [("x86-64", ["-march=x86-64"]), ("x86-64-v3", ["-march=x86-64-v3"]),
                  ("x86-64 sanitized", ["-march=x86-64", *sanitize])]
    return paths


@pytest.mark.parametrize("name,flags", c_paths(), ids=[p[0] for p in c_paths()])
def test_micro_kernels_on_every_vector_path(tmp_path, name, flags):
    compiler = os.environ.get("CC") or "cc"
    assert shutil.which(compiler), f"{compiler} is missing: make setup installs it"
    source = tmp_path / "harness.c"
    source.write_text(HARNESS.replace("MICROKERNELS", os.path.join(HERE, "microkernels_conv.c")))
    binary = tmp_path / "harness"
    subprocess.run([compiler, "-O2", "-std=c11", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", *flags, str(source),
                    "-o", str(binary), "-lm"], check=True)
    result = subprocess.run([str(binary)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "0", (result.stdout, result.stderr[-2000:])
