/* Grouped attention of one query row (lq_attn_fn), AVX2 + FMA + F16C: the AVX-512 kernel's
 * plan at 8 lanes. The heads of a group take turns on each 64-position block of the cache,
 * so that the block's K and V rows come from memory once and from L1/L2 for the others; up to
 * four heads at a time share each K and V row's loads and conversions; the next block's rows
 * are asked for while this one computes. With 16 vector registers the queries (scaled once)
 * are read from L1 as FMA operands, and the values go in chunks of 8 / heads vectors.
 *
 * Every head goes through exactly the operations of a group of one (its dot products in the
 * same order, the same transposing reduction, its softmax and value sums in position order),
 * so a head's result does not depend on nq. Without this set the AVX2 machines ran the scalar
 * reference: one head at a time, one element at a time. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define AI static inline __attribute__((always_inline))

/* Values 8u..8u+7 of one head's KV row of hd values (kv_type T; kernels.h). */
AI __m256 kvrow8(const uint8_t *row, int T, int hd, int u)
{
    if (T == LQ_KVT_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 16 * (size_t)u)));
    if (T == LQ_KVT_Q8) {
        float sc;
        memcpy(&sc, row + (size_t)hd + 4 * (size_t)(u / (LQ_KV_Q8_BLOCK / 8)), sizeof sc);
        __m128i b = _mm_loadl_epi64((const __m128i *)(row + 8 * (size_t)u));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), _mm256_set1_ps(sc));
    }
    return _mm256_loadu_ps((const float *)(row + 32 * (size_t)u));
}

/* out[j] = the sum of the 8 lanes of v[j], j = 0..7, each grouped ((0+1)+(2+3))+((4+5)+(6+7))
 * whatever the other vectors hold. */
AI __m256 hsum8(const __m256 *v)
{
    __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
    __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* exp(x) of 8 lanes: the AVX-512 kernel's polynomial, 2^n built in the exponent bits */
AI __m256 exp8(__m256 x)
{
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(LQ_EXP_HI)), _mm256_set1_ps(LQ_EXP_LO));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LQ_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LQ_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LQ_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(LQ_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LQ_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LQ_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LQ_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LQ_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LQ_EXP_P5));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* n is in [-126, 127] after the clamp: a normal power of two */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AI void att_prefetch8(const uint8_t *p, size_t pfd, size_t bytes)
{
    if (!pfd)
        return;
    for (size_t i = 0; i < bytes; i += 64)
        _mm_prefetch((const char *)(p + pfd + i), _MM_HINT_T1);
}

/* Scores of NH heads (1, 2 or 4) over a block's nb positions into s[h]: P = 8 / NH positions
 * a reduction, each K row converted once for the NH heads (queries qs[h], scaled). */
AI void scores_n(const float *const *qs, const uint8_t *k, size_t ld, int T, int nb, int hd, int NV, int NH,
                 float *const *s, size_t pfd)
{
    const int P = 8 / NH;
    const size_t rb = lq_kv_head_bytes(T, hd);
    for (int b0 = 0; b0 < nb; b0 += P) {
        __m256 dv[8];
        for (int j = 0; j < P; j++) {
            if (b0 + j >= nb) {
                for (int h = 0; h < NH; h++)
                    dv[h * P + j] = _mm256_setzero_ps();
                continue;
            }
            const uint8_t *kr = k + (size_t)(b0 + j) * ld;
            att_prefetch8(kr, pfd, rb);
            __m256 d0[4], d1[4];
            const __m256 k0 = kvrow8(kr, T, hd, 0);
#pragma GCC unroll 4
            for (int h = 0; h < NH; h++) {
                d0[h] = _mm256_mul_ps(_mm256_load_ps(qs[h]), k0);
                d1[h] = _mm256_setzero_ps();
            }
#pragma GCC unroll 16
            for (int u = 1; u < NV; u++) {
                const __m256 x = kvrow8(kr, T, hd, u);
#pragma GCC unroll 4
                for (int h = 0; h < NH; h++) {
                    if (u & 1)
                        d1[h] = _mm256_fmadd_ps(_mm256_load_ps(qs[h] + 8 * u), x, d1[h]);
                    else
                        d0[h] = _mm256_fmadd_ps(_mm256_load_ps(qs[h] + 8 * u), x, d0[h]);
                }
            }
            for (int h = 0; h < NH; h++)
                dv[h * P + j] = _mm256_add_ps(d0[h], d1[h]);
        }
        float r[8] __attribute__((aligned(32)));
        _mm256_store_ps(r, hsum8(dv));
        for (int h = 0; h < NH; h++)
            memcpy(s[h] + b0, r + h * P, sizeof(float) * (size_t)P);
    }
}

/* One head's softmax step over a block (as the AVX-512 kernel's att_softmax). */
AI void softmax8(float *s, int nb, int hd, float *mx, float *sum, float *og)
{
    __m256 vbm = _mm256_set1_ps(-INFINITY);
    int b = 0;
    for (; b + 8 <= nb; b += 8)
        vbm = _mm256_max_ps(vbm, _mm256_loadu_ps(s + b));
    float bm = -INFINITY, lanes[8];
    _mm256_storeu_ps(lanes, vbm);
    for (int i = 0; i < 8; i++)
        bm = lanes[i] > bm ? lanes[i] : bm;
    for (; b < nb; b++)
        bm = s[b] > bm ? s[b] : bm;
    if (bm > *mx) {
        const float rr = expf(*mx - bm); /* 0 on the first block (mx = -inf) */
        *sum *= rr;
        for (int i = 0; i < hd; i += 8)
            _mm256_storeu_ps(og + i, _mm256_mul_ps(_mm256_loadu_ps(og + i), _mm256_set1_ps(rr)));
        *mx = bm;
    }
    __m256 vs = _mm256_setzero_ps();
    for (b = 0; b < nb; b += 8) {
        /* the block arrays hold LQ_ATT_BLOCK floats: a partial tail is padded, then masked */
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + b), _mm256_set1_ps(*mx)));
        if (nb - b < 8) {
            const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            e = _mm256_and_ps(e, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nb - b), idx)));
        }
        vs = _mm256_add_ps(vs, e);
        _mm256_storeu_ps(s + b, e);
    }
    float l[8];
    _mm256_storeu_ps(l, vs);
    *sum += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* One block for NH heads (1, 2 or 4): scores, softmax, then the values in chunks of 8 / NH
 * vectors whose accumulators stay in registers. */
AI void block_n(const float *const *qs, const uint8_t *kb, const uint8_t *vb, size_t ld, int T, int nb, int hd,
                int NV, int NH, float *mx, float *sum, float *const *o, float *const *s, size_t pfd)
{
    scores_n(qs, kb, ld, T, nb, hd, NV, NH, s, pfd);
    for (int h = 0; h < NH; h++)
        softmax8(s[h], nb, hd, &mx[h], &sum[h], o[h]);
    const int CU = 8 / NH;
    const size_t rb = lq_kv_head_bytes(T, hd);
    for (int u0 = 0; u0 < NV; u0 += CU) {
        const int nu = NV - u0 < CU ? NV - u0 : CU;
        __m256 acc[8];
#pragma GCC unroll 4
        for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
            for (int uu = 0; uu < CU; uu++)
                acc[h * CU + uu] = uu < nu ? _mm256_loadu_ps(o[h] + 8 * (u0 + uu)) : _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const uint8_t *vr = vb + (size_t)b * ld;
            if (u0 == 0)
                att_prefetch8(vr, pfd, rb);
#pragma GCC unroll 8
            for (int uu = 0; uu < nu; uu++) {
                const __m256 x = kvrow8(vr, T, hd, u0 + uu);
#pragma GCC unroll 4
                for (int h = 0; h < NH; h++)
                    acc[h * CU + uu] = _mm256_fmadd_ps(_mm256_set1_ps(s[h][b]), x, acc[h * CU + uu]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
            for (int uu = 0; uu < nu; uu++)
                _mm256_storeu_ps(o[h] + 8 * (u0 + uu), acc[h * CU + uu]);
    }
}

AI void attn_t(const float *q, size_t ldq, int nq, const void *k, const void *v, size_t ld, int T, int npos,
               int hd, int NV, float scale, float *out, size_t ldo, float *ml)
{
    /* scaled queries, 32-byte aligned rows (hd <= 128 here) */
    float qbuf[LQ_ATT_MAX_GROUP * 128] __attribute__((aligned(32)));
    /* zeroed: a block's last 8 lanes may be read past nb (then masked) */
    float sbuf[4][LQ_ATT_BLOCK + 8] __attribute__((aligned(32))) = {{0}};
    float mx[LQ_ATT_MAX_GROUP], sum[LQ_ATT_MAX_GROUP];
    for (int g = 0; g < nq; g++) {
        mx[g] = -INFINITY;
        sum[g] = 0;
        for (int i = 0; i < hd; i += 8) {
            _mm256_store_ps(qbuf + (size_t)g * hd + i,
                            _mm256_mul_ps(_mm256_loadu_ps(q + (size_t)g * ldq + i), _mm256_set1_ps(scale)));
            _mm256_storeu_ps(out + (size_t)g * ldo + i, _mm256_setzero_ps());
        }
    }
    float *const s4[4] = {sbuf[0], sbuf[1], sbuf[2], sbuf[3]};
    for (int p0 = 0; p0 < npos; p0 += LQ_ATT_BLOCK) {
        const int nb = npos - p0 < LQ_ATT_BLOCK ? npos - p0 : LQ_ATT_BLOCK;
        const uint8_t *kb = (const uint8_t *)k + (size_t)p0 * ld;
        const uint8_t *vb = (const uint8_t *)v + (size_t)p0 * ld;
        /* the first pass over the block asks for the next block's rows */
        const size_t pfd = p0 + LQ_ATT_BLOCK < npos ? (size_t)LQ_ATT_BLOCK * ld : 0;
        int g = 0;
        while (g < nq) {
            const int nh = nq - g >= 4 ? 4 : nq - g >= 2 ? 2 : 1;
            const float *qs[4];
            float *o[4];
            for (int h = 0; h < nh; h++) {
                qs[h] = qbuf + (size_t)(g + h) * hd;
                o[h] = out + (size_t)(g + h) * ldo;
            }
            const size_t pf = g ? 0 : pfd;
            if (nh == 4)
                block_n(qs, kb, vb, ld, T, nb, hd, NV, 4, mx + g, sum + g, o, s4, pf);
            else if (nh == 2)
                block_n(qs, kb, vb, ld, T, nb, hd, NV, 2, mx + g, sum + g, o, s4, pf);
            else
                block_n(qs, kb, vb, ld, T, nb, hd, NV, 1, mx + g, sum + g, o, s4, pf);
            g += nh;
        }
    }
    for (int g = 0; g < nq; g++) {
        float *og = out + (size_t)g * ldo;
        const __m256 inv = _mm256_set1_ps(1.0f / sum[g]);
        for (int i = 0; i < hd; i += 8)
            _mm256_storeu_ps(og + i, _mm256_mul_ps(_mm256_loadu_ps(og + i), inv));
        if (ml) {
            ml[2 * g] = mx[g];
            ml[2 * g + 1] = sum[g];
        }
    }
}

void lq_attn_avx2(const float *q, size_t ldq, int nq, const void *k, const void *v, size_t ld, int kv_type,
                  int npos, int hd, float scale, float *out, size_t ldo, float *ml)
{
    /* heads wider than the query buffer, or not whole vectors / q8 blocks: the reference */
    if (hd % 8 || hd > 128 || (kv_type == LQ_KVT_Q8 && hd % LQ_KV_Q8_BLOCK) || npos < 1) {
        lq_attn_group_scalar(q, ldq, nq, k, v, ld, kv_type, npos, hd, scale, out, ldo, ml);
        return;
    }
    for (int g0 = 0; g0 < nq; g0 += LQ_ATT_MAX_GROUP) {
        const int n = nq - g0 < LQ_ATT_MAX_GROUP ? nq - g0 : LQ_ATT_MAX_GROUP;
        const float *qg = q + (size_t)g0 * ldq;
        float *og = out + (size_t)g0 * ldo;
        float *mg = ml ? ml + 2 * g0 : NULL;
        /* one instance per kv type and common width (64, 128), so that the row loads compile
         * to one form and the accumulators stay in registers */
#define ATT_T(T)                                                                                   \
    do {                                                                                           \
        if (hd == 128)                                                                             \
            attn_t(qg, ldq, n, k, v, ld, T, npos, 128, 16, scale, og, ldo, mg);                    \
        else if (hd == 64)                                                                         \
            attn_t(qg, ldq, n, k, v, ld, T, npos, 64, 8, scale, og, ldo, mg);                      \
        else                                                                                       \
            attn_t(qg, ldq, n, k, v, ld, T, npos, hd, hd / 8, scale, og, ldo, mg);                 \
    } while (0)
        if (kv_type == LQ_KVT_F16)
            ATT_T(LQ_KVT_F16);
        else if (kv_type == LQ_KVT_Q8)
            ATT_T(LQ_KVT_Q8);
        else
            ATT_T(LQ_KVT_F32);
#undef ATT_T
    }
}
