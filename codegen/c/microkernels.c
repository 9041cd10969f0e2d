/* The C backends' micro-kernels: what tir kernels reach through `Extern` (TVM's call_extern)
 * where no portable C loop becomes the instructions it needs. Integer SIMD dot products of GGUF
 * weight blocks with activations quantized to 8 bits, as llama.cpp's CPU kernels compute them:
 * `pmaddubsw` on x86 (SSSE3, AVX2), `smull`/`sdot` on AArch64, `i32x4.dot_i16x8_s` in WebAssembly
 * SIMD128, and a plain C version elsewhere.
 * Put before the kernels in their C file by codegen/c (emit_c_module), for the c-native and c-wasm
 * backends alike, when a kernel calls one; docs/format.md ("c-native") lists them.
 *
 * Activations are quantized in blocks of 32 (op/quantized.py, activations="q8"): d = max|x| / 127,
 * q = round-half-even(x * (1 / d)) (0 where d = 0), and s = d * sum(q). Every path computes d, 1 / d
 * and x * (1 / d) as single IEEE float operations and rounds to nearest even, so q is the same bit
 * for bit on every machine and in numpy's reference; only the order of the float sums differs.
 *
 * Weight rows are whole blocks laid end to end (18, 20 or 34 bytes: they are read unaligned).
 *
 * externs: tsr_quantize_q8 tsr_dot_q4_0_q8 tsr_dot_q4_1_q8 tsr_dot_q8_0_q8
 * externs: tsr_dot_q4_0_q8_rows tsr_dot_q4_1_q8_rows tsr_dot_q8_0_q8_rows */

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define TSR_MK_AVX2 1
#include <immintrin.h>
#elif defined(__SSSE3__) && defined(__SSE4_1__)
#define TSR_MK_SSSE3 1
#include <smmintrin.h>
#include <tmmintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define TSR_MK_NEON 1
#include <arm_neon.h>
#elif defined(__wasm_simd128__)
#define TSR_MK_WASM 1
#include <wasm_simd128.h>
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

#define TSR_QK 32

/* An f16 of a block's header as f32: one instruction with F16C or on AArch64; elsewhere exact bit
 * arithmetic (a libgcc call per block would cost more than the block's dot product). */
static inline float tsr_mk_half(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
#if defined(__F16C__) || defined(__aarch64__)
  _Float16 value;
  memcpy(&value, &h, 2);
  return (float)value;
#else
  /* The magnitude's bits moved into a float's place, then scaled by 2^112: exact for normal and
   * subnormal halves alike; infinities and NaNs keep their mantissa under an all-ones exponent. */
  uint32_t bits = (uint32_t)(h & 0x7fffu) << 13;
  float f;
  memcpy(&f, &bits, 4);
  f *= 0x1p112f;
  if ((h & 0x7c00u) == 0x7c00u) {
    bits |= 0x7f800000u;
    memcpy(&f, &bits, 4);
  }
  return (h & 0x8000u) ? -f : f;
#endif
}

static inline float tsr_mk_scale(float amax) { return amax / 127.0f; }
static inline float tsr_mk_inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

/* x (k floats, k a multiple of 32) -> q (k int8 in the words of `q_words`), d and s per block. */
static void tsr_quantize_q8(const float *x, int32_t k, void *q_words, float *d, float *s) {
  int8_t *q = (int8_t *)q_words;
  for (int32_t b = 0; b < k / TSR_QK; b++, x += TSR_QK, q += TSR_QK) {
#if defined(TSR_MK_AVX2)
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], m;
    for (int i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(x + 8 * i);
    m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                      _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    half = _mm_max_ss(half, _mm_movehdup_ps(half));
    const float scale = tsr_mk_scale(_mm_cvtss_f32(half));
    const __m256 inverse = _mm256_set1_ps(tsr_mk_inverse(scale));
    __m256i n[4];
    for (int i = 0; i < 4; i++) n[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inverse)); /* nearest even */
    __m256i total = _mm256_add_epi32(_mm256_add_epi32(n[0], n[1]), _mm256_add_epi32(n[2], n[3]));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t = _mm_hadd_epi32(t, t);
    t = _mm_hadd_epi32(t, t);
    /* packs works within 128-bit halves: the permute puts the 32 bytes back in order. */
    __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]), _mm256_packs_epi32(n[2], n[3]));
    packed = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, packed);
    d[b] = scale;
    s[b] = scale * (float)_mm_cvtsi128_si32(t);
#elif defined(TSR_MK_SSSE3)
    const __m128 sign = _mm_set1_ps(-0.0f);
    __m128 v[8], m = _mm_setzero_ps();
    for (int i = 0; i < 8; i++) {
      v[i] = _mm_loadu_ps(x + 4 * i);
      m = _mm_max_ps(m, _mm_andnot_ps(sign, v[i]));
    }
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    const float scale = tsr_mk_scale(_mm_cvtss_f32(m));
    const __m128 inverse = _mm_set1_ps(tsr_mk_inverse(scale));
    __m128i n[8], total = _mm_setzero_si128();
    for (int i = 0; i < 8; i++) {
      n[i] = _mm_cvtps_epi32(_mm_mul_ps(v[i], inverse)); /* nearest even */
      total = _mm_add_epi32(total, n[i]);
    }
    total = _mm_hadd_epi32(total, total);
    total = _mm_hadd_epi32(total, total);
    _mm_storeu_si128((__m128i *)q, _mm_packs_epi16(_mm_packs_epi32(n[0], n[1]), _mm_packs_epi32(n[2], n[3])));
    _mm_storeu_si128((__m128i *)(q + 16), _mm_packs_epi16(_mm_packs_epi32(n[4], n[5]), _mm_packs_epi32(n[6], n[7])));
    d[b] = scale;
    s[b] = scale * (float)_mm_cvtsi128_si32(total);
#elif defined(TSR_MK_NEON)
    float32x4_t v[8];
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < 8; i++) {
      v[i] = vld1q_f32(x + 4 * i);
      m = vmaxq_f32(m, vabsq_f32(v[i]));
    }
    const float scale = tsr_mk_scale(vmaxvq_f32(m));
    const float inverse = tsr_mk_inverse(scale);
    int32x4_t total = vdupq_n_s32(0);
    for (int i = 0; i < 8; i += 2) {
      int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(v[i], inverse)), c = vcvtnq_s32_f32(vmulq_n_f32(v[i + 1], inverse));
      total = vaddq_s32(total, vaddq_s32(a, c));
      int16x8_t pair = vcombine_s16(vmovn_s32(a), vmovn_s32(c));
      vst1_s8(q + 4 * i, vmovn_s16(pair));
    }
    d[b] = scale;
    s[b] = scale * (float)vaddvq_s32(total);
#elif defined(TSR_MK_WASM)
    v128_t v[8], m = wasm_f32x4_splat(0.0f);
    for (int i = 0; i < 8; i++) {
      v[i] = wasm_v128_load(x + 4 * i);
      m = wasm_f32x4_pmax(m, wasm_f32x4_abs(v[i]));
    }
    float amax = 0.0f;
    for (int i = 0; i < 4; i++) {
      const float lane = i == 0 ? wasm_f32x4_extract_lane(m, 0) : i == 1 ? wasm_f32x4_extract_lane(m, 1)
                       : i == 2 ? wasm_f32x4_extract_lane(m, 2) : wasm_f32x4_extract_lane(m, 3);
      amax = lane > amax ? lane : amax;
    }
    const float scale = tsr_mk_scale(amax);
    const v128_t inverse = wasm_f32x4_splat(tsr_mk_inverse(scale));
    v128_t n[8], total = wasm_i32x4_splat(0);
    for (int i = 0; i < 8; i++) { /* nearest even, then exact: the values are whole numbers */
      n[i] = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(v[i], inverse)));
      total = wasm_i32x4_add(total, n[i]);
    }
    for (int i = 0; i < 8; i += 4) {
      const v128_t low = wasm_i16x8_narrow_i32x4(n[i], n[i + 1]), high = wasm_i16x8_narrow_i32x4(n[i + 2], n[i + 3]);
      wasm_v128_store(q + 4 * i, wasm_i8x16_narrow_i16x8(low, high));
    }
    d[b] = scale;
    s[b] = scale * (float)(wasm_i32x4_extract_lane(total, 0) + wasm_i32x4_extract_lane(total, 1) +
                           wasm_i32x4_extract_lane(total, 2) + wasm_i32x4_extract_lane(total, 3));
#else
    float amax = 0.0f;
    for (int j = 0; j < TSR_QK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float scale = tsr_mk_scale(amax), inverse = tsr_mk_inverse(scale);
    int32_t total = 0;
    for (int j = 0; j < TSR_QK; j++) {
      const int32_t value = (int32_t)rintf(x[j] * inverse); /* nearest even: the default rounding mode */
      q[j] = (int8_t)value;
      total += value;
    }
    d[b] = scale;
    s[b] = scale * (float)total;
#endif
  }
}

/* -- the integer dot product of one block: 32 weight values (unsigned nibbles or signed bytes) with
 *    32 signed activation bytes, as a sum the caller scales --------------------------------------- */

#if defined(TSR_MK_AVX2)
static inline __m256i tsr_mk_nibbles(const uint8_t *p) { /* 16 bytes -> low nibbles, then high ones */
  const __m128i raw = _mm_loadu_si128((const __m128i *)p);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
}
static inline __m256 tsr_mk_dot_u8(__m256i u, __m256i x) { /* 32 u8 x s8 products, summed as 8 floats */
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
}
static inline float tsr_mk_sum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}
#elif defined(TSR_MK_SSSE3)
static inline __m128 tsr_mk_dot_u8(__m128i u0, __m128i x0, __m128i u1, __m128i x1) {
  const __m128i ones = _mm_set1_epi16(1);
  return _mm_cvtepi32_ps(_mm_add_epi32(_mm_madd_epi16(_mm_maddubs_epi16(u0, x0), ones),
                                       _mm_madd_epi16(_mm_maddubs_epi16(u1, x1), ones)));
}
static inline float tsr_mk_sum4(__m128 r) {
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_shuffle_ps(r, r, 1)));
}
#elif defined(TSR_MK_WASM)
static inline v128_t tsr_mk_dot_s8(v128_t acc, v128_t a, v128_t b) { /* 16 s8 x s8 products into 4 i32 */
  acc = wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(a), wasm_i16x8_extend_low_i8x16(b)));
  return wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(a), wasm_i16x8_extend_high_i8x16(b)));
}
static inline float tsr_mk_sum4(v128_t r) {
  return (wasm_f32x4_extract_lane(r, 0) + wasm_f32x4_extract_lane(r, 1)) +
         (wasm_f32x4_extract_lane(r, 2) + wasm_f32x4_extract_lane(r, 3));
}
#elif defined(TSR_MK_NEON)
static inline int32x4_t tsr_mk_dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}
#endif

/* sum over the row's blocks of d_w * (d_x * sum(q_w * q_x)) (+ m_w * s_x for Q4_1; - 8 d_w s_x for
 * Q4_0, whose values are q - 8): one output of x @ W^T. */
#define TSR_MK_DOT4(NAME, BLOCK, OFFSET, HAS_MIN)                                                            \
  static float NAME(const void *row, const void *q_words, const float *d, const float *s, int32_t blocks) {  \
    const uint8_t *w = (const uint8_t *)row;                                                               \
    const int8_t *q = (const int8_t *)q_words;                                                             \
    float extra = 0.0f;                                                                                     \
    TSR_MK_DOT4_BODY(BLOCK, OFFSET, HAS_MIN)                                                               \
  }

#if defined(TSR_MK_AVX2)
#define TSR_MK_DOT4_BODY(BLOCK, OFFSET, HAS_MIN)                                                           \
  __m256 acc = _mm256_setzero_ps();                                                                        \
  for (int32_t b = 0; b < blocks; b++, w += BLOCK, q += TSR_QK) {                                          \
    const float dw = tsr_mk_half(w);                                                                       \
    const __m256 dot = tsr_mk_dot_u8(tsr_mk_nibbles(w + OFFSET), _mm256_loadu_si256((const __m256i *)q)); \
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[b]), dot, acc);                                            \
    extra += (HAS_MIN ? tsr_mk_half(w + 2) : -8.0f * dw) * s[b];                                           \
  }                                                                                                        \
  return tsr_mk_sum8(acc) + extra;
#elif defined(TSR_MK_SSSE3)
#define TSR_MK_DOT4_BODY(BLOCK, OFFSET, HAS_MIN)                                                           \
  __m128 acc = _mm_setzero_ps();                                                                           \
  const __m128i low = _mm_set1_epi8(15);                                                                   \
  for (int32_t b = 0; b < blocks; b++, w += BLOCK, q += TSR_QK) {                                          \
    const float dw = tsr_mk_half(w);                                                                       \
    const __m128i raw = _mm_loadu_si128((const __m128i *)(w + OFFSET));                                    \
    const __m128 dot = tsr_mk_dot_u8(_mm_and_si128(raw, low), _mm_loadu_si128((const __m128i *)q),         \
                                     _mm_and_si128(_mm_srli_epi16(raw, 4), low),                           \
                                     _mm_loadu_si128((const __m128i *)(q + 16)));                          \
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(dw * d[b]), dot));                                        \
    extra += (HAS_MIN ? tsr_mk_half(w + 2) : -8.0f * dw) * s[b];                                           \
  }                                                                                                        \
  return tsr_mk_sum4(acc) + extra;
#elif defined(TSR_MK_NEON)
#define TSR_MK_DOT4_BODY(BLOCK, OFFSET, HAS_MIN)                                                           \
  float32x4_t acc = vdupq_n_f32(0.0f);                                                                     \
  const uint8x16_t low = vdupq_n_u8(15);                                                                   \
  for (int32_t b = 0; b < blocks; b++, w += BLOCK, q += TSR_QK) {                                          \
    const float dw = tsr_mk_half(w);                                                                       \
    const uint8x16_t raw = vld1q_u8(w + OFFSET);                                                           \
    int32x4_t dot = tsr_mk_dot_s8(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(raw, low)), vld1q_s8(q));   \
    dot = tsr_mk_dot_s8(dot, vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), vld1q_s8(q + 16));                   \
    acc = vaddq_f32(acc, vmulq_n_f32(vcvtq_f32_s32(dot), dw * d[b]));                                      \
    extra += (HAS_MIN ? tsr_mk_half(w + 2) : -8.0f * dw) * s[b];                                           \
  }                                                                                                        \
  return vaddvq_f32(acc) + extra;
#elif defined(TSR_MK_WASM)
#define TSR_MK_DOT4_BODY(BLOCK, OFFSET, HAS_MIN)                                                           \
  v128_t acc = wasm_f32x4_splat(0.0f);                                                                     \
  const v128_t low = wasm_i8x16_splat(15);                                                                 \
  for (int32_t b = 0; b < blocks; b++, w += BLOCK, q += TSR_QK) {                                          \
    const float dw = tsr_mk_half(w);                                                                       \
    const v128_t raw = wasm_v128_load(w + OFFSET);                                                         \
    v128_t dot = tsr_mk_dot_s8(wasm_i32x4_splat(0), wasm_v128_and(raw, low), wasm_v128_load(q));          \
    dot = tsr_mk_dot_s8(dot, wasm_u8x16_shr(raw, 4), wasm_v128_load(q + 16));                              \
    acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(dot), wasm_f32x4_splat(dw * d[b])));   \
    extra += (HAS_MIN ? tsr_mk_half(w + 2) : -8.0f * dw) * s[b];                                           \
  }                                                                                                        \
  return tsr_mk_sum4(acc) + extra;
#else
#define TSR_MK_DOT4_BODY(BLOCK, OFFSET, HAS_MIN)                                                           \
  float total = 0.0f;                                                                                      \
  for (int32_t b = 0; b < blocks; b++, w += BLOCK, q += TSR_QK) {                                          \
    const float dw = tsr_mk_half(w);                                                                       \
    int32_t dot = 0;                                                                                       \
    for (int j = 0; j < 16; j++) dot += (w[OFFSET + j] & 15) * q[j] + (w[OFFSET + j] >> 4) * q[j + 16];    \
    total += dw * d[b] * (float)dot;                                                                       \
    extra += (HAS_MIN ? tsr_mk_half(w + 2) : -8.0f * dw) * s[b];                                           \
  }                                                                                                        \
  return total + extra;
#endif

TSR_MK_DOT4(tsr_dot_q4_0_q8, 18, 2, 0)
TSR_MK_DOT4(tsr_dot_q4_1_q8, 20, 4, 1)

/* The same sums for TSR_MK_ROWS rows of activations at once (a decode batch, tir/schedule/
 * quantized_gemv_q8.py): each weight block is loaded, unpacked and its header converted once for all
 * of them. Row r's bytes start at q_words + r * blocks * 32, its d and s at d + r * blocks and
 * s + r * blocks; out[r] gets its sum, computed by the same float operations in the same order as
 * the one-row kernel, so a row's result does not depend on the rows beside it. Fewer rows (the
 * batch's last group), and the paths without a rows body, call the one-row kernel per row. */
#define TSR_MK_ROWS 4
#define TSR_MK_DOT4_ROWS(NAME, ONE, BLOCK, OFFSET, HAS_MIN)                                                   \
  static void NAME(const void *row, const void *q_words, const float *d, const float *s, int32_t blocks,     \
                   int32_t rows, float *out) {                                                               \
    const int8_t *q = (const int8_t *)q_words;                                                               \
    const int32_t k = blocks * TSR_QK;                                                                       \
    if (rows != TSR_MK_ROWS) {                                                                               \
      for (int32_t r = 0; r < rows; r++) out[r] = ONE(row, q + (size_t)r * k, d + r * blocks, s + r * blocks, blocks); \
      return;                                                                                                \
    }                                                                                                        \
    TSR_MK_DOT4_ROWS_BODY(ONE, BLOCK, OFFSET, HAS_MIN)                                                       \
  }

#if defined(TSR_MK_AVX2)
#define TSR_MK_DOT4_ROWS_BODY(ONE, BLOCK, OFFSET, HAS_MIN)                                                   \
  const uint8_t *w = (const uint8_t *)row;                                                                   \
  __m256 acc[TSR_MK_ROWS];                                                                                   \
  float extra[TSR_MK_ROWS];                                                                                  \
  for (int r = 0; r < TSR_MK_ROWS; r++) acc[r] = _mm256_setzero_ps(), extra[r] = 0.0f;                       \
  for (int32_t b = 0; b < blocks; b++, w += BLOCK) {                                                         \
    const float dw = tsr_mk_half(w), mw = HAS_MIN ? tsr_mk_half(w + 2) : -8.0f * dw;                         \
    const __m256i u = tsr_mk_nibbles(w + OFFSET);                                                            \
    for (int r = 0; r < TSR_MK_ROWS; r++) {                                                                  \
      const __m256i x = _mm256_loadu_si256((const __m256i *)(q + (size_t)r * k + (size_t)b * TSR_QK));       \
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[r * blocks + b]), tsr_mk_dot_u8(u, x), acc[r]);         \
      extra[r] += mw * s[r * blocks + b];                                                                    \
    }                                                                                                        \
  }                                                                                                          \
  for (int r = 0; r < TSR_MK_ROWS; r++) out[r] = tsr_mk_sum8(acc[r]) + extra[r];
#elif defined(TSR_MK_WASM)
#define TSR_MK_DOT4_ROWS_BODY(ONE, BLOCK, OFFSET, HAS_MIN)                                                   \
  const uint8_t *w = (const uint8_t *)row;                                                                   \
  const v128_t low = wasm_i8x16_splat(15);                                                                   \
  v128_t acc[TSR_MK_ROWS];                                                                                   \
  float extra[TSR_MK_ROWS];                                                                                  \
  for (int r = 0; r < TSR_MK_ROWS; r++) acc[r] = wasm_f32x4_splat(0.0f), extra[r] = 0.0f;                    \
  for (int32_t b = 0; b < blocks; b++, w += BLOCK) {                                                         \
    const float dw = tsr_mk_half(w), mw = HAS_MIN ? tsr_mk_half(w + 2) : -8.0f * dw;                         \
    const v128_t raw = wasm_v128_load(w + OFFSET);                                                           \
    const v128_t lo = wasm_v128_and(raw, low), hi = wasm_u8x16_shr(raw, 4);                                  \
    for (int r = 0; r < TSR_MK_ROWS; r++) {                                                                  \
      const int8_t *x = q + (size_t)r * k + (size_t)b * TSR_QK;                                              \
      v128_t dot = tsr_mk_dot_s8(wasm_i32x4_splat(0), lo, wasm_v128_load(x));                                \
      dot = tsr_mk_dot_s8(dot, hi, wasm_v128_load(x + 16));                                                  \
      acc[r] = wasm_f32x4_add(acc[r], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(dot),                         \
                                                     wasm_f32x4_splat(dw * d[r * blocks + b])));            \
      extra[r] += mw * s[r * blocks + b];                                                                    \
    }                                                                                                        \
  }                                                                                                          \
  for (int r = 0; r < TSR_MK_ROWS; r++) out[r] = tsr_mk_sum4(acc[r]) + extra[r];
#else
#define TSR_MK_DOT4_ROWS_BODY(ONE, BLOCK, OFFSET, HAS_MIN)                                                   \
  for (int32_t r = 0; r < rows; r++) out[r] = ONE(row, q + (size_t)r * k, d + r * blocks, s + r * blocks, blocks);
#endif

TSR_MK_DOT4_ROWS(tsr_dot_q4_0_q8_rows, tsr_dot_q4_0_q8, 18, 2, 0)
TSR_MK_DOT4_ROWS(tsr_dot_q4_1_q8_rows, tsr_dot_q4_1_q8, 20, 4, 1)

/* Q8_0 (34 bytes: d, then 32 signed bytes): sum over blocks of d_w * d_x * sum(q_w * q_x). */
static float tsr_dot_q8_0_q8(const void *row, const void *q_words, const float *d, const float *s, int32_t blocks) {
  const uint8_t *w = (const uint8_t *)row;
  const int8_t *q = (const int8_t *)q_words;
  (void)s;
#if defined(TSR_MK_AVX2)
  __m256 acc = _mm256_setzero_ps();
  for (int32_t b = 0; b < blocks; b++, w += 34, q += TSR_QK) {
    const __m256i weights = _mm256_loadu_si256((const __m256i *)(w + 2));
    const __m256i x = _mm256_loadu_si256((const __m256i *)q);
    /* maddubs multiplies unsigned by signed bytes: |w| times x with w's sign. */
    const __m256 dot = tsr_mk_dot_u8(_mm256_sign_epi8(weights, weights), _mm256_sign_epi8(x, weights));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(tsr_mk_half(w) * d[b]), dot, acc);
  }
  return tsr_mk_sum8(acc);
#elif defined(TSR_MK_SSSE3)
  __m128 acc = _mm_setzero_ps();
  for (int32_t b = 0; b < blocks; b++, w += 34, q += TSR_QK) {
    const __m128i w0 = _mm_loadu_si128((const __m128i *)(w + 2)), w1 = _mm_loadu_si128((const __m128i *)(w + 18));
    const __m128i x0 = _mm_loadu_si128((const __m128i *)q), x1 = _mm_loadu_si128((const __m128i *)(q + 16));
    const __m128 dot = tsr_mk_dot_u8(_mm_sign_epi8(w0, w0), _mm_sign_epi8(x0, w0), _mm_sign_epi8(w1, w1),
                                     _mm_sign_epi8(x1, w1));
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(tsr_mk_half(w) * d[b]), dot));
  }
  return tsr_mk_sum4(acc);
#elif defined(TSR_MK_NEON)
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int32_t b = 0; b < blocks; b++, w += 34, q += TSR_QK) {
    int32x4_t dot = tsr_mk_dot_s8(vdupq_n_s32(0), vld1q_s8((const int8_t *)(w + 2)), vld1q_s8(q));
    dot = tsr_mk_dot_s8(dot, vld1q_s8((const int8_t *)(w + 18)), vld1q_s8(q + 16));
    acc = vaddq_f32(acc, vmulq_n_f32(vcvtq_f32_s32(dot), tsr_mk_half(w) * d[b]));
  }
  return vaddvq_f32(acc);
#elif defined(TSR_MK_WASM)
  v128_t acc = wasm_f32x4_splat(0.0f);
  for (int32_t b = 0; b < blocks; b++, w += 34, q += TSR_QK) {
    v128_t dot = tsr_mk_dot_s8(wasm_i32x4_splat(0), wasm_v128_load(w + 2), wasm_v128_load(q));
    dot = tsr_mk_dot_s8(dot, wasm_v128_load(w + 18), wasm_v128_load(q + 16));
    acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(dot), wasm_f32x4_splat(tsr_mk_half(w) * d[b])));
  }
  return tsr_mk_sum4(acc);
#else
  float total = 0.0f;
  for (int32_t b = 0; b < blocks; b++, w += 34, q += TSR_QK) {
    int32_t dot = 0;
    for (int j = 0; j < TSR_QK; j++) dot += (int8_t)w[2 + j] * q[j];
    total += tsr_mk_half(w) * d[b] * (float)dot;
  }
  return total;
#endif
}

/* Q8_0 for several rows: the one-row kernel per row (its blocks need no unpacking to share). */
static void tsr_dot_q8_0_q8_rows(const void *row, const void *q_words, const float *d, const float *s, int32_t blocks,
                                 int32_t rows, float *out) {
  const int8_t *q = (const int8_t *)q_words;
  for (int32_t r = 0; r < rows; r++)
    out[r] = tsr_dot_q8_0_q8(row, q + (size_t)r * blocks * TSR_QK, d + r * blocks, s + r * blocks, blocks);
}
