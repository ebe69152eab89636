/* The engine figures the server benchmark is read against, measured in the same run as the
 * server: single-stream decode through lq_generate (what one HTTP stream can get at best)
 * and lq_session_decode_batch at B = 1, 4, 16 (what the scheduler's steps can get at best).
 * Usage: bench_server MODEL [--runs N] [--tokens N] [--threads N]
 * Prints a Markdown table: median of N runs, min and max. No pass/fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "larql/generate.h"
#include "larql/model.h"

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

static void row(const char *what, double *v, int n, double base)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    printf("| %s | %.1f | %.1f-%.1f | %s", what, med, v[0], v[n - 1], base > 0 ? "" : "- |\n");
    if (base > 0)
        printf("%.2f |\n", med / base);
}

#define MAXB 16
#define PROMPT 16

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_server MODEL [--runs N] [--tokens N] [--threads N]\n");
        return 2;
    }
    int runs = 3, tokens = 32, threads = 2;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    }
    if (runs < 1 || runs > 100 || tokens < 2 || tokens > 4096 || threads < 1 || threads > 256) {
        fprintf(stderr, "bench_server: runs 1..100, tokens 2..4096, threads 1..256\n");
        return 2;
    }
    lq_model_opts mo = {0};
    mo.n_threads = threads;
    lq_model *m = NULL;
    lq_err err = {0};
    if (lq_model_open(argv[1], &mo, &m, &err)) {
        fprintf(stderr, "bench_server: %s\n", err.msg);
        return 1;
    }
    lq_model_weights_copied(m, 1);
    const lq_model_info *mi = lq_model_get_info(m);
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % mi->n_vocab);
    int ctx = PROMPT + tokens + 8;
    lq_session *ss[MAXB] = {0};
    float *lg[MAXB] = {0};
    for (int b = 0; b < MAXB; b++) {
        lg[b] = malloc((size_t)mi->n_vocab * sizeof(float)); /* [n_vocab] */
        if (!lg[b] || lq_session_create(m, ctx, &ss[b], &err)) {
            fprintf(stderr, "bench_server: %s\n", err.msg[0] ? err.msg : "out of memory");
            return 1;
        }
    }
    double *v = calloc((size_t)runs, sizeof *v);
    printf("| engine (%d threads, %d-token prompt) | tokens/s median | min-max | x single stream |\n", threads,
           PROMPT);
    printf("|---|---|---|---|\n");

    /* lq_generate: greedy, EOS ignored, decode rate after the first token */
    lq_generate_params gp;
    lq_generate_defaults(&gp);
    gp.max_tokens = tokens;
    gp.ignore_eos = 1;
    gp.sampling.temperature = 0;
    for (int r = 0; r < runs; r++) {
        lq_generate_result res;
        lq_session_reset(ss[0]);
        if (lq_generate(ss[0], prompt, PROMPT, &gp, NULL, NULL, &res, &err)) {
            fprintf(stderr, "bench_server: %s\n", err.msg);
            return 1;
        }
        v[r] = res.decode_ms > 0 ? (res.n_generated - 1) * 1e3 / res.decode_ms : 0;
    }
    double single = 0;
    {
        double tmp[100];
        memcpy(tmp, v, (size_t)runs * sizeof *v);
        qsort(tmp, (size_t)runs, sizeof *tmp, cmp_d);
        single = runs % 2 ? tmp[runs / 2] : 0.5 * (tmp[runs / 2 - 1] + tmp[runs / 2]);
    }
    row("lq_generate, 1 stream (decode)", v, runs, 0);

    /* lq_session_decode_batch: B sessions, each after the same prompt, tokens steps */
    static const int Bs[] = {1, 4, 16};
    for (size_t k = 0; k < sizeof Bs / sizeof Bs[0]; k++) {
        int B = Bs[k];
        for (int r = 0; r < runs; r++) {
            int32_t ids[MAXB];
            for (int b = 0; b < B; b++) {
                lq_session_reset(ss[b]);
                if (lq_session_eval(ss[b], prompt, PROMPT, NULL, NULL, &err)) {
                    fprintf(stderr, "bench_server: %s\n", err.msg);
                    return 1;
                }
                ids[b] = (int32_t)((b * 31 + 5) % mi->n_vocab);
            }
            double t0 = now_ms();
            for (int t = 0; t < tokens - 1; t++)
                if (lq_session_decode_batch(ss, ids, B, lg, &err)) {
                    fprintf(stderr, "bench_server: %s\n", err.msg);
                    return 1;
                }
            double ms = now_ms() - t0;
            v[r] = (double)B * (tokens - 1) * 1e3 / ms;
        }
        char what[64];
        snprintf(what, sizeof what, "lq_session_decode_batch B=%d (aggregate)", B);
        row(what, v, runs, single);
    }
    for (int b = 0; b < MAXB; b++) {
        lq_session_free(ss[b]);
        free(lg[b]);
    }
    free(v);
    lq_model_close(m);
    return 0;
}
