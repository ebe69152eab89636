/* Reference kernel for llama.cpp's ternary types TQ2_0 and TQ1_0 against int8 activations:
 * each weight's trit read straight from the layout of kernels.h (lq_tq_mat), each block's dot
 * exact in int32, S = Σ D_b d_b in double (exact under lq_tq_prepare), then lq_tq_out. The SIMD
 * sets (tq_avx2.c, tq_avx512.c) are tested bit for bit against this. */
#include <math.h>

#include "kernels/kernels_internal.h"

/* Code (0..3; trit = code - 1) of element e (0..255) of a TQ2_0 block. */
static int tq2_code(const uint8_t *blk, int e)
{
    return (blk[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* Digit n of a TQ1_0 byte: ((uint8)(q * 3^n) * 3) >> 8, in 0..2. */
static int tq1_digit(uint8_t q, int n)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t v = (uint8_t)(q * pow3[n]);
    return (v * 3) >> 8;
}

/* Code (0..2) of element e of a TQ1_0 block. */
static int tq1_code(const uint8_t *blk, int e)
{
    if (e < 160)
        return tq1_digit(blk[e % 32], e / 32);
    if (e < 240)
        return tq1_digit(blk[32 + (e - 160) % 16], (e - 160) / 16);
    return tq1_digit(blk[48 + (e - 240) % 4], (e - 240) / 4);
}

void lq_tq_i8_scalar(const lq_tq_mat *w, const int8_t *xq, size_t ldx, const float *inv_scale,
                     int T, float *y, size_t ldy, int64_t r0, int64_t r1)
{
    const int64_t nblk = w->cols / LQ_TQ_BLOCK;
    const size_t bb = lq_tq_block_bytes(w->type);
    const int tq1 = w->type == LQ_GGML_TQ1_0;
    for (int t = 0; t < T; t++)
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = w->data + (size_t)r * (size_t)nblk * bb;
            const int8_t *x = xq + (size_t)t * ldx;
            double s = 0;
            for (int64_t b = 0; b < nblk; b++) {
                const uint8_t *blk = row + (size_t)b * bb;
                const int8_t *xb = x + b * LQ_TQ_BLOCK;
                int32_t dot = 0;
                for (int e = 0; e < LQ_TQ_BLOCK; e++)
                    dot += ((tq1 ? tq1_code(blk, e) : tq2_code(blk, e)) - 1) * xb[e];
                s += (double)dot * (double)lq_tq_d(blk, w->type);
            }
            y[(size_t)t * ldy + r] = lq_tq_out(s, inv_scale[t], w->mult);
        }
}

int lq_tq_prepare(lq_tq_mat *w)
{
    w->row_uniform = 0;
    if (w->cols <= 0 || w->cols % LQ_TQ_BLOCK || w->cols > (int64_t)LQ_TQ_MAX_BLOCKS * LQ_TQ_BLOCK)
        return 0;
    const size_t bb = lq_tq_block_bytes(w->type);
    const uint64_t nb = (uint64_t)w->rows * (uint64_t)(w->cols / LQ_TQ_BLOCK);
    const uint64_t nbr = (uint64_t)(w->cols / LQ_TQ_BLOCK);
    int emin = 1000, emax = -1000, uniform = 1;
    for (uint64_t b = 0; b < nb; b++) {
        uint16_t h = lq_tq_dbits(w->data + b * bb, bb);
        uniform &= h == lq_tq_dbits(w->data + (b - b % nbr) * bb, bb);
        float d = lq_f16_to_f32(h);
        if (!isfinite(d))
            return 0;
        if (d == 0)
            continue;
        int e;
        frexpf(d, &e);
        emin = e < emin ? e : emin;
        emax = e > emax ? e : emax;
    }
    int lc = 0;
    while ((1LL << lc) < w->cols)
        lc++;
    /* terms are multiples of 2^(emin - 11) (11 significant bits of an f16), |S| and every
     * partial sum < cols * 256 * 2^emax: fewer than 53 bits between them */
    if (!(emax < emin || emax - emin + lc <= 34))
        return 0;
    w->row_uniform = uniform;
    return 1;
}
