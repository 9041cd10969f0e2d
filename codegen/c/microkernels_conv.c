/* Convolution and pooling micro-kernels (tir/schedule/conv.py): the raw window sums (or maxima) of
 * a block of one NCHW image's outputs, written to the calling kernel's private scratch; the kernel
 * applies the fused epilogue (bias, activation, residual) to each as it stores it.
 *
 * A register tile is TSR_CONV_OC output channels (TSR_CONV_WIDE_OC with 32 vector registers) by
 * TSR_CONV_PX consecutive output columns: for each input channel and tap, TSR_CONV_PX input values
 * (two vector loads at stride 1) are multiplied by each channel's weight, so each value loaded
 * serves every channel of the tile; the accumulators are vectors of the compiler's vector extension
 * (no intrinsics: SSE/AVX, NEON and SIMD128 alike). Taps outside the image contribute nothing (a
 * zero, or -inf for a maximum), as the operators' bodies say, and the sums run over channels, then
 * rows, then columns of the window, the order of the tir reduction. No fused multiply-add (gcc's
 * ISO C default), as in the tir kernels.
 *
 * externs: tsr_conv2d_f32 tsr_pool2d_f32 */

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A vector of TSR_CONV_VEC floats in the compiler's vector extension (GCC's and clang's alike): as
 * variables (not float arrays) the accumulators stay in registers. A register tile of TSR_CONV_OC
 * channels by two vectors is 8 accumulators, which 16 registers hold with room for the inputs and
 * weights. 256-bit vectors where the CPU has them, 128-bit ones elsewhere (SSE, NEON, WebAssembly
 * SIMD128). Chosen here rather than from microkernels.c's TSR_MK_*: those name instruction sets for
 * intrinsics (their AVX2 path also needs FMA and F16C, and none is AVX-512), where this needs only
 * the vector width and the register count; and this file compiles alone in its test harness. */
#if defined(__AVX2__) || defined(__AVX512F__)
#define TSR_CONV_VEC 8
#else
#define TSR_CONV_VEC 4
#endif
#define TSR_CONV_PX (2 * TSR_CONV_VEC)
#define TSR_CONV_OC 4
/* 32 vector registers (AVX-512, AArch64) hold a tile of twice the channels: 16 accumulators. */
#if defined(__AVX512F__) || defined(__aarch64__)
#define TSR_CONV_WIDE_OC 8
#define TSR_CONV_MAX_OC TSR_CONV_WIDE_OC
#else
#define TSR_CONV_MAX_OC TSR_CONV_OC
#endif
typedef float tsr_conv_vf __attribute__((vector_size(TSR_CONV_VEC * sizeof(float))));

static inline tsr_conv_vf tsr_conv_load(const float *p) {
  tsr_conv_vf v;
  memcpy(&v, p, sizeof v); /* unaligned */
  return v;
}

typedef int32_t tsr_conv_vi __attribute__((vector_size(TSR_CONV_VEC * sizeof(int32_t))));
static const int32_t tsr_conv_lanes[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* A tap's TSR_CONV_PX values at stride 1 from column `start` of `line`, the lanes whose column falls
 * outside [0, width) cleared (padding): two vector loads and masks instead of a copy per value. The
 * caller checks that all TSR_CONV_PX loads stay inside the image. */
static inline void tsr_conv_masked(const float *line, int32_t start, int32_t width, tsr_conv_vf *lo, tsr_conv_vf *hi) {
  tsr_conv_vi col_lo, col_hi;
  memcpy(&col_lo, tsr_conv_lanes, sizeof col_lo);
  memcpy(&col_hi, tsr_conv_lanes + TSR_CONV_VEC, sizeof col_hi);
  col_lo += start;
  col_hi += start;
  const tsr_conv_vi zero = {0}, end = zero + width;
  const tsr_conv_vi keep_lo = (col_lo >= zero) & (col_lo < end), keep_hi = (col_hi >= zero) & (col_hi < end);
  *lo = (tsr_conv_vf)((tsr_conv_vi)tsr_conv_load(line + start) & keep_lo);
  *hi = (tsr_conv_vf)((tsr_conv_vi)tsr_conv_load(line + start + TSR_CONV_VEC) & keep_hi);
}

/* tsr_conv_masked at stride 2 (downsampling convolutions): four loads, the even values of each pair. */
#if TSR_CONV_VEC == 8
#define TSR_CONV_EVENS(a, b) __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14)
#else
#define TSR_CONV_EVENS(a, b) __builtin_shufflevector(a, b, 0, 2, 4, 6)
#endif
static inline void tsr_conv_masked2(const float *line, int32_t start, int32_t width, tsr_conv_vf *lo, tsr_conv_vf *hi) {
  tsr_conv_vi col_lo, col_hi;
  memcpy(&col_lo, tsr_conv_lanes, sizeof col_lo);
  memcpy(&col_hi, tsr_conv_lanes + TSR_CONV_VEC, sizeof col_hi);
  col_lo = col_lo * 2 + start;
  col_hi = col_hi * 2 + start;
  const tsr_conv_vi zero = {0}, end = zero + width;
  const tsr_conv_vi keep_lo = (col_lo >= zero) & (col_lo < end), keep_hi = (col_hi >= zero) & (col_hi < end);
  const float *p = line + start;
  const tsr_conv_vf v0 = tsr_conv_load(p), v1 = tsr_conv_load(p + TSR_CONV_VEC);
  const tsr_conv_vf v2 = tsr_conv_load(p + 2 * TSR_CONV_VEC), v3 = tsr_conv_load(p + 3 * TSR_CONV_VEC);
  *lo = (tsr_conv_vf)((tsr_conv_vi)TSR_CONV_EVENS(v0, v1) & keep_lo);
  *hi = (tsr_conv_vf)((tsr_conv_vi)TSR_CONV_EVENS(v2, v3) & keep_hi);
}

/* The geometry of a window over one image plane (height x width) and of the block of outputs.
 * `end`: how many values from the input pointer on may be read (the group's planes, less the rows a
 * pointwise block skips when it moves the pointer to its first row): no load goes past it. */
typedef struct {
  int32_t height, width, kh, kw, sh, sw, dh, dw, top, left;
  int64_t end;
} tsr_conv_geometry;

/* The TSR_CONV_PX values that tap column `col0` (the tile's first) reads from `row`, `sw` apart, for
 * the tile's first `n` outputs; `fill` where a tap falls outside the row or past the tile. A pointer
 * into the row itself where all are inside and contiguous, else `buf` filled: the taps inside are
 * one range [lo, hi), copied without a test per tap. */
static inline const float *tsr_conv_taps(const float *row, int32_t width, int32_t col0, int32_t sw, int32_t n,
                                         float fill, float *buf) {
  if (sw == 1 && n == TSR_CONV_PX && col0 >= 0 && col0 + TSR_CONV_PX <= width) return row + col0;
  int32_t lo = col0 < 0 ? (sw - 1 - col0) / sw : 0;          /* first k with col0 + k * sw >= 0 */
  int32_t hi = col0 < width ? (width - col0 + sw - 1) / sw : 0; /* first k with col0 + k * sw >= width */
  if (hi > n) hi = n;
  if (lo > hi) lo = hi;
  for (int32_t k = 0; k < lo; k++) buf[k] = fill;
  for (int32_t k = lo; k < hi; k++) buf[k] = row[col0 + k * sw];
  for (int32_t k = hi; k < TSR_CONV_PX; k++) buf[k] = fill;
  return buf;
}

/* The tile's `n` first columns of a channel's two accumulators to out. */
static inline void tsr_conv_put(float *out, int32_t n, tsr_conv_vf lo, tsr_conv_vf hi) {
  if (n == TSR_CONV_PX) { /* constant sizes: two vector stores (a call of memcpy in WebAssembly otherwise) */
    memcpy(out, &lo, sizeof lo);
    memcpy(out + TSR_CONV_VEC, &hi, sizeof hi);
    return;
  }
  float tile[TSR_CONV_PX];
  memcpy(tile, &lo, sizeof lo);
  memcpy(tile + TSR_CONV_VEC, &hi, sizeof hi);
  for (int32_t k = 0; k < n; k++) out[k] = tile[k];
}

/* Whether a tile of `n` outputs from column `col0` on reads each tap's values straight from the row:
 * stride 1, and every tap of the first `n` columns inside the row. A tile narrower than the vectors
 * (rows of 7 or 14 outputs) then loads values past its last column too, from the next row or
 * channel, and discards them; never past the input's end (g->end). */
static inline int tsr_conv_inside(const tsr_conv_geometry *g, int32_t channels, int32_t plane, int32_t y, int32_t col0,
                                  int32_t n) {
  const int32_t last_col = col0 + (g->kw - 1) * g->dw;
  if (g->sw != 1 || col0 < 0 || last_col + n - 1 >= g->width) return 0;
  if (n == TSR_CONV_PX) return 1;
  int32_t last_row = y * g->sh + (g->kh - 1) * g->dh - g->top;
  if (last_row >= g->height) last_row = g->height - 1;
  return (int64_t)(channels - 1) * plane + (int64_t)last_row * g->width + last_col + TSR_CONV_PX <= g->end;
}

/* `oc` channels' sums (a constant where inlined: the loops over channels unroll and the accumulators
 * stay in registers) for outputs (y, ox .. ox + n) into out[o * pitch + k]. x: the group's `channels`
 * planes, `plane` apart; w: the first channel's weights, `w_stride` apart from one channel to the
 * next. A tile whose taps all fall inside the image's columns (most of them) loads them straight
 * from the row; one at the border loads and masks them (tsr_conv_masked), or where those loads would
 * leave the image (its first and last values) or the stride is not 1, gathers them (tsr_conv_taps). */
static inline __attribute__((always_inline)) void tsr_conv_tile(int32_t oc, const float *x, int32_t plane,
                                                                int32_t channels, const tsr_conv_geometry *g,
                                                                const float *w, int32_t w_stride, int32_t y,
                                                                int32_t ox, int32_t n, float *out, int32_t pitch) {
  tsr_conv_vf lo_acc[TSR_CONV_MAX_OC], hi_acc[TSR_CONV_MAX_OC];
  memset(lo_acc, 0, sizeof lo_acc);
  memset(hi_acc, 0, sizeof hi_acc);
  float buf[TSR_CONV_PX];
  const int32_t taps = g->kh * g->kw, col0 = ox * g->sw - g->left;
  const int inside = tsr_conv_inside(g, channels, plane, y, col0, n);
  for (int32_t c = 0; c < channels; c++) {
    for (int32_t i = 0; i < g->kh; i++) {
      const int32_t row = y * g->sh + i * g->dh - g->top;
      if (row < 0 || row >= g->height) continue;
      const float *line = x + (int64_t)c * plane + (int64_t)row * g->width;
      const float *wt = w + (int64_t)c * taps + i * g->kw;
      const int64_t line_at = (int64_t)c * plane + (int64_t)row * g->width;
      for (int32_t j = 0; j < g->kw; j++) {
        const int32_t start = col0 + j * g->dw;
        tsr_conv_vf lo, hi;
        if (inside) {
          lo = tsr_conv_load(line + start);
          hi = tsr_conv_load(line + start + TSR_CONV_VEC);
        } else if (g->sw == 1 && line_at + start >= 0 && line_at + start + TSR_CONV_PX <= g->end) {
          tsr_conv_masked(line, start, g->width, &lo, &hi);
        } else if (g->sw == 2 && line_at + start >= 0 &&
                   line_at + start + 2 * TSR_CONV_PX <= g->end) {
          tsr_conv_masked2(line, start, g->width, &lo, &hi);
        } else {
          const float *v = tsr_conv_taps(line, g->width, start, g->sw, n, 0.0f, buf);
          lo = tsr_conv_load(v);
          hi = tsr_conv_load(v + TSR_CONV_VEC);
        }
        for (int32_t o = 0; o < oc; o++) {
          const float weight = wt[j + (int64_t)o * w_stride];
          lo_acc[o] += lo * weight;
          hi_acc[o] += hi * weight;
        }
      }
    }
  }
  for (int32_t o = 0; o < oc; o++) tsr_conv_put(out + (int64_t)o * pitch, n, lo_acc[o], hi_acc[o]);
}

static void tsr_conv_tile4(const float *x, int32_t plane, int32_t channels, const tsr_conv_geometry *g, const float *w,
                           int32_t w_stride, int32_t y, int32_t ox, int32_t n, float *out, int32_t pitch) {
  tsr_conv_tile(TSR_CONV_OC, x, plane, channels, g, w, w_stride, y, ox, n, out, pitch);
}

#ifdef TSR_CONV_WIDE_OC
static void tsr_conv_tile8(const float *x, int32_t plane, int32_t channels, const tsr_conv_geometry *g, const float *w,
                           int32_t w_stride, int32_t y, int32_t ox, int32_t n, float *out, int32_t pitch) {
  tsr_conv_tile(TSR_CONV_WIDE_OC, x, plane, channels, g, w, w_stride, y, ox, n, out, pitch);
}
#endif

/* One channel's sums (depthwise convolutions, and the channels left over), as tsr_conv_tile with
 * one pair of accumulators. */
static void tsr_conv_tile1(const float *x, int32_t plane, int32_t channels, const tsr_conv_geometry *g, const float *w,
                           int32_t y, int32_t ox, int32_t n, float *out) {
  tsr_conv_vf lo_acc = {0}, hi_acc = {0};
  float buf[TSR_CONV_PX];
  const int32_t taps = g->kh * g->kw, col0 = ox * g->sw - g->left;
  const int inside = tsr_conv_inside(g, channels, plane, y, col0, n);
  for (int32_t c = 0; c < channels; c++) {
    for (int32_t i = 0; i < g->kh; i++) {
      const int32_t row = y * g->sh + i * g->dh - g->top;
      if (row < 0 || row >= g->height) continue;
      const float *line = x + (int64_t)c * plane + (int64_t)row * g->width;
      const float *wt = w + (int64_t)c * taps + i * g->kw;
      if (inside) {
        for (int32_t j = 0; j < g->kw; j++) {
          const float *v = line + col0 + j * g->dw;
          lo_acc += tsr_conv_load(v) * wt[j];
          hi_acc += tsr_conv_load(v + TSR_CONV_VEC) * wt[j];
        }
      } else {
        const int64_t line_at = (int64_t)c * plane + (int64_t)row * g->width;
        for (int32_t j = 0; j < g->kw; j++) {
          const int32_t start = col0 + j * g->dw;
          tsr_conv_vf lo, hi;
          if (g->sw == 1 && line_at + start >= 0 && line_at + start + TSR_CONV_PX <= g->end) {
            tsr_conv_masked(line, start, g->width, &lo, &hi);
          } else if (g->sw == 2 && line_at + start >= 0 &&
                     line_at + start + 2 * TSR_CONV_PX <= g->end) {
            tsr_conv_masked2(line, start, g->width, &lo, &hi);
          } else {
            const float *v = tsr_conv_taps(line, g->width, start, g->sw, n, 0.0f, buf);
            lo = tsr_conv_load(v);
            hi = tsr_conv_load(v + TSR_CONV_VEC);
          }
          lo_acc += lo * wt[j];
          hi_acc += hi * wt[j];
        }
      }
    }
  }
  tsr_conv_put(out, n, lo_acc, hi_acc);
}

/* A 1x1 window of stride 1 reading inside the image (pointwise convolutions: most of a MobileNet's
 * work): TSR_CONV_OC channels' sums for the `n` positions from `x` on (`channels` planes, `plane`
 * apart) into out[o * pitch + k], with nothing but loads and arithmetic in the channel loop. */
static void tsr_conv_pointwise4(const float *x, int32_t plane, int32_t channels, const float *w, int32_t w_stride,
                                int32_t n, float *out, int32_t pitch) {
  tsr_conv_vf a0 = {0}, b0 = {0}, a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0}, a3 = {0}, b3 = {0};
  float buf[TSR_CONV_PX] = {0};
  for (int32_t c = 0; c < channels; c++) {
    const float *v = x + (int64_t)c * plane;
    if (n < TSR_CONV_PX) {
      for (int32_t k = 0; k < n; k++) buf[k] = v[k];
      v = buf;
    }
    const tsr_conv_vf lo = tsr_conv_load(v), hi = tsr_conv_load(v + TSR_CONV_VEC);
    const float w0 = w[c], w1 = w[c + w_stride], w2 = w[c + 2 * w_stride], w3 = w[c + 3 * w_stride];
    a0 += lo * w0;
    b0 += hi * w0;
    a1 += lo * w1;
    b1 += hi * w1;
    a2 += lo * w2;
    b2 += hi * w2;
    a3 += lo * w3;
    b3 += hi * w3;
  }
  tsr_conv_put(out, n, a0, b0);
  tsr_conv_put(out + pitch, n, a1, b1);
  tsr_conv_put(out + 2 * pitch, n, a2, b2);
  tsr_conv_put(out + 3 * pitch, n, a3, b3);
}

#ifdef TSR_CONV_WIDE_OC
/* tsr_conv_pointwise4 for TSR_CONV_WIDE_OC channels (the loops over them have constant bounds: the
 * compiler unrolls them and keeps the accumulators in registers). */
static void tsr_conv_pointwise8(const float *x, int32_t plane, int32_t channels, const float *w, int32_t w_stride,
                                int32_t n, float *out, int32_t pitch) {
  tsr_conv_vf lo_acc[TSR_CONV_WIDE_OC], hi_acc[TSR_CONV_WIDE_OC];
  memset(lo_acc, 0, sizeof lo_acc);
  memset(hi_acc, 0, sizeof hi_acc);
  float buf[TSR_CONV_PX] = {0};
  for (int32_t c = 0; c < channels; c++) {
    const float *v = x + (int64_t)c * plane;
    if (n < TSR_CONV_PX) {
      for (int32_t k = 0; k < n; k++) buf[k] = v[k];
      v = buf;
    }
    const tsr_conv_vf lo = tsr_conv_load(v), hi = tsr_conv_load(v + TSR_CONV_VEC);
    for (int32_t o = 0; o < TSR_CONV_WIDE_OC; o++) {
      const float weight = w[c + (int64_t)o * w_stride];
      lo_acc[o] += lo * weight;
      hi_acc[o] += hi * weight;
    }
  }
  for (int32_t o = 0; o < TSR_CONV_WIDE_OC; o++) tsr_conv_put(out + (int64_t)o * pitch, n, lo_acc[o], hi_acc[o]);
}
#endif

/* The convolution sums of output channels [first, first + count) of one group (weights `w`, the
 * group's, OIHW with `channels` input channels each) at output rows y0 .. y0 + rows and columns x0 .. x0 + cols of one
 * image (`x`: the group's first input plane) into acc[o * block + r * pitch + c]. */
static void tsr_conv2d_f32(const float *x, int32_t channels, int32_t height, int32_t width, const float *w, int32_t first,
                           int32_t count,
                           int32_t kh, int32_t kw, int32_t sh, int32_t sw, int32_t dh, int32_t dw, int32_t top,
                           int32_t left, int32_t y0, int32_t rows, int32_t x0, int32_t cols, int32_t pitch,
                           int32_t block, float *acc) {
  const int32_t plane = height * width;
  tsr_conv_geometry g = {height, width, kh, kw, sh, sw, dh, dw, top, left, (int64_t)channels * plane};
  const int32_t w_stride = channels * kh * kw;
  w += (int64_t)first * w_stride;
  /* A 1x1 window of stride 1 without padding over whole rows inside the image reads its outputs'
   * own positions: the block's rows are one row of rows * width columns. The input then starts at
   * row y0: y0 rows fewer of it may be read. */
  if (kh == 1 && kw == 1 && sh == 1 && sw == 1 && top == 0 && left == 0 && x0 == 0 && cols == width &&
      pitch == cols && y0 + rows <= height) {
    g.height = 1;
    g.width = rows * width;
    x += (int64_t)y0 * width;
    g.end -= (int64_t)y0 * width;
    cols = rows * width;
    pitch = cols;
    rows = 1;
    y0 = 0;
  }
  int32_t o = 0;
  if (kh == 1 && kw == 1 && sh == 1 && sw == 1 && top == 0 && left == 0 && y0 + rows <= g.height &&
      x0 + cols <= g.width) {
#ifdef TSR_CONV_WIDE_OC
    for (; o + TSR_CONV_WIDE_OC <= count; o += TSR_CONV_WIDE_OC)
      for (int32_t r = 0; r < rows; r++)
        for (int32_t c = 0; c < cols; c += TSR_CONV_PX)
          tsr_conv_pointwise8(x + (int64_t)(y0 + r) * g.width + x0 + c, plane, channels, w + (int64_t)o * w_stride,
                              w_stride, cols - c < TSR_CONV_PX ? cols - c : TSR_CONV_PX,
                              acc + (int64_t)o * block + r * pitch + c, block);
#endif
    for (; o + TSR_CONV_OC <= count; o += TSR_CONV_OC)
      for (int32_t r = 0; r < rows; r++)
        for (int32_t c = 0; c < cols; c += TSR_CONV_PX)
          tsr_conv_pointwise4(x + (int64_t)(y0 + r) * g.width + x0 + c, plane, channels, w + (int64_t)o * w_stride,
                              w_stride, cols - c < TSR_CONV_PX ? cols - c : TSR_CONV_PX,
                              acc + (int64_t)o * block + r * pitch + c, block);
  }
#ifdef TSR_CONV_WIDE_OC
  for (; o + TSR_CONV_WIDE_OC <= count; o += TSR_CONV_WIDE_OC)
    for (int32_t r = 0; r < rows; r++)
      for (int32_t c = 0; c < cols; c += TSR_CONV_PX)
        tsr_conv_tile8(x, plane, channels, &g, w + (int64_t)o * w_stride, w_stride, y0 + r, x0 + c,
                       cols - c < TSR_CONV_PX ? cols - c : TSR_CONV_PX, acc + (int64_t)o * block + r * pitch + c, block);
#endif
  for (; o + TSR_CONV_OC <= count; o += TSR_CONV_OC)
    for (int32_t r = 0; r < rows; r++)
      for (int32_t c = 0; c < cols; c += TSR_CONV_PX)
        tsr_conv_tile4(x, plane, channels, &g, w + (int64_t)o * w_stride, w_stride, y0 + r, x0 + c,
                       cols - c < TSR_CONV_PX ? cols - c : TSR_CONV_PX, acc + (int64_t)o * block + r * pitch + c, block);
  for (; o < count; o++)
    for (int32_t r = 0; r < rows; r++)
      for (int32_t c = 0; c < cols; c += TSR_CONV_PX)
        tsr_conv_tile1(x, plane, channels, &g, w + (int64_t)o * w_stride, y0 + r, x0 + c,
                       cols - c < TSR_CONV_PX ? cols - c : TSR_CONV_PX, acc + (int64_t)o * block + r * pitch + c);
}

/* Pooling over one plane `x`: the maximum (`is_max`; -inf where no tap is inside) or the sum of the
 * taps inside the image, for output rows y0 .. y0 + rows and columns x0 .. x0 + cols, into
 * acc[r * pitch + c]. */
static void tsr_pool2d_f32(const float *x, int32_t height, int32_t width, int32_t kh, int32_t kw, int32_t sh, int32_t sw,
                           int32_t dh, int32_t dw, int32_t top, int32_t left, int32_t y0, int32_t rows, int32_t x0,
                           int32_t cols, int32_t pitch, int32_t is_max, float *acc) {
  const float fill = is_max ? -INFINITY : 0.0f;
  float buf[TSR_CONV_PX];
  for (int32_t r = 0; r < rows; r++) {
    for (int32_t c = 0; c < cols; c += TSR_CONV_PX) {
      const int32_t n = cols - c < TSR_CONV_PX ? cols - c : TSR_CONV_PX;
      float best[TSR_CONV_PX];
      for (int32_t k = 0; k < TSR_CONV_PX; k++) best[k] = fill;
      for (int32_t i = 0; i < kh; i++) {
        const int32_t row = (y0 + r) * sh + i * dh - top;
        if (row < 0 || row >= height) continue;
        for (int32_t j = 0; j < kw; j++) {
          const float *v = tsr_conv_taps(x + (int64_t)row * width, width, (x0 + c) * sw + j * dw - left, sw, n, fill, buf);
          if (is_max) {
            for (int32_t k = 0; k < TSR_CONV_PX; k++) best[k] = best[k] > v[k] ? best[k] : v[k];
          } else {
            for (int32_t k = 0; k < TSR_CONV_PX; k++) best[k] += v[k];
          }
        }
      }
      for (int32_t k = 0; k < n; k++) acc[r * pitch + c + k] = best[k];
    }
  }
}
