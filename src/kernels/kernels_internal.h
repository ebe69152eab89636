/* Helpers shared by every kernel set so that the SIMD kernels and the scalar reference use
 * exactly the same scalar expressions where results must be bit-identical (the quantizer's
 * scale and clamp, the final float expression of the int8 x ternary dot). Private to
 * src/kernels. */
#ifndef LQ_KERNELS_INTERNAL_H
#define LQ_KERNELS_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/f16.h"
#include "kernels/kernels.h"
#include "larql/gguf.h"

/* The "ms" activation scale: s = 127 / max(amax, 1e-5) in f32. Written with a comparison
 * (not fmaxf) so that the same expression is used everywhere; amax is never NaN here
 * because every amax loop ignores NaN inputs. */
static inline float lq_quant_scale(float amax)
{
    float m = amax > 1e-5f ? amax : 1e-5f;
    return 127.0f / m;
}

/* One activation: round half to even (nearbyintf in the default rounding mode, which is
 * what _mm*_round_ps(TO_NEAREST_INT) does), then clamp to [-128, 127]. A NaN maps to -128:
 * that is what max_ps(r, -128) returns for a NaN r (the second operand), so scalar and SIMD
 * agree even on garbage input. */
static inline int8_t lq_quant_one(float x, float s)
{
    float r = nearbyintf(x * s);
    if (!(r > -128.0f))
        r = -128.0f;
    if (r > 127.0f)
        r = 127.0f;
    return (int8_t)r;
}

/* The one final float expression of the int8 path: y = (float)dot * (inv_scale * w_scale).
 * Every kernel set computes exactly this (the product of the two scales first, then one
 * multiply), so outputs are bit-identical across sets. */
static inline float lq_i2s_i8_out(int32_t dot, float inv_scale, float w_scale)
{
    float k = inv_scale * w_scale;
    return (float)dot * k;
}

/* The one final float expression of the q8 lm_head (exact int64 dot). */
static inline float lq_q8_out(int64_t dot, float inv_scale, float w_scale)
{
    float k = inv_scale * w_scale;
    return (float)dot * k;
}

/* The factor by which the q8 copy's error and norm sums (double, n = cols terms of at most
 * one rounding each, then a square root) are scaled up before they are rounded up to float:
 * any summation order of n non-negative terms is within (n - 1)u / (1 - (n - 1)u) of the true
 * sum (u = 2^-53), the terms and the root add a few u more; 4u per column plus 1e-12 covers
 * it with room for rows of up to 2^20 columns. */
static inline double lq_q8_bound_slack(int64_t cols) { return 1.0 + 1e-12 + (double)cols * 4.5e-16; }

/* v rounded up to a float >= v (+inf past the float range). */
static inline float lq_up_float(double v)
{
    float f = (float)v;
    if ((double)f < v)
        f = nextafterf(f, INFINITY);
    return f;
}

/* The scalar q8 copy with bounds (the reference; SIMD sets fall back to it for rows it does
 * not vectorise: other types, widths, a non-finite value). */
int lq_q8_bound_scalar(const lq_dense_mat *w, int8_t *q, float *scale, float *err, float *norm, int64_t r0,
                       int64_t r1);
int lq_q8_bound_avx2(const lq_dense_mat *w, int8_t *q, float *scale, float *err, float *norm, int64_t r0,
                     int64_t r1);
int lq_q8_bound_avx512(const lq_dense_mat *w, int8_t *q, float *scale, float *err, float *norm, int64_t r0,
                       int64_t r1);

/* Columns per int32 accumulation block of the AVX-512 q8 kernel: a 16-lane accumulator sums
 * 4096/16 products of |q| <= 127 by |x| <= 32767 per block (< 2^30; two summed < 2^31). */
#define LQ_Q8_BLOCK 4096

#ifdef __AVX2__
#include <immintrin.h>
/* Σ of the 8 int32 lanes of v (the AVX2 files). */
static inline __attribute__((always_inline)) int32_t lq_hsum_epi32_avx2(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}
#endif

/* ---- TQ1_0 / TQ2_0 (layouts in kernels.h, lq_tq_mat) ---- */
#define LQ_TQ_BLOCK 256
#define LQ_TQ2_BYTES 66 /* qs[64], f16 d */
#define LQ_TQ1_BYTES 54 /* qs[48], qh[4], f16 d */
/* The longest row the TQ kernels take, in blocks (the model's cap on a row length, 2^20, over
 * 256): the SIMD drivers keep the activations' prefix block sums of a token group on the stack
 * (2 x 4097 int32, 32 KB). The loader refuses longer rows (LQ_MODEL_MAX_FF). */
#define LQ_TQ_MAX_BLOCKS 4096

static inline size_t lq_tq_block_bytes(int type)
{
    return type == LQ_GGML_TQ1_0 ? LQ_TQ1_BYTES : LQ_TQ2_BYTES;
}

/* The raw f16 scale d of a block (at its end; no alignment assumed) and its value. */
static inline uint16_t lq_tq_dbits(const uint8_t *blk, size_t bb)
{
    return (uint16_t)(blk[bb - 2] | blk[bb - 1] << 8);
}
static inline float lq_tq_d(const uint8_t *blk, int type)
{
    return lq_f16_to_f32(lq_tq_dbits(blk, lq_tq_block_bytes(type)));
}

/* The output of a row (kernels.h lq_tq_i8_fn): S = Σ_b D_b d_b, exact in double (the loader
 * guarantees it), rounded once to float, then times inv_scale * mult. */
static inline float lq_tq_out(double s, float inv_scale, float mult)
{
    float k = inv_scale * mult;
    float f = (float)s;
    return f * k;
}

/* The SIMD tiles' runs of blocks with one scale: the end of row r's run [start, b) for one
 * token, whose Σ code*xq is code_dot: minus the run's Σ xq (prefix sums pre), times d, into
 * the exact sum acc. */
static inline void lq_tq_run_end(double *acc, int32_t code_dot, const int32_t *pre, int start,
                                 int b, uint16_t dbits)
{
    int32_t dot = code_dot - (pre[b] - pre[start]);
    *acc += (double)dot * (double)lq_f16_to_f32(dbits);
}

/* A tile's run state: per row the scale bits of its current run (cur) and where the run began
 * (start), from the first block; acc zeroed. ZERO(r, t) clears the tile's accumulators. */
#define LQ_TQ_RUNS_BEGIN(R, TT, w, rb, bb, ZERO)                                             \
    uint16_t cur[4];                                                                         \
    int start[4];                                                                            \
    _Pragma("GCC unroll 4") for (int r_ = 0; r_ < (R); r_++)                                \
    {                                                                                        \
        cur[r_] = lq_tq_dbits((w) + r_ * (rb), bb);                                          \
        start[r_] = 0;                                                                       \
        _Pragma("GCC unroll 2") for (int t_ = 0; t_ < (TT); t_++)                           \
        {                                                                                    \
            ZERO(r_, t_);                                                                    \
            acc[r_][t_] = 0;                                                                 \
        }                                                                                    \
    }

/* Before block b of row r (at blk): where its scale differs from the run's (cur[r]), END(r, b)
 * closes the run and a new one starts here. cur[] and start[] are the tile's; uni (a constant
 * of the tile: w->row_uniform) skips the check. */
#define LQ_TQ_RUN_STEP(r, b, blk, bb, END)                                                   \
    do {                                                                                     \
        const uint16_t h_ = uni ? cur[r] : lq_tq_dbits(blk, bb);                             \
        if (__builtin_expect(h_ != cur[r], 0)) {                                             \
            END(r, b);                                                                       \
            cur[r] = h_;                                                                     \
            start[r] = b;                                                                    \
        }                                                                                    \
    } while (0)

/* One tile call of LQ_TQ_I8_DRIVER with constant R, TT and uniformity. */
#define LQ_TQ_TILE_CALL(TILE, R_, TT_)                                                       \
    (w->row_uniform ? TILE(w->type, wr, rb, xt, ldx, nblk, R_, TT_, 1, pre, acc)             \
                    : TILE(w->type, wr, rb, xt, ldx, nblk, R_, TT_, 0, pre, acc))

/* The SIMD sets' entry point: tokens in groups of TG (2: the shapes below); per group the
 * activations' block sums as prefix sums pre[t][0..nblk] (BSUM(x, nb, out[nb]) gives Σ xq
 * over each 256), computed once for every row; rows in tiles of up to 4 (RSTEP) through the
 * set's always-inline TILE(type, wr, rb, x, ldx, nb, R, TT, uni, pre, acc) with constant R,
 * TT and uni (w->row_uniform), which sets acc[r][t] to S of the R rows at wr (row stride rb
 * bytes) for TT tokens: a run of blocks with the same d accumulates Σ code*xq in int32, minus
 * the run's Σ xq from pre, times d into the double (exact). */
#define LQ_TQ_I8_DRIVER(NAME, BSUM, TILE, TG, RSTEP)                                         \
    void NAME(const lq_tq_mat *w, const int8_t *xq, size_t ldx, const float *inv_scale,        \
              int T, float *y, size_t ldy, int64_t r0, int64_t r1)                           \
    {                                                                                        \
        const int nblk = (int)(w->cols / LQ_TQ_BLOCK);                                       \
        const size_t bb = lq_tq_block_bytes(w->type), rb = (size_t)nblk * bb;                \
        const int rstep = (RSTEP);                                                           \
        int32_t pre[TG][LQ_TQ_MAX_BLOCKS + 1];                                               \
        if (nblk > LQ_TQ_MAX_BLOCKS)                                                         \
            return; /* never: the loader refuses such rows */                               \
        for (int t = 0; t < T; t += (TG)) {                                                  \
            const int TT = T - t < (TG) ? T - t : (TG);                                      \
            const int8_t *xt = xq + (size_t)t * ldx;                                         \
            for (int tt = 0; tt < TT; tt++) {                                                \
                BSUM(xt + (size_t)tt * ldx, nblk, pre[tt] + 1);                              \
                pre[tt][0] = 0;                                                              \
                for (int b = 1; b <= nblk; b++)                                              \
                    pre[tt][b] += pre[tt][b - 1];                                            \
            }                                                                                \
            for (int64_t r = r0; r < r1; r += rstep) {                                       \
                const int R = r1 - r < rstep ? (int)(r1 - r) : rstep;                        \
                double acc[4][TG];                                                           \
                const uint8_t *wr = w->data + (size_t)r * rb;                                \
                /* each shape twice: rows with one d skip the per-block scale check */        \
                switch (R * 4 + TT) { /* constant tile shapes, unrolled */                   \
                case 5: LQ_TQ_TILE_CALL(TILE, 1, 1); break;                                  \
                case 6: LQ_TQ_TILE_CALL(TILE, 1, 2); break;                                  \
                case 9: LQ_TQ_TILE_CALL(TILE, 2, 1); break;                                  \
                case 10: LQ_TQ_TILE_CALL(TILE, 2, 2); break;                                 \
                case 13: LQ_TQ_TILE_CALL(TILE, 3, 1); break;                                 \
                case 14: LQ_TQ_TILE_CALL(TILE, 3, 2); break;                                 \
                case 17: LQ_TQ_TILE_CALL(TILE, 4, 1); break;                                 \
                default: LQ_TQ_TILE_CALL(TILE, 4, 2); break;                                 \
                }                                                                            \
                for (int rr = 0; rr < R; rr++)                                               \
                    for (int tt = 0; tt < TT; tt++)                                          \
                        y[(size_t)(t + tt) * ldy + r + rr] =                                 \
                            lq_tq_out(acc[rr][tt], inv_scale[t + tt], w->mult);              \
            }                                                                                \
        }                                                                                    \
    }

void lq_tq_i8_scalar(const lq_tq_mat *w, const int8_t *xq, size_t ldx, const float *inv_scale,
                     int T, float *y, size_t ldy, int64_t r0, int64_t r1);
void lq_tq_i8_avx2(const lq_tq_mat *w, const int8_t *xq, size_t ldx, const float *inv_scale,
                   int T, float *y, size_t ldy, int64_t r0, int64_t r1);
void lq_tq_i8_avx512(const lq_tq_mat *w, const int8_t *xq, size_t ldx, const float *inv_scale,
                     int T, float *y, size_t ldy, int64_t r0, int64_t r1);

/* I2_S code (0/1/2) -> trit (-1/0/+1). The reference reads the never-written code 3 as 0;
 * SIMD kernels compute code - 1 via the Σq correction and so would read it as +2. The GGUF
 * writers (microsoft's and ours) never emit 3, and the model loader may reject it. */
static inline int lq_i2s_trit(unsigned code)
{
    return code == 2 ? 1 : (code == 0 ? -1 : 0);
}

/* How far ahead (bytes of I2_S weights) the SIMD matvecs prefetch. Prefetches past the end
 * of a tensor are harmless hints (no fault). */
#ifndef LQ_I2S_PF_BYTES
#define LQ_I2S_PF_BYTES 4096
#endif
#ifndef LQ_I2S_DECODE_ROWS /* default rows per tile of the one-token matvec (1..4) */
#define LQ_I2S_DECODE_ROWS 2
#endif

/* Rows per tile of the one-token I2_S matvec on this CPU (dispatch.c; LQ_I2S_DECODE_ROWS). */
int lq_i2s_decode_rows(void);
/* Whether the AVX-512 gate scan prefetches its row stream by hand (dispatch.c: per CPU). */
int lq_gate_prefetch(void);
#ifndef LQ_I2S_PF_HINT
#define LQ_I2S_PF_HINT _MM_HINT_T0
#endif
/* ... and with several tokens per call (batched decode, prefill), where a tile computes long
 * enough for L2 to be near: into L1 the prefetched codes evicted the activations (2B-4T ffn
 * shape, 2 threads, T=2, three alternating runs: 226 / 207 / 204 -> 180 / 180 / 162 us). The
 * AVX2 tiles keep LQ_I2S_PF_HINT for every T (kernels_avx2.c). */
#ifndef LQ_I2S_PF_HINT_BATCH
#define LQ_I2S_PF_HINT_BATCH _MM_HINT_T1
#endif
/* A tile's share (R*32 bytes) of one block of the group pf points at, for a tile of R rows with
 * one token (several = 0) or more (used by the SIMD files, which include immintrin.h). */
#define LQ_I2S_PREFETCH(pf, R, several)                                                     \
    do {                                                                                   \
        if (several) {                                                                     \
            _mm_prefetch((const char *)(pf), LQ_I2S_PF_HINT_BATCH);                        \
            if ((R) > 2)                                                                   \
                _mm_prefetch((const char *)(pf) + 64, LQ_I2S_PF_HINT_BATCH);               \
        } else {                                                                           \
            _mm_prefetch((const char *)(pf), LQ_I2S_PF_HINT);                              \
            if ((R) > 2)                                                                   \
                _mm_prefetch((const char *)(pf) + 64, LQ_I2S_PF_HINT);                     \
        }                                                                                  \
    } while (0)
/* The dense (lm_head) and q8 lm_head tiles prefetch the rows LQ_DENSE_PF_TILES tiles ahead
 * into this cache level: AVX-512 for every T (at T=1 a few % faster than the hardware
 * prefetchers alone), AVX2 for T >= 2 (its T=1 row loop is left as it was). */
#ifndef LQ_DENSE_PF_HINT
#define LQ_DENSE_PF_HINT _MM_HINT_T1
#endif
#ifndef LQ_DENSE_PF_TILES /* how many tiles ahead */
#define LQ_DENSE_PF_TILES 2
#endif

/* Attention (lq_attn_fn): positions per online-softmax block, and the largest head_dim the
 * kernels accept (the model loader caps head_dim at LQ_MODEL_MAX_HEAD_DIM = this). */
#define LQ_ATT_BLOCK 64
#define LQ_ATT_MAX_HD 1024
#define LQ_ATT_MAX_GROUP 16 /* heads per pass of a grouped attention kernel */

/* The attention kernels' e^x (Cephes expf: x = n ln2 + r, |r| <= ln2/2, a degree-6
 * polynomial in r, then 2^n), shared by the AVX2 and AVX-512 sets so that both compute the
 * same function: the clamp (below -87 gives ~0, as softmax wants), log2(e), ln2 in two parts,
 * and the coefficients from the highest degree down. */
#define LQ_EXP_HI 88.3f
#define LQ_EXP_LO (-87.3f)
#define LQ_EXP_LOG2E 1.44269504088896341f
#define LQ_EXP_LN2_HI 0.693359375f
#define LQ_EXP_LN2_LO (-2.12194440e-4f)
#define LQ_EXP_P0 1.9875691500E-4f
#define LQ_EXP_P1 1.3981999507E-3f
#define LQ_EXP_P2 8.3334519073E-3f
#define LQ_EXP_P3 4.1665795894E-2f
#define LQ_EXP_P4 1.6666665459E-1f
#define LQ_EXP_P5 5.0000001201E-1f

/* Element i of one head's KV row of hd values stored as kv_type (kernels.h). */
static inline float lq_kv_elem(const void *row, int kv_type, int hd, int i)
{
    if (kv_type == LQ_KVT_F16)
        return lq_f16_to_f32(((const uint16_t *)row)[i]);
    if (kv_type == LQ_KVT_Q8) {
        float s;
        memcpy(&s, (const uint8_t *)row + hd + 4 * (i / LQ_KV_Q8_BLOCK), sizeof s);
        return s * (float)((const int8_t *)row)[i];
    }
    return ((const float *)row)[i];
}

void lq_attn_scalar(const float *q, const void *k, const void *v, size_t ld, int kv_type, int npos,
                    int hd, float scale, float *out, float *ml);
void lq_attn_group_scalar(const float *q, size_t ldq, int nq, const void *k, const void *v,
                          size_t ld, int kv_type, int npos, int hd, float scale, float *out,
                          size_t ldo, float *ml);
/* attn_avx2.c: the AVX2 set's grouped attention (the reference for what it does not take) */
void lq_attn_avx2(const float *q, size_t ldq, int nq, const void *k, const void *v, size_t ld, int kv_type,
                  int npos, int hd, float scale, float *out, size_t ldo, float *ml);

extern const lq_kernels lq_kernels_avx2;
extern const lq_kernels lq_kernels_avx512;

/* Component i of a gate row stored as f32 or f16 (rows come from a file mapping: memcpy,
 * no alignment assumed). */
static inline float lq_gate_elem(const void *row, int f16, size_t i)
{
    const uint8_t *p = row;
    if (f16) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return lq_f16_to_f32(h);
    }
    float w;
    memcpy(&w, p + 4 * i, 4);
    return w;
}

/* The gate, sketch and down_meta kernels of each set (signatures and layouts in kernels.h). */
void lq_gate_scores_scalar(const void *rows, int f16, size_t d, size_t r0, size_t r1,
                           const float *Q, size_t nq, float *out, size_t out_stride);
void lq_gate_scores_avx2(const void *rows, int f16, size_t d, size_t r0, size_t r1,
                         const float *Q, size_t nq, float *out, size_t out_stride);
void lq_gate_scores_avx512(const void *rows, int f16, size_t d, size_t r0, size_t r1,
                           const float *Q, size_t nq, float *out, size_t out_stride);
void lq_sketch_row_scalar(const void *row, int f16, size_t d, uint8_t *codes, float *scale,
                          int *inexact);
void lq_sketch_row_avx2(const void *row, int f16, size_t d, uint8_t *codes, float *scale,
                        int *inexact);
void lq_sketch_row_avx512(const void *row, int f16, size_t d, uint8_t *codes, float *scale,
                          int *inexact);
void lq_sketch_scores_scalar(const uint8_t *codes, const float *scale, size_t dp, size_t r0,
                             size_t r1, const int8_t *q8, const float *qs, const int32_t *qsum,
                             size_t nq, float *out, size_t out_stride);
void lq_sketch_scores_avx2(const uint8_t *codes, const float *scale, size_t dp, size_t r0,
                           size_t r1, const int8_t *q8, const float *qs, const int32_t *qsum,
                           size_t nq, float *out, size_t out_stride);
void lq_sketch_scores_avx512(const uint8_t *codes, const float *scale, size_t dp, size_t r0,
                             size_t r1, const int8_t *q8, const float *qs, const int32_t *qsum,
                             size_t nq, float *out, size_t out_stride);
void lq_dm_block_avx512(const uint8_t *Ep, const float *escale, const uint8_t *keep, int V,
                        int v0, int nv, const int8_t *Bt, const int32_t *colsum, int Fp, int D4,
                        int Kc, uint32_t *ids, float *vals);
void lq_dm_block_avx2(const uint8_t *Ep, const float *escale, const uint8_t *keep, int V,
                        int v0, int nv, const int8_t *Bt, const int32_t *colsum, int Fp, int D4,
                        int Kc, uint32_t *ids, float *vals);

uint64_t lq_read_sum_scalar(const uint8_t *p, size_t bytes);
uint64_t lq_read_sum_avx2(const uint8_t *p, size_t bytes);
uint32_t lq_mac_peak_avx512(int64_t iters);

/* The one float expression of a sketch score (kernels.h): exact integer dot, then scales. */
static inline float lq_sketch_out(int32_t dot, int32_t qsum, float scale, float qs)
{
    return (float)(dot - qsum) * (scale * qs);
}

#ifndef LQ_SKETCH_PF_ROWS
#define LQ_SKETCH_PF_ROWS 8 /* code rows prefetched ahead (640 bytes each for hidden 2560) */
#endif

/* The row loop every SIMD sketch scorer shares (a static function NAME with the
 * lq_sketch_scores_fn signature): rows [r0, r1), queries in groups of up to 4 through the
 * set's ROW(codes, prefetch, dp, q8, NQ, dots[NQ]) with a constant NQ so it unrolls; only
 * the first group prefetches (LQ_SKETCH_PF_ROWS rows ahead): the row is in cache for the
 * others. */
#define LQ_SKETCH_ROWS_FN(NAME, ROW)                                                         \
    static void NAME(const uint8_t *codes, const float *scale, size_t dp, size_t r0,        \
                     size_t r1, const int8_t *q8, const float *qs, const int32_t *qsum,     \
                     size_t nq, float *out, size_t out_stride)                              \
    {                                                                                        \
        const size_t rb = dp / 4;                                                            \
        for (size_t r = r0; r < r1; r++) {                                                   \
            const uint8_t *c = codes + r * rb;                                               \
            const uint8_t *pf = r + LQ_SKETCH_PF_ROWS < r1 ? c + LQ_SKETCH_PF_ROWS * rb : NULL; \
            for (size_t q = 0; q < nq; q += 4) {                                             \
                int32_t dots[4];                                                             \
                const size_t n = nq - q < 4 ? nq - q : 4;                                    \
                const int8_t *x = q8 + q * dp;                                               \
                switch (n) {                                                                 \
                case 4: ROW(c, q ? NULL : pf, dp, x, 4, dots); break;                        \
                case 3: ROW(c, q ? NULL : pf, dp, x, 3, dots); break;                        \
                case 2: ROW(c, q ? NULL : pf, dp, x, 2, dots); break;                        \
                default: ROW(c, q ? NULL : pf, dp, x, 1, dots); break;                       \
                }                                                                            \
                for (size_t k = 0; k < n; k++)                                               \
                    out[(q + k) * out_stride + r] =                                          \
                        lq_sketch_out(dots[k], qsum[q + k], scale[r], qs[q + k]);            \
            }                                                                                \
        }                                                                                    \
    }

/* The i2s_f32 entry point every SIMD set shares: rows [r0, r1), tokens in groups of up to 4
 * through the set's tile (TILE(row, x, ldx, nblk, TT, out[4]) with a constant TT so the
 * tile unrolls), then the per-tensor scale. */
#define LQ_I2S_F32_DRIVER(NAME, TILE)                                                        \
    static void NAME(const lq_i2s_mat *w, const float *x, size_t ldx, int T, float *y,       \
                     size_t ldy, int64_t r0, int64_t r1)                                     \
    {                                                                                        \
        const size_t rb = (size_t)(w->cols / 4);                                             \
        const int64_t nblk = w->cols / 128;                                                  \
        for (int64_t r = r0; r < r1; r++) {                                                  \
            const uint8_t *row = w->data + (size_t)r * rb;                                   \
            for (int t = 0; t < T; t += 4) {                                                 \
                const int TT = T - t < 4 ? T - t : 4;                                        \
                float out[4];                                                                \
                const float *xt = x + (size_t)t * ldx;                                       \
                switch (TT) {                                                                \
                case 1: TILE(row, xt, ldx, nblk, 1, out); break;                             \
                case 2: TILE(row, xt, ldx, nblk, 2, out); break;                             \
                case 3: TILE(row, xt, ldx, nblk, 3, out); break;                             \
                default: TILE(row, xt, ldx, nblk, 4, out); break;                            \
                }                                                                            \
                for (int tt = 0; tt < TT; tt++)                                              \
                    y[(size_t)(t + tt) * ldy + r] = out[tt] * w->scale;                      \
            }                                                                                \
        }                                                                                    \
    }

#endif
