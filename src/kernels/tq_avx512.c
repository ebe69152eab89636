/* AVX-512 (F/BW/VL/DQ + VNNI) kernels for TQ2_0 / TQ1_0 x int8 activations.
 *
 * Each 256-weight block gives 4 zmm of 64 unsigned codes in element order (codes 0..2; 3 for
 * a TQ2_0 code 3), each multiplied with 64 contiguous activations by vpdpbusd (u8 x s8, four
 * products per int32 lane, no saturation). Σ code*q - Σ q = Σ trit*q, exact. A run of blocks
 * with one scale d (a whole row, in files llama-quantize made from a BitNet model) is summed
 * in int32 lanes and scaled once: S = Σ D_b d_b is exact in double (kernels.h), so this is
 * bit-identical to the block-by-block reference (tq_scalar.c).
 *
 * TQ2_0: masks only, as the I2_S decode tile (tq2_masked). TQ1_0: the digit n of a byte q is
 * ((uint8)(q*3^n)*3) >> 8, computed for broadcast copies of qs[0..31], qs[32..47] and qh with
 * 16-bit multiplies, 3^n chosen per 16-bit lane (tq1_codes).
 * Tiles: up to 4 rows x 2 tokens; a block's activations are loaded once for the tile's rows,
 * a row's codes once for its tokens. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define AI static inline __attribute__((always_inline))

/* acc += dpbusd(codes u8, x s8), pinned in place (see kernels_avx512.c). */
#define DPBUSD(acc, codes, x) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(codes), "v"(x))

/* Σ of each 256 int8 of x [nb * 256] into out[nb]: sad of the bytes + 128 (unsigned). */
static void block_sums(const int8_t *x, int nb, int32_t *out)
{
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    for (int b = 0; b < nb; b++) {
        __m512i s = zero;
        for (int k = 0; k < 4; k++) {
            __m512i v = _mm512_loadu_si512(x + b * 256 + 64 * k);
            s = _mm512_add_epi64(s, _mm512_sad_epu8(_mm512_xor_si512(v, bias), zero));
        }
        out[b] = (int32_t)_mm512_reduce_add_epi64(s) - 128 * 256;
    }
}

/* TQ2_0, masks only (as the I2_S decode tile). With each half of qs broadcast to both halves
 * of a zmm, mask [0x03 | 0x0C] leaves code*1 (elements 32k+m, k = 0) in the low half and
 * code*4 (k = 1) in the high half, [0x30 | 0xC0] code*16 (k = 2) and code*64 (k = 3): a run's
 * dot is then srav(A, 0 | 2) + srav(E, 4 | 6) of the two accumulators A (masks 03/0C) and E
 * (30/C0), exact, every term a multiple. */
AI void tq2_masked(const uint8_t *blk, __m512i c[4])
{
    const __m512i mk_a = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0C), 1);
    const __m512i mk_e = _mm512_inserti64x4(_mm512_set1_epi8(0x30), _mm256_set1_epi8((char)0xC0), 1);
    __m512i lo = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)blk));
    __m512i hi = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 32)));
    c[0] = _mm512_and_si512(lo, mk_a); /* elements 0..63 (x 1 | x 4) */
    c[1] = _mm512_and_si512(lo, mk_e); /* 64..127 (x 16 | x 64) */
    c[2] = _mm512_and_si512(hi, mk_a); /* 128..191 */
    c[3] = _mm512_and_si512(hi, mk_e); /* 192..255 */
}

/* Base-3 digit n of every byte of s, n given per 16-bit lane by p = 3^n: with a byte b in the
 * high half of a 16-bit lane (low half zero), mullo(b << 8, p) = ((b * p) mod 256) << 8 and
 * mulhi(that, 3) = ((b * p mod 256) * 3) >> 8, the digit, in the low half. Even bytes are
 * moved up first, odd bytes are there already; the two digits are put back in place. */
AI __m512i digits(__m512i s, __m512i p)
{
    const __m512i hi = _mm512_set1_epi16((short)0xFF00), three = _mm512_set1_epi16(3);
    __m512i e = _mm512_mulhi_epu16(_mm512_mullo_epi16(_mm512_slli_epi16(s, 8), p), three);
    __m512i o = _mm512_mulhi_epu16(_mm512_mullo_epi16(_mm512_and_si512(s, hi), p), three);
    return _mm512_or_si512(e, _mm512_slli_epi16(o, 8));
}

/* The 4 code vectors (elements 64k..64k+63) of one TQ1_0 block, by 128-bit lanes:
 *   c0 = digits 0 | 1 of x (x = qs[0..31], 32 bytes)   elements 0..63
 *   c1 = digits 2 | 3 of x                              64..127
 *   c2 = digit 4 of x | digit 0 of y | 1 of y           128..191 (y = qs[32..47])
 *   c3 = digit 2 | 3 | 4 of y | digits 0..3 of qh      192..255 (4 bytes each) */
AI void tq1_codes(const uint8_t *blk, __m512i c[4])
{
    const __m512i p0 = _mm512_inserti64x4(_mm512_set1_epi16(1), _mm256_set1_epi16(3), 1);
    const __m512i p1 = _mm512_inserti64x4(_mm512_set1_epi16(9), _mm256_set1_epi16(27), 1);
    const __m512i p2 = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 81, 81, 81,
                                        81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81);
    const __m512i p3 = _mm512_set_epi16(27, 27, 9, 9, 3, 3, 1, 1, 81, 81, 81, 81, 81, 81, 81, 81, 27,
                                        27, 27, 27, 27, 27, 27, 27, 9, 9, 9, 9, 9, 9, 9, 9);
    uint32_t qh;
    memcpy(&qh, blk + 48, 4);
    __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)blk));
    __m512i y = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(blk + 32)));
    c[0] = digits(x, p0);
    c[1] = digits(x, p1);
    c[2] = digits(_mm512_mask_blend_epi64(0xF0, x, y), p2);
    c[3] = digits(_mm512_inserti32x4(y, _mm_set1_epi32((int)qh), 3), p3);
}

/* acc[r][t] = S of R rows x TT tokens (see LQ_TQ_I8_DRIVER). Per row, a run of blocks with
 * the same d bits adds its dots into int32 lanes (A, and E for TQ2_0's shifted codes); where
 * d changes, and at the end, the run is reduced, its Σ xq (from the prefix sums) taken off,
 * and (double)D * d added to acc: exact, as the reference's per-block sum. A lane of A or E
 * gains < 2^18 per block (8 products of <= 192 x 128), so a run of up to 4096 blocks stays
 * within int32. */
AI void tile(int type, const uint8_t *w, size_t rb, const int8_t *x, size_t ldx, int nb, int R,
             int TT, int uni, const int32_t pre[2][LQ_TQ_MAX_BLOCKS + 1], double acc[4][2])
{
    const size_t bb = lq_tq_block_bytes(type);
    const int tq2 = type == LQ_GGML_TQ2_0;
    const __m512i sh_a = _mm512_inserti64x4(_mm512_set1_epi32(0), _mm256_set1_epi32(2), 1);
    const __m512i sh_e = _mm512_inserti64x4(_mm512_set1_epi32(4), _mm256_set1_epi32(6), 1);
    /* A/E take codes 0 and 1 (and 2 and 3 unless split); with few rows x tokens the dpbusd
     * chains are too few to hide their latency, so then codes 2 and 3 go to A2/E2 */
    const int split = R * TT <= 2;
    __m512i A[4][2], E[4][2], A2[4][2], E2[4][2];
#define ZERO(r, t) (A[r][t] = E[r][t] = A2[r][t] = E2[r][t] = _mm512_setzero_si512())
    LQ_TQ_RUNS_BEGIN(R, TT, w, rb, bb, ZERO)
#define FLUSH(r, b)                                                                          \
    do {                                                                                     \
        _Pragma("GCC unroll 2") for (int t = 0; t < TT; t++)                                \
        {                                                                                    \
            __m512i a = split ? _mm512_add_epi32(A[r][t], A2[r][t]) : A[r][t];               \
            __m512i e = split ? _mm512_add_epi32(E[r][t], E2[r][t]) : E[r][t];               \
            __m512i v = tq2 ? _mm512_add_epi32(_mm512_srav_epi32(a, sh_a),                   \
                                               _mm512_srav_epi32(e, sh_e))                   \
                            : _mm512_add_epi32(a, e);                                        \
            lq_tq_run_end(&acc[r][t], _mm512_reduce_add_epi32(v), pre[t], start[r], b, cur[r]); \
            ZERO(r, t);                                                                      \
        }                                                                                    \
    } while (0)
    for (int b = 0; b < nb; b++) {
        __m512i xv[2][4];
#pragma GCC unroll 2
        for (int t = 0; t < TT; t++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                xv[t][k] = _mm512_loadu_si512(x + (size_t)t * ldx + b * 256 + 64 * k);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * rb + (size_t)b * bb;
            _mm_prefetch((const char *)blk + LQ_I2S_PF_BYTES, _MM_HINT_T0);
            LQ_TQ_RUN_STEP(r, b, blk, bb, FLUSH);
            __m512i c[4];
            if (tq2)
                tq2_masked(blk, c);
            else
                tq1_codes(blk, c);
#pragma GCC unroll 2
            for (int t = 0; t < TT; t++) {
                DPBUSD(A[r][t], c[0], xv[t][0]);
                DPBUSD(E[r][t], c[1], xv[t][1]);
                if (split) {
                    DPBUSD(A2[r][t], c[2], xv[t][2]);
                    DPBUSD(E2[r][t], c[3], xv[t][3]);
                } else {
                    DPBUSD(A[r][t], c[2], xv[t][2]);
                    DPBUSD(E[r][t], c[3], xv[t][3]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        FLUSH(r, nb);
#undef FLUSH
#undef ZERO
}

LQ_TQ_I8_DRIVER(lq_tq_i8_avx512, block_sums, tile, 2, T == 1 ? lq_i2s_decode_rows() : 4)
