/* The TQ2_0 / TQ1_0 kernels (lq_kernels.tq_i8): the scalar reference against a known answer
 * computed here from the trits (packed by the library's lq_tq_pack, whose layout test_gguf
 * checks against the decoders), and every SIMD set against the reference bit for bit on
 * random bytes (every TQ1_0 byte value, TQ2_0's code 3, f16 scales of every sign and size,
 * zero and subnormal included), ragged row ranges, 1..8 tokens, and rows longer than one
 * chunk of the SIMD drivers. Sets this CPU lacks are skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "larql/gguf.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static const int types[2] = {LQ_GGML_TQ2_0, LQ_GGML_TQ1_0};

/* Random f16 scales for one matrix, within what lq_tq_exact accepts: both signs, zeros, one
 * binade range (a random base, 3 binades above it, or subnormals), and as one d for the whole
 * matrix, runs of a few blocks, or a new d every block (the SIMD sets scale runs at once). */
typedef struct dgen {
    int mode, base;
    uint16_t last;
} dgen;

static uint16_t next_d(dgen *g, size_t b)
{
    if (g->mode == 0 && b > 0)
        return g->last;
    if (g->mode == 1 && b > 0 && rnd() % 4)
        return g->last;
    uint16_t h;
    if (rnd() % 10 == 0)
        h = 0;
    else if (g->base < 0) /* subnormals only */
        h = (uint16_t)(rnd() % 0x3ff + 1);
    else
        h = (uint16_t)(((unsigned)(g->base + rnd() % 4) << 10) | (rnd() & 0x3ff));
    h |= (uint16_t)(rnd() & 0x8000);
    return g->last = h;
}

/* rows x cols of random blocks (any byte in the code part), scales from next_d. */
static uint8_t *rand_tq(int type, int64_t rows, int64_t cols)
{
    size_t bb = lq_tq_block_bytes(type), nb = (size_t)(rows * cols / 256);
    uint8_t *d = malloc(nb * bb);
    dgen g = {(int)(rnd() % 3), rnd() % 8 == 0 ? -1 : (int)(1 + rnd() % 26), 0};
    for (size_t b = 0; b < nb; b++) {
        for (size_t i = 0; i < bb - 2; i++)
            d[b * bb + i] = (uint8_t)rnd();
        uint16_t h = next_d(&g, b);
        memcpy(d + b * bb + bb - 2, &h, 2);
    }
    return d;
}

static const lq_kernels *simd_sets[2];
static const char *simd_names[2] = {"avx2", "avx512"};

static int check_case(const lq_kernels *k, int type, int64_t rows, int64_t cols, int T, int64_t r0,
                      int64_t r1)
{
    size_t ldx = (size_t)cols + (rnd() % 3) * 64 + (rnd() % 2) * 7;
    size_t ldy = (size_t)rows + rnd() % 5;
    uint8_t *wd = rand_tq(type, rows, cols);
    lq_tq_mat w = {wd, rows, cols, type, rnd() % 2 ? 1.0f : 0.75f, 0};
    if (!lq_tq_prepare(&w)) {
        printf("#   generated a matrix outside lq_tq_exact\n");
        free(wd);
        return 0;
    }
    int8_t *xq = malloc(ldx * (size_t)T);
    float inv[8];
    for (int t = 0; t < T; t++) {
        for (size_t c = 0; c < ldx; c++)
            xq[t * ldx + c] = rnd() % 50 == 0 ? -128 : (int8_t)(rnd() & 0xff);
        inv[t] = ldexpf(1.0f + (float)(rnd() % 1000) / 1000.0f, -(int)(rnd() % 12));
    }
    size_t ny = ldy * (size_t)T;
    float *y_ref = malloc(ny * sizeof(float)), *y = malloc(ny * sizeof(float));
    memset(y_ref, 0xA5, ny * sizeof(float)); /* outside [r0, r1) must stay untouched */
    memset(y, 0xA5, ny * sizeof(float));
    lq_kernels_scalar.tq_i8(&w, xq, ldx, inv, T, y_ref, ldy, r0, r1);
    k->tq_i8(&w, xq, ldx, inv, T, y, ldy, r0, r1);
    int ok = memcmp(y, y_ref, ny * sizeof(float)) == 0;
    for (size_t i = 0; !ok && i < ny; i++)
        if (memcmp(&y[i], &y_ref[i], 4)) {
            printf("#   %s %s rows=%lld cols=%lld T=%d [%lld,%lld): y[%zu] %.9g vs %.9g\n", k->name,
                   lq_ggml_type_name(type), (long long)rows, (long long)cols, T, (long long)r0,
                   (long long)r1, i, y[i], y_ref[i]);
            break;
        }
    free(wd);
    free(xq);
    free(y_ref);
    free(y);
    return ok;
}

static void run_set(int si)
{
    static const int64_t row_set[] = {1, 2, 3, 5, 7, 17, 64};
    static const int64_t col_set[] = {256, 768, 1024, 1280};
    static const int t_set[] = {1, 2, 3, 4, 5, 8};
    const lq_kernels *k = simd_sets[si];
    if (!k)
        SKIP("CPU lacks the %s kernel set", simd_names[si]);
    int bad = 0, n = 0;
    for (int ty = 0; ty < 2; ty++) {
        for (size_t a = 0; a < sizeof row_set / sizeof *row_set; a++)
            for (size_t b = 0; b < sizeof col_set / sizeof *col_set; b++)
                for (size_t c = 0; c < sizeof t_set / sizeof *t_set; c++) {
                    int64_t rows = row_set[a];
                    bad += !check_case(k, types[ty], rows, col_set[b], t_set[c], 0, rows);
                    int64_t r0 = rows / 3, r1 = rows - rows / 4; /* not a multiple of a tile */
                    if (r1 > r0)
                        bad += !check_case(k, types[ty], rows, col_set[b], t_set[c], r0, r1);
                    n += 2;
                }
        /* rows of 2B-4T's widths, and the longest row the kernels take */
        for (int rep = 0; rep < 4; rep++) {
            bad += !check_case(k, types[ty], 9, 2560, 3, 1, 8);
            bad += !check_case(k, types[ty], 5, 6912, 1, 0, 5);
        }
        bad += !check_case(k, types[ty], 2, (int64_t)LQ_TQ_MAX_BLOCKS * 256, 2, 0, 2);
        n += 9;
    }
    CHECK_MSG(bad == 0, "%d of %d tq_i8 cases differ from scalar", bad, n);
}
static void test_tq_avx2(void) { run_set(0); }
static void test_tq_avx512(void) { run_set(1); }

/* The reference on packed trits: y = (float)(Σ_b d_b Σ trit*q) * (inv * mult), the sum exact,
 * for both types; and every set agrees. */
static void test_known_answer(void)
{
    enum { ROWS = 3, COLS = 768 };
    static int8_t tr[ROWS * COLS];
    static int8_t xq[COLS];
    float d[ROWS * COLS / 256];
    for (int i = 0; i < ROWS * COLS; i++)
        tr[i] = (int8_t)((int)(rnd() % 3) - 1);
    for (int i = 0; i < COLS; i++)
        xq[i] = (int8_t)(rnd() & 0xff);
    for (int b = 0; b < ROWS * COLS / 256; b++)
        d[b] = lq_f16_to_f32(lq_f32_to_f16(0.125f * (float)(b + 1) * (b % 2 ? -1.0f : 1.0f)));
    const float inv = 0.01f, mult = 1.5f;
    for (int ty = 0; ty < 2; ty++) {
        uint8_t packed[ROWS * COLS / 256 * 66];
        CHECK_EQ_INT(lq_tq_pack(types[ty], tr, ROWS * COLS, d, packed), LQ_OK);
        lq_tq_mat w = {packed, ROWS, COLS, types[ty], mult, 0};
        CHECK(lq_tq_prepare(&w));
        const lq_kernels *sets[3] = {&lq_kernels_scalar, simd_sets[0], simd_sets[1]};
        for (int s = 0; s < 3; s++) {
            if (!sets[s])
                continue;
            float y[ROWS];
            sets[s]->tq_i8(&w, xq, COLS, &inv, 1, y, ROWS, 0, ROWS);
            for (int r = 0; r < ROWS; r++) {
                double acc = 0;
                for (int b = 0; b < COLS / 256; b++) {
                    int32_t dot = 0;
                    for (int e = 0; e < 256; e++)
                        dot += tr[r * COLS + b * 256 + e] * xq[b * 256 + e];
                    acc += (double)dot * d[r * COLS / 256 + b];
                }
                float k = inv * mult, want = (float)acc * k;
                CHECK_MSG(memcmp(&y[r], &want, 4) == 0, "%s %s row %d: %.9g, want %.9g",
                          sets[s]->name, lq_ggml_type_name(types[ty]), r, y[r], want);
            }
        }
    }
    /* the packer refuses what it cannot write */
    uint8_t out[66];
    int8_t bad[256] = {2};
    CHECK_EQ_INT(lq_tq_pack(LQ_GGML_TQ2_0, bad, 256, NULL, out), LQ_EINVAL);
    CHECK_EQ_INT(lq_tq_pack(LQ_GGML_TQ2_0, tr, 128, NULL, out), LQ_EINVAL);
    CHECK_EQ_INT(lq_tq_pack(LQ_GGML_I2_S, tr, 256, NULL, out), LQ_EINVAL);
}

/* Every TQ1_0 byte value decodes to digits 0..2 in the SIMD sets as in the reference: one
 * row whose 48 + 4 code bytes sweep 0..255 across blocks, against one-hot activations. */
static void test_tq1_every_byte(void)
{
    enum { NB = 6 };
    uint8_t w[NB * 54];
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < 52; i++)
            w[b * 54 + i] = (uint8_t)(b * 52 + i);
        uint16_t one = lq_f32_to_f16(1.0f);
        memcpy(w + b * 54 + 52, &one, 2);
    }
    lq_tq_mat m = {w, 1, NB * 256, LQ_GGML_TQ1_0, 1.0f, 0};
    CHECK(lq_tq_prepare(&m));
    static int8_t x[NB * 256];
    float inv = 1.0f;
    int bad = 0;
    for (int e = 0; e < NB * 256; e += 7) { /* a stride coprime to every digit group */
        memset(x, 0, sizeof x);
        x[e] = 1;
        float yr, ys;
        lq_kernels_scalar.tq_i8(&m, x, NB * 256, &inv, 1, &yr, 1, 0, 1);
        for (int s = 0; s < 2; s++)
            if (simd_sets[s]) {
                simd_sets[s]->tq_i8(&m, x, NB * 256, &inv, 1, &ys, 1, 0, 1);
                bad += memcmp(&ys, &yr, 4) != 0;
            }
        bad += !(yr == -1.0f || yr == 0.0f || yr == 1.0f);
    }
    CHECK_MSG(bad == 0, "%d single-element TQ1_0 reads differ or are not trits", bad);
}

/* lq_tq_exact: one d, close d's, zero d's pass; d's 2^30 apart, a NaN or infinite d, and rows
 * that are not whole blocks or longer than 2^20 fail. */
static void test_exact_condition(void)
{
    enum { NB = 8 };
    static uint8_t w[NB * 66];
    memset(w, 0, sizeof w);
    lq_tq_mat m = {w, 2, NB / 2 * 256, LQ_GGML_TQ2_0, 1.0f, 0};
    uint16_t ds[NB];
    for (int b = 0; b < NB; b++)
        ds[b] = lq_f32_to_f16(0.25f);
#define SET_D() for (int b = 0; b < NB; b++) memcpy(w + b * 66 + 64, &ds[b], 2)
    SET_D();
    CHECK(lq_tq_prepare(&m));
    ds[3] = lq_f32_to_f16(-3.0f);
    ds[5] = 0;
    SET_D();
    CHECK(lq_tq_prepare(&m));
    ds[6] = 0x0001;                 /* 2^-24 next to 2 */
    SET_D();
    CHECK(!lq_tq_prepare(&m));
    ds[6] = 0x7e00;                 /* NaN */
    SET_D();
    CHECK(!lq_tq_prepare(&m));
    ds[6] = 0x7c00;                 /* inf */
    SET_D();
    CHECK(!lq_tq_prepare(&m));
#undef SET_D
    lq_tq_mat bad = m;
    bad.cols = 300;
    CHECK(!lq_tq_prepare(&bad));
    bad.cols = (int64_t)(LQ_TQ_MAX_BLOCKS + 1) * 256;
    bad.rows = 0;
    CHECK(!lq_tq_prepare(&bad));
}

int main(void)
{
    simd_sets[0] = lq_kernels_by_name("avx2");
    simd_sets[1] = lq_kernels_by_name("avx512");
    RUN(test_known_answer);
    RUN(test_exact_condition);
    RUN(test_tq1_every_byte);
    RUN(test_tq_avx2);
    RUN(test_tq_avx512);
    return harness_done();
}
