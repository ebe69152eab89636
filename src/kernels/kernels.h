/* Compute kernels: ternary (I2_S) and dense (F32/F16/BF16) matrix x activations, and the
 * int8 activation quantizer. One implementation per ISA (kernels_scalar.c is the reference,
 * *_avx2.c, *_avx512.c), chosen at run time from cpuid; tests compare each with the scalar
 * reference bit for bit (integer paths) or within a float tolerance (f32 paths).
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

/* nq attention heads of one query row that share one KV head (grouped-query attention), over
 * npos cached positions (causal prefix): for head g, q_g = q + g*ldq and
 * out_g[hd] = Σ_p softmax_p(q_g·k_p * scale) v_p, max-subtracted, with k_p = k + p*ld and
 * v_p = v + p*ld (f32, or f16 when kv_f16). Sets that walk the cache once for the whole group
 * read each K/V block once instead of nq times. A head's result does not depend on nq
 * (bit-identical to nq = 1 in the same set); each set computes in its own order (float
 * tolerance across sets). out_g = out + g*ldo. ml: NULL, or 2*nq floats that receive each
 * head's softmax state (max of the scaled scores, sum of exp(score - max)), so that results
 * over consecutive position ranges can be merged (split attention over a long cache). */
typedef void (*lq_attn_fn)(const float *q, size_t ldq, int nq, const void *k, const void *v,
                           size_t ld, int kv_f16, int npos, int hd, float scale, float *out,
                           size_t ldo, float *ml);

typedef struct lq_kernels {
    const char *name; /* "scalar", "avx2", "avx512" */
    lq_quant_i8_fn quant_i8;
    lq_i2s_i8_fn i2s_i8;
    lq_i2s_f32_fn i2s_f32;
    lq_dense_f32_fn dense;
    lq_q8_i16_fn q8_i16;
    lq_attn_fn attn;
} lq_kernels;

/* The fastest kernel set this CPU supports (LQ_KERNELS=scalar|avx2|avx512 in the
 * environment forces one, if supported). Never NULL. */
const lq_kernels *lq_kernels_best(void);
/* A named kernel set, or NULL if unknown or unsupported by this CPU. */
const lq_kernels *lq_kernels_by_name(const char *name);

extern const lq_kernels lq_kernels_scalar;

/* Rows [r0, r1) of the int8 per-row-scaled copy of w (F32/F16/BF16): q [rows, cols] and
 * scale [rows] (see lq_q8_mat). An all-zero row gets scale 0 and zeros. Returns 0, -1 for
 * an unsupported w->type or -2 when a row buffer cannot be allocated (nothing written). */
int lq_q8_quantize_rows(const lq_dense_mat *w, int8_t *q, float *scale, int64_t r0, int64_t r1);

#endif
