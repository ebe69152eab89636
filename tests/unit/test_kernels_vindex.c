/* The vindex kernels of every kernel set against the scalar reference, on random shapes with
 * ragged tails (hidden sizes that are not multiples of 8, 16, 64 or 256, odd row ranges,
 * 1..6 queries): gate scores within float tolerance of the double-summed reference (and the
 * AVX-512 set's grouping invariance the prefilter relies on), sketches bit for bit (codes and
 * integer scores; the scale within 1e-5), and the down_meta int8 GEMM's candidate lists bit
 * for bit. Sets this CPU lacks are skipped; the scalar reference itself gets known answers. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "harness.h"
#include "kernels/kernels.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rndf(void) /* [-1, 1) */
{
    return (float)((int32_t)(rnd() % 2000000) - 1000000) / 1000000.0f;
}

static const lq_kernels *simd_sets[2];
static const char *simd_names[2] = {"avx2", "avx512"};

/* Gate rows [n, d]: f32 copy (the values the f16 rows hold, when f16) and f16 copy. */
typedef struct rows_t {
    float *f32;     /* [n, d] */
    uint16_t *f16;  /* [n, d] */
} rows_t;

static rows_t make_rows(size_t n, size_t d, int f16, int trit)
{
    rows_t r = {malloc(n * d * sizeof(float)), malloc(n * d * sizeof(uint16_t))};
    for (size_t i = 0; i < n * d; i++) {
        float v = trit ? (float)((int)(rnd() % 3) - 1) : rndf();
        r.f16[i] = lq_f32_to_f16(v);
        r.f32[i] = f16 ? lq_f16_to_f32(r.f16[i]) : v;
    }
    return r;
}

static const void *rows_ptr(const rows_t *r, int f16) { return f16 ? (const void *)r->f16 : (const void *)r->f32; }

/* ---- gate scores ---- */

static const size_t gate_dims[] = {1, 7, 8, 15, 16, 17, 37, 63, 64, 65, 128, 259, 2560};

static int check_gate_case(const lq_kernels *k, size_t d, int f16, size_t n, size_t nq)
{
    rows_t rw = make_rows(n, d, f16, 0);
    float *Q = malloc(nq * d * sizeof *Q);
    for (size_t i = 0; i < nq * d; i++)
        Q[i] = rndf();
    size_t os = n + rnd() % 3; /* out stride wider than the rows */
    float *a = malloc(nq * os * sizeof *a), *b = malloc(nq * os * sizeof *b);
    const float sentinel = 12345.0f;
    for (size_t i = 0; i < nq * os; i++)
        a[i] = b[i] = sentinel;
    /* a ragged row range: only its rows are written */
    size_t r0 = n > 2 ? rnd() % (n / 2) : 0, r1 = n - (n > 3 ? rnd() % (n / 3) : 0);
    lq_kernels_scalar.gate_scores(rows_ptr(&rw, f16), f16, d, r0, r1, Q, nq, a, os);
    k->gate_scores(rows_ptr(&rw, f16), f16, d, r0, r1, Q, nq, b, os);
    int ok = 1;
    for (size_t q = 0; q < nq; q++)
        for (size_t r = 0; r < os; r++) {
            float x = a[q * os + r], y = b[q * os + r];
            if (r < r0 || r >= r1) {
                ok &= x == sentinel && y == sentinel;
                continue;
            }
            double mag = 0; /* Σ|w·x|: the size of the sum's rounding error */
            for (size_t i = 0; i < d; i++)
                mag += fabs((double)rw.f32[r * d + i] * Q[q * d + i]);
            ok &= fabs((double)x - y) <= 1e-5 * mag + 1e-6;
        }
    if (!ok)
        printf("#   %s gate d=%zu f16=%d n=%zu nq=%zu rows [%zu, %zu) differ\n", k->name, d, f16, n, nq, r0, r1);
    free(rw.f32), free(rw.f16), free(Q), free(a), free(b);
    return ok;
}

static void run_gate(int si)
{
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    int bad = 0, n = 0;
    for (size_t di = 0; di < sizeof gate_dims / sizeof *gate_dims; di++)
        for (int f16 = 0; f16 < 2; f16++)
            for (size_t nq = 1; nq <= 6; nq++, n++)
                bad += !check_gate_case(k, gate_dims[di], f16, 5 + rnd() % 20, nq);
    CHECK_MSG(bad == 0, "%d of %d gate score cases differ from scalar", bad, n);
}
static void test_gate_avx2(void) { run_gate(0); }
static void test_gate_avx512(void) { run_gate(1); }

/* The AVX-512 set scores every (row, query) in the same order however rows and queries are
 * grouped (a row alone, one query alone, odd ranges): the prefilter re-scores single rows
 * and must match a full scan bit for bit. */
static void test_gate_avx512_grouping(void)
{
    const lq_kernels *k = simd_sets[1];
    if (!k)
        SKIP("CPU lacks the avx512 kernel set");
    for (size_t di = 0; di < sizeof gate_dims / sizeof *gate_dims; di++)
        for (int f16 = 0; f16 < 2; f16++) {
            size_t d = gate_dims[di], n = 23, nq = 6, esz = f16 ? 2 : 4;
            rows_t rw = make_rows(n, d, f16, 0);
            float *Q = malloc(nq * d * sizeof *Q), *b = malloc(nq * n * sizeof *b), *c = calloc(nq * n, sizeof *c);
            for (size_t i = 0; i < nq * d; i++)
                Q[i] = rndf();
            const uint8_t *rows = rows_ptr(&rw, f16);
            k->gate_scores(rows, f16, d, 0, n, Q, nq, b, n);
            size_t same = 0;
            for (size_t row = 0; row < n; row++)
                for (size_t q = 0; q < nq; q++) {
                    float one;
                    k->gate_scores(rows + row * d * esz, f16, d, 0, 1, Q + q * d, 1, &one, 1);
                    same += memcmp(&one, &b[q * n + row], 4) == 0;
                }
            CHECK_MSG(same == n * nq, "d=%zu f16=%d: %zu of %zu single-row scores differ", d, f16, n * nq - same,
                      n * nq);
            k->gate_scores(rows, f16, d, 3, 18, Q + d, nq - 1, c + n, n);
            same = 0;
            for (size_t q = 1; q < nq; q++)
                for (size_t row = 0; row < n; row++)
                    same += row < 3 || row >= 18 ? c[q * n + row] == 0
                                                 : memcmp(&c[q * n + row], &b[q * n + row], 4) == 0;
            CHECK_MSG(same == (nq - 1) * n, "d=%zu f16=%d: a sub-range scores differently", d, f16);
            free(rw.f32), free(rw.f16), free(Q), free(b), free(c);
        }
}

/* ---- sketches ---- */

static const size_t sketch_dims[] = {1, 100, 208, 256, 300, 513, 2560};

/* Builds the sketches of N rows with set k and with the scalar reference, scores them for
 * nq queries over a ragged row range with both; returns 1 if codes and scores are identical
 * and the scales agree within 1e-5. */
static int check_sketch_case(const lq_kernels *k, size_t d, int f16, int trit, size_t N, size_t nq)
{
    size_t dp = lq_sketch_dp(d), rb = dp / 4;
    rows_t rw = make_rows(N, d, f16, trit);
    float *Q = malloc(nq * d * sizeof *Q);
    for (size_t i = 0; i < nq * d; i++)
        Q[i] = rndf();
    uint8_t *ca = malloc(N * rb), *cb = malloc(N * rb);
    float *sa = malloc(N * sizeof *sa), *sb = malloc(N * sizeof *sb);
    int ina = 0, inb = 0;
    const uint8_t *rows = rows_ptr(&rw, f16);
    for (size_t r = 0; r < N; r++) {
        lq_kernels_scalar.sketch_row(rows + r * d * (f16 ? 2 : 4), f16, d, ca + r * rb, &sa[r], &ina);
        k->sketch_row(rows + r * d * (f16 ? 2 : 4), f16, d, cb + r * rb, &sb[r], &inb);
    }
    int ok = ina == inb && !memcmp(ca, cb, N * rb);
    for (size_t r = 0; r < N; r++)
        ok &= fabsf(sa[r] - sb[r]) <= 1e-5f * fabsf(sa[r]);
    int8_t *q8 = malloc(nq * dp);
    float *qs = malloc(nq * sizeof *qs);
    int32_t *qsum = malloc(nq * sizeof *qsum);
    lq_sketch_quant_queries(Q, nq, d, q8, qs, qsum);
    float *oa = malloc(nq * N * sizeof *oa), *ob = malloc(nq * N * sizeof *ob);
    memset(oa, 0, nq * N * sizeof *oa);
    memset(ob, 0, nq * N * sizeof *ob);
    size_t r0 = N > 2 ? rnd() % (N / 2) : 0, r1 = N - (N > 3 ? rnd() % (N / 3) : 0);
    lq_kernels_scalar.sketch_scores(ca, sa, dp, r0, r1, q8, qs, qsum, nq, oa, N);
    k->sketch_scores(ca, sa, dp, r0, r1, q8, qs, qsum, nq, ob, N);
    ok &= !memcmp(oa, ob, nq * N * sizeof *oa);
    if (!ok)
        printf("#   %s sketch d=%zu f16=%d trit=%d N=%zu nq=%zu rows [%zu, %zu) differ\n", k->name, d, f16, trit, N,
               nq, r0, r1);
    free(rw.f32), free(rw.f16), free(Q), free(ca), free(cb), free(sa), free(sb), free(q8), free(qs), free(qsum);
    free(oa), free(ob);
    return ok;
}

static void run_sketch(int si)
{
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    int bad = 0, n = 0;
    for (size_t di = 0; di < sizeof sketch_dims / sizeof *sketch_dims; di++)
        for (int f16 = 0; f16 < 2; f16++)
            for (int trit = 0; trit < 2; trit++)
                for (size_t nq = 1; nq <= 6; nq++, n++)
                    bad += !check_sketch_case(k, sketch_dims[di], f16, trit, 3 + rnd() % 20, nq);
    CHECK_MSG(bad == 0, "%d of %d sketch cases differ from scalar", bad, n);
}
static void test_sketch_avx2(void) { run_sketch(0); }
static void test_sketch_avx512(void) { run_sketch(1); }

/* The reference's scores approximate the exact dot products: exactly the trits (scale 1,
 * never inexact) for unit-trit rows up to the int8 query rounding (<= 0.5 qs per component);
 * real-valued rows are flagged inexact. */
static void test_sketch_scalar_approximates(void)
{
    for (size_t di = 0; di < sizeof sketch_dims / sizeof *sketch_dims; di++)
        for (int f16 = 0; f16 < 2; f16++)
            for (int trit = 0; trit < 2; trit++) {
                size_t d = sketch_dims[di], dp = lq_sketch_dp(d), N = 9, nq = 6;
                rows_t rw = make_rows(N, d, f16, trit);
                float *Q = malloc(nq * d * sizeof *Q);
                for (size_t i = 0; i < nq * d; i++)
                    Q[i] = rndf();
                uint8_t *codes = malloc(N * dp / 4);
                float s[9], out[6 * 9], qs[6];
                int8_t *q8 = malloc(nq * dp);
                int32_t qsum[6];
                int inexact = 0;
                for (size_t r = 0; r < N; r++)
                    lq_kernels_scalar.sketch_row((const uint8_t *)rows_ptr(&rw, f16) + r * d * (f16 ? 2 : 4), f16, d,
                                                 codes + r * dp / 4, &s[r], &inexact);
                lq_sketch_quant_queries(Q, nq, d, q8, qs, qsum);
                lq_kernels_scalar.sketch_scores(codes, s, dp, 0, N, q8, qs, qsum, nq, out, N);
                if (trit) {
                    /* an all-zero row has no kept component: scale 0; d = 1 may draw one */
                    CHECK_EQ_INT(inexact, 0);
                    double worst = 0;
                    for (size_t q = 0; q < nq; q++)
                        for (size_t r = 0; r < N; r++) {
                            double e = 0;
                            for (size_t i = 0; i < d; i++)
                                e += (double)rw.f32[r * d + i] * Q[q * d + i];
                            worst = fmax(worst, fabs((double)out[q * N + r] - e) / (qs[q] * (double)d));
                        }
                    CHECK_MSG(worst <= 0.5, "d=%zu f16=%d: sketch score off by %g qs*d", d, f16, worst);
                    for (size_t r = 0; r < N; r++)
                        CHECK(s[r] == 1.0f || s[r] == 0.0f);
                } else if (d > 1) {
                    CHECK_EQ_INT(inexact, 1);
                }
                free(rw.f32), free(rw.f16), free(Q), free(codes), free(q8);
            }
}

/* Known answers: codes of a 3-component row in the block layout, padding code 1. */
static void test_sketch_scalar_known(void)
{
    CHECK_EQ_INT(lq_sketch_dp(1), 256);
    CHECK_EQ_INT(lq_sketch_dp(256), 256);
    CHECK_EQ_INT(lq_sketch_dp(257), 512);
    /* mean |g| = 1, threshold 0.5: 2 -> +1, -0.4 -> 0, -0.6 -> -1; kept magnitudes 2, 0.6 */
    float row[3] = {2.0f, -0.4f, -0.6f};
    uint8_t codes[64];
    float s;
    int inexact = 0;
    lq_kernels_scalar.sketch_row(row, 0, 3, codes, &s, &inexact);
    CHECK_EQ_INT(codes[0], 0x54 | 2); /* component 0 in bits 0-1 of byte 0: t + 1 = 2 */
    CHECK_EQ_INT(codes[1], 0x55);     /* component 1: trit 0 */
    CHECK_EQ_INT(codes[2], 0x54 | 0); /* component 2: t + 1 = 0 */
    CHECK_EQ_INT(codes[63], 0x55);
    CHECK_NEAR(s, 1.3, 1e-6);
    CHECK_EQ_INT(inexact, 1);
    /* queries: amax 2 -> qs = 2/127, -0.5 -> round(-31.75) = -32, padding zeros */
    float q[3] = {2.0f, -0.5f, 0.0f};
    int8_t q8[256];
    float qs;
    int32_t qsum;
    lq_sketch_quant_queries(q, 1, 3, q8, &qs, &qsum);
    CHECK_EQ_INT(q8[0], 127);
    CHECK_EQ_INT(q8[1], -32);
    CHECK_EQ_INT(q8[2], 0);
    CHECK_EQ_INT(q8[255], 0);
    CHECK_EQ_INT(qsum, 95);
    CHECK_NEAR(qs, 2.0f / 127.0f, 0);
    float zero[3] = {0, 0, 0};
    lq_sketch_quant_queries(zero, 1, 3, q8, &qs, &qsum);
    CHECK(qs == 0 && qsum == 0 && q8[0] == 0);
}

/* ---- down_meta int8 GEMM ---- */

/* Packs V random embedding rows [V, d] into Ep [Vp/16][D4/4][16][4] with escale [Vp]. */
static void pack_embedding(const float *E, int V, int d, int Vp, int D4, uint8_t *Ep, float *escale)
{
    for (int v = 0; v < Vp; v++)
        escale[v] = lq_dm_pack_row(v < V ? E + (size_t)v * d : NULL, d, D4, Ep + (size_t)(v / 16) * D4 * 16, v % 16);
}

static int check_dm_case(const lq_kernels *k, int V, int d, int F, int Kc, int vblock)
{
    int Vp = (V + 31) / 32 * 32, D4 = (d + 3) / 4 * 4, Fp = (F + 11) / 12 * 12;
    float *E = malloc((size_t)V * d * sizeof *E);
    for (size_t i = 0; i < (size_t)V * d; i++)
        E[i] = rndf() * (1 + (float)(rnd() % 4)); /* rows of different scales */
    if (V > 3)
        memset(E + (size_t)2 * d, 0, (size_t)d * sizeof *E); /* an all-zero row: scale 0 */
    uint8_t *Ep = malloc((size_t)Vp * D4), *keep = malloc((size_t)V);
    float *escale = malloc((size_t)Vp * sizeof *escale);
    pack_embedding(E, V, d, Vp, D4, Ep, escale);
    for (int v = 0; v < V; v++)
        keep[v] = rnd() % 5 != 0;
    int8_t *Bt = calloc((size_t)Fp * D4, 1);
    int32_t *colsum = calloc((size_t)Fp, sizeof *colsum);
    for (int f = 0; f < F; f++)
        for (int i = 0; i < d; i++) {
            int t = (int)(rnd() % 3) - 1;
            Bt[(size_t)f * D4 + i] = (int8_t)t;
            colsum[f] += t;
        }
    size_t nc = (size_t)Fp * Kc;
    uint32_t *ia = malloc(nc * sizeof *ia), *ib = malloc(nc * sizeof *ib);
    float *va = malloc(nc * sizeof *va), *vb = malloc(nc * sizeof *vb);
    for (size_t i = 0; i < nc; i++)
        ia[i] = ib[i] = 0, va[i] = vb[i] = -INFINITY;
    /* vocabulary blocks in order, as the builder's threads walk them */
    for (int v0 = 0; v0 < Vp; v0 += vblock) {
        int nv = Vp - v0 < vblock ? Vp - v0 : vblock;
        lq_dm_block_scalar(Ep, escale, keep, V, v0, nv, Bt, colsum, Fp, D4, Kc, ia, va);
        k->dm_block(Ep, escale, keep, V, v0, nv, Bt, colsum, Fp, D4, Kc, ib, vb);
    }
    int ok = !memcmp(ia, ib, nc * sizeof *ia) && !memcmp(va, vb, nc * sizeof *va);
    /* the reference keeps the best approximate logits: check feature 0 by brute force */
    float best = -INFINITY;
    for (int v = 0; v < V; v++) {
        if (!keep[v])
            continue;
        int32_t dot = 0;
        for (int i = 0; i < D4; i++)
            dot += ((int32_t)Ep[(size_t)(v / 16) * D4 * 16 + (size_t)(i / 4) * 64 + (size_t)(v % 16) * 4 + i % 4] -
                    128) * Bt[i];
        float x = (float)dot * escale[v];
        best = x > best ? x : best;
    }
    ok &= va[0] == best;
    if (!ok)
        printf("#   %s dm V=%d d=%d F=%d Kc=%d vblock=%d differs\n", k->name, V, d, F, Kc, vblock);
    free(E), free(Ep), free(keep), free(escale), free(Bt), free(colsum), free(ia), free(ib), free(va), free(vb);
    return ok;
}

static void test_dm_sets(void)
{
    int have = 0;
    for (int si = 0; si < 2; si++) {
        const lq_kernels *k = simd_sets[si];
        if (!k || !k->dm_block)
            continue;
        have++;
        static const int Vs[] = {5, 37, 100, 250}, ds[] = {3, 64, 130, 257}, Fs[] = {1, 13, 30}, Kcs[] = {1, 4, 40};
        int bad = 0, n = 0;
        for (size_t a = 0; a < 4; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 3; c++, n++)
                    bad += !check_dm_case(k, Vs[a], ds[b], Fs[c], Kcs[(a + b + c) % 3], (a + c) % 2 ? 32 : 128);
        CHECK_MSG(bad == 0, "%s: %d of %d down_meta cases differ from scalar", k->name, bad, n);
    }
    if (!have)
        SKIP("no kernel set on this CPU has an int8 down_meta GEMM");
}

/* Known answers of the packer: lane layout, the +128 offset, rounding, padding. */
static void test_dm_pack_known(void)
{
    int D4 = 8;
    uint8_t panel[8 * 16];
    memset(panel, 0xEE, sizeof panel);
    float x[5] = {1.27f, -0.5f, 0.004f, 0.0f, -1.27f}; /* scale 0.01: 127, -50, 0.4 -> 0, 0, -127 */
    float s = lq_dm_pack_row(x, 5, D4, panel, 3);
    CHECK_NEAR(s, 0.01, 1e-9);
    CHECK_EQ_INT(panel[3 * 4 + 0], 128 + 127);
    CHECK_EQ_INT(panel[3 * 4 + 1], 128 - 50);
    CHECK_EQ_INT(panel[3 * 4 + 2], 128);
    CHECK_EQ_INT(panel[3 * 4 + 3], 128);
    CHECK_EQ_INT(panel[64 + 3 * 4 + 0], 128 - 127); /* component 4: second 4-step */
    CHECK_EQ_INT(panel[64 + 3 * 4 + 1], 128);       /* components past d: zero */
    CHECK_EQ_INT(panel[2 * 4], 0xEE);               /* other lanes untouched */
    CHECK(lq_dm_pack_row(NULL, 5, D4, panel, 0) == 0.0f && panel[0] == 128 && panel[64 + 3] == 128);
}

/* ---- the table ---- */

static void test_table_complete(void)
{
    CHECK(lq_kernels_is_name("scalar") && lq_kernels_is_name("avx2") && lq_kernels_is_name("avx512"));
    CHECK(!lq_kernels_is_name("avx") && !lq_kernels_is_name(NULL) && !lq_kernels_is_name(""));
    const lq_kernels *sets[3] = {&lq_kernels_scalar, simd_sets[0], simd_sets[1]};
    for (int i = 0; i < 3; i++)
        if (sets[i])
            CHECK_MSG(sets[i]->gate_scores && sets[i]->sketch_row && sets[i]->sketch_scores, "%s", sets[i]->name);
    CHECK(lq_kernels_scalar.dm_block == NULL); /* the builder's reference path is the f32 scan */
}

int main(void)
{
    simd_sets[0] = lq_kernels_by_name("avx2");
    simd_sets[1] = lq_kernels_by_name("avx512");
    RUN(test_table_complete);
    RUN(test_sketch_scalar_known);
    RUN(test_sketch_scalar_approximates);
    RUN(test_dm_pack_known);
    RUN(test_gate_avx2);
    RUN(test_gate_avx512);
    RUN(test_gate_avx512_grouping);
    RUN(test_sketch_avx2);
    RUN(test_sketch_avx512);
    RUN(test_dm_sets);
    return harness_done();
}
