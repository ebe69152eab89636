/* Engine benchmark: load time, prefill and decode tokens/s at 1 and 2 threads, peak RSS,
 * and the memory roofline they answer to (measured read bandwidth / bytes read per token).
 * Usage: bench_engine MODEL [--runs N] [--prefill N] [--decode N] [--threads-list 1,2]
 * Prints a Markdown table (median of N runs, min and max). No pass/fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench/membw.h"
#include "larql/model.h"
#include "larql/sampler.h"

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

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_engine MODEL [--runs N] [--prefill N] [--decode N] [--threads-list 1,2]\n");
        return 2;
    }
    const char *path = argv[1];
    int runs = 5, n_prefill = 128, n_decode = 32;
    int threads[8] = {1, 2}, n_threads = 2;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefill")) n_prefill = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode")) n_decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads-list")) {
            n_threads = 0;
            for (char *p = argv[i + 1]; *p && n_threads < 8;) {
                threads[n_threads++] = (int)strtol(p, &p, 10);
                if (*p == ',') p++;
            }
        }
    }
    if (runs < 1 || runs > 100 || n_prefill < 1 || n_decode < 1)
        return 2;

    double bw[8];
    for (int t = 0; t < n_threads; t++)
        bw[t] = lq_bench_read_bw(threads[t]);

    printf("| threads | load ms | prefill %d tok/s (min-max) | decode tok/s (min-max) | roofline tok/s | decode / roofline | read GB/s |\n",
           n_prefill);
    printf("|---|---|---|---|---|---|---|\n");
    for (int t = 0; t < n_threads; t++) {
        lq_model_opts o = {.n_threads = threads[t]};
        lq_model *m;
        lq_err err = {0};
        double t0 = now_ms();
        if (lq_model_open(path, &o, &m, &err)) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
        double load = now_ms() - t0;
        const lq_model_info *in = lq_model_get_info(m);
        int V = in->n_vocab;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_prefill);
        float *logits = malloc(sizeof(float) * (size_t)V);
        double *pf = malloc(sizeof(double) * (size_t)runs), *dc = malloc(sizeof(double) * (size_t)runs);
        unsigned seed = 12345;
        for (int k = 0; k < n_prefill; k++) {
            seed = seed * 1103515245u + 12345u;
            ids[k] = (int32_t)((seed >> 8) % (unsigned)(V > 256 ? 256 : V)) + 1;
        }
        lq_session *s;
        if (lq_session_create(m, n_prefill + n_decode + 8, &s, &err)) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
        /* warm-up: touches every weight page once */
        lq_session_eval(s, ids, 8, logits, NULL, &err);
        for (int r = 0; r < runs; r++) {
            lq_session_reset(s);
            double a = now_ms();
            if (lq_session_eval(s, ids, (size_t)n_prefill, logits, NULL, &err)) {
                fprintf(stderr, "bench_engine: %s\n", err.msg);
                return 1;
            }
            pf[r] = n_prefill * 1000.0 / (now_ms() - a);
            lq_session_reset(s);
            lq_session_eval(s, ids, 8, logits, NULL, &err);
            int32_t tok;
            float best;
            lq_top_k(logits, V, 1, &tok, &best);
            a = now_ms();
            for (int k = 0; k < n_decode; k++) {
                if (lq_session_decode(s, tok, logits, &err)) {
                    fprintf(stderr, "bench_engine: %s\n", err.msg);
                    return 1;
                }
                lq_top_k(logits, V, 1, &tok, &best);
            }
            dc[r] = n_decode * 1000.0 / (now_ms() - a);
        }
        stat3 P = stats(pf, runs), D = stats(dc, runs);
        double roof = bw[t] * 1e9 / (double)in->bytes_per_token;
        printf("| %d | %.0f | %.1f (%.1f-%.1f) | %.2f (%.2f-%.2f) | %.1f | %.0f%% | %.1f |\n", threads[t], load,
               P.med, P.min, P.max, D.med, D.min, D.max, roof, 100.0 * D.med / roof, bw[t]);
        fflush(stdout);
        if (t == n_threads - 1) {
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            printf("\nmodel: %s, %s, %d layers, dim %d, ffn %d, vocab %d; kernels %s\n", path, in->arch_name,
                   in->n_layer, in->n_embd, in->n_ff, V, in->kernels);
            printf("bytes read per decoded token: %.1f MB (weights %.1f MB mapped)\n",
                   in->bytes_per_token / 1e6, in->weight_bytes / 1e6);
            printf("peak RSS: %.1f MB\n", ru.ru_maxrss / 1024.0);
        }
        lq_session_free(s);
        lq_model_close(m);
        free(ids);
        free(logits);
        free(pf);
        free(dc);
    }
    return 0;
}
