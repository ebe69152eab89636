/* Vindex benchmark: describe (knowledge band and all layers) and walk latency, and describe
 * queries/s at 1, 2, 4 and 16 concurrent callers, each next to the memory roofline (bytes a
 * query touches / measured read bandwidth). Then the gate prefilter: bytes per query, speed
 * and recall of the top edges against the exact scan.
 * Usage: bench_vindex DIR [--runs N] [--seconds S] [--scan-only 1]
 * Prints Markdown (median of N runs, min and max). No pass/fail. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "membw.h"
#include "larql/vindex.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
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
    stat3 s = {v[n / 2], v[0], v[n - 1]};
    if (n % 2 == 0)
        s.med = 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

static const char *entities[] = {
    "France", "Paris", "Germany", "Berlin", "the", "model", "water", "music", "history", "king",
    "river", "city", "science", "language", "computer", "garden", "ocean", "mountain", "school",
    "doctor", "money", "winter", "summer", "book", "house", "light", "energy", "market", "story",
    "game", "family", "world",
};
#define N_ENT (sizeof entities / sizeof entities[0])

static lq_vindex *V;
static const char *BAND = "knowledge";

static int describe_once(const char *ent, const char *band, lq_err *err)
{
    lq_describe_params p;
    lq_describe_params_init(&p);
    p.entity = ent;
    p.band = band;
    lq_describe_result r;
    int rc = lq_vindex_describe(V, &p, &r, err);
    if (!rc)
        lq_describe_result_free(&r);
    return rc;
}

typedef struct qjob {
    int idx;
    double until;
    long done;
    int failed;
} qjob;

static void *qworker(void *arg)
{
    qjob *j = arg;
    lq_err err = {0};
    lq_vindex_set_thread_scan(1, &err); /* each caller scans on its own thread */
    long n = 0;
    while (now_ms() < j->until) {
        if (describe_once(entities[(size_t)(j->idx + n) % N_ENT], BAND, &err)) {
            j->failed = 1;
            break;
        }
        n++;
    }
    j->done = n;
    lq_vindex_thread_release();
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_vindex DIR [--runs N] [--seconds S] [--scan-only 1]\n");
        return 2;
    }
    int runs = 5;
    double seconds = 3;
    int scan_only = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--scan-only"))
            scan_only = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
    }
    if (runs < 1)
        runs = 1;
    lq_err err = {0};
    double t0 = now_ms();
    if (lq_vindex_open(argv[1], NULL, &V, &err)) {
        fprintf(stderr, "bench_vindex: %s\n", err.msg);
        return 1;
    }
    double open_ms = now_ms() - t0;
    const lq_vindex_info *in = lq_vindex_get_info(V);
    size_t bpe = in->dtype == LQ_VDT_F16 ? 2 : 4;
    double layer_bytes = (double)in->features_per_layer * in->hidden_size * bpe;
    int kb = in->bands[1].end - in->bands[1].start + 1;
    double bw1 = lq_bench_read_bw(1), bw2 = lq_bench_read_bw(2);
    printf("vindex: %s — %d layers x %d features x %d (%s), vocab %d; open %.0f ms\n", argv[1],
           in->num_layers, in->features_per_layer, in->hidden_size, bpe == 2 ? "f16" : "f32",
           in->vocab_size, open_ms);
    printf("read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (2 threads)\n\n", bw1, bw2);

    /* warm the page cache: one scan of every layer */
    describe_once("warm", "all", &err);

    /* the gate scan alone (one query, top 20, all layers) per kernel set and thread count,
     * against the read bandwidth of the same number of threads */
    {
        static const char *ks[] = {"avx2", "avx512"};
        int D = in->hidden_size, L = in->num_layers;
        float *q = malloc((size_t)D * sizeof *q);
        int *ly = malloc((size_t)L * sizeof *ly);
        lq_vindex_hit *h = malloc((size_t)L * 20 * sizeof *h);
        size_t *cnt = malloc((size_t)L * sizeof *cnt);
        size_t ntk = 0;
        lq_vindex_entity_vector(V, "France", q, &ntk, &err);
        for (int i = 0; i < L; i++)
            ly[i] = i;
        double bytes = layer_bytes * L;
        printf("gate scan alone (1 query, top 20, all %d layers, %.0f MB):\n\n"
               "| kernels | threads | median ms | min | max | GB/s | %% of read bandwidth (same threads) |\n"
               "|---|---|---|---|---|---|---|\n", L, bytes / 1e6);
        for (int k = 0; k < 2; k++)
            for (int nt = 1; nt <= 2; nt++) {
                lq_vindex *S = NULL;
                lq_vindex_open_opts so = {.n_threads = nt, .kernels = ks[k]};
                if (lq_vindex_open(argv[1], &so, &S, &err)) {
                    printf("| %s | %d | (%s) | | | | |\n", ks[k], nt, err.msg);
                    continue;
                }
                double *t = malloc((size_t)runs * sizeof *t);
                lq_vindex_gate_knn_batch(S, ly, (size_t)L, q, 1, 20, h, cnt, &err); /* warm */
                for (int r = 0; r < runs; r++) {
                    double a = now_ms();
                    lq_vindex_gate_knn_batch(S, ly, (size_t)L, q, 1, 20, h, cnt, &err);
                    t[r] = now_ms() - a;
                }
                stat3 st = stats(t, runs);
                double gbs = bytes / (st.med * 1e6), bw = nt == 1 ? bw1 : bw2;
                printf("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n", ks[k], nt, st.med, st.min, st.max, gbs,
                       100 * gbs / bw);
                free(t);
                lq_vindex_close(S);
            }
        printf("\n");
        /* describe_many's scan: 10 queries in one pass against 1, same run, 1 thread (a
         * pg_infer backend), alternating (pg_infer's goal: <= 3x one query) */
        float *q10 = malloc(10 * (size_t)D * sizeof *q10);
        lq_vindex_hit *h10 = malloc(10 * (size_t)L * 20 * sizeof *h10);
        size_t *c10 = malloc(10 * (size_t)L * sizeof *c10);
        for (int e = 0; e < 10; e++)
            lq_vindex_entity_vector(V, entities[(size_t)e % N_ENT], q10 + (size_t)e * D, &ntk, &err);
        printf("10 queries in one pass vs 1 (top 20, all layers, 1 thread, %d alternating runs):\n\n"
               "| kernels | 1 query ms | 10 queries ms | same-run ratio (median) | min | max |\n|---|---|---|---|---|---|\n",
               runs);
        for (int k = 0; k < 2; k++) {
            lq_vindex *S = NULL;
            lq_vindex_open_opts so = {.n_threads = 1, .kernels = ks[k]};
            if (lq_vindex_open(argv[1], &so, &S, &err))
                continue;
            double *t1 = malloc((size_t)runs * sizeof *t1), *t10 = malloc((size_t)runs * sizeof *t10),
                   *rt = malloc((size_t)runs * sizeof *rt);
            lq_vindex_gate_knn_batch(S, ly, (size_t)L, q10, 10, 20, h10, c10, &err); /* warm */
            for (int r = 0; r < runs; r++) {
                double a = now_ms();
                lq_vindex_gate_knn_batch(S, ly, (size_t)L, q10, 1, 20, h10, c10, &err);
                t1[r] = now_ms() - a;
                a = now_ms();
                lq_vindex_gate_knn_batch(S, ly, (size_t)L, q10, 10, 20, h10, c10, &err);
                t10[r] = now_ms() - a;
                rt[r] = t10[r] / t1[r];
            }
            stat3 a1 = stats(t1, runs), a10 = stats(t10, runs), ar = stats(rt, runs);
            printf("| %s | %.1f | %.1f | %.2f | %.2f | %.2f |\n", ks[k], a1.med, a10.med, ar.med, ar.min, ar.max);
            free(t1), free(t10), free(rt);
            lq_vindex_close(S);
        }
        printf("\n");
        free(q10);
        free(h10);
        free(c10);
        free(q);
        free(ly);
        free(h);
        free(cnt);
    }
    if (scan_only) {
        lq_vindex_close(V);
        return 0;
    }

    printf("| query | bytes touched | median ms | min | max | roofline ms (bytes / %.1f GB/s) | "
           "%% of bandwidth |\n|---|---|---|---|---|---|---|\n", bw2);
    struct {
        const char *name, *band;
        int layers;
    } qs[] = {{"describe (knowledge band)", "knowledge", kb}, {"describe (all layers)", "all", in->num_layers}};
    for (size_t q = 0; q < 2; q++) {
        double *t = malloc((size_t)runs * sizeof *t);
        for (int r = 0; r < runs; r++) {
            double a = now_ms();
            describe_once(entities[(size_t)r % N_ENT], qs[q].band, &err);
            t[r] = now_ms() - a;
        }
        stat3 s = stats(t, runs);
        double bytes = layer_bytes * qs[q].layers, roof = bytes / (bw2 * 1e6);
        printf("| %s | %.0f MB | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n", qs[q].name, bytes / 1e6, s.med,
               s.min, s.max, roof, 100 * roof / s.med);
        free(t);
    }
    {
        double *t = malloc((size_t)runs * sizeof *t);
        for (int r = 0; r < runs; r++) {
            lq_walk_params p;
            lq_walk_params_init(&p);
            p.prompt = "The capital of France is";
            lq_walk_result w;
            double a = now_ms();
            if (lq_vindex_walk(V, &p, &w, &err) == 0)
                lq_walk_result_free(&w);
            t[r] = now_ms() - a;
        }
        stat3 s = stats(t, runs);
        double bytes = layer_bytes * in->n_loaded_layers, roof = bytes / (bw2 * 1e6);
        printf("| walk (all layers, top 5) | %.0f MB | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n", bytes / 1e6,
               s.med, s.min, s.max, roof, 100 * roof / s.med);
        free(t);
    }

    /* concurrent callers */
    printf("\nconcurrent describe (knowledge band), each caller scanning on its own thread "
           "(lq_vindex_set_thread_scan(1)), %.0f s per point, %d points:\n\n", seconds, runs > 3 ? 3 : runs);
    printf("| callers | queries/s median | min | max | roofline q/s (%.1f GB/s / %.0f MB) |\n|---|---|---|---|---|\n",
           bw2, layer_bytes * kb / 1e6);
    int callers[] = {1, 2, 4, 16};
    int pts = runs > 3 ? 3 : runs;
    for (size_t c = 0; c < 4; c++) {
        double qps[8];
        for (int r = 0; r < pts; r++) {
            pthread_t th[16];
            qjob jobs[16];
            double a = now_ms();
            for (int i = 0; i < callers[c]; i++) {
                jobs[i] = (qjob){i * 7, a + seconds * 1000, 0, 0};
                pthread_create(&th[i], NULL, qworker, &jobs[i]);
            }
            long total = 0;
            for (int i = 0; i < callers[c]; i++) {
                pthread_join(th[i], NULL);
                total += jobs[i].done;
            }
            qps[r] = total / ((now_ms() - a) / 1000);
        }
        stat3 s = stats(qps, pts);
        printf("| %d | %.1f | %.1f | %.1f | %.1f |\n", callers[c], s.med, s.min, s.max,
               bw2 * 1e9 / (layer_bytes * kb));
    }

    /* ---- prefilter: 2-bit gate sketches + exact re-scoring ---- */
    lq_vindex *P = NULL;
    lq_vindex_open_opts po = {.prefilter = 1};
    t0 = now_ms();
    if (lq_vindex_open(argv[1], &po, &P, &err)) {
        fprintf(stderr, "bench_vindex: prefilter open: %s\n", err.msg);
        lq_vindex_close(V);
        return 1;
    }
    double pf_open = now_ms() - t0;
    /* test set: entity vectors of up to 256 vocabulary tokens spread over the vocabulary */
    int D = in->hidden_size, nl = kb, K = 20, nq = 0;
    float *Q = malloc((size_t)256 * D * sizeof *Q);
    for (int i = 0; i < 4096 && nq < 256; i++) {
        const char *t = lq_vindex_token_text(V, (int32_t)((i * 7919L) % in->vocab_size));
        size_t nt = 0;
        if (t && strlen(t) > 2 && !strchr(t, ' ') &&
            lq_vindex_entity_vector(V, t, Q + (size_t)nq * D, &nt, NULL) == 0 && nt > 0)
            nq++;
    }
    int *layers = malloc((size_t)nl * sizeof *layers);
    for (int i = 0; i < nl; i++)
        layers[i] = in->bands[1].start + i;
    lq_vindex_hit *he = malloc((size_t)nq * nl * K * sizeof *he), *hp = malloc((size_t)nq * nl * K * sizeof *hp);
    size_t *ce = malloc((size_t)nq * nl * sizeof *ce), *cp = malloc((size_t)nq * nl * sizeof *cp);
    long found = 0, total = 0, ent_same = 0;
    for (int q = 0; q < nq; q++) {
        lq_vindex_gate_knn_batch(V, layers, (size_t)nl, Q + (size_t)q * D, 1, (size_t)K, he + (size_t)q * nl * K,
                                 ce + (size_t)q * nl, &err);
        lq_vindex_gate_knn_batch(P, layers, (size_t)nl, Q + (size_t)q * D, 1, (size_t)K, hp + (size_t)q * nl * K,
                                 cp + (size_t)q * nl, &err);
        int same = 1;
        for (int l = 0; l < nl; l++) {
            size_t i = (size_t)q * nl + (size_t)l;
            same &= ce[i] == cp[i];
            for (size_t a = 0; a < ce[i]; a++) {
                total++;
                int hit = 0;
                for (size_t b = 0; b < cp[i]; b++)
                    hit |= hp[i * K + b].feature == he[i * K + a].feature;
                found += hit;
                same &= a < cp[i] && hp[i * K + a].feature == he[i * K + a].feature &&
                        hp[i * K + a].score == he[i * K + a].score;
            }
        }
        ent_same += same;
    }
    /* latency: describe on both handles, alternating */
    double *te = malloc((size_t)runs * sizeof *te), *tp = malloc((size_t)runs * sizeof *tp);
    lq_vindex *keep = V;
    for (int r = 0; r < runs; r++) {
        double a = now_ms();
        describe_once(entities[(size_t)r % N_ENT], "knowledge", &err);
        te[r] = now_ms() - a;
        V = P;
        a = now_ms();
        describe_once(entities[(size_t)r % N_ENT], "knowledge", &err);
        tp[r] = now_ms() - a;
        V = keep;
    }
    stat3 se = stats(te, runs), sp = stats(tp, runs);
    double sk_bytes = (double)in->features_per_layer * (D / 4 + 4) * kb;
    double rs_bytes = (double)(2 * K + 32) * D * bpe * kb;
    printf("\nprefilter (2-bit gate sketches, exact re-scoring of the best 2K+32 rows per layer; built "
           "in %.0f ms at open, %.0f MB in memory):\n\n", pf_open,
           (double)in->features_per_layer * (D / 4 + 4) * in->n_loaded_layers / 1e6);
    printf("| describe (knowledge band) | bytes per query | median ms | min | max |\n|---|---|---|---|---|\n");
    printf("| full f16 scan | %.1f MB | %.1f | %.1f | %.1f |\n", layer_bytes * kb / 1e6, se.med, se.min, se.max);
    printf("| prefilter | %.1f MB (%.1f MB sketch + %.1f MB re-scored) | %.1f | %.1f | %.1f |\n",
           (sk_bytes + rs_bytes) / 1e6, sk_bytes / 1e6, rs_bytes / 1e6, sp.med, sp.min, sp.max);
    printf("\nbytes cut %.1fx, speedup %.1fx (medians); recall of the exact top-%d edges per layer over %d "
           "entities x %d layers: %.4f (%ld/%ld); entities with identical edges (ids, order, scores): %ld/%d\n",
           layer_bytes * kb / (sk_bytes + rs_bytes), se.med / sp.med, K, nq, nl,
           total ? (double)found / total : 1.0, found, total, ent_same, nq);
    free(te);
    free(tp);
    free(Q);
    free(layers);
    free(he);
    free(hp);
    free(ce);
    free(cp);
    lq_vindex_close(P);
    lq_vindex_close(V);
    return 0;
}
