/* AVX2 kernels for TQ2_0 / TQ1_0 x int8 activations (compiled with the AVX2 set's flags).
 *
 * Each 256-weight block is unpacked to 8 vectors of 32 unsigned codes (0..2; 3 for a TQ2_0
 * code 3) in element order and multiplied with 32 contiguous activations by maddubs (u8 x s8,
 * pairs summed to int16: |pair| <= 2*3*128, the eight of a block <= 6144, no saturation),
 * widened by madd(ones). Σ code*q - Σ q = Σ trit*q, exact. A run of blocks with one scale d
 * is summed in int32 and scaled once: S = Σ D_b d_b is exact in double (kernels.h), so this
 * is bit-identical to the block-by-block reference (tq_scalar.c).
 *
 * TQ2_0: bytes 0..31 hold elements 0..127 (element 32k+m in byte m at shift 2k), bytes 32..63
 * elements 128..255. TQ1_0: the base-3 digit n of a byte q is ((uint8)(q*3^n)*3) >> 8; q*3^n
 * mod 256 is repeated byte additions, and (v*3)>>8 is [v >= 86] + [v >= 171] (saturating
 * subtractions clamped to 1). Tiles: up to 4 rows x 2 tokens, one unpack per row and block. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define AI static inline __attribute__((always_inline))

/* Σ of each 256 int8 of x [nb * 256] into out[nb]: sad of the bytes + 128 (unsigned). */
static void block_sums(const int8_t *x, int nb, int32_t *out)
{
    const __m256i bias = _mm256_set1_epi8((char)0x80), zero = _mm256_setzero_si256();
    for (int b = 0; b < nb; b++) {
        __m256i s = zero;
        for (int k = 0; k < 8; k++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(x + b * 256 + 32 * k));
            s = _mm256_add_epi64(s, _mm256_sad_epu8(_mm256_xor_si256(v, bias), zero));
        }
        __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
        out[b] = (int32_t)_mm_cvtsi128_si64(h) - 128 * 256;
    }
}

/* (v * 3) mod 256 in every byte. */
AI __m256i mul3(__m256i v)
{
    return _mm256_add_epi8(v, _mm256_add_epi8(v, v));
}
AI __m128i mul3x(__m128i v)
{
    return _mm_add_epi8(v, _mm_add_epi8(v, v));
}

/* Base-3 digit of every byte: (v * 3) >> 8. */
AI __m256i digit(__m256i v)
{
    const __m256i one = _mm256_set1_epi8(1);
    __m256i a = _mm256_min_epu8(_mm256_subs_epu8(v, _mm256_set1_epi8(85)), one);
    __m256i b = _mm256_min_epu8(_mm256_subs_epu8(v, _mm256_set1_epi8((char)170)), one);
    return _mm256_add_epi8(a, b);
}

/* The 8 code vectors (elements 32k..32k+31) of one block. */
AI void unpack(int type, const uint8_t *blk, __m256i c[8])
{
    if (type == LQ_GGML_TQ2_0) {
        const __m256i m3 = _mm256_set1_epi8(3);
        __m256i lo = _mm256_loadu_si256((const __m256i *)blk);
        __m256i hi = _mm256_loadu_si256((const __m256i *)(blk + 32));
        c[0] = _mm256_and_si256(lo, m3);
        c[1] = _mm256_and_si256(_mm256_srli_epi16(lo, 2), m3);
        c[2] = _mm256_and_si256(_mm256_srli_epi16(lo, 4), m3);
        c[3] = _mm256_and_si256(_mm256_srli_epi16(lo, 6), m3);
        c[4] = _mm256_and_si256(hi, m3);
        c[5] = _mm256_and_si256(_mm256_srli_epi16(hi, 2), m3);
        c[6] = _mm256_and_si256(_mm256_srli_epi16(hi, 4), m3);
        c[7] = _mm256_and_si256(_mm256_srli_epi16(hi, 6), m3);
        return;
    }
    /* TQ1_0: qs[0..31] digits 0..4 -> elements 0..159; qs[32..47] digits 0..4 -> 160..239
     * (16 each); qh[0..3] digits 0..3 -> 240..255 (4 each) */
    __m256i p = _mm256_loadu_si256((const __m256i *)blk);
    for (int n = 0; n < 5; n++) {
        c[n] = digit(p);
        p = mul3(p);
    }
    uint32_t qh;
    memcpy(&qh, blk + 48, 4);
    __m128i y0 = _mm_loadu_si128((const __m128i *)(blk + 32)), y1 = mul3x(y0), y2 = mul3x(y1),
            y3 = mul3x(y2), y4 = mul3x(y3);
    __m128i z0 = _mm_set1_epi32((int)qh), z1 = mul3x(z0), z2 = mul3x(z1), z3 = mul3x(z2);
    __m128i z = _mm_blend_epi32(_mm_blend_epi32(z0, z1, 2), _mm_blend_epi32(z2, z3, 8), 12);
    c[5] = digit(_mm256_set_m128i(y1, y0));
    c[6] = digit(_mm256_set_m128i(y3, y2));
    c[7] = digit(_mm256_set_m128i(z, y4));
}

/* acc[r][t] = S of R rows x TT tokens (see LQ_TQ_I8_DRIVER): per row, a run of blocks with
 * the same d bits adds its dots into int32 lanes; where d changes, and at the end, the run is
 * reduced, its Σ xq (from the prefix sums) taken off, and (double)D * d added to acc (exact,
 * as the reference's per-block sum). A lane gains < 2^14 per block: no overflow. */
AI void tile(int type, const uint8_t *w, size_t rb, const int8_t *x, size_t ldx, int nb, int R,
             int TT, int uni, const int32_t pre[2][LQ_TQ_MAX_BLOCKS + 1], double acc[4][2])
{
    const size_t bb = lq_tq_block_bytes(type);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i A[4][2];
#define ZERO(r, t) (A[r][t] = _mm256_setzero_si256())
    LQ_TQ_RUNS_BEGIN(R, TT, w, rb, bb, ZERO)
#undef ZERO
#define FLUSH(r, b)                                                                          \
    do {                                                                                     \
        _Pragma("GCC unroll 2") for (int t = 0; t < TT; t++)                                \
        {                                                                                    \
            lq_tq_run_end(&acc[r][t], lq_hsum_epi32_avx2(A[r][t]), pre[t], start[r], b, cur[r]); \
            A[r][t] = _mm256_setzero_si256();                                                \
        }                                                                                    \
    } while (0)
    for (int b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * rb + (size_t)b * bb;
            _mm_prefetch((const char *)blk + LQ_I2S_PF_BYTES, _MM_HINT_T0);
            LQ_TQ_RUN_STEP(r, b, blk, bb, FLUSH);
            __m256i c[8];
            unpack(type, blk, c);
#pragma GCC unroll 2
            for (int t = 0; t < TT; t++) {
                const int8_t *xp = x + (size_t)t * ldx + b * 256;
                __m256i s = _mm256_maddubs_epi16(c[0], _mm256_loadu_si256((const __m256i *)xp));
#pragma GCC unroll 8
                for (int k = 1; k < 8; k++)
                    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(
                                                c[k], _mm256_loadu_si256((const __m256i *)(xp + 32 * k))));
                A[r][t] = _mm256_add_epi32(A[r][t], _mm256_madd_epi16(s, ones));
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        FLUSH(r, nb);
#undef FLUSH
}

LQ_TQ_I8_DRIVER(lq_tq_i8_avx2, block_sums, tile, 2, T == 1 ? lq_i2s_decode_rows() : 4)
