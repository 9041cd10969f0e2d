/* f32 GEMM micro-kernels over packed panels (tir/schedule/cpu_gemm.py), for every matmul of C targets
 * with more than one row: LLM prefill over quantized weights (dequantized once per panel, so prefill
 * stays exact f32 arithmetic), and the f32 matmuls of encoders (BERT, ViT, Whisper).
 *
 * A panel is `depth` values of k by `nc` columns of B (nc a multiple of TSR_GEMM_STRIP), laid out as
 * strips of 16 columns, each strip `depth` rows of 16 contiguous floats:
 *
 *   panel[s * depth * 16 + kk * 16 + j] = B[k0 + kk][col0 + 16 s + j]   (0 past the last column)
 *
 * so that the micro-kernel reads one strip (16 KB for depth 256) from L1 for every tile of rows.
 * Packers: tsr_gemm_pack_f32 copies a row-major K x N matrix; tsr_gemm_pack_q4_0 / _q4_1 / _q8_0
 * dequantize GGUF rows (row c of the weights is column c of B) into it, value by value as ggml does:
 * d * (q - 8), d * q + m (two roundings, as ggml's float code), d * q. Other formats are packed by tir.
 *
 * tsr_gemm_f32 then computes rows x nc outputs into `c` (row stride nc): each output is one sum over
 * k, in order kk = 0, 1, ..., accumulated onto c's value (when `accumulate`) so a long K runs as
 * several panels of `depth` values, still in order. Tiles of rows (6 on AVX2 and NEON, 4 elsewhere;
 * with AVX-512, 6 rows of both strips of a 32-column panel at once) keep their outputs in registers; a last, shorter tile reads its last row again in place of the
 * missing ones and stores only its own. Every path sums in the same order, so results do not
 * depend on the tiling; AVX2 (and AVX-512) and NEON multiply-add fused (FMA), the other paths (SSSE3, WASM
 * SIMD128, plain C) round the product, then the sum. The two groups agree bit for bit among
 * themselves (tests/kernels/test_gemm_microkernels.py).
 *
 * externs: tsr_gemm_f32 tsr_gemm_pack_f32 tsr_gemm_pack_q4_0 tsr_gemm_pack_q4_1 tsr_gemm_pack_q8_0 */

#define TSR_GEMM_STRIP 16

static inline int32_t tsr_gemm_width(int32_t columns, int32_t strip) {
  const int32_t left = columns - strip * TSR_GEMM_STRIP;
  return left < 0 ? 0 : left > TSR_GEMM_STRIP ? TSR_GEMM_STRIP : left;
}

/* B (row-major, row stride ldb): rows k0 .. k0 + depth - 1, columns col0 .. col0 + columns - 1. */
static void tsr_gemm_pack_f32(const float *b, int32_t ldb, int32_t k0, int32_t depth, int32_t col0, int32_t columns,
                              int32_t nc, float *panel) {
  for (int32_t s = 0; s < nc / TSR_GEMM_STRIP; s++) {
    float *strip = panel + (size_t)s * depth * TSR_GEMM_STRIP;
    const int32_t width = tsr_gemm_width(columns, s);
    if (width == 0) {
      memset(strip, 0, sizeof(float) * (size_t)depth * TSR_GEMM_STRIP);
      continue;
    }
    const float *source = b + (size_t)k0 * ldb + col0 + s * TSR_GEMM_STRIP;
    for (int32_t kk = 0; kk < depth; kk++, source += ldb, strip += TSR_GEMM_STRIP) {
      memcpy(strip, source, sizeof(float) * (size_t)width);
      if (width < TSR_GEMM_STRIP) memset(strip + width, 0, sizeof(float) * (size_t)(TSR_GEMM_STRIP - width));
    }
  }
}

/* Quantized rows (each `row_words` 32-bit words: blocks of 32 values end to end): the strip's 16 rows'
 * headers and data bytes are gathered block by block into small arrays indexed by column, so that each
 * value's dequantization is a loop over the 16 columns of a panel row, which the C compiler turns into
 * vector code (and the panel's writes are contiguous). Columns past the last are zero. */
#define TSR_GEMM_PACK_Q(NAME, BLOCK, DATA, BODY)                                                             \
  static void NAME(const void *w, int32_t row_words, int32_t k0, int32_t depth, int32_t col0, int32_t columns, \
                   int32_t nc, float *panel) {                                                               \
    const uint8_t *base = (const uint8_t *)w;                                                                \
    for (int32_t s = 0; s < nc / TSR_GEMM_STRIP; s++) {                                                      \
      float *strip = panel + (size_t)s * depth * TSR_GEMM_STRIP;                                             \
      const int32_t width = tsr_gemm_width(columns, s);                                                      \
      for (int32_t kk = 0; kk < depth; kk += TSR_QK) {                                                       \
        float d[TSR_GEMM_STRIP], m[TSR_GEMM_STRIP];                                                          \
        uint8_t q[DATA][TSR_GEMM_STRIP];                                                                     \
        memset(q, 0, sizeof q);                                                                              \
        for (int j = 0; j < TSR_GEMM_STRIP; j++) {                                                           \
          d[j] = 0.0f, m[j] = 0.0f;                                                                          \
          if (j >= width) continue;                                                                          \
          const uint8_t *block = base + (size_t)(col0 + s * TSR_GEMM_STRIP + j) * row_words * 4 +             \
                                 (size_t)((k0 + kk) / TSR_QK) * BLOCK;                                       \
          d[j] = tsr_mk_half(block);                                                                         \
          if (BLOCK == 20) m[j] = tsr_mk_half(block + 2);                                                    \
          for (int p = 0; p < DATA; p++) q[p][j] = block[BLOCK - DATA + p];                                  \
        }                                                                                                    \
        float *out = strip + (size_t)kk * TSR_GEMM_STRIP;                                                    \
        (void)m; /* read by Q4_1's body only */                                                              \
        for (int p = 0; p < DATA; p++) {                                                                     \
          for (int j = 0; j < TSR_GEMM_STRIP; j++) { BODY }                                                  \
        }                                                                                                    \
      }                                                                                                      \
    }                                                                                                        \
  }

/* Q4_0: value p (low nibble) and p + 16 (high nibble) of each data byte p, d * (q - 8). */
TSR_GEMM_PACK_Q(tsr_gemm_pack_q4_0, 18, 16, {
  out[p * TSR_GEMM_STRIP + j] = d[j] * (float)((int32_t)(q[p][j] & 15) - 8);
  out[(p + 16) * TSR_GEMM_STRIP + j] = d[j] * (float)((int32_t)(q[p][j] >> 4) - 8);
})
/* Q4_1: d * q + m, the product rounded before the sum: -ffp-contract=off keeps it from becoming one
 * FMA (gcc in GNU mode fuses even across statements; wasm32 SIMD128 has no FMA). */
TSR_GEMM_PACK_Q(tsr_gemm_pack_q4_1, 20, 16, {
  const float low = d[j] * (float)(q[p][j] & 15);
  const float high = d[j] * (float)(q[p][j] >> 4);
  out[p * TSR_GEMM_STRIP + j] = low + m[j];
  out[(p + 16) * TSR_GEMM_STRIP + j] = high + m[j];
})
/* Q8_0: d * q, q a signed byte. */
TSR_GEMM_PACK_Q(tsr_gemm_pack_q8_0, 34, 32, { out[p * TSR_GEMM_STRIP + j] = d[j] * (float)(int8_t)q[p][j]; })

/* -- the micro-kernels: `rows` (1 .. TSR_GEMM_MR) rows of a (row stride lda) times one strip, into c
 *    (row stride ldc), 16 columns ------------------------------------------------------------------ */

#if defined(TSR_MK_AVX2)
#define TSR_GEMM_MR 6
static void tsr_gemm_tile(const float *a, int32_t lda, int32_t rows, int32_t depth, const float *strip, float *c,
                          int32_t ldc, int32_t accumulate) {
  const float *r0 = a, *r1 = a + (size_t)(rows > 1 ? 1 : 0) * lda, *r2 = a + (size_t)(rows > 2 ? 2 : rows - 1) * lda,
              *r3 = a + (size_t)(rows > 3 ? 3 : rows - 1) * lda, *r4 = a + (size_t)(rows > 4 ? 4 : rows - 1) * lda,
              *r5 = a + (size_t)(rows > 5 ? 5 : rows - 1) * lda;
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  if (accumulate) {
#define TSR_GEMM_LOAD(R, C0, C1)                                      \
  if (rows > R) {                                                     \
    C0 = _mm256_loadu_ps(c + (size_t)(R) * ldc);                      \
    C1 = _mm256_loadu_ps(c + (size_t)(R) * ldc + 8);                  \
  }
    TSR_GEMM_LOAD(0, c00, c01) TSR_GEMM_LOAD(1, c10, c11) TSR_GEMM_LOAD(2, c20, c21)
    TSR_GEMM_LOAD(3, c30, c31) TSR_GEMM_LOAD(4, c40, c41) TSR_GEMM_LOAD(5, c50, c51)
#undef TSR_GEMM_LOAD
  }
  for (int32_t kk = 0; kk < depth; kk++, strip += TSR_GEMM_STRIP) {
    const __m256 b0 = _mm256_loadu_ps(strip), b1 = _mm256_loadu_ps(strip + 8);
    __m256 x = _mm256_broadcast_ss(r0 + kk);
    c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(r1 + kk);
    c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(r2 + kk);
    c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(r3 + kk);
    c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(r4 + kk);
    c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(r5 + kk);
    c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
  }
#define TSR_GEMM_STORE(R, C0, C1)                                     \
  if (rows > R) {                                                     \
    _mm256_storeu_ps(c + (size_t)(R) * ldc, C0);                      \
    _mm256_storeu_ps(c + (size_t)(R) * ldc + 8, C1);                  \
  }
  TSR_GEMM_STORE(0, c00, c01) TSR_GEMM_STORE(1, c10, c11) TSR_GEMM_STORE(2, c20, c21)
  TSR_GEMM_STORE(3, c30, c31) TSR_GEMM_STORE(4, c40, c41) TSR_GEMM_STORE(5, c50, c51)
#undef TSR_GEMM_STORE
}
#if defined(__AVX512F__)
/* AVX-512: both strips of a 32-column panel at once, 6 rows x 32 columns in 12 zmm accumulators, the
 * same fused steps in the same order as the AVX2 tile (so the same bits). */
#define TSR_GEMM_PAIR 1
static void tsr_gemm_tile_pair(const float *a, int32_t lda, int32_t rows, int32_t depth, const float *strip0,
                               const float *strip1, float *c, int32_t ldc, int32_t accumulate) {
  const float *r0 = a, *r1 = a + (size_t)(rows > 1 ? 1 : 0) * lda, *r2 = a + (size_t)(rows > 2 ? 2 : rows - 1) * lda,
              *r3 = a + (size_t)(rows > 3 ? 3 : rows - 1) * lda, *r4 = a + (size_t)(rows > 4 ? 4 : rows - 1) * lda,
              *r5 = a + (size_t)(rows > 5 ? 5 : rows - 1) * lda;
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  if (accumulate) {
#define TSR_GEMM_LOAD(R, C0, C1)                                      \
  if (rows > R) {                                                     \
    C0 = _mm512_loadu_ps(c + (size_t)(R) * ldc);                      \
    C1 = _mm512_loadu_ps(c + (size_t)(R) * ldc + 16);                 \
  }
    TSR_GEMM_LOAD(0, c00, c01) TSR_GEMM_LOAD(1, c10, c11) TSR_GEMM_LOAD(2, c20, c21)
    TSR_GEMM_LOAD(3, c30, c31) TSR_GEMM_LOAD(4, c40, c41) TSR_GEMM_LOAD(5, c50, c51)
#undef TSR_GEMM_LOAD
  }
  for (int32_t kk = 0; kk < depth; kk++, strip0 += TSR_GEMM_STRIP, strip1 += TSR_GEMM_STRIP) {
    const __m512 b0 = _mm512_loadu_ps(strip0), b1 = _mm512_loadu_ps(strip1);
    __m512 x = _mm512_set1_ps(r0[kk]);
    c00 = _mm512_fmadd_ps(x, b0, c00), c01 = _mm512_fmadd_ps(x, b1, c01);
    x = _mm512_set1_ps(r1[kk]);
    c10 = _mm512_fmadd_ps(x, b0, c10), c11 = _mm512_fmadd_ps(x, b1, c11);
    x = _mm512_set1_ps(r2[kk]);
    c20 = _mm512_fmadd_ps(x, b0, c20), c21 = _mm512_fmadd_ps(x, b1, c21);
    x = _mm512_set1_ps(r3[kk]);
    c30 = _mm512_fmadd_ps(x, b0, c30), c31 = _mm512_fmadd_ps(x, b1, c31);
    x = _mm512_set1_ps(r4[kk]);
    c40 = _mm512_fmadd_ps(x, b0, c40), c41 = _mm512_fmadd_ps(x, b1, c41);
    x = _mm512_set1_ps(r5[kk]);
    c50 = _mm512_fmadd_ps(x, b0, c50), c51 = _mm512_fmadd_ps(x, b1, c51);
  }
#define TSR_GEMM_STORE(R, C0, C1)                                     \
  if (rows > R) {                                                     \
    _mm512_storeu_ps(c + (size_t)(R) * ldc, C0);                      \
    _mm512_storeu_ps(c + (size_t)(R) * ldc + 16, C1);                 \
  }
  TSR_GEMM_STORE(0, c00, c01) TSR_GEMM_STORE(1, c10, c11) TSR_GEMM_STORE(2, c20, c21)
  TSR_GEMM_STORE(3, c30, c31) TSR_GEMM_STORE(4, c40, c41) TSR_GEMM_STORE(5, c50, c51)
#undef TSR_GEMM_STORE
}
#endif
#elif defined(TSR_MK_NEON)
/* 32 vector registers: 6 rows x 16 columns of accumulators (24), each a named variable (gcc kept an
 * array of them in memory, stored back every step). */
#define TSR_GEMM_MR 6
static void tsr_gemm_tile(const float *a, int32_t lda, int32_t rows, int32_t depth, const float *strip, float *c,
                          int32_t ldc, int32_t accumulate) {
  const float *r0 = a, *r1 = a + (size_t)(rows > 1 ? 1 : 0) * lda, *r2 = a + (size_t)(rows > 2 ? 2 : rows - 1) * lda,
              *r3 = a + (size_t)(rows > 3 ? 3 : rows - 1) * lda, *r4 = a + (size_t)(rows > 4 ? 4 : rows - 1) * lda,
              *r5 = a + (size_t)(rows > 5 ? 5 : rows - 1) * lda;
  const float32x4_t zero = vdupq_n_f32(0.0f);
  float32x4_t c00 = zero, c01 = zero, c02 = zero, c03 = zero, c10 = zero, c11 = zero, c12 = zero, c13 = zero,
              c20 = zero, c21 = zero, c22 = zero, c23 = zero, c30 = zero, c31 = zero, c32 = zero, c33 = zero,
              c40 = zero, c41 = zero, c42 = zero, c43 = zero, c50 = zero, c51 = zero, c52 = zero, c53 = zero;
  if (accumulate) {
#define TSR_GEMM_LOAD(R, C0, C1, C2, C3)                              \
  if (rows > R) {                                                     \
    C0 = vld1q_f32(c + (size_t)(R) * ldc);                            \
    C1 = vld1q_f32(c + (size_t)(R) * ldc + 4);                        \
    C2 = vld1q_f32(c + (size_t)(R) * ldc + 8);                        \
    C3 = vld1q_f32(c + (size_t)(R) * ldc + 12);                       \
  }
    TSR_GEMM_LOAD(0, c00, c01, c02, c03) TSR_GEMM_LOAD(1, c10, c11, c12, c13) TSR_GEMM_LOAD(2, c20, c21, c22, c23)
    TSR_GEMM_LOAD(3, c30, c31, c32, c33) TSR_GEMM_LOAD(4, c40, c41, c42, c43) TSR_GEMM_LOAD(5, c50, c51, c52, c53)
#undef TSR_GEMM_LOAD
  }
  for (int32_t kk = 0; kk < depth; kk++, strip += TSR_GEMM_STRIP) {
    const float32x4_t b0 = vld1q_f32(strip), b1 = vld1q_f32(strip + 4), b2 = vld1q_f32(strip + 8),
                      b3 = vld1q_f32(strip + 12);
#define TSR_GEMM_ROW(R, C0, C1, C2, C3)                                                             \
  {                                                                                                 \
    const float32x4_t x = vld1q_dup_f32(R + kk);                                                    \
    C0 = vfmaq_f32(C0, x, b0), C1 = vfmaq_f32(C1, x, b1), C2 = vfmaq_f32(C2, x, b2), C3 = vfmaq_f32(C3, x, b3); \
  }
    TSR_GEMM_ROW(r0, c00, c01, c02, c03) TSR_GEMM_ROW(r1, c10, c11, c12, c13) TSR_GEMM_ROW(r2, c20, c21, c22, c23)
    TSR_GEMM_ROW(r3, c30, c31, c32, c33) TSR_GEMM_ROW(r4, c40, c41, c42, c43) TSR_GEMM_ROW(r5, c50, c51, c52, c53)
#undef TSR_GEMM_ROW
  }
#define TSR_GEMM_STORE(R, C0, C1, C2, C3)                             \
  if (rows > R) {                                                     \
    vst1q_f32(c + (size_t)(R) * ldc, C0);                             \
    vst1q_f32(c + (size_t)(R) * ldc + 4, C1);                         \
    vst1q_f32(c + (size_t)(R) * ldc + 8, C2);                         \
    vst1q_f32(c + (size_t)(R) * ldc + 12, C3);                        \
  }
  TSR_GEMM_STORE(0, c00, c01, c02, c03) TSR_GEMM_STORE(1, c10, c11, c12, c13) TSR_GEMM_STORE(2, c20, c21, c22, c23)
  TSR_GEMM_STORE(3, c30, c31, c32, c33) TSR_GEMM_STORE(4, c40, c41, c42, c43) TSR_GEMM_STORE(5, c50, c51, c52, c53)
#undef TSR_GEMM_STORE
}
#elif defined(TSR_MK_SSSE3) || defined(TSR_MK_WASM)
/* 16 vector registers of 4 floats: tiles of 4 rows x 8 columns (8 accumulators), each strip in two halves. */
#define TSR_GEMM_MR 4
#if defined(TSR_MK_SSSE3)
#define TSR_V __m128
#define TSR_V_LOAD(p) _mm_loadu_ps(p)
#define TSR_V_STORE(p, v) _mm_storeu_ps(p, v)
#define TSR_V_SPLAT(p) _mm_set1_ps(*(p))
#define TSR_V_ZERO() _mm_setzero_ps()
#define TSR_V_MADD(acc, x, b) _mm_add_ps(acc, _mm_mul_ps(x, b))
#else
#define TSR_V v128_t
#define TSR_V_LOAD(p) wasm_v128_load(p)
#define TSR_V_STORE(p, v) wasm_v128_store(p, v)
#define TSR_V_SPLAT(p) wasm_v128_load32_splat(p)
#define TSR_V_ZERO() wasm_f32x4_splat(0.0f)
#define TSR_V_MADD(acc, x, b) wasm_f32x4_add(acc, wasm_f32x4_mul(x, b))
#endif
static void tsr_gemm_tile(const float *a, int32_t lda, int32_t rows, int32_t depth, const float *strip, float *c,
                          int32_t ldc, int32_t accumulate) {
  const float *r0 = a, *r1 = a + (size_t)(rows > 1 ? 1 : 0) * lda, *r2 = a + (size_t)(rows > 2 ? 2 : rows - 1) * lda,
              *r3 = a + (size_t)(rows > 3 ? 3 : rows - 1) * lda;
  for (int half = 0; half < 2; half++) {
    const float *b = strip + 8 * half;
    float *out = c + 8 * half;
    TSR_V c00 = TSR_V_ZERO(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    if (accumulate) {
#define TSR_GEMM_LOAD(R, C0, C1)                                      \
  if (rows > R) {                                                     \
    C0 = TSR_V_LOAD(out + (size_t)(R) * ldc);                         \
    C1 = TSR_V_LOAD(out + (size_t)(R) * ldc + 4);                     \
  }
      TSR_GEMM_LOAD(0, c00, c01) TSR_GEMM_LOAD(1, c10, c11) TSR_GEMM_LOAD(2, c20, c21) TSR_GEMM_LOAD(3, c30, c31)
#undef TSR_GEMM_LOAD
    }
    for (int32_t kk = 0; kk < depth; kk++, b += TSR_GEMM_STRIP) {
      const TSR_V b0 = TSR_V_LOAD(b), b1 = TSR_V_LOAD(b + 4);
      TSR_V x = TSR_V_SPLAT(r0 + kk);
      c00 = TSR_V_MADD(c00, x, b0), c01 = TSR_V_MADD(c01, x, b1);
      x = TSR_V_SPLAT(r1 + kk);
      c10 = TSR_V_MADD(c10, x, b0), c11 = TSR_V_MADD(c11, x, b1);
      x = TSR_V_SPLAT(r2 + kk);
      c20 = TSR_V_MADD(c20, x, b0), c21 = TSR_V_MADD(c21, x, b1);
      x = TSR_V_SPLAT(r3 + kk);
      c30 = TSR_V_MADD(c30, x, b0), c31 = TSR_V_MADD(c31, x, b1);
    }
#define TSR_GEMM_STORE(R, C0, C1)                                     \
  if (rows > R) {                                                     \
    TSR_V_STORE(out + (size_t)(R) * ldc, C0);                         \
    TSR_V_STORE(out + (size_t)(R) * ldc + 4, C1);                     \
  }
    TSR_GEMM_STORE(0, c00, c01) TSR_GEMM_STORE(1, c10, c11) TSR_GEMM_STORE(2, c20, c21) TSR_GEMM_STORE(3, c30, c31)
#undef TSR_GEMM_STORE
  }
}
#else
#define TSR_GEMM_MR 4
static void tsr_gemm_tile(const float *a, int32_t lda, int32_t rows, int32_t depth, const float *strip, float *c,
                          int32_t ldc, int32_t accumulate) {
  for (int32_t i = 0; i < rows; i++) {
    const float *row = a + (size_t)i * lda;
    float acc[TSR_GEMM_STRIP];
    for (int j = 0; j < TSR_GEMM_STRIP; j++) acc[j] = accumulate ? c[(size_t)i * ldc + j] : 0.0f;
    for (int32_t kk = 0; kk < depth; kk++) {
      const float x = row[kk];
      for (int j = 0; j < TSR_GEMM_STRIP; j++) {
        const float product = x * strip[(size_t)kk * TSR_GEMM_STRIP + j]; /* rounded, then added: no FMA */
        acc[j] = acc[j] + product;
      }
    }
    for (int j = 0; j < TSR_GEMM_STRIP; j++) c[(size_t)i * ldc + j] = acc[j];
  }
}
#endif

/* rows x nc outputs: rows row0 .. row0 + rows - 1 of a (row stride lda), values k0 .. k0 + depth - 1 of
 * each, times the panel; c[i * nc + j] gets (or, with `accumulate`, adds to its value) the sum. */
static void tsr_gemm_f32(const float *a, int32_t lda, int32_t row0, int32_t rows, int32_t k0, int32_t depth,
                         const float *panel, int32_t nc, float *c, int32_t accumulate) {
  a += (size_t)row0 * lda + k0;
  int32_t s = 0;
#if defined(TSR_GEMM_PAIR)
  for (; s + 1 < nc / TSR_GEMM_STRIP; s += 2) {
    const float *strip = panel + (size_t)s * depth * TSR_GEMM_STRIP;
    for (int32_t i = 0; i < rows; i += TSR_GEMM_MR) {
      const int32_t tile = rows - i < TSR_GEMM_MR ? rows - i : TSR_GEMM_MR;
      tsr_gemm_tile_pair(a + (size_t)i * lda, lda, tile, depth, strip, strip + (size_t)depth * TSR_GEMM_STRIP,
                         c + (size_t)i * nc + s * TSR_GEMM_STRIP, nc, accumulate);
    }
  }
#endif
  for (; s < nc / TSR_GEMM_STRIP; s++) {
    const float *strip = panel + (size_t)s * depth * TSR_GEMM_STRIP;
    for (int32_t i = 0; i < rows; i += TSR_GEMM_MR) {
      const int32_t tile = rows - i < TSR_GEMM_MR ? rows - i : TSR_GEMM_MR;
      tsr_gemm_tile(a + (size_t)i * lda, lda, tile, depth, strip, c + (size_t)i * nc + s * TSR_GEMM_STRIP, nc,
                    accumulate);
    }
  }
}
