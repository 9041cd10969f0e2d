/* Integer SIMD dot products of the K-quant blocks (Q2_K .. Q6_K) and of Q5_0 and Q5_1 with
 * activations rounded to q8 blocks of 32 (tsr_quantize_q8 in microkernels.c, which comes first and
 * chooses the instruction set: TSR_MK_AVX2, TSR_MK_SSSE3, TSR_MK_NEON, TSR_MK_WASM or plain C).
 *
 * A K-quant super-block (256 values) is first unpacked into small integers, one byte per value, and
 * its scales into integers per 16 values (tsr_kq_unpack_*: portable loops over whole 32-byte runs with
 * constant shifts, which the C compiler turns into vector code); a 32-value Q5_0 / Q5_1 block, too
 * short for that round trip through memory, is unpacked in registers (tsr_kq_load5). Then each run of
 * 32 values, one q8 block of x, is one integer dot product weighted per 16 values by the sub-block
 * scales (x86 `pmaddubsw` then `pmaddwd` by the scales; `sdot` or `smull` on AArch64;
 * `i32x4.dot_i16x8_s` in WASM), converted to float once and scaled by d_w * d_x:
 *
 *   sum over the row's q8 blocks b of  d_w * d_x[b] * sum_j(scale(j) * v_j * q_j)  +  c[b] * s_x[b]
 *
 * where a format's value is d_w * scale * v + (per-32 constant) and c[b] carries that constant:
 * -dmin * min for Q4_K and Q5_K, -16 d for Q5_0, m for Q5_1 (s_x = d_x * sum(q) is tsr_quantize_q8's).
 * Q2_K's minimums are per 16 values: a second weighted dot of the block with ones, the minimums as
 * its scales and -dmin as its d. Q3_K's and Q6_K's offsets (-4 without the high bit, -32) are in the
 * unpacked values themselves, which are then signed. Decoding follows tir/quant.py's FORMATS (ggml's).
 *
 * The `_rows` kernels (TSR_MK_ROWS rows of x: a decode batch) unpack each super-block once for the
 * rows and give each row the float operations, in the order, of the one-row kernel.
 *
 * externs: tsr_dot_q4_k_q8 tsr_dot_q6_k_q8 tsr_dot_q5_0_q8 tsr_dot_q5_k_q8 tsr_dot_q5_1_q8
 * externs: tsr_dot_q2_k_q8 tsr_dot_q3_k_q8
 * externs: tsr_dot_q4_k_q8_rows tsr_dot_q6_k_q8_rows tsr_dot_q5_0_q8_rows tsr_dot_q5_k_q8_rows
 * externs: tsr_dot_q5_1_q8_rows tsr_dot_q2_k_q8_rows tsr_dot_q3_k_q8_rows */

/* One unpacked super-block: 256 values as bytes, the integer scale of each 16 values, the float
 * d_w of the weighted dot, and c per q8 block (the s_x coefficient, for Q4_K and Q5_K).
 * Q2_K's minimums (per 16 values) are weighted against ones with d = -dmin. */
typedef struct {
  int8_t v[256];
  int16_t scale[16];
  uint8_t packed[16]; /* Q2_K's scale and minimum bytes, read where they are used: a loop widening them
                         here is vectorized by gcc 12 into byte inserts that cost more than the dot */
  float d, dmin_neg;
  float c[8];
} tsr_kq_block;

/* -- the weighted integer dot of 32 values (32 weights w as bytes in the path's registers, 32
 * activations x) --------------------------------------------------------------------------------
 * acc + factor * (sc_lo * sum_{j<16} w_j x_j + sc_hi * sum_{j>=16} w_j x_j), in the path's float
 * vector; SIGNED says whether w may be negative (x86's pmaddubsw multiplies unsigned by signed).
 * tsr_kq_load reads 32 unpacked bytes; tsr_kq_load5 unpacks a Q5_0 / Q5_1 block in registers: value j
 * is the low nibble of byte j of `nibbles` (j < 16) or the high one of byte j - 16, plus 16 where bit
 * j of `high` is set. */

#if defined(TSR_MK_AVX2)
typedef __m256 tsr_kq_acc;
typedef __m256i tsr_kq_vec;
static inline tsr_kq_acc tsr_kq_zero(void) { return _mm256_setzero_ps(); }
static inline tsr_kq_vec tsr_kq_load(const int8_t *v) { return _mm256_loadu_si256((const __m256i *)v); }
static inline tsr_kq_vec tsr_kq_load5(const uint8_t *nibbles, uint32_t high) {
  /* Byte j of the 32 gets byte j / 8 of `high`, then its own bit of it picked by a mask. */
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int32_t)high),
                                             _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                                               0x0101010101010101ll, 0));
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  const __m256i fifth = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
  return _mm256_or_si256(tsr_mk_nibbles(nibbles), fifth);
}
static inline tsr_kq_acc tsr_kq_dot(tsr_kq_acc acc, tsr_kq_vec w, const int8_t *x, int sc_lo, int sc_hi,
                                    float factor, int is_signed) {
  __m256i q = _mm256_loadu_si256((const __m256i *)x);
  if (is_signed) q = _mm256_sign_epi8(q, w), w = _mm256_sign_epi8(w, w); /* |w| times x with w's sign */
  const __m256i scales = _mm256_set_m128i(_mm_set1_epi16((int16_t)sc_hi), _mm_set1_epi16((int16_t)sc_lo));
  const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w, q), scales);
  return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(factor), _mm256_cvtepi32_ps(dot)));
}
static inline float tsr_kq_total(tsr_kq_acc acc) { return tsr_mk_sum8(acc); }
#elif defined(TSR_MK_SSSE3)
typedef __m128 tsr_kq_acc;
typedef struct { __m128i low, high; } tsr_kq_vec;
static inline tsr_kq_acc tsr_kq_zero(void) { return _mm_setzero_ps(); }
static inline tsr_kq_vec tsr_kq_load(const int8_t *v) {
  return (tsr_kq_vec){_mm_loadu_si128((const __m128i *)v), _mm_loadu_si128((const __m128i *)(v + 16))};
}
static inline __m128i tsr_kq_fifth(uint32_t high, long long select) {
  const __m128i spread = _mm_shuffle_epi8(_mm_set1_epi32((int32_t)high),
                                          _mm_set_epi64x(select + 0x0101010101010101ll, select));
  const __m128i bit = _mm_set1_epi64x((long long)0x8040201008040201ull);
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(spread, bit), bit), _mm_set1_epi8(16));
}
static inline tsr_kq_vec tsr_kq_load5(const uint8_t *nibbles, uint32_t high) {
  const __m128i raw = _mm_loadu_si128((const __m128i *)nibbles), low = _mm_set1_epi8(15);
  return (tsr_kq_vec){_mm_or_si128(_mm_and_si128(raw, low), tsr_kq_fifth(high, 0)),
                      _mm_or_si128(_mm_and_si128(_mm_srli_epi16(raw, 4), low), tsr_kq_fifth(high, 0x0202020202020202ll))};
}
static inline tsr_kq_acc tsr_kq_dot(tsr_kq_acc acc, tsr_kq_vec w, const int8_t *x, int sc_lo, int sc_hi,
                                    float factor, int is_signed) {
  __m128i w0 = w.low, w1 = w.high;
  __m128i q0 = _mm_loadu_si128((const __m128i *)x), q1 = _mm_loadu_si128((const __m128i *)(x + 16));
  if (is_signed) {
    q0 = _mm_sign_epi8(q0, w0), w0 = _mm_sign_epi8(w0, w0);
    q1 = _mm_sign_epi8(q1, w1), w1 = _mm_sign_epi8(w1, w1);
  }
  const __m128i dot = _mm_add_epi32(_mm_madd_epi16(_mm_maddubs_epi16(w0, q0), _mm_set1_epi16((int16_t)sc_lo)),
                                    _mm_madd_epi16(_mm_maddubs_epi16(w1, q1), _mm_set1_epi16((int16_t)sc_hi)));
  return _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(factor), _mm_cvtepi32_ps(dot)));
}
static inline float tsr_kq_total(tsr_kq_acc acc) { return tsr_mk_sum4(acc); }
#elif defined(TSR_MK_NEON)
typedef float32x4_t tsr_kq_acc;
typedef int8x16x2_t tsr_kq_vec;
static inline tsr_kq_acc tsr_kq_zero(void) { return vdupq_n_f32(0.0f); }
static inline tsr_kq_vec tsr_kq_load(const int8_t *v) { return vld1q_s8_x2(v); }
static inline tsr_kq_vec tsr_kq_load5(const uint8_t *nibbles, uint32_t high) {
  const uint8x16_t raw = vld1q_u8(nibbles), sixteen = vdupq_n_u8(16);
  const uint8x16_t bits = vreinterpretq_u8_u32(vdupq_n_u32(high));
  const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
  /* Byte j gets byte j / 8 of `high` (a table lookup), then its own bit of it. */
  const uint8x16_t first = vqtbl1q_u8(bits, vcombine_u8(vdup_n_u8(0), vdup_n_u8(1)));
  const uint8x16_t second = vqtbl1q_u8(bits, vcombine_u8(vdup_n_u8(2), vdup_n_u8(3)));
  tsr_kq_vec w;
  w.val[0] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(raw, vdupq_n_u8(15)), vandq_u8(vtstq_u8(first, bit), sixteen)));
  w.val[1] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(raw, 4), vandq_u8(vtstq_u8(second, bit), sixteen)));
  return w;
}
static inline tsr_kq_acc tsr_kq_dot(tsr_kq_acc acc, tsr_kq_vec w, const int8_t *x, int sc_lo, int sc_hi,
                                    float factor, int is_signed) {
  (void)is_signed; /* sdot and smull are signed */
  const int32x4_t lo = tsr_mk_dot_s8(vdupq_n_s32(0), w.val[0], vld1q_s8(x));
  const int32x4_t hi = tsr_mk_dot_s8(vdupq_n_s32(0), w.val[1], vld1q_s8(x + 16));
  const int32x4_t dot = vmlaq_n_s32(vmulq_n_s32(lo, sc_lo), hi, sc_hi);
  return vaddq_f32(acc, vmulq_n_f32(vcvtq_f32_s32(dot), factor));
}
static inline float tsr_kq_total(tsr_kq_acc acc) { return vaddvq_f32(acc); }
#elif defined(TSR_MK_WASM)
typedef v128_t tsr_kq_acc;
typedef struct { v128_t low, high; } tsr_kq_vec;
static inline tsr_kq_acc tsr_kq_zero(void) { return wasm_f32x4_splat(0.0f); }
static inline tsr_kq_vec tsr_kq_load(const int8_t *v) { return (tsr_kq_vec){wasm_v128_load(v), wasm_v128_load(v + 16)}; }
static inline v128_t tsr_kq_fifth(v128_t bits, uint8_t first) { /* byte j: byte first + j / 8 of bits, its own bit */
  const v128_t bit = wasm_i64x2_splat((int64_t)0x8040201008040201ull);
  const v128_t spread = wasm_i8x16_swizzle(bits, wasm_i64x2_make((int64_t)(first * 0x0101010101010101ull),
                                                                 (int64_t)((first + 1) * 0x0101010101010101ull)));
  return wasm_v128_and(wasm_i8x16_eq(wasm_v128_and(spread, bit), bit), wasm_i8x16_splat(16));
}
static inline tsr_kq_vec tsr_kq_load5(const uint8_t *nibbles, uint32_t high) {
  const v128_t raw = wasm_v128_load(nibbles), bits = wasm_i32x4_splat((int32_t)high);
  return (tsr_kq_vec){wasm_v128_or(wasm_v128_and(raw, wasm_i8x16_splat(15)), tsr_kq_fifth(bits, 0)),
                      wasm_v128_or(wasm_u8x16_shr(raw, 4), tsr_kq_fifth(bits, 2))};
}
static inline tsr_kq_acc tsr_kq_dot(tsr_kq_acc acc, tsr_kq_vec w, const int8_t *x, int sc_lo, int sc_hi,
                                    float factor, int is_signed) {
  (void)is_signed; /* the bytes are widened as signed */
  const v128_t lo = tsr_mk_dot_s8(wasm_i32x4_splat(0), w.low, wasm_v128_load(x));
  const v128_t hi = tsr_mk_dot_s8(wasm_i32x4_splat(0), w.high, wasm_v128_load(x + 16));
  const v128_t dot = wasm_i32x4_add(wasm_i32x4_mul(lo, wasm_i32x4_splat(sc_lo)), wasm_i32x4_mul(hi, wasm_i32x4_splat(sc_hi)));
  return wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(dot), wasm_f32x4_splat(factor)));
}
static inline float tsr_kq_total(tsr_kq_acc acc) { return tsr_mk_sum4(acc); }
#else
typedef float tsr_kq_acc;
typedef struct { int8_t v[32]; } tsr_kq_vec;
static inline tsr_kq_acc tsr_kq_zero(void) { return 0.0f; }
static inline tsr_kq_vec tsr_kq_load(const int8_t *v) {
  tsr_kq_vec w;
  memcpy(w.v, v, 32);
  return w;
}
static inline tsr_kq_vec tsr_kq_load5(const uint8_t *nibbles, uint32_t high) {
  tsr_kq_vec w;
  for (int j = 0; j < 16; j++) {
    w.v[j] = (int8_t)((nibbles[j] & 15) | (((high >> j) & 1) << 4));
    w.v[j + 16] = (int8_t)((nibbles[j] >> 4) | (((high >> (j + 16)) & 1) << 4));
  }
  return w;
}
static inline tsr_kq_acc tsr_kq_dot(tsr_kq_acc acc, tsr_kq_vec w, const int8_t *x, int sc_lo, int sc_hi,
                                    float factor, int is_signed) {
  (void)is_signed;
  int32_t lo = 0, hi = 0;
  for (int j = 0; j < 16; j++) lo += w.v[j] * x[j], hi += w.v[j + 16] * x[j + 16];
  return acc + factor * (float)(lo * sc_lo + hi * sc_hi);
}
static inline float tsr_kq_total(tsr_kq_acc acc) { return acc; }
#endif

/* Q2_K's second dot (values all 1, the minimums as scales). */
static const int8_t tsr_kq_ones[32] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/* -- unpacking, one function per format (byte offsets as in tir/quant.py) ----------------------- */

/* Q4_K and Q5_K: the 6-bit scale and minimum of sub-block s (0..7) from the 12 bytes at p (ggml's
 * get_scale_min_k4): s < 4 in the low 6 bits of bytes s and s + 4; s >= 4 in the nibbles of byte
 * s + 4 and the top 2 bits of bytes s - 4 and s. (Written so, gcc 12 makes faster code of it than of
 * a branch-free form.) */
static inline void tsr_kq_scale_min(const uint8_t *p, int s, int *scale, int *minimum) {
  if (s < 4) {
    *scale = p[s] & 63, *minimum = p[s + 4] & 63;
  } else {
    *scale = (p[s + 4] & 15) | ((p[s - 4] >> 6) << 4);
    *minimum = (p[s + 4] >> 4) | ((p[s] >> 6) << 4);
  }
}

static inline void tsr_kq_k4_scales(const uint8_t *w, tsr_kq_block *u) {
  u->d = tsr_mk_half(w);
  const float dmin = tsr_mk_half(w + 2);
  for (int s = 0; s < 8; s++) {
    int scale, minimum;
    tsr_kq_scale_min(w + 4, s, &scale, &minimum);
    u->scale[2 * s] = u->scale[2 * s + 1] = (int16_t)scale;
    u->c[s] = -(dmin * (float)minimum);
  }
}

/* Q4_K, 144 bytes: sub-blocks 2c and 2c + 1 are the low and high nibbles of the 32 bytes at 16 + 32c. */
static inline void tsr_kq_unpack_q4_k(const uint8_t *w, tsr_kq_block *u) {
  tsr_kq_k4_scales(w, u);
  for (int c = 0; c < 4; c++) {
    const uint8_t *p = w + 16 + 32 * c;
    int8_t *v = u->v + 64 * c;
    for (int j = 0; j < 32; j++) v[j] = (int8_t)(p[j] & 15), v[j + 32] = (int8_t)(p[j] >> 4);
  }
}

/* Q5_K, 176 bytes: Q4_K's nibbles at 48, plus bit s of byte j of the 32 bytes at 16 as the fifth bit. */
static inline void tsr_kq_unpack_q5_k(const uint8_t *w, tsr_kq_block *u) {
  tsr_kq_k4_scales(w, u);
  const uint8_t *high = w + 16;
  for (int c = 0; c < 4; c++) {
    const uint8_t *p = w + 48 + 32 * c;
    int8_t *v = u->v + 64 * c;
    for (int j = 0; j < 32; j++) {
      v[j] = (int8_t)((p[j] & 15) | (((high[j] >> (2 * c)) & 1) << 4));
      v[j + 32] = (int8_t)((p[j] >> 4) | (((high[j] >> (2 * c + 1)) & 1) << 4));
    }
  }
}

/* Q6_K, 210 bytes: 4 low bits in the nibbles of the 128 bytes at 0, 2 high bits in the 64 bytes at
 * 128, centred on 32; a signed scale per 16 values at 192, d at 208. Each half h of the block: values
 * 0..31 low nibbles of bytes 64h + 0..31 and bits 0-1 of 128 + 32h + 0..31, values 32..63 low nibbles
 * of 64h + 32..63 and bits 2-3, then the high nibbles with bits 4-5 and 6-7. */
static inline void tsr_kq_unpack_q6_k(const uint8_t *w, tsr_kq_block *u) {
  u->d = tsr_mk_half(w + 208);
  for (int s = 0; s < 16; s++) u->scale[s] = (int8_t)w[192 + s];
  for (int h = 0; h < 2; h++) {
    const uint8_t *low = w + 64 * h, *high = w + 128 + 32 * h;
    int8_t *v = u->v + 128 * h;
    for (int j = 0; j < 32; j++) {
      v[j] = (int8_t)(((low[j] & 15) | ((high[j] & 3) << 4)) - 32);
      v[j + 32] = (int8_t)(((low[j + 32] & 15) | (((high[j] >> 2) & 3) << 4)) - 32);
      v[j + 64] = (int8_t)(((low[j] >> 4) | (((high[j] >> 4) & 3) << 4)) - 32);
      v[j + 96] = (int8_t)(((low[j + 32] >> 4) | (((high[j] >> 6) & 3) << 4)) - 32);
    }
  }
}

/* v[j] = bits shift, shift + 1 of p[j] for 32 bytes (a constant shift once inlined, which the C
 * compiler vectorizes; a loop over the shifts around it, it does not). */
static inline void tsr_kq_two_bits(const uint8_t *p, int shift, int8_t *v) {
  for (int j = 0; j < 32; j++) v[j] = (int8_t)((p[j] >> shift) & 3);
}

/* Q2_K, 84 bytes: a byte per 16 values at 0 (scale in the low nibble, minimum in the high one), 2-bit
 * values at 16 (values 128n + 32c + j are bits 2c of byte 16 + 32n + j), d at 80, dmin at 82. */
static inline void tsr_kq_unpack_q2_k(const uint8_t *w, tsr_kq_block *u) {
  u->d = tsr_mk_half(w + 80);
  u->dmin_neg = -tsr_mk_half(w + 82);
  memcpy(u->packed, w, 16);
  for (int n = 0; n < 2; n++) {
    tsr_kq_two_bits(w + 16 + 32 * n, 0, u->v + 128 * n);
    tsr_kq_two_bits(w + 16 + 32 * n, 2, u->v + 128 * n + 32);
    tsr_kq_two_bits(w + 16 + 32 * n, 4, u->v + 128 * n + 64);
    tsr_kq_two_bits(w + 16 + 32 * n, 6, u->v + 128 * n + 96);
  }
}

/* Q3_K's values 32 at a time: 2 bits at `shift`, minus 4 where bit `bit` of the mask byte is clear. */
static inline void tsr_kq_three_bits(const uint8_t *p, const uint8_t *mask, int shift, int bit, int8_t *v) {
  for (int j = 0; j < 32; j++) v[j] = (int8_t)(((p[j] >> shift) & 3) - 4 + (((mask[j] >> bit) & 1) << 2));
}

/* Q3_K, 110 bytes: high-bit mask at 0, 2-bit values at 32 (laid out as Q2_K's), 6-bit scales centred
 * on 32 at 96 (low 4 bits in the nibbles of bytes 96..103, top 2 in bytes 104..107), d at 108. Value
 * 128n + 32c + j is its 2 bits minus 4 unless bit 4n + c of mask byte j is set. */
static inline void tsr_kq_unpack_q3_k(const uint8_t *w, tsr_kq_block *u) {
  u->d = tsr_mk_half(w + 108);
  for (int i = 0; i < 4; i++) { /* sub-blocks i, i + 4, i + 8, i + 12 */
    const int top = w[104 + i];
    u->scale[i] = (int16_t)(((w[96 + i] & 15) | ((top & 3) << 4)) - 32);
    u->scale[i + 4] = (int16_t)(((w[100 + i] & 15) | (((top >> 2) & 3) << 4)) - 32);
    u->scale[i + 8] = (int16_t)(((w[96 + i] >> 4) | (((top >> 4) & 3) << 4)) - 32);
    u->scale[i + 12] = (int16_t)(((w[100 + i] >> 4) | ((top >> 6) << 4)) - 32);
  }
  for (int n = 0; n < 2; n++) {
    tsr_kq_three_bits(w + 32 + 32 * n, w, 0, 4 * n, u->v + 128 * n);
    tsr_kq_three_bits(w + 32 + 32 * n, w, 2, 4 * n + 1, u->v + 128 * n + 32);
    tsr_kq_three_bits(w + 32 + 32 * n, w, 4, 4 * n + 2, u->v + 128 * n + 64);
    tsr_kq_three_bits(w + 32 + 32 * n, w, 6, 4 * n + 3, u->v + 128 * n + 96);
  }
}

/* One unpacked block's share of a row's sum: its q8 blocks (8, or 1 for Q5_0 / Q5_1) in order. The
 * one-row and the rows kernels both call this, so a row's float operations are the same in both. */
static inline void tsr_kq_block_dot(const tsr_kq_block *u, int q8_blocks, int is_signed, int c_kind,
                                    const int8_t *q, const float *d, const float *s, tsr_kq_acc *acc,
                                    float *extra) {
  for (int i = 0; i < q8_blocks; i++) {
    const int sc_lo = c_kind == 2 ? u->packed[2 * i] & 15 : u->scale[2 * i];
    const int sc_hi = c_kind == 2 ? u->packed[2 * i + 1] & 15 : u->scale[2 * i + 1];
    *acc = tsr_kq_dot(*acc, tsr_kq_load(u->v + 32 * i), q + 32 * i, sc_lo, sc_hi, u->d * d[i], is_signed);
    if (c_kind == 1) *extra += u->c[i] * s[i];
    if (c_kind == 2) /* Q2_K's minimums: a dot of ones with x, weighted per 16 values */
      *acc = tsr_kq_dot(*acc, tsr_kq_load(tsr_kq_ones), q + 32 * i, u->packed[2 * i] >> 4,
                        u->packed[2 * i + 1] >> 4, u->dmin_neg * d[i], 0);
  }
}

/* NAME: the one-row kernel (blocks = K / 32 q8 blocks of x); NAME_rows: TSR_MK_ROWS rows of x, laid
 * out as microkernels.c's rows kernels take them. VALUES per block of BYTES bytes; C_KIND: 0 no
 * per-block constant, 1 c * s_x per q8 block, 2 Q2_K's minimums. */
#define TSR_KQ_DOT(NAME, ROWS_NAME, UNPACK, BYTES, VALUES, SIGNED, C_KIND)                                   \
  static float NAME(const void *row, const void *q_words, const float *d, const float *s, int32_t blocks) {   \
    const uint8_t *w = (const uint8_t *)row;                                                                \
    const int8_t *q = (const int8_t *)q_words;                                                              \
    const int per = (VALUES) / TSR_QK;                                                                      \
    tsr_kq_block u;                                                                                         \
    tsr_kq_acc acc = tsr_kq_zero();                                                                         \
    float extra = 0.0f;                                                                                     \
    for (int32_t b = 0; b < blocks; b += per, w += (BYTES)) {                                               \
      UNPACK(w, &u);                                                                                        \
      tsr_kq_block_dot(&u, per, SIGNED, C_KIND, q + (size_t)b * TSR_QK, d + b, s + b, &acc, &extra);        \
    }                                                                                                       \
    return tsr_kq_total(acc) + extra;                                                                       \
  }                                                                                                         \
  static void ROWS_NAME(const void *row, const void *q_words, const float *d, const float *s, int32_t blocks, \
                        int32_t rows, float *out) {                                                         \
    const uint8_t *w = (const uint8_t *)row;                                                                \
    const int8_t *q = (const int8_t *)q_words;                                                              \
    const int per = (VALUES) / TSR_QK;                                                                      \
    const size_t k = (size_t)blocks * TSR_QK;                                                               \
    if (rows != TSR_MK_ROWS) {                                                                              \
      for (int32_t r = 0; r < rows; r++) out[r] = NAME(row, q + r * k, d + r * blocks, s + r * blocks, blocks); \
      return;                                                                                               \
    }                                                                                                       \
    tsr_kq_block u;                                                                                         \
    tsr_kq_acc acc[TSR_MK_ROWS];                                                                            \
    float extra[TSR_MK_ROWS];                                                                               \
    for (int r = 0; r < TSR_MK_ROWS; r++) acc[r] = tsr_kq_zero(), extra[r] = 0.0f;                          \
    for (int32_t b = 0; b < blocks; b += per, w += (BYTES)) {                                               \
      UNPACK(w, &u);                                                                                        \
      for (int r = 0; r < TSR_MK_ROWS; r++)                                                                 \
        tsr_kq_block_dot(&u, per, SIGNED, C_KIND, q + r * k + (size_t)b * TSR_QK, d + r * blocks + b,       \
                         s + r * blocks + b, &acc[r], &extra[r]);                                           \
    }                                                                                                       \
    for (int r = 0; r < TSR_MK_ROWS; r++) out[r] = tsr_kq_total(acc[r]) + extra[r];                         \
  }

TSR_KQ_DOT(tsr_dot_q4_k_q8, tsr_dot_q4_k_q8_rows, tsr_kq_unpack_q4_k, 144, 256, 0, 1)
TSR_KQ_DOT(tsr_dot_q5_k_q8, tsr_dot_q5_k_q8_rows, tsr_kq_unpack_q5_k, 176, 256, 0, 1)
TSR_KQ_DOT(tsr_dot_q6_k_q8, tsr_dot_q6_k_q8_rows, tsr_kq_unpack_q6_k, 210, 256, 1, 0)
TSR_KQ_DOT(tsr_dot_q2_k_q8, tsr_dot_q2_k_q8_rows, tsr_kq_unpack_q2_k, 84, 256, 0, 2)
TSR_KQ_DOT(tsr_dot_q3_k_q8, tsr_dot_q3_k_q8_rows, tsr_kq_unpack_q3_k, 110, 256, 1, 0)

/* Q5_0 (22 bytes: d, 32 fifth bits, 16 bytes of nibbles; value = d * (v - 16)) and Q5_1 (24 bytes: d,
 * m, fifth bits, nibbles; value = d * v + m), unpacked in registers (tsr_kq_load5): a block of 32 is
 * too short for the round trip through memory of the K-quants' unpacking. */
#define TSR_KQ_DOT5(NAME, ROWS_NAME, BYTES, HAS_MIN)                                                          \
  static inline float NAME##_constant(const uint8_t *w, float dw) { return HAS_MIN ? tsr_mk_half(w + 2) : -16.0f * dw; } \
  static float NAME(const void *row, const void *q_words, const float *d, const float *s, int32_t blocks) {   \
    const uint8_t *w = (const uint8_t *)row;                                                                \
    const int8_t *q = (const int8_t *)q_words;                                                              \
    tsr_kq_acc acc = tsr_kq_zero();                                                                         \
    float extra = 0.0f;                                                                                     \
    for (int32_t b = 0; b < blocks; b++, w += (BYTES), q += TSR_QK) {                                       \
      uint32_t high;                                                                                        \
      memcpy(&high, w + (HAS_MIN ? 4 : 2), 4);                                                              \
      const float dw = tsr_mk_half(w);                                                                      \
      acc = tsr_kq_dot(acc, tsr_kq_load5(w + (HAS_MIN ? 8 : 6), high), q, 1, 1, dw * d[b], 0);              \
      extra += NAME##_constant(w, dw) * s[b];                                                               \
    }                                                                                                       \
    return tsr_kq_total(acc) + extra;                                                                       \
  }                                                                                                         \
  static void ROWS_NAME(const void *row, const void *q_words, const float *d, const float *s, int32_t blocks, \
                        int32_t rows, float *out) {                                                         \
    const uint8_t *w = (const uint8_t *)row;                                                                \
    const int8_t *q = (const int8_t *)q_words;                                                              \
    const size_t k = (size_t)blocks * TSR_QK;                                                               \
    if (rows != TSR_MK_ROWS) {                                                                              \
      for (int32_t r = 0; r < rows; r++) out[r] = NAME(row, q + r * k, d + r * blocks, s + r * blocks, blocks); \
      return;                                                                                               \
    }                                                                                                       \
    tsr_kq_acc acc[TSR_MK_ROWS];                                                                            \
    float extra[TSR_MK_ROWS];                                                                               \
    for (int r = 0; r < TSR_MK_ROWS; r++) acc[r] = tsr_kq_zero(), extra[r] = 0.0f;                          \
    for (int32_t b = 0; b < blocks; b++, w += (BYTES)) {                                                    \
      uint32_t high;                                                                                        \
      memcpy(&high, w + (HAS_MIN ? 4 : 2), 4);                                                              \
      const float dw = tsr_mk_half(w), c = NAME##_constant(w, dw);                                          \
      const tsr_kq_vec v = tsr_kq_load5(w + (HAS_MIN ? 8 : 6), high);                                       \
      for (int r = 0; r < TSR_MK_ROWS; r++) {                                                               \
        acc[r] = tsr_kq_dot(acc[r], v, q + r * k + (size_t)b * TSR_QK, 1, 1, dw * d[r * blocks + b], 0);     \
        extra[r] += c * s[r * blocks + b];                                                                  \
      }                                                                                                     \
    }                                                                                                       \
    for (int r = 0; r < TSR_MK_ROWS; r++) out[r] = tsr_kq_total(acc[r]) + extra[r];                         \
  }

TSR_KQ_DOT5(tsr_dot_q5_0_q8, tsr_dot_q5_0_q8_rows, 22, 0)
TSR_KQ_DOT5(tsr_dot_q5_1_q8, tsr_dot_q5_1_q8_rows, 24, 1)
