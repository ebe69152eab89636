/* Kernel sets against the scalar reference: i2s_i8 and quant_i8 bit for bit, i2s_f32 and
 * dense within 1e-5 of Σ|w·x| (the size of the sum's rounding error, so near-cancelling
 * rows are judged fairly). The vindex kernels on ragged shapes (hidden sizes that are not
 * multiples of 8, 16, 64 or 256, odd row ranges, 1..6 queries): gate scores within float
 * tolerance (and the AVX-512 set's grouping invariance), sketches and the down_meta GEMM bit
 * for bit. The roofline probes. Sets this CPU lacks are skipped. Also known answers for the
 * scalar reference itself (worked I2_S example, ties, amax = 0, sketch and packer layouts)
 * and the dispatcher. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/f16.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "larql/gguf.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rndf(void) /* [-1, 1) */
{
    return (float)((int32_t)rnd() % 1000000) / 1000000.0f;
}

static const uint8_t sentinel_byte = 0xA5; /* fills Y outside the rows a kernel may write */

/* rows x cols I2_S matrix (codes 0..2 only), some all-zero rows (code 1 everywhere). */
static uint8_t *rand_i2s(int64_t rows, int64_t cols)
{
    uint8_t *d = malloc((size_t)(rows * cols / 4));
    for (int64_t r = 0; r < rows; r++) {
        int zero_row = rnd() % 5 == 0;
        for (int64_t i = 0; i < cols / 4; i++) {
            uint8_t b = 0;
            for (int k = 0; k < 4; k++)
                b = (uint8_t)(b << 2 | (zero_row ? 1 : rnd() % 3));
            d[r * cols / 4 + i] = b;
        }
    }
    return d;
}

static const lq_kernels *simd_sets[2];
static const char *simd_names[2] = {"avx2", "avx512"};

/* ---- i2s_i8 ---- */

static int check_i2s_i8_case(const lq_kernels *k, int64_t rows, int64_t cols, int T, int64_t r0,
                             int64_t r1)
{
    size_t ldx = (size_t)cols + (rnd() % 3) * 64 + (rnd() % 2) * 7;
    size_t ldy = (size_t)rows + rnd() % 5;
    uint8_t *wd = rand_i2s(rows, cols);
    lq_i2s_mat w = {wd, rows, cols, 0.5f + rndf()};
    int8_t *xq = malloc(ldx * T);
    float inv[8];
    int32_t xsum[8];
    for (int t = 0; t < T; t++) {
        int32_t s = 0;
        for (size_t c = 0; c < ldx; c++) {
            int8_t v = (int8_t)(rnd() & 0xff); /* includes -128 */
            if (rnd() % 50 == 0)
                v = -128;
            xq[t * ldx + c] = v;
            if ((int64_t)c < cols)
                s += v;
        }
        xsum[t] = s;
        inv[t] = ldexpf(1.0f + rndf(), -(int)(rnd() % 12));
    }
    size_t ny = ldy * T;
    float *y_ref = malloc(ny * sizeof(float)), *y = malloc(ny * sizeof(float));
    memset(y_ref, sentinel_byte, ny * sizeof(float));
    memset(y, sentinel_byte, ny * sizeof(float));
    lq_kernels_scalar.i2s_i8(&w, xq, ldx, inv, xsum, T, y_ref, ldy, r0, r1);
    k->i2s_i8(&w, xq, ldx, inv, xsum, T, y, ldy, r0, r1);
    int ok = memcmp(y, y_ref, ny * sizeof(float)) == 0;
    if (!ok) {
        for (size_t i = 0; i < ny; i++)
            if (memcmp(&y[i], &y_ref[i], 4)) {
                printf("#   %s i2s_i8 rows=%lld cols=%lld T=%d [%lld,%lld): y[%zu] %.9g vs %.9g\n",
                       k->name, (long long)rows, (long long)cols, T, (long long)r0, (long long)r1,
                       i, y[i], y_ref[i]);
                break;
            }
    }
    free(wd);
    free(xq);
    free(y_ref);
    free(y);
    return ok;
}

static const int64_t row_set[] = {1, 2, 3, 5, 7, 17, 64, 67};
static const int64_t col_set[] = {128, 256, 384};
static const int t_set[] = {1, 2, 3, 4, 5, 8};

static void run_i2s_i8(int si)
{
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    int bad = 0, n = 0;
    for (size_t a = 0; a < sizeof row_set / sizeof *row_set; a++)
        for (size_t b = 0; b < sizeof col_set / sizeof *col_set; b++)
            for (size_t c = 0; c < sizeof t_set / sizeof *t_set; c++) {
                int64_t rows = row_set[a];
                bad += !check_i2s_i8_case(k, rows, col_set[b], t_set[c], 0, rows);
                /* a range that is not a multiple of the 4-row tile */
                int64_t r0 = rows / 3, r1 = rows - rows / 4;
                if (r1 > r0)
                    bad += !check_i2s_i8_case(k, rows, col_set[b], t_set[c], r0, r1);
                n += 2;
            }
    bad += !check_i2s_i8_case(k, 67, 2560, 5, 1, 66);
    CHECK_MSG(bad == 0, "%d of %d i2s_i8 cases differ from scalar", bad, n + 1);
}
static void test_i2s_i8_avx2(void) { run_i2s_i8(0); }
static void test_i2s_i8_avx512(void) { run_i2s_i8(1); }

/* ---- quant_i8 ---- */

static int check_quant(const lq_kernels *k, const float *x, int64_t n, const char *what)
{
    int8_t *q0 = malloc((size_t)n + 64), *q1 = malloc((size_t)n + 64);
    memset(q0, 0x5a, (size_t)n + 64);
    memset(q1, 0x5a, (size_t)n + 64); /* bytes past n must stay untouched */
    float i0, i1;
    int32_t s0, s1;
    lq_kernels_scalar.quant_i8(x, n, q0, &i0, &s0);
    k->quant_i8(x, n, q1, &i1, &s1);
    int ok = !memcmp(q0, q1, (size_t)n + 64) && !memcmp(&i0, &i1, 4) && s0 == s1;
    if (!ok)
        printf("#   %s quant_i8 %s n=%lld: inv %.9g vs %.9g, sum %d vs %d\n", k->name, what,
               (long long)n, i1, i0, s1, s0);
    free(q0);
    free(q1);
    return ok;
}

static void run_quant(int si)
{
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    static const int64_t ns[] = {1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 128, 300, 2560, 6912};
    float *x = malloc(6912 * sizeof(float));
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
        int64_t n = ns[a];
        for (int64_t i = 0; i < n; i++)
            x[i] = rndf() * 10.0f;
        CHECK(check_quant(k, x, n, "random"));
        /* ties: amax = 127 makes s = 1 exactly, so v + 0.5 lands on .5 after scaling */
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)((int)(rnd() % 254) - 127) + 0.5f;
        x[rnd() % n] = 127.0f;
        CHECK(check_quant(k, x, n, "ties"));
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.0f;
        CHECK(check_quant(k, x, n, "zeros"));
        for (int64_t i = 0; i < n; i++)
            x[i] = rndf() * 3e-6f; /* amax below the 1e-5 floor */
        CHECK(check_quant(k, x, n, "tiny"));
        for (int64_t i = 0; i < n; i++)
            x[i] = rndf();
        x[rnd() % n] = NAN;
        CHECK(check_quant(k, x, n, "nan"));
        x[rnd() % n] = -INFINITY;
        CHECK(check_quant(k, x, n, "inf"));
    }
    free(x);
}
static void test_quant_avx2(void) { run_quant(0); }
static void test_quant_avx512(void) { run_quant(1); }

/* ---- i2s_f32 and dense (tolerance) ---- */

/* |y - y_ref| <= 1e-5 * mag + 1e-30 for rows in [r0, r1); sentinel elsewhere untouched. */
static int compare_tol(const char *what, const lq_kernels *k, const float *y, const float *y_ref,
                       const float *mag, size_t ldy, int T, int64_t rows, int64_t r0, int64_t r1)
{
    for (int t = 0; t < T; t++)
        for (int64_t r = 0; r < (int64_t)ldy; r++) {
            size_t i = (size_t)t * ldy + (size_t)r;
            int inside = r >= r0 && r < r1;
            if (inside ? !(fabsf(y[i] - y_ref[i]) <= 1e-5f * mag[i] + 1e-30f)
                       : memcmp(&y[i], &y_ref[i], 4) != 0) {
                printf("#   %s %s rows=%lld T=%d [%lld,%lld): y[%d][%lld] %.9g vs %.9g (mag %g)\n",
                       k->name, what, (long long)rows, T, (long long)r0, (long long)r1, t,
                       (long long)r, y[i], y_ref[i], inside ? mag[i] : 0.0f);
                return 0;
            }
        }
    return 1;
}

static int check_i2s_f32_case(const lq_kernels *k, int64_t rows, int64_t cols, int T, int64_t r0,
                              int64_t r1)
{
    size_t ldx = (size_t)cols + (rnd() % 3) * 16 + (rnd() % 2) * 3;
    size_t ldy = (size_t)rows + rnd() % 5;
    uint8_t *wd = rand_i2s(rows, cols);
    lq_i2s_mat w = {wd, rows, cols, 0.5f + rndf()};
    float *x = malloc(ldx * T * sizeof(float));
    for (size_t i = 0; i < ldx * T; i++)
        x[i] = rndf() * 4.0f;
    size_t ny = ldy * T;
    float *y_ref = malloc(ny * 4), *y = malloc(ny * 4), *mag = calloc(ny, 4);
    memset(y_ref, sentinel_byte, ny * 4);
    memset(y, sentinel_byte, ny * 4);
    for (int t = 0; t < T; t++)
        for (int64_t r = r0; r < r1; r++) {
            float m = 0;
            for (int64_t c = 0; c < cols; c++)
                m += fabsf(x[t * ldx + c]);
            mag[t * ldy + r] = m * fabsf(w.scale);
        }
    lq_kernels_scalar.i2s_f32(&w, x, ldx, T, y_ref, ldy, r0, r1);
    k->i2s_f32(&w, x, ldx, T, y, ldy, r0, r1);
    int ok = compare_tol("i2s_f32", k, y, y_ref, mag, ldy, T, rows, r0, r1);
    free(wd);
    free(x);
    free(y_ref);
    free(y);
    free(mag);
    return ok;
}

static void run_i2s_f32(int si)
{
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    int bad = 0;
    for (size_t a = 0; a < sizeof row_set / sizeof *row_set; a++)
        for (size_t b = 0; b < sizeof col_set / sizeof *col_set; b++)
            for (size_t c = 0; c < sizeof t_set / sizeof *t_set; c++) {
                int64_t rows = row_set[a];
                bad += !check_i2s_f32_case(k, rows, col_set[b], t_set[c], 0, rows);
                int64_t r0 = rows / 3, r1 = rows - rows / 4;
                if (r1 > r0)
                    bad += !check_i2s_f32_case(k, rows, col_set[b], t_set[c], r0, r1);
            }
    bad += !check_i2s_f32_case(k, 17, 2560, 5, 2, 15);
    CHECK_EQ_INT(bad, 0);
}
static void test_i2s_f32_avx2(void) { run_i2s_f32(0); }
static void test_i2s_f32_avx512(void) { run_i2s_f32(1); }

static int check_dense_case(const lq_kernels *k, int type, int64_t rows, int64_t cols, int T,
                            int64_t r0, int64_t r1)
{
    size_t es = type == LQ_GGML_F32 ? 4 : 2;
    size_t ldx = (size_t)cols + rnd() % 9;
    size_t ldy = (size_t)rows + rnd() % 5;
    void *wd = malloc((size_t)(rows * cols) * es);
    float *wf = malloc((size_t)(rows * cols) * 4); /* the same weights as f32, for mag */
    for (int64_t i = 0; i < rows * cols; i++) {
        float v = rndf() * 2.0f;
        if (type == LQ_GGML_F32) {
            ((float *)wd)[i] = v;
            wf[i] = v;
        } else if (type == LQ_GGML_F16) {
            uint16_t h = lq_f32_to_f16(v);
            ((uint16_t *)wd)[i] = h;
            wf[i] = lq_f16_to_f32(h);
        } else {
            uint32_t bits;
            memcpy(&bits, &v, 4);
            ((uint16_t *)wd)[i] = (uint16_t)(bits >> 16);
            wf[i] = lq_bf16_to_f32((uint16_t)(bits >> 16));
        }
    }
    lq_dense_mat w = {wd, rows, cols, type};
    float *x = malloc(ldx * T * 4);
    for (size_t i = 0; i < ldx * T; i++)
        x[i] = rndf();
    size_t ny = ldy * T;
    float *y_ref = malloc(ny * 4), *y = malloc(ny * 4), *mag = calloc(ny, 4);
    memset(y_ref, sentinel_byte, ny * 4);
    memset(y, sentinel_byte, ny * 4);
    for (int t = 0; t < T; t++)
        for (int64_t r = r0; r < r1; r++) {
            float m = 0;
            for (int64_t c = 0; c < cols; c++)
                m += fabsf(wf[r * cols + c] * x[t * ldx + c]);
            mag[t * ldy + r] = m;
        }
    lq_kernels_scalar.dense(&w, x, ldx, T, y_ref, ldy, r0, r1);
    k->dense(&w, x, ldx, T, y, ldy, r0, r1);
    static const char *tn[] = {"dense f32", "dense f16", "dense bf16"};
    int ok = compare_tol(tn[type == LQ_GGML_F32 ? 0 : type == LQ_GGML_F16 ? 1 : 2], k, y, y_ref,
                         mag, ldy, T, rows, r0, r1);
    free(wd);
    free(wf);
    free(x);
    free(y_ref);
    free(y);
    free(mag);
    return ok;
}

static void run_dense(int si)
{
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    static const int types[] = {LQ_GGML_F32, LQ_GGML_F16, LQ_GGML_BF16};
    static const int64_t dcols[] = {1, 7, 8, 15, 16, 17, 33, 64, 100, 128, 300};
    static const int64_t drows[] = {1, 2, 3, 5, 17};
    int bad = 0;
    for (int ti = 0; ti < 3; ti++)
        for (size_t a = 0; a < sizeof drows / sizeof *drows; a++)
            for (size_t b = 0; b < sizeof dcols / sizeof *dcols; b++)
                for (size_t c = 0; c < sizeof t_set / sizeof *t_set; c++) {
                    int64_t rows = drows[a];
                    bad += !check_dense_case(k, types[ti], rows, dcols[b], t_set[c], 0, rows);
                    if (rows > 2)
                        bad += !check_dense_case(k, types[ti], rows, dcols[b], t_set[c], 1, rows - 1);
                }
    for (int ti = 0; ti < 3; ti++)
        bad += !check_dense_case(k, types[ti], 9, 2560, 3, 0, 9);
    CHECK_EQ_INT(bad, 0);
}
static void test_dense_avx2(void) { run_dense(0); }
static void test_dense_avx512(void) { run_dense(1); }

/* ---- q8_f32 (int8 per-row-scaled lm_head) ---- */

static int check_q8_case(const lq_kernels *k, int64_t rows, int64_t cols, int T, int64_t r0, int64_t r1)
{
    size_t ldx = (size_t)cols + rnd() % 9;
    size_t ldy = (size_t)rows + rnd() % 5;
    int8_t *q = malloc((size_t)(rows * cols));
    float *sc = malloc((size_t)rows * 4);
    int extreme = cols >= 2560; /* all weights and activations at their limits: int32 lanes must not overflow */
    for (int64_t i = 0; i < rows * cols; i++)
        q[i] = extreme ? (int8_t)(i % 7 == 3 ? 127 : -127) : (int8_t)((int)(rnd() % 255) - 127);
    for (int64_t r = 0; r < rows; r++)
        sc[r] = (rndf() + 1.5f) / 127.0f;
    lq_q8_mat w = {q, sc, rows, cols};
    int16_t *x = malloc(ldx * T * 2);
    float inv[8];
    for (size_t i = 0; i < ldx * T; i++)
        x[i] = extreme ? (int16_t)(i % 7 == 3 ? 32767 : -32767) : (int16_t)((int)(rnd() % 65535) - 32767);
    for (int t = 0; t < T; t++)
        inv[t] = (rndf() + 1.5f) / 32767.0f;
    size_t ny = ldy * T;
    float *y_ref = malloc(ny * 4), *y = malloc(ny * 4);
    memset(y_ref, sentinel_byte, ny * 4);
    memset(y, sentinel_byte, ny * 4);
    lq_kernels_scalar.q8_i16(&w, x, ldx, inv, T, y_ref, ldy, r0, r1);
    k->q8_i16(&w, x, ldx, inv, T, y, ldy, r0, r1);
    int ok = memcmp(y, y_ref, ny * 4) == 0; /* exact integer dots: bit-identical */
    if (!ok)
        printf("#   %s q8_i16 rows=%lld cols=%lld T=%d [%lld,%lld) differs\n", k->name, (long long)rows,
               (long long)cols, T, (long long)r0, (long long)r1);
    if (extreme && ok) { /* and the reference itself is the exact sum */
        int64_t d = 0;
        for (int64_t c = 0; c < cols; c++)
            d += (int64_t)q[r0 * cols + c] * x[c];
        ok = y_ref[r0] == (float)d * (inv[0] * sc[r0]);
    }
    free(q);
    free(sc);
    free(x);
    free(y_ref);
    free(y);
    return ok;
}

static void run_q8(int si)
{
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    static const int64_t qcols[] = {1, 7, 8, 15, 16, 17, 33, 64, 100, 128, 300};
    static const int64_t qrows[] = {1, 2, 3, 5, 17};
    int bad = 0;
    for (size_t a = 0; a < sizeof qrows / sizeof *qrows; a++)
        for (size_t b = 0; b < sizeof qcols / sizeof *qcols; b++)
            for (size_t c = 0; c < sizeof t_set / sizeof *t_set; c++) {
                int64_t rows = qrows[a];
                bad += !check_q8_case(k, rows, qcols[b], t_set[c], 0, rows);
                if (rows > 2)
                    bad += !check_q8_case(k, rows, qcols[b], t_set[c], 1, rows - 1);
            }
    bad += !check_q8_case(k, 9, 2560, 3, 0, 9);
    bad += !check_q8_case(k, 9, 2560, 1, 1, 8);
    bad += !check_q8_case(k, 3, 10000, 1, 0, 3); /* several int32 blocks */
    bad += !check_q8_case(k, 3, 10000, 5, 0, 3);
    CHECK_EQ_INT(bad, 0);
}
static void test_q8_avx2(void) { run_q8(0); }
static void test_q8_avx512(void) { run_q8(1); }

/* lq_quant_i16: scale 32767/amax, round half to even, zeros. */
static void test_quant_i16_known(void)
{
    float x[4] = {1.0f, -0.5f, 0.25f, 0.0f}, inv;
    int16_t q[4];
    lq_quant_i16(x, 4, q, &inv);
    CHECK_EQ_INT(q[0], 32767);
    CHECK_EQ_INT(q[1], -16384); /* -16383.5 -> -16384 (half to even) */
    CHECK_EQ_INT(q[2], 8192);   /* 8191.75 */
    CHECK_EQ_INT(q[3], 0);
    CHECK_NEAR(inv, 1.0 / 32767, 1e-12);
    float z[3] = {0, 0, 0};
    lq_quant_i16(z, 3, q, &inv);
    CHECK(q[0] == 0 && q[1] == 0 && q[2] == 0 && inv == 1.0f);
}

/* lq_q8_quantize_rows: scale = amax/127, round half to even, zero rows, every source type,
 * and a round trip within half a quantum of each row. */
static void test_q8_quantize_known(void)
{
    float w[3][4] = {{1.0f, -0.5f, 0.25f, 0.0f}, {0, 0, 0, 0}, {-2.54f, 0.01f, 1.27f, 0.015f}};
    lq_dense_mat d = {w, 3, 4, LQ_GGML_F32};
    int8_t q[12];
    float sc[3];
    CHECK_EQ_INT(lq_q8_quantize_rows(&d, q, sc, 0, 3), 0);
    CHECK_NEAR(sc[0], 1.0 / 127, 1e-9);
    CHECK_EQ_INT(q[0], 127);
    CHECK_EQ_INT(q[1], -64); /* -63.5 -> -64 (half to even) */
    CHECK_EQ_INT(q[2], 32);  /* 31.75 */
    CHECK_EQ_INT(q[3], 0);
    CHECK_NEAR(sc[1], 0, 0);
    CHECK(q[4] == 0 && q[5] == 0 && q[6] == 0 && q[7] == 0);
    CHECK_NEAR(sc[2], 2.54 / 127, 1e-8);
    CHECK_EQ_INT(q[8], -127);
    CHECK_EQ_INT(q[9], 0);  /* 0.5 -> 0 (half to even) */
    CHECK_EQ_INT(q[10], 64); /* 63.5 -> 64 */
    CHECK_EQ_INT(q[11], 1);  /* 0.75 */
    /* f16 source: the round trip error is at most half a quantum */
    enum { R = 5, C = 300 };
    uint16_t h[R * C];
    float f[R * C];
    for (int i = 0; i < R * C; i++) {
        h[i] = lq_f32_to_f16(rndf() * 3.0f);
        f[i] = lq_f16_to_f32(h[i]);
    }
    lq_dense_mat dh = {h, R, C, LQ_GGML_F16};
    int8_t qh[R * C];
    float sh[R];
    memset(qh, 0x55, sizeof qh);
    CHECK_EQ_INT(lq_q8_quantize_rows(&dh, qh, sh, 1, 4), 0);
    double worst = 0;
    for (int r = 1; r < 4; r++)
        for (int c = 0; c < C; c++) {
            double e = fabs(qh[r * C + c] * sh[r] - f[r * C + c]) / sh[r];
            worst = e > worst ? e : worst;
        }
    CHECK(worst <= 0.5 + 1e-4);
    CHECK(qh[0] == 0x55 && qh[4 * C] == 0x55); /* rows outside [1, 4) untouched */
    lq_dense_mat bad = {h, R, C, 99};
    CHECK_EQ_INT(lq_q8_quantize_rows(&bad, qh, sh, 0, 1), -1);
}

/* q8_bound (the bounded lm_head's copy): each set's q and scale are the reference's bit for
 * bit; err and norm are upper bounds of the true figures (long double), within the slack of
 * the reference's; a row with a NaN or an infinity gets +inf bounds; widths without a SIMD path
 * and other types go through the reference; NULL err/norm builds the copy alone. */
static void run_q8_bound(int si)
{
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    static const int64_t cols[] = {8, 16, 24, 40, 300, 2560};
    enum { R = 6 };
    int bad = 0;
    for (size_t b = 0; b < sizeof cols / sizeof *cols; b++) {
        int64_t C = cols[b];
        uint16_t *h = malloc((size_t)(R * C) * sizeof *h);
        int8_t *q0 = malloc((size_t)(R * C)), *q1 = malloc((size_t)(R * C));
        float s0[R], s1[R], e0[R], e1[R], n0[R], n1[R];
        for (int64_t i = 0; i < R * C; i++)
            h[i] = lq_f32_to_f16(rndf() * (i % 7 ? 0.05f : 2.0f));
        for (int64_t c = 0; c < C; c++)
            h[C + c] = 0; /* row 1: all zero */
        h[2 * C + C / 2] = 0x7e00; /* row 2: a NaN */
        h[3 * C + 1] = 0xfc00;     /* row 3: -inf */
        lq_dense_mat w = {h, R, C, LQ_GGML_F16};
        CHECK_EQ_INT(lq_kernels_scalar.q8_bound(&w, q0, s0, e0, n0, 0, R), 0);
        CHECK_EQ_INT(k->q8_bound(&w, q1, s1, e1, n1, 0, R), 0);
        bad += memcmp(q0, q1, (size_t)(R * C)) != 0 || memcmp(s0, s1, sizeof s0) != 0;
        for (int r = 0; r < R; r++) {
            if (r == 2 || r == 3) {
                bad += !(isinf(e1[r]) && isinf(n1[r]));
                continue;
            }
            long double te = 0, tw = 0, tq = 0;
            for (int64_t c = 0; c < C; c++) {
                long double x = lq_f16_to_f32(h[r * C + c]), xq = (long double)s1[r] * q1[r * C + c];
                te += (x - xq) * (x - xq), tw += x * x, tq += xq * xq;
            }
            bad += !((long double)e1[r] >= sqrtl(te) && (long double)n1[r] >= sqrtl(tw > tq ? tw : tq));
            bad += fabs((double)e1[r] - e0[r]) > 1e-6 * e0[r] || fabs((double)n1[r] - n0[r]) > 1e-6 * n0[r];
        }
        memset(q1, 0, (size_t)(R * C));
        CHECK_EQ_INT(k->q8_bound(&w, q1, s1, NULL, NULL, 1, 5), 0); /* the copy alone, a row range */
        bad += memcmp(q0 + C, q1 + C, (size_t)(4 * C)) != 0 || q1[0] != 0 || q1[5 * C] != 0;
        free(h), free(q0), free(q1);
    }
    CHECK_MSG(bad == 0, "%s: %d q8_bound mismatches", k->name, bad);
    float w32[4] = {1, 2, 3, 4};
    lq_dense_mat f = {w32, 1, 4, LQ_GGML_F32}, unk = {w32, 1, 4, 99};
    int8_t q[4];
    float sc, er, nr;
    CHECK_EQ_INT(k->q8_bound(&f, q, &sc, &er, &nr, 0, 1), 0); /* f32: the reference */
    CHECK(q[3] == 127 && er >= 0 && nr >= 5.477f);
    CHECK_EQ_INT(k->q8_bound(&unk, q, &sc, &er, &nr, 0, 1), -1);
}
static void test_q8_bound_avx2(void) { run_q8_bound(0); }
static void test_q8_bound_avx512(void) { run_q8_bound(1); }

/* ---- attention ---- */

/* SIMD attention against the scalar reference, f32, f16 and q8 caches, positions across block
 * boundaries (64), head_dims with and without a SIMD path; grouped heads give exactly what
 * each head gives alone. Also: one position returns v_0. */
static void run_attn(int si)
{
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    static const int hds[] = {16, 40, 64, 128};
    static const int nposs[] = {1, 2, 63, 64, 65, 130, 300};
    int bad = 0;
    for (int f16 = 0; f16 <= 2; f16++) /* the kv type: f32, f16, q8 */
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (size_t b = 0; b < sizeof nposs / sizeof *nposs; b++) {
                int hd = hds[a], np = nposs[b];
                if (f16 == LQ_KVT_Q8 && hd % LQ_KV_Q8_BLOCK)
                    continue; /* q8 needs whole blocks (the model refuses such a cache) */
                size_t hb = lq_kv_head_bytes(f16, hd);
                size_t ld = hb * 3; /* bytes a position: other heads interleaved */
                uint8_t *kc = malloc(ld * np), *vc = malloc(ld * np);
                float kr[128], vr[128];
                for (int p = 0; p < np; p++)
                    for (int h = 0; h < 3; h++) {
                        for (int i = 0; i < hd; i++) {
                            kr[i] = rndf() * 3.0f;
                            vr[i] = rndf();
                        }
                        lq_kv_store_head(f16, kc + (size_t)p * ld + (size_t)h * hb, kr, hd);
                        lq_kv_store_head(f16, vc + (size_t)p * ld + (size_t)h * hb, vr, hd);
                    }
                /* a group of G query heads sharing this KV head (G = 1, 3, 4 and 18, which
                 * the AVX-512 kernel takes in two passes of at most 16) */
                enum { GMAX = 18 };
                static float q[GMAX * 128], o1[GMAX * 128], o2[GMAX * 128], og[GMAX * 128];
                for (int i = 0; i < GMAX * hd; i++)
                    q[i] = rndf() * 2.0f;
                float scale = 1.0f / sqrtf((float)hd);
                lq_kernels_scalar.attn(q, (size_t)hd, 1, kc, vc, ld, f16, np, hd, scale, o1, (size_t)hd, NULL);
                k->attn(q, (size_t)hd, 1, kc, vc, ld, f16, np, hd, scale, o2, (size_t)hd, NULL);
                for (int i = 0; i < hd; i++)
                    if (!(fabsf(o1[i] - o2[i]) <= 2e-5f)) {
                        printf("#   %s attn f16=%d hd=%d npos=%d out[%d] %.8g vs %.8g\n", k->name,
                               f16, hd, np, i, o2[i], o1[i]);
                        bad++;
                        break;
                    }
                static const int groups[] = {3, 4, GMAX};
                for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++) {
                    int G = groups[gi];
                    /* each head alone, in this set and in the reference */
                    for (int g = 0; g < G; g++) {
                        k->attn(q + g * hd, (size_t)hd, 1, kc, vc, ld, f16, np, hd, scale,
                                o2 + g * hd, (size_t)hd, NULL);
                        lq_kernels_scalar.attn(q + g * hd, (size_t)hd, 1, kc, vc, ld, f16, np, hd,
                                               scale, o1 + g * hd, (size_t)hd, NULL);
                    }
                    k->attn(q, (size_t)hd, G, kc, vc, ld, f16, np, hd, scale, og, (size_t)hd, NULL);
                    for (int i = 0; i < G * hd; i++)
                        if (og[i] != o2[i] || !(fabsf(og[i] - o1[i]) <= 2e-5f)) {
                            printf("#   %s grouped attn G=%d f16=%d hd=%d npos=%d out[%d] %.8g vs alone %.8g, reference %.8g\n",
                                   k->name, G, f16, hd, np, i, og[i], o2[i], o1[i]);
                            bad++;
                            break;
                        }
                }
                if (np > 64) { /* two ranges' softmax states merge into the whole result */
                    float oa[128], ob[128], ma[2], mb[2];
                    int half = np / 2;
                    size_t off = (size_t)half * ld;
                    k->attn(q, (size_t)hd, 1, kc, vc, ld, f16, half, hd, scale, oa, (size_t)hd, ma);
                    k->attn(q, (size_t)hd, 1, kc + off, vc + off, ld, f16, np - half, hd, scale, ob,
                            (size_t)hd, mb);
                    float mx = ma[0] > mb[0] ? ma[0] : mb[0];
                    float wa = ma[1] * expf(ma[0] - mx), wb = mb[1] * expf(mb[0] - mx);
                    for (int i = 0; i < hd; i++)
                        if (!(fabsf((oa[i] * wa + ob[i] * wb) / (wa + wb) - o2[i]) <= 2e-5f)) {
                            printf("#   %s attn halves merged f16=%d hd=%d npos=%d out[%d] %.8g vs %.8g\n",
                                   k->name, f16, hd, np, i, (oa[i] * wa + ob[i] * wb) / (wa + wb), o2[i]);
                            bad++;
                            break;
                        }
                }
                if (np == 1) /* softmax of one position: exactly v_0 */
                    for (int i = 0; i < hd; i++) {
                        float v0 = lq_kv_elem(vc, f16, hd, i);
                        bad += fabsf(o2[i] - v0) > 1e-6f;
                    }
                free(kc);
                free(vc);
            }
    CHECK_EQ_INT(bad, 0);
}
/* The q8 KV row: every value within half a step of its block's scale (absmax / 127); an
 * all-zero block reads back zeros; f16 and f32 rows read back as stored. */
static void test_kv_store_q8(void)
{
    enum { HD = 128 };
    float x[HD];
    uint8_t row[HD * 4];
    int bad = 0;
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < HD; i++)
            x[i] = rep % 7 == 3 && i < 32 ? 0.0f : rndf() * (float)(1 + rep);
        lq_kv_store_head(LQ_KVT_Q8, row, x, HD);
        for (int b = 0; b < HD / LQ_KV_Q8_BLOCK; b++) {
            float amax = 0;
            for (int i = 0; i < LQ_KV_Q8_BLOCK; i++)
                amax = fmaxf(amax, fabsf(x[b * LQ_KV_Q8_BLOCK + i]));
            for (int i = b * LQ_KV_Q8_BLOCK; i < (b + 1) * LQ_KV_Q8_BLOCK; i++)
                bad += !(fabsf(lq_kv_elem(row, LQ_KVT_Q8, HD, i) - x[i]) <= amax / 254.0f * 1.0001f + 1e-30f);
        }
        for (int t = LQ_KVT_F32; t <= LQ_KVT_F16; t++) {
            lq_kv_store_head(t, row, x, HD);
            for (int i = 0; i < HD; i++)
                bad += lq_kv_elem(row, t, HD, i) != (t == LQ_KVT_F16 ? lq_f16_to_f32(lq_f32_to_f16(x[i])) : x[i]);
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT((int)lq_kv_head_bytes(LQ_KVT_Q8, 128), 144);
}

static void test_attn_avx2(void) { run_attn(0); }
static void test_attn_avx512(void) { run_attn(1); }

/* ---- the scalar reference itself ---- */

/* The worked example of the I2_S notes: one 128-element row, byte0 = 0x86 holds
 * w[0]=+1, w[32]=-1, w[64]=0, w[96]=+1; byte1 = 0x00 holds w[1]=w[33]=w[65]=w[97]=-1;
 * everything else is 0x55 (zeros). */
static void test_scalar_worked_example(void)
{
    uint8_t row[32];
    memset(row, 0x55, sizeof row);
    row[0] = 0x86;
    row[1] = 0x00;
    lq_i2s_mat w = {row, 1, 128, 2.0f};
    int8_t q[128];
    for (int i = 0; i < 128; i++)
        q[i] = (int8_t)(i - 64);
    /* +q0 - q32 + q96 - q1 - q33 - q65 - q97 = -64 - (-32) + 32 - (-63) - (-31) - 1 - 33 */
    int32_t expect = -64 + 32 + 32 + 63 + 31 - 1 - 33;
    float inv = 0.25f, y = 0;
    int32_t sum = 0;
    for (int i = 0; i < 128; i++)
        sum += q[i];
    lq_kernels_scalar.i2s_i8(&w, q, 128, &inv, &sum, 1, &y, 1, 0, 1);
    CHECK_NEAR(y, expect * 0.5f, 0);
    float xf[128];
    for (int i = 0; i < 128; i++)
        xf[i] = (float)q[i];
    lq_kernels_scalar.i2s_f32(&w, xf, 128, 1, &y, 1, 0, 1);
    CHECK_NEAR(y, expect * 2.0f, 0);
    /* code 3 is read as 0 by the reference */
    row[5] = 0xff;
    lq_kernels_scalar.i2s_i8(&w, q, 128, &inv, &sum, 1, &y, 1, 0, 1);
    CHECK_NEAR(y, expect * 0.5f, 0);
    /* the SIMD sets agree on the code-0..2 row (bit-identical path) */
    row[5] = 0x55;
    for (int si = 0; si < 2; si++)
        if (simd_sets[si]) {
            simd_sets[si]->i2s_i8(&w, q, 128, &inv, &sum, 1, &y, 1, 0, 1);
            CHECK_NEAR(y, expect * 0.5f, 0);
        }
}

static void test_scalar_quant_known(void)
{
    /* amax 127 -> s = 1: ties round half to even, so 2.5 -> 2, 3.5 -> 4, -2.5 -> -2 */
    float x[6] = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.4f};
    int8_t q[6];
    float inv;
    int32_t sum;
    lq_kernels_scalar.quant_i8(x, 6, q, &inv, &sum);
    CHECK_EQ_INT(q[0], 127);
    CHECK_EQ_INT(q[1], 2);
    CHECK_EQ_INT(q[2], 4);
    CHECK_EQ_INT(q[3], -2);
    CHECK_EQ_INT(q[4], 0);
    CHECK_EQ_INT(q[5], 0);
    CHECK_EQ_INT(sum, 127 + 2 + 4 - 2);
    CHECK_NEAR(inv, 1.0f, 0);
    /* all-zero input: the 1e-5 floor, q = 0, inv = 1e-5/127 */
    float z[4] = {0, 0, 0, 0};
    lq_kernels_scalar.quant_i8(z, 4, q, &inv, &sum);
    CHECK_EQ_INT(q[0] | q[1] | q[2] | q[3], 0);
    CHECK_EQ_INT(sum, 0);
    CHECK_NEAR(inv, 1.0f / (127.0f / 1e-5f), 0);
    /* amax 1: s = 127, x = -1 -> -127 (never -128 from finite input) */
    float y[2] = {-1.0f, 0.5f};
    lq_kernels_scalar.quant_i8(y, 2, q, &inv, &sum);
    CHECK_EQ_INT(q[0], -127);
    CHECK_EQ_INT(q[1], 64); /* 63.5 -> 64 (even) */
}

static void test_scalar_dense_known(void)
{
    float wf[6] = {1, 2, 3, 4, 5, 6}; /* [2, 3] */
    uint16_t wh[6], wb[6];
    for (int i = 0; i < 6; i++) {
        wh[i] = lq_f32_to_f16(wf[i]);
        uint32_t b;
        memcpy(&b, &wf[i], 4);
        wb[i] = (uint16_t)(b >> 16);
    }
    float x[3] = {1, 0.5f, -1};
    const void *datas[3] = {wf, wh, wb};
    int types[3] = {LQ_GGML_F32, LQ_GGML_F16, LQ_GGML_BF16};
    for (int i = 0; i < 3; i++) {
        lq_dense_mat w = {datas[i], 2, 3, types[i]};
        float y[2] = {0, 0};
        lq_kernels_scalar.dense(&w, x, 3, 1, y, 2, 0, 2);
        CHECK_NEAR(y[0], 1 + 1 - 3, 0);
        CHECK_NEAR(y[1], 4 + 2.5 - 6, 0);
    }
    /* an unsupported type writes nothing */
    lq_dense_mat bad = {wf, 2, 3, LQ_GGML_Q8_0};
    float y[2] = {42, 42};
    lq_kernels_scalar.dense(&bad, x, 3, 1, y, 2, 0, 2);
    CHECK_NEAR(y[0], 42, 0);
}

/* ---- the vindex kernels: gate scores, sketches, down_meta GEMM ---- */

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
            CHECK_MSG(sets[i]->gate_scores && sets[i]->sketch_row && sets[i]->sketch_scores && sets[i]->q8_bound, "%s",
                      sets[i]->name);
    CHECK(lq_kernels_scalar.dm_block == NULL); /* the builder's reference path is the f32 scan */
}

/* ---- roofline probes ---- */

/* read_sum of every set equals the scalar reference on random buffers of several sizes
 * (multiples of 128 bytes, 32-byte aligned), and the int8 peak probe computes exactly the
 * scalar definition's chains. */
static void test_probes(void)
{
    const lq_kernels *sets[3] = {&lq_kernels_scalar, simd_sets[0], simd_sets[1]};
    static const size_t sizes[] = {0, 128, 256, 4096 + 128, 65536};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        uint8_t *p = aligned_alloc(64, n + 64);
        for (size_t i = 0; i < n; i++)
            p[i] = (uint8_t)rnd();
        uint64_t want = 0;
        for (size_t i = 0; i + 8 <= n; i += 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            want += w;
        }
        for (int k = 0; k < 3; k++)
            if (sets[k])
                CHECK_MSG(sets[k]->read_sum(p, n) == want, "%s read_sum of %zu bytes", sets[k]->name, n);
        free(p);
    }
    CHECK(lq_kernels_scalar.mac_peak == NULL);
    /* chains start at 0..11 and lose 60 per round: 16 lanes x (66 - 12 * 60 * iters) */
    CHECK_EQ_INT(lq_mac_peak_scalar(0), 16 * 66);
    CHECK_EQ_INT(lq_mac_peak_scalar(3), (uint32_t)(16 * 66 - 16 * 12 * 60 * 3));
    for (int k = 1; k < 3; k++)
        if (sets[k] && sets[k]->mac_peak)
            for (int64_t it = 0; it < 40; it += 13)
                CHECK_MSG(sets[k]->mac_peak(it) == lq_mac_peak_scalar(it), "%s mac_peak(%lld)", sets[k]->name,
                          (long long)it);
}

/* ---- dispatch ---- */

static void test_dispatch(void)
{
    const lq_cpu_features *f = lq_cpu_features_get();
    CHECK(f != NULL);
    CHECK(lq_kernels_by_name("scalar") == &lq_kernels_scalar);
    CHECK(lq_kernels_by_name("nope") == NULL);
    CHECK(lq_kernels_by_name(NULL) == NULL);
    CHECK(lq_kernels_by_name("") == NULL);
    if (f->avx512f)
        CHECK(f->avx2); /* sanity of detection on any real CPU */
    unsetenv("LQ_KERNELS");
    const lq_kernels *best = lq_kernels_best();
    CHECK(best != NULL);
    const lq_kernels *expect = simd_sets[1] ? simd_sets[1] : simd_sets[0] ? simd_sets[0] : &lq_kernels_scalar;
    CHECK(best == expect);
    setenv("LQ_KERNELS", "scalar", 1);
    CHECK(lq_kernels_best() == &lq_kernels_scalar);
    if (simd_sets[0]) {
        setenv("LQ_KERNELS", "avx2", 1);
        CHECK(lq_kernels_best() == simd_sets[0]);
    }
    setenv("LQ_KERNELS", "bogus", 1); /* unknown: falls back to the best */
    CHECK(lq_kernels_best() == expect);
    unsetenv("LQ_KERNELS");
    printf("#   best kernel set: %s (avx2=%d fma=%d f16c=%d bmi2=%d avx512f=%d bw=%d vl=%d dq=%d vnni=%d avxvnni=%d)\n",
           best->name, f->avx2, f->fma, f->f16c, f->bmi2, f->avx512f, f->avx512bw, f->avx512vl,
           f->avx512dq, f->avx512vnni, f->avxvnni);
}

int main(void)
{
    simd_sets[0] = lq_kernels_by_name("avx2");
    simd_sets[1] = lq_kernels_by_name("avx512");
    RUN(test_dispatch);
    RUN(test_scalar_worked_example);
    RUN(test_scalar_quant_known);
    RUN(test_scalar_dense_known);
    RUN(test_i2s_i8_avx2);
    RUN(test_i2s_i8_avx512);
    RUN(test_quant_avx2);
    RUN(test_quant_avx512);
    RUN(test_i2s_f32_avx2);
    RUN(test_i2s_f32_avx512);
    RUN(test_dense_avx2);
    RUN(test_dense_avx512);
    RUN(test_q8_quantize_known);
    RUN(test_quant_i16_known);
    RUN(test_q8_avx2);
    RUN(test_q8_avx512);
    RUN(test_q8_bound_avx2);
    RUN(test_q8_bound_avx512);
    RUN(test_kv_store_q8);
    RUN(test_attn_avx2);
    RUN(test_attn_avx512);
    RUN(test_probes);
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
