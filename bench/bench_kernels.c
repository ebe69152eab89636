/* Kernel benchmark: figures, each printed next to the reference it answers to.
 *
 *   - read bandwidth: stream-sum of a 1 GiB buffer, 1 and 2 threads (the decode roofline)
 *   - int8 MAC peak: independent vpdpbusd chains in registers, 1 and 2 threads (the prefill
 *     roofline)
 *   - pool hand-off: an empty lq_pool_for (decode makes ~210 of them per token)
 *   - I2_S matvec 6912x2560 (ffn gate/up shape), T=1: GB/s of weights streamed and G MAC/s.
 *     The sweep runs over enough distinct copies (> 100 MB) that weights come from DRAM, as
 *     in decode, not from L3.
 *   - TQ2_0 / TQ1_0 matvec of the same shape against I2_S, in turns, from DRAM and from L2
 *   - I2_S GEMM 6912x2560 with T=64 and T=128 tokens (prefill): G MAC/s vs the int8 peak
 *   - f16 lm_head matvec 128256x2560: GB/s vs read bandwidth
 *   - attention of one decode token at 4096 positions (2B-4T: 150 KV-head items), per KV type:
 *     GB/s of K/V read vs read bandwidth, and the same work from L2 (the compute floor)
 *   - a 2B-4T decode estimate from the two measured rates (30 layers of I2_S + f16 lm_head)
 * Every figure is the median of >= 5 runs, with min and max. Total runtime ~30-60 s.
 *
 * Notes for bench/README (kept here, since bench/run.sh and the README belong to the lead):
 * run with `make build/bench/bench_kernels && build/bench/bench_kernels` or via `make bench`.
 * LQ_BENCH_QUICK=1 shortens it (3 runs, fewer copies) for smoke tests; LQ_BENCH_ONLY=a,b
 * runs only the named sections (bw, peak, pool, matvec, batch, tq, gemm, f16, f16batch, q8, attn; the estimate needs bw,
 * matvec and f16). The machine is
 * shared, so close other work; figures swing by ~10% between runs on a busy box. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/f16.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "larql/gguf.h"
#include "bench/membw.h"

#define MAX_RUNS 9

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct stat3 {
    double med, min, max;
} stat3;

static stat3 stats(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    stat3 s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
    return s;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ---- kernels through the pool ---- */

typedef struct mv_ctx {
    const lq_kernels *k;
    const lq_i2s_mat *w;
    const lq_dense_mat *d;
    const int8_t *xq;
    const float *xf;
    size_t ldx;
    const float *inv;
    const int32_t *xsum;
    int T;
    float *y;
    size_t ldy;
    const lq_tq_mat *tq;
} mv_ctx;

static void i2s_fn(void *ctx, int64_t s, int64_t e, int idx)
{
    (void)idx;
    mv_ctx *c = ctx;
    c->k->i2s_i8(c->w, c->xq, c->ldx, c->inv, c->xsum, c->T, c->y, c->ldy, s, e);
}

static void tq_fn(void *ctx, int64_t s, int64_t e, int idx)
{
    (void)idx;
    mv_ctx *c = ctx;
    c->k->tq_i8(c->tq, c->xq, c->ldx, c->inv, c->T, c->y, c->ldy, s, e);
}

static void dense_fn(void *ctx, int64_t s, int64_t e, int idx)
{
    (void)idx;
    mv_ctx *c = ctx;
    c->k->dense(c->d, c->xf, c->ldx, c->T, c->y, c->ldy, s, e);
}

/* Median over runs of the time of n rows of work (fn on ctx) whose weights stay in L2: the
 * first hot_rows rows, warmed, then swept reps times and scaled to n (the arithmetic alone). */
static stat3 hot_time(lq_pool *pool, lq_pool_fn fn, void *ctx, int64_t hot_rows, int reps,
                      int64_t n, int runs, double *v)
{
    for (int r = 0; r < runs; r++) {
        lq_pool_for(pool, hot_rows, 64, fn, ctx);
        double t0 = now_s();
        for (int k = 0; k < reps; k++)
            lq_pool_for(pool, hot_rows, 64, fn, ctx);
        v[r] = (now_s() - t0) / reps * ((double)n / hot_rows);
    }
    return stats(v, runs);
}

/* Where a time t falls between max(t1, hot) (1: the read and the arithmetic fully overlap)
 * and t1 + hot (0: one after the other). */
static double overlap(double t, double t1, double hot)
{
    double lo = t1 > hot ? t1 : hot, hi = t1 + hot;
    return hi > lo ? (hi - t) / (hi - lo) : 1;
}

typedef struct q8_ctx {
    const lq_kernels *k;
    const lq_q8_mat *w;
    const int16_t *x;
    float inv;
    float *y;
} q8_ctx;

static void q8_fn(void *ctx, int64_t s, int64_t e, int idx)
{
    (void)idx;
    q8_ctx *c = ctx;
    c->k->q8_i16(c->w, c->x, (size_t)c->w->cols, &c->inv, 1, c->y, (size_t)c->w->rows, s, e);
}

/* attention at a long context: item i = (layer, KV head) reads its own K/V rows at
 * k + i * kstride (or the same rows for every item when kstride is 0: the cache-resident
 * compute rate) with the grouped query heads of the 2B-4T shape */
typedef struct attn_ctx {
    const lq_kernels *k;
    const uint8_t *kc, *vc;
    size_t kstride, hb;
    int kv_type, npos, hd, group;
    const float *q;
    float *out;
} attn_ctx;

static void attn_fn(void *ctx, int64_t s, int64_t e, int idx)
{
    (void)idx;
    attn_ctx *c = ctx;
    for (int64_t i = s; i < e; i++) {
        size_t qo = (size_t)i * (size_t)c->group * (size_t)c->hd;
        c->k->attn(c->q + qo, (size_t)c->hd, c->group, c->kc + (size_t)i * c->kstride,
                   c->vc + (size_t)i * c->kstride, c->hb, c->kv_type, c->npos, c->hd,
                   0.0883883f, c->out + qo, (size_t)c->hd, NULL);
    }
}

static const char *only;
static int want(const char *section) { return lq_bench_want(only, section); }

/* ~1 us of busy work per chunk: a hand-off costs (time per call - 1 us) */
static void busy_fn(void *ctx, int64_t s, int64_t e, int idx)
{
    (void)ctx, (void)s, (void)e, (void)idx;
    double t0 = now_s();
    while (now_s() - t0 < 1e-6)
        ;
}

/* Other processes skew every figure here (cores and memory bandwidth are shared). */
static void print_load(const char *when)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double l1;
    if (f && fscanf(f, "%lf", &l1) == 1)
        printf("load average %s: %.2f on %d cpus%s\n", when, l1, lq_cpu_count(),
               l1 > 0.5 ? " (other work is running: figures are pessimistic and noisy)" : "");
    if (f)
        fclose(f);
}

int main(void)
{
    const int quick = getenv("LQ_BENCH_QUICK") && *getenv("LQ_BENCH_QUICK") == '1';
    const int runs = quick ? 3 : 7;
    only = getenv("LQ_BENCH_ONLY");
    lq_pool *pools[3] = {NULL, NULL, NULL};
    if (lq_pool_create(1, &pools[1], NULL) || lq_pool_create(2, &pools[2], NULL)) {
        fprintf(stderr, "bench_kernels: cannot create thread pools\n");
        return 1;
    }
    const char *set_names[3] = {"scalar", "avx2", "avx512"};
    const lq_kernels *sets[3];
    for (int i = 0; i < 3; i++)
        sets[i] = lq_kernels_by_name(set_names[i]);
    printf("kernel sets: scalar%s%s (best: %s); cpu count %d\n", sets[1] ? " avx2" : "",
           sets[2] ? " avx512" : "", lq_kernels_best()->name, lq_cpu_count());
    double v[MAX_RUNS];
    print_load("at start");

    /* 1. read bandwidth */
    double bw[3] = {0, 0, 0};
    if (want("bw")) {
        for (int nt = 1; nt <= 2; nt++) {
            lq_bw_stat s = lq_bench_read_bw_stat(nt, runs);
            bw[nt] = s.med;
            printf("read bandwidth %d thread%s: %.1f GB/s (min %.1f, max %.1f)  [bench/membw.h: 256-bit stream-sum of 1 GiB; load %.2f]\n",
                   nt, nt > 1 ? "s" : "", s.med, s.min, s.max, lq_bench_loadavg());
        }
    }

    /* 2. int8 MAC peak */
    double peak[3] = {0, 0, 0};
    if (!want("peak")) {
    } else if (lq_kernels_best()->mac_peak) {
        for (int nt = 1; nt <= 2; nt++) {
            lq_bw_stat s = lq_bench_mac_peak_stat(nt, runs);
            peak[nt] = s.med;
            printf("int8 MAC peak %d thread%s: %.0f G MAC/s (min %.0f, max %.0f)  [bench/membw.h: 12 vpdpbusd zmm chains; load %.2f]\n",
                   nt, nt > 1 ? "s" : "", s.med, s.min, s.max, lq_bench_loadavg());
        }
    } else {
        printf("int8 MAC peak: skipped (the %s kernel set has no int8 peak probe)\n", lq_kernels_best()->name);
    }

    /* 3. pool hand-off */
    if (want("pool")) {
        const int calls = 5000;
        for (int r = 0; r < runs; r++) {
            double t0 = now_s();
            for (int i = 0; i < calls; i++)
                lq_pool_for(pools[2], 2, 1, busy_fn, NULL);
            v[r] = (now_s() - t0) / calls * 1e6 - 1.0;
        }
        stat3 s = stats(v, runs);
        printf("pool hand-off, 2 threads: %.2f us per lq_pool_for beyond the 1 us of work per thread (min %.2f, max %.2f) = %.2f ms per decode token at 210 calls\n",
               s.med, s.min, s.max, s.med * 210 / 1000);
    }

    /* 4. I2_S matvec 6912x2560, T = 1, weights from DRAM */
    const int64_t rows = 6912, cols = 2560;
    const size_t mat_bytes = (size_t)(rows * cols / 4);
    /* distinct copies so that a sweep (like decode walking 30 layers) comes from DRAM: 566 MB
     * is larger than any L3 this will run on (VMs may expose large L3s) */
    const int copies = quick ? 8 : 128;
    uint8_t *wbuf = aligned_alloc(64, mat_bytes * copies);
    const int Tmax = 128;
    int8_t *xq = aligned_alloc(64, (size_t)Tmax * cols);
    float *xf = aligned_alloc(64, (size_t)Tmax * cols * 4);
    float inv[128];
    int32_t xsum[128];
    float *y = aligned_alloc(64, (size_t)Tmax * rows * 4);
    if (!wbuf || !xq || !xf || !y) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        return 1;
    }
    /* every copy distinct random bytes (codes 0..2 only): on the VM these figures were taken
     * on, repeated data streamed from "DRAM" at impossible rates (56 GB/s against ~32 for a
     * random buffer), so no copy repeats another */
    for (size_t i = 0; i < mat_bytes * (size_t)copies; i += 8) {
        uint64_t r = rnd64();
        for (int b = 0; b < 8; b++) {
            unsigned d3 = (unsigned)(r >> (8 * b) & 0xff) % 81; /* four base-3 digits */
            wbuf[i + (size_t)b] = (uint8_t)((d3 % 3) << 6 | (d3 / 3 % 3) << 4 | (d3 / 9 % 3) << 2 | (d3 / 27 % 3));
        }
    }
    for (int64_t i = 0; i < Tmax * cols; i++)
        xf[i] = (float)((int64_t)(rnd64() % 2001) - 1000) / 1000.0f;
    for (int t = 0; t < Tmax; t++)
        lq_kernels_scalar.quant_i8(xf + (size_t)t * cols, cols, xq + (size_t)t * cols, &inv[t], &xsum[t]);
    lq_i2s_mat mats[128];
    for (int i = 0; i < copies; i++)
        mats[i] = (lq_i2s_mat){wbuf + mat_bytes * i, rows, cols, 0.5f};
    double i2s_rate[3] = {0, 0, 0}; /* best set's GB/s per thread count */
    if (want("matvec"))
        printf("\nI2_S matvec %lldx%lld T=1 (%.2f MB of weights; sweep over %d copies = %.0f MB, from DRAM)\n",
           (long long)rows, (long long)cols, mat_bytes / 1e6, copies, mat_bytes * copies / 1e6);
    for (int si = 0; si < 3; si++) {
        if (!sets[si] || !want("matvec"))
            continue;
        int n_mats = si == 0 ? 1 : copies; /* the scalar reference is compute bound: one copy */
        for (int nt = 1; nt <= 2; nt++) {
            for (int r = 0; r < runs; r++) {
                double t0 = now_s();
                for (int m = 0; m < n_mats; m++) {
                    mv_ctx c = {sets[si], &mats[m], NULL, xq, NULL, (size_t)cols, inv, xsum, 1, y, (size_t)rows, NULL};
                    lq_pool_for(pools[nt], rows, 64, i2s_fn, &c);
                }
                v[r] = (now_s() - t0) / n_mats;
            }
            stat3 s = stats(v, runs);
            double gbs = mat_bytes / s.med / 1e9;
            double gmacs = (double)rows * cols / s.med / 1e9;
            if (gbs > i2s_rate[nt])
                i2s_rate[nt] = gbs;
            printf("  %-6s %d thr: %7.1f us (min %.1f, max %.1f) = %5.1f GB/s, %6.1f G MAC/s",
                   set_names[si], nt, s.med * 1e6, s.min * 1e6, s.max * 1e6, gbs, gmacs);
            if (bw[nt] > 0)
                printf(" = %3.0f%% of measured read bandwidth %.1f GB/s", 100 * gbs / bw[nt], bw[nt]);
            printf("\n");
        }
    }

    /* 4b. batched decode shapes: the same sweep with T = 2, 4 and 8 tokens per weight read;
     * "x T=1" is tokens per second relative to one token (the batched decode gain). "L2" is the
     * same work with its weights in L2 (the first 256 rows, 164 KB, swept again and again,
     * scaled to the whole matrix): the arithmetic alone. A step that overlapped its weight
     * stream with that arithmetic would take max(DRAM T=1, L2); one that does not takes their
     * sum; "overlap" says where the measured time falls between them (1 = max, 0 = sum) */
    if (want("batch"))
        printf("\nI2_S matvec %lldx%lld, T = 1/2/4/8 tokens per weight read (batched decode), from DRAM and from L2\n",
               (long long)rows, (long long)cols);
    for (int si = 1; si < 3; si++) {
        if (!sets[si] || !want("batch"))
            continue;
        for (int nt = 1; nt <= 2; nt++) {
            double t1 = 0;
            for (int T = 1; T <= 8; T *= 2) {
                for (int r = 0; r < runs; r++) {
                    double t0 = now_s();
                    for (int m = 0; m < copies; m++) {
                        mv_ctx c = {sets[si], &mats[m], NULL, xq, NULL, (size_t)cols, inv, xsum, T, y, (size_t)rows, NULL};
                        lq_pool_for(pools[nt], rows, 64, i2s_fn, &c);
                    }
                    v[r] = (now_s() - t0) / copies;
                }
                stat3 s = stats(v, runs);
                lq_i2s_mat hot = {mats[0].data, 256, cols, 0.5f};
                mv_ctx hc = {sets[si], &hot, NULL, xq, NULL, (size_t)cols, inv, xsum, T, y, (size_t)rows, NULL};
                stat3 h = hot_time(pools[nt], i2s_fn, &hc, hot.rows, 64, rows, runs, v);
                if (T == 1)
                    t1 = s.med;
                double ov = overlap(s.med, t1, h.med);
                printf("  T=%d %-6s %d thr: %7.1f us (min %.1f, max %.1f) = %5.1f GB/s, %6.1f G MAC/s, %.2fx T=1; "
                       "L2 %6.1f us, overlap %.2f\n",
                       T, set_names[si], nt, s.med * 1e6, s.min * 1e6, s.max * 1e6, mat_bytes / s.med / 1e9,
                       (double)rows * cols * T / s.med / 1e9, T * t1 / s.med, h.med * 1e6, ov);
            }
        }
    }

    /* 4c. llama.cpp's TQ2_0 / TQ1_0 against I2_S: the matvec above (T=1, from DRAM), the
     * three types in turns within each run (the first one rotates), each type's time as a
     * same-run ratio to I2_S; then each from L2 (its arithmetic alone). Same random codes
     * (TQ2_0's 64 code bytes a block from the I2_S stream: codes 0..2), TQ1_0 any byte, d 0.5 */
    if (want("tq")) {
        const size_t tq_bytes[2] = {(size_t)(rows * cols / 256) * 66, (size_t)(rows * cols / 256) * 54};
        uint8_t *tbuf[2];
        static lq_tq_mat tmats[2][128];
        const uint16_t half = lq_f32_to_f16(0.5f);
        for (int ty = 0; ty < 2; ty++) {
            const size_t bb = ty ? 54 : 66, nb = (size_t)(rows * cols / 256) * (size_t)copies;
            tbuf[ty] = aligned_alloc(64, (tq_bytes[ty] * copies + 63) / 64 * 64);
            if (!tbuf[ty]) {
                fprintf(stderr, "bench_kernels: out of memory\n");
                return 1;
            }
            for (size_t b = 0; b < nb; b++) {
                uint8_t *blk = tbuf[ty] + b * bb;
                if (ty)
                    for (int i = 0; i < 52; i += 4) {
                        uint64_t r = rnd64();
                        memcpy(blk + i, &r, 4);
                    }
                else
                    memcpy(blk, wbuf + (b * 64) % (mat_bytes * (size_t)copies), 64);
                memcpy(blk + bb - 2, &half, 2);
            }
            for (int i = 0; i < copies; i++) {
                tmats[ty][i] = (lq_tq_mat){tbuf[ty] + tq_bytes[ty] * (size_t)i, rows, cols,
                                           ty ? LQ_GGML_TQ1_0 : LQ_GGML_TQ2_0, 1.0f, 0};
                lq_tq_prepare(&tmats[ty][i]); /* one d: rows uniform */
            }
        }
        const char *tn[3] = {"I2_S", "TQ2_0", "TQ1_0"};
        const double tb[3] = {(double)mat_bytes, (double)tq_bytes[0], (double)tq_bytes[1]};
        printf("\nTQ2_0 / TQ1_0 vs I2_S matvec %lldx%lld T=1 from DRAM (%d copies each), in turns within each run; "
               "from L2 (256 rows swept, scaled)\n", (long long)rows, (long long)cols, copies);
        for (int si = 1; si < 3; si++) {
            if (!sets[si])
                continue;
            for (int nt = 1; nt <= 2; nt++) {
                double tv[3][MAX_RUNS], ratio[MAX_RUNS];
                for (int r = 0; r < runs; r++)
                    for (int j = 0; j < 3; j++) {
                        const int ty = (j + r) % 3;
                        double t0 = now_s();
                        for (int m = 0; m < copies; m++) {
                            mv_ctx c = {sets[si], &mats[m], NULL, xq, NULL, (size_t)cols, inv, xsum, 1, y,
                                        (size_t)rows, ty ? &tmats[ty - 1][m] : NULL};
                            lq_pool_for(pools[nt], rows, 64, ty ? tq_fn : i2s_fn, &c);
                        }
                        tv[ty][r] = (now_s() - t0) / copies;
                    }
                for (int ty = 0; ty < 3; ty++) {
                    for (int r = 0; r < runs; r++)
                        ratio[r] = tv[ty][r] / tv[0][r];
                    stat3 q = stats(ratio, runs), d = stats(tv[ty], runs);
                    lq_i2s_mat hot = {mats[0].data, 256, cols, 0.5f};
                    lq_tq_mat thot = ty ? tmats[ty - 1][0] : tmats[0][0];
                    thot.rows = 256;
                    mv_ctx hc = {sets[si], &hot, NULL, xq, NULL, (size_t)cols, inv, xsum, 1, y, (size_t)rows, &thot};
                    stat3 h = hot_time(pools[nt], ty ? tq_fn : i2s_fn, &hc, 256, 64, rows, runs, v);
                    printf("  %-5s %-6s %d thr: %7.1f us (min %.1f, max %.1f) = %5.1f GB/s; time / I2_S same-run %.3f (%.3f-%.3f); L2 %6.1f us\n",
                           tn[ty], set_names[si], nt, d.med * 1e6, d.min * 1e6, d.max * 1e6, tb[ty] / d.med / 1e9,
                           q.med, q.min, q.max, h.med * 1e6);
                }
            }
        }
        free(tbuf[0]);
        free(tbuf[1]);
    }

    /* 5. I2_S GEMM (prefill), T = 64 and 128 */
    if (want("gemm"))
        printf("\nI2_S GEMM %lldx%lld x T tokens (prefill), int8 MACs\n", (long long)rows, (long long)cols);
    for (int ti = 0; ti < 2; ti++) {
        int T = ti ? 128 : 64;
        for (int si = 1; si < 3; si++) {
            if (!sets[si] || !want("gemm"))
                continue;
            for (int nt = 1; nt <= 2; nt++) {
                for (int r = 0; r < runs; r++) {
                    mv_ctx c = {sets[si], &mats[r % copies], NULL, xq, NULL, (size_t)cols, inv, xsum, T, y, (size_t)rows, NULL};
                    double t0 = now_s();
                    lq_pool_for(pools[nt], rows, 64, i2s_fn, &c);
                    v[r] = now_s() - t0;
                }
                stat3 s = stats(v, runs);
                double g = (double)rows * cols * T / 1e9;
                if (peak[nt] > 0)
                    printf("  T=%-3d %-6s %d thr: %6.2f ms (min %.2f, max %.2f) = %6.1f G MAC/s = %3.0f%% of measured vpdpbusd peak %.0f G MAC/s\n",
                           T, set_names[si], nt, s.med * 1e3, s.min * 1e3, s.max * 1e3, g / s.med,
                           100 * g / s.med / peak[nt], peak[nt]);
                else
                    printf("  T=%-3d %-6s %d thr: %6.2f ms (min %.2f, max %.2f) = %6.1f G MAC/s\n", T,
                           set_names[si], nt, s.med * 1e3, s.min * 1e3, s.max * 1e3, g / s.med);
            }
        }
    }
    if (want("gemm"))
        printf("  (scalar skipped: the reference runs ~1 G MAC/s)\n");
    free(wbuf);

    /* 6. f16 lm_head matvec 128256x2560 */
    const int64_t vocab = 128256;
    const size_t lm_bytes = (size_t)vocab * cols * 2;
    uint16_t *lm = aligned_alloc(64, lm_bytes);
    float *logits = aligned_alloc(64, (size_t)vocab * 4 * 8); /* up to 8 tokens */
    double f16_rate[3] = {0, 0, 0};
    if (lm && logits && (want("f16") || want("q8") || want("f16batch"))) {
        /* random f16 in +-1/16 everywhere, for this and the f16batch and q8 sections (a
         * repeated pattern streams unrealistically fast here, see the I2_S sweep above) */
        for (size_t i = 0; i + 4 <= lm_bytes / 2; i += 4) {
            uint64_t r = rnd64();
            for (int b = 0; b < 4; b++)
                lm[i + (size_t)b] = lq_f32_to_f16((float)((int)(r >> (16 * b) & 0xffff) % 2001 - 1000) / 16000.0f);
        }
    }
    if (lm && logits && want("f16")) { /* T=1 (the decode estimate at the end uses it) */
        lq_dense_mat d = {lm, vocab, cols, LQ_GGML_F16};
        printf("\nf16 lm_head matvec %lldx%lld T=1 (%.0f MB)\n", (long long)vocab, (long long)cols, lm_bytes / 1e6);
        for (int si = 1; si < 3; si++) {
            if (!sets[si])
                continue;
            for (int nt = 1; nt <= 2; nt++) {
                for (int r = 0; r < runs; r++) {
                    mv_ctx c = {sets[si], NULL, &d, NULL, xf, (size_t)cols, NULL, NULL, 1, logits, (size_t)vocab, NULL};
                    double t0 = now_s();
                    lq_pool_for(pools[nt], vocab, 256, dense_fn, &c);
                    v[r] = now_s() - t0;
                }
                stat3 s = stats(v, runs);
                double gbs = lm_bytes / s.med / 1e9;
                if (gbs > f16_rate[nt])
                    f16_rate[nt] = gbs;
                printf("  %-6s %d thr: %6.2f ms (min %.2f, max %.2f) = %5.1f GB/s", set_names[si], nt,
                       s.med * 1e3, s.min * 1e3, s.max * 1e3, gbs);
                if (bw[nt] > 0)
                    printf(" = %3.0f%% of measured read bandwidth %.1f GB/s", 100 * gbs / bw[nt], bw[nt]);
                printf("\n");
            }
        }
        printf("  (scalar skipped: software f16 conversion, ~1 GB/s)\n");
    }
    /* 6a. the lm_head of a batched decode step: T tokens per read, from DRAM and from L2 (the
     * first 64 rows, 328 KB, again and again, scaled to the whole matrix), as in 4b */
    if (lm && logits && want("f16batch")) {
        lq_dense_mat d = {lm, vocab, cols, LQ_GGML_F16};
        printf("\nf16 lm_head %lldx%lld, T = 1/2/4/8 tokens per read (batched decode), from DRAM and from L2\n",
               (long long)vocab, (long long)cols);
        for (int si = 2; si > 0; si--) {
            if (!sets[si])
                continue;
            for (int nt = 1; nt <= 2; nt++) {
                double t1 = 0;
                for (int T = 1; T <= 8; T *= 2) {
                    for (int r = 0; r < runs; r++) {
                        mv_ctx c = {sets[si], NULL, &d, NULL, xf, (size_t)cols, NULL, NULL, T, logits, (size_t)vocab, NULL};
                        double t0 = now_s();
                        lq_pool_for(pools[nt], vocab, 256, dense_fn, &c);
                        v[r] = now_s() - t0;
                    }
                    stat3 s = stats(v, runs);
                    lq_dense_mat hot = {lm, 64 * nt, cols, LQ_GGML_F16};
                    mv_ctx hc = {sets[si], NULL, &hot, NULL, xf, (size_t)cols, NULL, NULL, T, logits, (size_t)vocab, NULL};
                    stat3 h = hot_time(pools[nt], dense_fn, &hc, hot.rows, 256, vocab, runs, v);
                    if (T == 1)
                        t1 = s.med;
                    printf("  T=%d %-6s %d thr: %6.2f ms (min %.2f, max %.2f) = %5.1f GB/s, %.2fx T=1; L2 %6.2f ms "
                           "(%5.1f G FMA/s), overlap %.2f\n",
                           T, set_names[si], nt, s.med * 1e3, s.min * 1e3, s.max * 1e3, lm_bytes / s.med / 1e9,
                           T * t1 / s.med, h.med * 1e3, (double)vocab * cols * T / h.med / 1e9,
                           overlap(s.med, t1, h.med));
                }
            }
        }
    }
    /* 6b. the same lm_head as the int8 per-row copy (--lm-head q8): half the bytes */
    int8_t *lq8 = malloc((size_t)vocab * cols);
    float *lsc = malloc((size_t)vocab * 4);
    if (lm && logits && lq8 && lsc && want("q8")) {
        lq_dense_mat d = {lm, vocab, cols, LQ_GGML_F16};
        double t0 = now_s();
        lq_q8_quantize_rows(&d, lq8, lsc, 0, vocab);
        printf("\nq8 lm_head matvec %lldx%lld T=1 (%.0f MB; built from f16 in %.0f ms on 1 thread)\n",
               (long long)vocab, (long long)cols, (vocab * (cols + 4.0)) / 1e6, (now_s() - t0) * 1e3);
        lq_q8_mat q = {lq8, lsc, vocab, cols};
        int16_t x16[2560];
        float inv16;
        lq_quant_i16(xf, cols, x16, &inv16);
        for (int si = 1; si < 3; si++) {
            if (!sets[si])
                continue;
            for (int nt = 1; nt <= 2; nt++) {
                for (int r = 0; r < runs; r++) {
                    q8_ctx c = {sets[si], &q, x16, inv16, logits};
                    double a = now_s();
                    lq_pool_for(pools[nt], vocab, 256, q8_fn, &c);
                    v[r] = now_s() - a;
                }
                stat3 s = stats(v, runs);
                double gbs = vocab * (cols + 4.0) / s.med / 1e9;
                printf("  %-6s %d thr: %6.2f ms (min %.2f, max %.2f) = %5.1f GB/s", set_names[si], nt,
                       s.med * 1e3, s.min * 1e3, s.max * 1e3, gbs);
                if (bw[nt] > 0)
                    printf(" = %3.0f%% of measured read bandwidth %.1f GB/s", 100 * gbs / bw[nt], bw[nt]);
                printf("  [load %.2f]\n", lq_bench_loadavg());
            }
        }
    }
    free(lq8);
    free(lsc);
    free(lm);
    free(logits);

    /* 6c. attention of one decode token at 4096 positions, the 2B-4T shape (30 layers x 5 KV
     * heads of 128, 4 query heads each): the K/V bytes per token from DRAM (every (layer, KV
     * head) its own rows) against the read bandwidth, and the same work on one item's rows
     * that stay in L2 (the kernel's compute rate: if it is near the DRAM time, the two do not
     * overlap and attention cannot reach the roofline) */
    if (want("attn") && (sets[1] || sets[2])) {
        const int items = 150, npos = 4096, hd = 128, group = 4, l2pos = 512;
        float *q = malloc(sizeof(float) * (size_t)items * group * hd);
        float *out = malloc(sizeof(float) * (size_t)items * group * hd);
        float *row = malloc(sizeof(float) * (size_t)hd);
        printf("\nattention, one decode token at %d positions: %d (layer, KV head) items of %d, %d query heads each\n",
               npos, items, hd, group);
        for (int kt = LQ_KVT_F32; kt <= LQ_KVT_Q8 && q && out && row; kt++) {
            size_t hb = lq_kv_head_bytes(kt, hd), per = (size_t)npos * hb;
            uint8_t *kc = malloc(per * items), *vc = malloc(per * items);
            if (!kc || !vc) {
                free(kc);
                free(vc);
                printf("  %s: out of memory\n", kt == LQ_KVT_F32 ? "f32" : kt == LQ_KVT_F16 ? "f16" : "q8");
                continue;
            }
            /* one item's rows at random, copied to the others (the values do not change the
             * work; every item keeps its own memory) */
            for (size_t i = 0; i < (size_t)npos; i++) {
                for (int d = 0; d < hd; d++)
                    row[d] = (float)((int)(rnd64() % 2001) - 1000) / 1000.0f;
                lq_kv_store_head(kt, kc + i * hb, row, hd);
                for (int d = 0; d < hd; d++)
                    row[d] = (float)((int)(rnd64() % 2001) - 1000) / 1000.0f;
                lq_kv_store_head(kt, vc + i * hb, row, hd);
            }
            for (int i = 1; i < items; i++) {
                memcpy(kc + (size_t)i * per, kc, per);
                memcpy(vc + (size_t)i * per, vc, per);
            }
            for (size_t i = 0; i < (size_t)items * group * hd; i++)
                q[i] = (float)((int)(rnd64() % 2001) - 1000) / 1000.0f;
            double mb = 2.0 * per * items / 1e6;
            for (int si = 0; si < 3; si++) /* the scalar set: what the AVX2 set ran before its kernel */
            for (int nt = 1; nt <= 2 && sets[si]; nt++) {
                double vd[MAX_RUNS], vc2[MAX_RUNS];
                for (int r = 0; r < runs; r++) {
                    attn_ctx c = {sets[si], kc, vc, per, hb, kt, npos, hd, group, q, out};
                    double t0 = now_s();
                    lq_pool_for(pools[nt], items, 1, attn_fn, &c);
                    vd[r] = now_s() - t0;
                    /* the same positions' work on l2pos rows kept in L2, scaled to npos */
                    attn_ctx h = {sets[si], kc, vc, 0, hb, kt, l2pos, hd, group, q, out};
                    lq_pool_for(pools[nt], items, 1, attn_fn, &h); /* warm */
                    t0 = now_s();
                    lq_pool_for(pools[nt], items, 1, attn_fn, &h);
                    vc2[r] = (now_s() - t0) * npos / l2pos;
                }
                stat3 d = stats(vd, runs), cst = stats(vc2, runs);
                printf("  %-3s %-6s %d thr: %5.0f MB K/V: %6.2f ms (min %.2f, max %.2f) = %5.1f GB/s",
                       kt == LQ_KVT_F32 ? "f32" : kt == LQ_KVT_F16 ? "f16" : "q8", set_names[si], nt, mb, d.med * 1e3,
                       d.min * 1e3, d.max * 1e3, mb / 1e3 / d.med);
                if (bw[nt] > 0)
                    printf(" = %3.0f%% of read bandwidth (%.2f ms)", 100 * mb / 1e3 / d.med / bw[nt],
                           mb / 1e3 / bw[nt] * 1e3);
                printf("; from L2: %.2f ms  [load %.2f]\n", cst.med * 1e3, lq_bench_loadavg());
            }
            free(kc);
            free(vc);
        }
        free(q);
        free(out);
        free(row);
    }

    /* 7. 2B-4T decode estimate: per layer q,o 2560x2560, k,v 640x2560, gate,up 6912x2560,
     * down 2560x6912 (all I2_S, cols/4 bytes per row) + f16 tied lm_head */
    if (i2s_rate[1] > 0 && f16_rate[1] > 0 && bw[1] > 0) {
        double layer = (2.0 * 2560 * 2560 + 2.0 * 640 * 2560 + 3.0 * 6912 * 2560) / 4;
        double i2s_b = 30 * layer, f16_b = (double)lm_bytes;
        printf("\n2B-4T decode, weights per token: %.0f MB I2_S + %.0f MB f16 lm_head\n", i2s_b / 1e6, f16_b / 1e6);
        for (int nt = 1; nt <= 2; nt++) {
            if (i2s_rate[nt] <= 0 || f16_rate[nt] <= 0 || bw[nt] <= 0)
                continue;
            double t = i2s_b / (i2s_rate[nt] * 1e9) + f16_b / (f16_rate[nt] * 1e9);
            double roof = (i2s_b + f16_b) / (bw[nt] * 1e9);
            printf("  %d thr: matvec time %.1f ms/token = %.1f tok/s; memory roofline %.1f ms = %.1f tok/s (%.0f%% of roofline, excludes attention/norms/hand-offs)\n",
                   nt, t * 1e3, 1 / t, roof * 1e3, 1 / roof, 100 * roof / t);
        }
    }
    print_load("at end");
    free(xq);
    free(xf);
    free(y);
    lq_pool_free(pools[1]);
    lq_pool_free(pools[2]);
    return 0;
}
