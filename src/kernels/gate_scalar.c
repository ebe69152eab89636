/* Scalar references of the vindex kernels: gate scores, 2-bit sketches (building and
 * scoring), the sketch query quantiser, and the down_meta int8 GEMM with its embedding
 * packer. Plain C, exact definitions; the SIMD sets are tested against these. Layouts and
 * arithmetic are defined in kernels.h. */
#include <math.h>
#include <string.h>

#include "kernels/kernels_internal.h"

/* ---- gate scores ---- */

void lq_gate_scores_scalar(const void *rows, int f16, size_t d, size_t r0, size_t r1,
                           const float *Q, size_t nq, float *out, size_t out_stride)
{
    const size_t esz = f16 ? 2 : 4;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *p = (const uint8_t *)rows + r * d * esz;
        for (size_t q = 0; q < nq; q++) {
            const float *x = Q + q * d;
            double acc = 0; /* double: the reference the SIMD kernels are compared with */
            for (size_t i = 0; i < d; i++)
                acc += (double)lq_gate_elem(p, f16, i) * x[i];
            out[q * out_stride + r] = (float)acc;
        }
    }
}

/* ---- sketches ---- */

size_t lq_sketch_dp(size_t d) { return (d + 255) / 256 * 256; }

void lq_sketch_row_scalar(const void *row, int f16, size_t d, uint8_t *codes, float *scale,
                          int *inexact)
{
    const uint8_t *p = row;
    size_t dp = lq_sketch_dp(d);
    float sum = 0;
    for (size_t i = 0; i < d; i++)
        sum += fabsf(lq_gate_elem(p, f16, i));
    float thr = 0.5f * (sum / (float)d);
    memset(codes, 0x55, dp / 4); /* code 1 (trit 0) everywhere, padding included */
    float kept = 0;
    size_t nk = 0;
    for (size_t i = 0; i < d; i++) {
        float g = lq_gate_elem(p, f16, i);
        if (!(fabsf(g) > thr))
            continue;
        size_t blk = i / 256, j = i % 256;
        uint8_t *c = codes + blk * 64 + j % 64;
        int sh = 2 * (int)(j / 64);
        *c = (uint8_t)((*c & ~(3u << sh)) | (unsigned)(g > 0 ? 2 : 0) << sh);
        kept += fabsf(g);
        nk++;
    }
    *scale = nk ? kept / (float)nk : 0.0f;
    for (size_t i = 0; i < d && !*inexact; i++) {
        float g = lq_gate_elem(p, f16, i);
        if (g != 0 && fabsf(g) != *scale)
            *inexact = 1;
    }
}

void lq_sketch_quant_queries(const float *Q, size_t nq, size_t d, int8_t *q8, float *qs,
                             int32_t *qsum)
{
    size_t dp = lq_sketch_dp(d);
    for (size_t q = 0; q < nq; q++) {
        const float *x = Q + q * d;
        int8_t *o = q8 + q * dp;
        float amax = 0;
        for (size_t i = 0; i < d; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        float s = amax > 0 && isfinite(amax) ? amax / 127.0f : 0.0f, inv = s > 0 ? 1.0f / s : 0.0f;
        int32_t sum = 0;
        for (size_t i = 0; i < dp; i++) {
            int v = i < d && s > 0 ? (int)lrintf(x[i] * inv) : 0;
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            o[i] = (int8_t)v;
            sum += v;
        }
        qs[q] = s;
        qsum[q] = sum;
    }
}

void lq_sketch_scores_scalar(const uint8_t *codes, const float *scale, size_t dp, size_t r0,
                             size_t r1, const int8_t *q8, const float *qs, const int32_t *qsum,
                             size_t nq, float *out, size_t out_stride)
{
    size_t rb = dp / 4;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *c = codes + r * rb;
        for (size_t q = 0; q < nq; q++) {
            const int8_t *x = q8 + q * dp;
            int32_t dot = 0;
            for (size_t blk = 0; blk < dp / 256; blk++)
                for (size_t j = 0; j < 64; j++) {
                    unsigned b = c[blk * 64 + j];
                    for (int k = 0; k < 4; k++)
                        dot += (int32_t)(b >> (2 * k) & 3) * x[blk * 256 + 64 * (size_t)k + j];
                }
            out[q * out_stride + r] = lq_sketch_out(dot, qsum[q], scale[r], qs[q]);
        }
    }
}

/* ---- down_meta int8 GEMM ---- */

float lq_dm_pack_row(const float *x, int d, int D4, uint8_t *panel, int lane)
{
    float amax = 0;
    for (int i = 0; x && i < d; i++)
        if (fabsf(x[i]) > amax)
            amax = fabsf(x[i]);
    float s = amax > 0 && isfinite(amax) ? amax / 127.0f : 0.0f, inv = s > 0 ? 1.0f / s : 0.0f;
    for (int i = 0; i < D4; i++) {
        int q = 0;
        if (x && i < d && s > 0) {
            q = (int)lrintf(x[i] * inv);
            q = q > 127 ? 127 : q < -127 ? -127 : q;
        }
        panel[(size_t)(i / 4) * 64 + (size_t)lane * 4 + (size_t)(i % 4)] = (uint8_t)(q + 128);
    }
    return s;
}

void lq_dm_block_scalar(const uint8_t *Ep, const float *escale, const uint8_t *keep, int V,
                        int v0, int nv, const int8_t *Bt, const int32_t *colsum, int Fp, int D4,
                        int Kc, uint32_t *ids, float *vals)
{
    for (int f = 0; f < Fp; f++) {
        const int8_t *b = Bt + (size_t)f * D4;
        float *fv = vals + (size_t)f * Kc;
        uint32_t *fi = ids + (size_t)f * Kc;
        for (int v = v0; v < v0 + nv && v < V; v++) {
            if (!keep[v])
                continue;
            const uint8_t *a = Ep + (size_t)(v / 16) * D4 * 16 + (size_t)(v % 16) * 4;
            int32_t dot = 0;
            for (int i = 0; i < D4; i++)
                dot += (int32_t)a[(size_t)(i / 4) * 64 + (size_t)(i % 4)] * b[i];
            float x = (float)(dot - 128 * colsum[f]) * escale[v];
            if (x > fv[Kc - 1])
                lq_dm_cand_insert(fi, fv, Kc, (uint32_t)v, x);
        }
    }
}
