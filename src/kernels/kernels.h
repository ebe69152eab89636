/* Compute kernels: ternary (I2_S) and dense (F32/F16/BF16) matrix x activations, the int8
 * activation quantizer, attention, the vindex's gate scoring, gate sketches and down_meta
 * GEMM, and the roofline probes of the benchmarks. Every SIMD loop of the library lives
 * here. One implementation per ISA (kernels_scalar.c and gate_scalar.c are the references,
 * *_avx2.c, *_avx512.c), chosen at run time from cpuid by one dispatcher (dispatch.c) for the
 * model, the vindex and the builder alike; tests compare each with the scalar reference bit
 * for bit (integer paths) or within a float tolerance (f32 paths).
 *
 * Every matrix kernel computes a row range [r0, r1) of the output for T input vectors, so
 * the thread pool can split rows across threads and prefill can batch positions (each weight
 * byte read once per batch of T).
 *
 * Shapes: W is [rows, cols] row-major (GGUF ne0 = cols). X is [T, cols] with row stride ldx
 * (elements). Y is [T, rows] with row stride ldy; kernels write Y[t*ldy + r] (overwrite). */
#ifndef LQ_KERNELS_H
#define LQ_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* A ternary matrix in microsoft's I2_S layout, straight from the GGUF mapping: each row is
 * cols/4 bytes (cols % 128 == 0), 128-element blocks of 32 bytes, element j of a block in
 * byte j%32 at shift 6-2*(j/32), code 0/1/2 = -1/0/+1. One scale for the whole tensor. */
typedef struct lq_i2s_mat {
    const uint8_t *data;
    int64_t rows, cols;
    float scale;
} lq_i2s_mat;

/* A ternary matrix in one of llama.cpp's ternary types, straight from the GGUF mapping: each
 * row is cols/256 blocks (cols % 256 == 0) of 256 weights and one f16 scale d, weight =
 * trit * d * mult.
 *   TQ2_0 (66 bytes a block): qs[64] then d; element e in qs[(e/128)*32 + e%32] at shift
 *         2*((e%128)/32), code c gives trit c - 1 (code 3, never written, reads as +2, as in
 *         llama.cpp's dequantisation and src/gguf's decoder).
 *   TQ1_0 (54 bytes): qs[48], qh[4], d; base-3 digits stored as ceil(v * 256 / 243), digit n
 *         of a byte q is ((uint8)(q * 3^n) * 3) >> 8: qs[m] (m < 32) holds elements n*32+m
 *         (n < 5), qs[32+m] (m < 16) 160+n*16+m, qh[m] (m < 4) 240+n*4+m (n < 4).
 * mult is the optional "<name>.scale" companion of the 2024 TQ fork (1 when absent). */
typedef struct lq_tq_mat {
    const uint8_t *data;
    int64_t rows, cols;
    int type; /* LQ_GGML_TQ1_0 or LQ_GGML_TQ2_0 */
    float mult;
    int row_uniform; /* 1: every block of each row has that row's first d (set by lq_tq_prepare;
                        the kernels then skip the per-block scale check) */
} lq_tq_mat;

/* A dense matrix: type is LQ_GGML_F32, LQ_GGML_F16 or LQ_GGML_BF16 (see larql/gguf.h). */
typedef struct lq_dense_mat {
    const void *data;
    int64_t rows, cols;
    int type;
} lq_dense_mat;

/* An int8 copy of a dense matrix with one f32 scale per row (the `--lm-head q8` lm_head):
 * W[r][c] ≈ scale[r] * data[r*cols + c], data [rows, cols] int8, scale [rows]. Built by
 * lq_q8_quantize_rows: scale = amax(row) / 127, q = round_half_even(w / scale). */
typedef struct lq_q8_mat {
    const int8_t *data;
    const float *scale;
    int64_t rows, cols;
} lq_q8_mat;

/* Per-token int8 activations, BitNet b1.58 definition ("ms"): s = 127 / max(amax, 1e-5),
 * q = clamp(round_half_even(x * s), -128, 127). Stores q[0..n), *inv_scale = 1/s (so that
 * x ≈ q * inv_scale) and *sum = Σ q (SIMD kernels use it for the unsigned-code trick). */
typedef void (*lq_quant_i8_fn)(const float *x, int64_t n, int8_t *q, float *inv_scale, int32_t *sum);

/* Y[t][r] = w->scale * inv_scale[t] * Σ_c trit(r,c) * xq[t][c]   (exact integer dot)
 * Every set computes the float as (float)dot * (inv_scale[t] * w->scale), so results are
 * bit-identical across sets. SIMD sets use xsum[t] (= Σ_c xq[t][c], from quant_i8) and
 * assume codes are 0..2 (code 3, never written, reads as 0 only in the scalar reference). */
typedef void (*lq_i2s_i8_fn)(const lq_i2s_mat *w, const int8_t *xq, size_t ldx,
                             const float *inv_scale, const int32_t *xsum, int T,
                             float *y, size_t ldy, int64_t r0, int64_t r1);

/* Y[t][r] for a TQ matrix against per-token int8 activations (quant_i8):
 *   S = Σ_b D_b * d_b, D_b = Σ trit * xq[t] over block b's 256 columns,
 *   Y = (float)S * (inv_scale[t] * mult),
 * where S is exact (every product and partial sum representable in double). That holds when
 * the nonzero scales of a matrix span few binades: with e_min, e_max the frexp exponents of
 * the smallest and largest |d|, e_max - e_min + log2(cols) <= 34 (lq_tq_prepare; the loader
 * checks it, and decodes a matrix that fails to f32 instead). Then S does not depend on the
 * order of the sums, so a set may add the int32 dots of a run of blocks with one d before
 * scaling (BitNet files quantised by llama-quantize have one d per tensor: one scaling per
 * row), and every set gives bit-identical results. cols <= 2^20. */
typedef void (*lq_tq_i8_fn)(const lq_tq_mat *w, const int8_t *xq, size_t ldx,
                            const float *inv_scale, int T, float *y, size_t ldy, int64_t r0,
                            int64_t r1);

/* Y[t][r] = w->scale * Σ_c trit(r,c) * x[t][c]   (f32 activations: LARQL's numerics) */
typedef void (*lq_i2s_f32_fn)(const lq_i2s_mat *w, const float *x, size_t ldx, int T,
                              float *y, size_t ldy, int64_t r0, int64_t r1);

/* Y[t][r] = Σ_c W[r][c] * x[t][c]   (W dense f32/f16/bf16, f32 accumulation) */
typedef void (*lq_dense_f32_fn)(const lq_dense_mat *w, const float *x, size_t ldx, int T,
                                float *y, size_t ldy, int64_t r0, int64_t r1);

/* Per-token int16 activations for the q8 lm_head: s = 32767 / amax (1 if amax is 0),
 * q = round_half_even(x * s) (|q| <= 32767), *inv_scale = 1/s. The error (<= amax/65534 per
 * element) is ~250x below that of the int8 weights. Shared scalar code (one row per token). */
void lq_quant_i16(const float *x, int64_t n, int16_t *q, float *inv_scale);

/* Y[t][r] = (float)D * (inv_scale[t] * scale[r]), D = Σ_c q[r][c] * xq[t][c] computed exactly
 * (int64), so every set gives bit-identical results. */
typedef void (*lq_q8_i16_fn)(const lq_q8_mat *w, const int16_t *xq, size_t ldx,
                             const float *inv_scale, int T, float *y, size_t ldy, int64_t r0,
                             int64_t r1);

/* How a session's KV cache stores an element (the values of lq_model_opts.kv_type).
 * LQ_KVT_Q8: each head's row of hd values is hd int8 followed by hd/32 f32 scales, value
 * i = scale[i/32] * q[i] (blocks of 32 rounded to nearest, scale = absmax/127; hd must be a
 * multiple of 32): 1.125 bytes a value instead of 2 (f16) or 4. */
enum { LQ_KVT_F32 = 0, LQ_KVT_F16 = 1, LQ_KVT_Q8 = 2 };
#define LQ_KV_Q8_BLOCK 32

/* Bytes of one head's row of hd values in a KV cache of kv_type. */
static inline size_t lq_kv_head_bytes(int kv_type, int hd)
{
    return kv_type == LQ_KVT_Q8 ? (size_t)hd + 4 * (size_t)(hd / LQ_KV_Q8_BLOCK)
                                : (size_t)hd * (kv_type == LQ_KVT_F16 ? 2 : 4);
}

/* Stores x[hd] as one head's row of kv_type at dst (f16: round to nearest even). */
void lq_kv_store_head(int kv_type, void *dst, const float *x, int hd);

/* nq attention heads of one query row that share one KV head (grouped-query attention), over
 * npos cached positions (causal prefix): for head g, q_g = q + g*ldq and
 * out_g[hd] = Σ_p softmax_p(q_g·k_p * scale) v_p, max-subtracted, where k_p and v_p are the
 * head's rows (kv_type, above) at k + p*ld and v + p*ld bytes. Sets that walk the cache once
 * for the whole group read each K/V block once instead of nq times. A head's result does
 * not depend on nq (bit-identical to nq = 1 in the same set); each set computes in its own
 * order (float tolerance across sets). out_g = out + g*ldo. ml: NULL, or 2*nq floats that
 * receive each head's softmax state (max of the scaled scores, sum of exp(score - max)), so
 * that results over consecutive position ranges can be merged (split attention over a long
 * cache). */
typedef void (*lq_attn_fn)(const float *q, size_t ldq, int nq, const void *k, const void *v,
                           size_t ld, int kv_type, int npos, int hd, float scale, float *out,
                           size_t ldo, float *ml);

/* ---- gate scoring (the vindex's gate KNN, and the exact down_meta scan of the builder) ----
 * rows: [n, d] f32 or f16 (f16 = 1; little-endian, read in place, no alignment assumed),
 * Q: [nq, d] f32, out: [nq, out_stride] f32 with out[q * out_stride + r] = rows[r] . Q[q].
 * Computes rows [r0, r1) only (the thread pool splits rows). The scalar reference sums in
 * double; SIMD sets agree within float tolerance. The AVX-512 set accumulates every
 * (row, query) score in the same order whatever r0, r1 and nq are, so a row scored alone
 * (the prefilter's exact re-scoring) is bit-identical to the same row in a full scan. */
typedef void (*lq_gate_scores_fn)(const void *rows, int f16, size_t d, size_t r0, size_t r1,
                                  const float *Q, size_t nq, float *out, size_t out_stride);

/* ---- 2-bit sketches of gate rows (the vindex's gate prefilter) ----
 * A gate row g (d components) becomes trits t_i = sign(g_i) where |g_i| > 0.5 * mean|g| (else
 * 0) and a scale s = mean of |g_i| over the kept components, so that s * Σ t·q approximates
 * g . q (exactly the trits and s = 1 for BitNet's unit-trit gate rows).
 * Codes: dp / 4 bytes per row (dp = lq_sketch_dp(d), padding codes 1); in each block of 256
 * components, byte j holds components j, j+64, j+128, j+192 in bits 0-1, 2-3, 4-5, 6-7 as
 * t + 1 (0, 1, 2): one 64-byte load and three shifts give 64 consecutive codes per byte lane,
 * ready for a u8 x s8 dot product.
 * Queries are quantised to int8 per query by lq_sketch_quant_queries; a row's approximate
 * score is (float)(Σ (t+1) q8 - qsum) * (s * qs), integer-exact, so every set gives the same
 * float. */
size_t lq_sketch_dp(size_t d); /* d rounded up to a multiple of 256 */

/* Q [nq, d] -> q8 [nq, dp] (round(q * 127 / amax), clamped to ±127, zero padded to dp),
 * qs [nq] = amax / 127 (0 for an all-zero or non-finite query), qsum [nq] = Σ q8. Shared
 * scalar code (one pass per query, not worth a SIMD version). */
void lq_sketch_quant_queries(const float *Q, size_t nq, size_t d, int8_t *q8, float *qs,
                             int32_t *qsum);

/* One row (f32 or f16, d components) -> codes [dp / 4] and *scale; sets *inexact (never
 * clears it) when a nonzero component's magnitude differs from the scale (the row is not a
 * unit-trit pattern times s). Codes are identical across sets; the scale within 1e-5
 * (its sums run in another order). */
typedef void (*lq_sketch_row_fn)(const void *row, int f16, size_t d, uint8_t *codes,
                                 float *scale, int *inexact);

/* Approximate scores of sketch rows [r0, r1): codes [n, dp / 4], scale [n], q8 [nq, dp],
 * qs, qsum [nq], out [nq, out_stride]. Bit-identical across sets (integer dot). */
typedef void (*lq_sketch_scores_fn)(const uint8_t *codes, const float *scale, size_t dp,
                                    size_t r0, size_t r1, const int8_t *q8, const float *qs,
                                    const int32_t *qsum, size_t nq, float *out,
                                    size_t out_stride);

/* ---- down_meta candidates: logits[v, f] = E[v] . W_down[:, f] over the whole vocabulary as
 * an int8 x ternary GEMM (the vindex builder) ----
 * E is quantised per row to int8 (absmax / 127) and stored as u8 = q + 128 (the unsigned
 * operand of vpdpbusd; the +128 is removed with 128 * colsum(trits)). W_down's columns are
 * unit trits (a positive per-tensor scale does not change the ranking). The approximate
 * logits only choose candidates; the builder re-scores them exactly in f32.
 * Layouts:
 *   Ep      [Vp/16][D4/4][16][4] u8: 16 vocabulary rows per lane panel, 4 consecutive
 *           components per 32-bit lane; Vp = V rounded up to 32, D4 = d rounded up to 4
 *   escale  [Vp] f32 per-row scale of Ep (0 for padding rows)
 *   keep    [V] u8: 1 = the token may be a candidate
 *   Bt      [Fp, D4] int8 trit of (feature f, component d), Fp a multiple of 12 (zero rows)
 *   colsum  [Fp] int32 Σ_d Bt[f, d]
 *   ids, vals [Fp, Kc]: per feature the Kc best approximate logits so far, vals descending,
 *           -inf = empty; updated in place (a value enters only if strictly greater than
 *           the current last, inserted after equal values)
 * A call covers vocabulary rows [v0, v0 + nv), nv a multiple of 32. Every set that has this
 * kernel gives bit-identical ids and vals (exact int32 dot, one float multiply). */
typedef void (*lq_dm_block_fn)(const uint8_t *Ep, const float *escale, const uint8_t *keep,
                               int V, int v0, int nv, const int8_t *Bt, const int32_t *colsum,
                               int Fp, int D4, int Kc, uint32_t *ids, float *vals);

/* The one candidate-list update of lq_dm_block_fn, also the builder's exact scan's: x
 * (already known to beat vals[k - 1]) enters the descending list ids/vals [k] after every
 * value >= x, so ties keep the token seen first (both walk the vocabulary in order). */
static inline void lq_dm_cand_insert(uint32_t *ids, float *vals, int k, uint32_t id, float x)
{
    int i = k - 1;
    while (i > 0 && x > vals[i - 1]) {
        vals[i] = vals[i - 1];
        ids[i] = ids[i - 1];
        i--;
    }
    vals[i] = x;
    ids[i] = id;
}

/* Lane `lane` (0..15) of a 16-row panel of Ep (panel = Ep + (v / 16) * D4 * 16, lane = v % 16)
 * from row x [d] (NULL: a padding row, all zeros); returns the row's scale (amax / 127, 0 for
 * an all-zero, non-finite or padding row). */
float lq_dm_pack_row(const float *x, int d, int D4, uint8_t *panel, int lane);

/* The scalar definition of lq_dm_block_fn (the reference the SIMD kernel is tested against).
 * Not in a kernel set: without an int8 GEMM that beats it, the builder scans exactly in f32. */
void lq_dm_block_scalar(const uint8_t *Ep, const float *escale, const uint8_t *keep, int V,
                        int v0, int nv, const int8_t *Bt, const int32_t *colsum, int Fp, int D4,
                        int Kc, uint32_t *ids, float *vals);

/* ---- roofline probes: the references the benchmarks print next to every kernel ----
 * Σ of the u64 words of p [bytes / 8] (bytes a multiple of 128, p 32-byte aligned), streamed
 * with 4 independent sums: the read bandwidth this set's loads reach (no arithmetic limit). */
typedef uint64_t (*lq_read_sum_fn)(const uint8_t *p, size_t bytes);

/* iters rounds of 12 independent int8 dot-product chains of 16 int32 lanes, each lane adding
 * 4 products 3 x -5 per round (chain c starts at c in every lane), in registers with no
 * memory traffic: the set's int8 multiply-accumulate peak. Returns Σ of every lane, wrapped
 * to 32 bits (keeps the work live; tests check it). */
typedef uint32_t (*lq_mac_peak_fn)(int64_t iters);

/* Rows [r0, r1) of the int8 per-row-scaled copy of w (F32/F16/BF16), exactly as
 * lq_q8_quantize_rows, and per row upper bounds that the bounded lm_head relies on:
 *   err[r]  >= ||w_r - scale_r * q_r||_2,   norm[r] >= max(||w_r||_2, ||scale_r * q_r||_2),
 * both +inf for a row holding a non-finite value (that row is then always computed exactly).
 * The sums are taken in double over exact terms in any order and scaled up by lq_q8_bound_slack
 * (cols) before rounding up to float, so every set's figures are bounds, equal to the
 * reference's within that slack (q and scale bit for bit). err and norm may both be NULL (the
 * copy alone: the `--lm-head q8` build). Returns 0, -1 for an unsupported w->type, -2 when a
 * row buffer cannot be allocated. */
typedef int (*lq_q8_bound_fn)(const lq_dense_mat *w, int8_t *q, float *scale, float *err, float *norm, int64_t r0,
                              int64_t r1);

/* The scalar definition of lq_mac_peak_fn (the reference; not a peak worth measuring, so not
 * in a set). */
uint32_t lq_mac_peak_scalar(int64_t iters);

typedef struct lq_kernels {
    const char *name; /* "scalar", "avx2", "avx512" */
    lq_quant_i8_fn quant_i8;
    lq_i2s_i8_fn i2s_i8;
    lq_i2s_f32_fn i2s_f32;
    lq_tq_i8_fn tq_i8;
    lq_dense_f32_fn dense;
    lq_q8_i16_fn q8_i16;
    lq_attn_fn attn;
    lq_gate_scores_fn gate_scores;
    lq_sketch_row_fn sketch_row;
    lq_sketch_scores_fn sketch_scores;
    lq_dm_block_fn dm_block; /* NULL: no fast int8 GEMM in this set (builder: exact f32 scan) */
    lq_read_sum_fn read_sum;
    lq_mac_peak_fn mac_peak; /* NULL: no int8 dot-product instruction in this set */
    lq_q8_bound_fn q8_bound;
} lq_kernels;

/* The fastest kernel set this CPU supports (LQ_KERNELS=scalar|avx2|avx512 in the
 * environment forces one, if supported). Never NULL. */
const lq_kernels *lq_kernels_best(void);
/* 1 if the kernels' sums over w are exact (the condition above): finite scales only (a NaN or
 * infinite d: 0), cols a multiple of 256 and at most 2^20. Also sets w->row_uniform. Call it
 * once for every matrix before any kernel: a wrong row_uniform gives wrong results. */
int lq_tq_prepare(lq_tq_mat *w);
/* A named kernel set, or NULL if unknown or unsupported by this CPU. */
const lq_kernels *lq_kernels_by_name(const char *name);
/* 1 if name is one of the set names ("scalar", "avx2", "avx512"), supported here or not
 * (callers tell "unknown" from "not on this CPU" in their errors). */
int lq_kernels_is_name(const char *name);

extern const lq_kernels lq_kernels_scalar;

/* Rows [r0, r1) of the int8 per-row-scaled copy of w (F32/F16/BF16): q [rows, cols] and
 * scale [rows] (see lq_q8_mat). An all-zero row gets scale 0 and zeros. Returns 0, -1 for
 * an unsupported w->type or -2 when a row buffer cannot be allocated (nothing written). */
int lq_q8_quantize_rows(const lq_dense_mat *w, int8_t *q, float *scale, int64_t r0, int64_t r1);

#endif
