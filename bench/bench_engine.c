/* Engine benchmark on one model: load time, decode tokens/s (1 and 2 threads), prefill
 * tokens/s (128 and 512 tokens), batched decode aggregate tokens/s (B = 1, 2, 4, 8), peak RSS,
 * each next to the roofline it answers to:
 *
 *   decode   memory bound:  measured read bandwidth / weight bytes read per token
 *   prefill  compute bound: measured int8 MAC peak / ternary MACs per token
 *   batched  memory bound per step (weights read once for all B), so up to B x decode
 *
 * The references come from bench/membw.h (the same functions bench_kernels uses). Every
 * figure is the median of --runs runs with min and max, and the 1-minute load average when
 * it was taken (other jobs on the machine lower everything).
 *
 * lmhead: generation's decode tok/s with the exact lm_head and the bounded one (lq_generate,
 * greedy, full_logits 1 vs 0, in alternating runs on one model), the tokens compared, the
 * lm_head bytes read per token both ways and the read roofline of each.
 * lmbits: how tight the bounded head's per-row bound is for compact copies of 8, 4 and 2 bits
 * (int8 and int4 per-row absmax, the vindex's 2-bit sketch): rows whose bound reaches the best
 * lower bound, and the lm_head bytes per token each would read.
 *
 * vs (with --vs): decode tok/s of MODEL and of each model of the list (the same weights in other
 * types: TQ2_0, TQ1_0), in turns within each run, with bytes per token, the read roofline and
 * each model's same-run ratio to MODEL.
 *
 * ctx: decode at a long context (the model's, at most 4096) against 16 positions, for each KV
 * cache type (f32, f16, q8).
 *
 * Usage: bench_engine MODEL [--runs N] [--decode N] [--threads-list 1,2]
 *                           [--prefill-list 128,512] [--batch-list 1,2,4,8] [--lm-head f16|q8]
 *                           [--only refs,decode,prefill,batch,q8acc,ctx,lmhead,lmbits,vs]
 *                           [--vs MODEL2,MODEL3]
 * q8acc: top-1 agreement and max logit error of --lm-head q8 against the stored lm_head.
 * Prints Markdown tables. No pass/fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/membw.h"
#include "larql/generate.h"
#include "larql/model.h"
#include "larql/sampler.h"

#define MAXL 8

static int parse_list(const char *s, int *out)
{
    int n = 0;
    for (const char *p = s; *p && n < MAXL;) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p || v < 1 || v > 4096)
            return -1;
        out[n++] = (int)v;
        p = *e == ',' ? e + 1 : e;
        if (*e && *e != ',')
            return -1;
    }
    return n;
}

static const char *only;
static int want(const char *section) { return lq_bench_want(only, section); }

static void die(const char *what, const lq_err *err)
{
    fprintf(stderr, "bench_engine: %s: %s\n", what, err->msg);
    exit(1);
}

/* Deterministic token ids in [1, 256] (valid for every vocabulary the bench is run on). */
static void make_ids(int32_t *ids, int n, int V, unsigned seed)
{
    for (int k = 0; k < n; k++) {
        seed = seed * 1103515245u + 12345u;
        ids[k] = (int32_t)((seed >> 8) % (unsigned)(V > 256 ? 256 : V)) + 1;
    }
}

/* Greedy decode of n_decode tokens after an 8-token prompt (ids) on a reset session: tok/s. */
static double decode_run(lq_session *s, const int32_t *ids, int V, float *logits, int n_decode)
{
    lq_err err = {0};
    lq_session_reset(s);
    if (lq_session_eval(s, ids, 8, logits, NULL, &err))
        die("eval", &err);
    int32_t tok;
    float best;
    lq_top_k(logits, V, 1, &tok, &best);
    double a = lq_bw_now();
    for (int k = 0; k < n_decode; k++) {
        if (lq_session_decode(s, tok, logits, &err))
            die("decode", &err);
        lq_top_k(logits, V, 1, &tok, &best);
    }
    return n_decode / (lq_bw_now() - a);
}

/* ---- vs: decode of MODEL and of the same shape stored in other types (--vs A,B: e.g. the
 * TQ2_0 and TQ1_0 copies of an I2_S model), every model once per run in turns (the first
 * model of a run rotates), each figure's ratio to MODEL taken within the run ---- */
static void bench_vs(const char *path, const char *list, int nt, int runs, int n_decode, double bw)
{
    char *copy = strdup(list);
    const char *paths[MAXL] = {path};
    int n = 1;
    for (char *tok = strtok(copy, ","); tok && n < MAXL; tok = strtok(NULL, ","))
        paths[n++] = tok;
    lq_model *m[MAXL];
    lq_session *s[MAXL];
    float *logits[MAXL];
    static double tps[MAXL][64], ratio[MAXL][64];
    int32_t ids[8];
    lq_err err = {0};
    for (int k = 0; k < n; k++) {
        lq_model_opts o = {.n_threads = nt, .lm_head_mode = LQ_LM_HEAD_EXACT};
        if (lq_model_open(paths[k], &o, &m[k], &err))
            die(paths[k], &err);
        lq_model_weights_copied(m[k], 1);
        logits[k] = malloc(sizeof(float) * (size_t)lq_model_get_info(m[k])->n_vocab);
        if (!logits[k] || lq_session_create(m[k], n_decode + 16, &s[k], &err))
            die("session", &err);
    }
    const int V = lq_model_get_info(m[0])->n_vocab;
    make_ids(ids, 8, V, 12345);
    for (int r = -1; r < runs; r++) /* run -1: warm-up */
        for (int j = 0; j < n; j++) {
            int k = (j + (r < 0 ? 0 : r)) % n;
            double v = decode_run(s[k], ids, lq_model_get_info(m[k])->n_vocab, logits[k], n_decode);
            if (r >= 0)
                tps[k][r] = v;
        }
    printf("\n### the same model in other weight types (%d thread%s, %d tokens after 8, models in turns within each run)\n\n",
           nt, nt > 1 ? "s" : "", n_decode);
    printf("| model | projections | weights MB per token | decode tok/s median | min | max | read roofline tok/s (%.1f GB/s) | fraction | / first, same-run (min-max) |\n|---|---|---|---|---|---|---|---|---|\n", bw);
    for (int k = 0; k < n; k++) {
        const lq_model_info *in = lq_model_get_info(m[k]);
        for (int r = 0; r < runs; r++)
            ratio[k][r] = tps[0][r] > 0 ? tps[k][r] / tps[0][r] : 0;
        lq_bw_stat d = lq_bw_stats(tps[k], runs), q = lq_bw_stats(ratio[k], runs);
        double bpt = (double)in->bytes_per_token, roof = bw * 1e9 / bpt;
        printf("| %s | %s | %.1f | %.2f | %.2f | %.2f | %.1f | %.0f%% | %.3f (%.3f-%.3f) |\n", paths[k],
               lq_ggml_type_name(in->proj_type), bpt / 1e6, d.med, d.min, d.max, roof,
               100 * d.med / roof, q.med, q.min, q.max);
    }
    printf("\nload %.2f\n", lq_bench_loadavg());
    fflush(stdout);
    for (int k = 0; k < n; k++) {
        lq_session_free(s[k]);
        lq_model_close(m[k]);
        free(logits[k]);
    }
    free(copy);
}

/* ---- lmbits: bound tightness of compact lm_head copies ---- */

/* Row w [d] quantised by scheme (8..3 bits: per-row absmax to +-(2^(bits-1) - 1), round half
 * even; 2: the
 * vindex sketch, trits where |w| > 0.5 mean|w| with scale = mean of the kept |w|) into wq [d];
 * returns ||w - wq|| (double). */
static double quant_err(const float *w, int d, int bits, float *wq)
{
    double e2 = 0;
    if (bits == 2) {
        double ma = 0;
        for (int i = 0; i < d; i++)
            ma += fabs(w[i]);
        ma /= d;
        double sum = 0;
        int nk = 0;
        for (int i = 0; i < d; i++)
            if (fabs(w[i]) > 0.5 * ma) {
                sum += fabs(w[i]);
                nk++;
            }
        float sc = nk ? (float)(sum / nk) : 0.0f;
        for (int i = 0; i < d; i++)
            wq[i] = fabs(w[i]) > 0.5 * ma ? (w[i] > 0 ? sc : -sc) : 0.0f;
    } else {
        float amax = 0;
        for (int i = 0; i < d; i++)
            amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
        float lv = (float)((1 << (bits - 1)) - 1), sc = amax / lv;
        for (int i = 0; i < d; i++)
            wq[i] = sc > 0 ? nearbyintf(w[i] / sc) * sc : 0.0f;
    }
    for (int i = 0; i < d; i++)
        e2 += ((double)w[i] - wq[i]) * ((double)w[i] - wq[i]);
    return sqrt(e2);
}

static void bench_lmbits(const char *path, int nt)
{
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts o = {.n_threads = nt, .lm_head_mode = LQ_LM_HEAD_EXACT};
    if (lq_model_open(path, &o, &m, &err))
        die(path, &err);
    const lq_model_info *in = lq_model_get_info(m);
    const int V = in->n_vocab, D = in->n_embd, L = in->n_layer, P = 4, CH = 1024;
    /* final-normed hidden states of P prompts: the last layer's residual / rms (the norm
     * weight is folded into the rows by lq_model_output_rows) */
    float *x = malloc(sizeof(float) * (size_t)P * D), *res = malloc(sizeof(float) * (size_t)L * D);
    float *rows = malloc(sizeof(float) * (size_t)CH * D), *wq = malloc(sizeof(float) * (size_t)D);
    enum { NB = 6 };
    double *a[NB], *e[NB], *ex = malloc(sizeof(double) * (size_t)V * P);
    int32_t *ids = malloc(sizeof(int32_t) * CH);
    for (int b = 0; b < NB; b++) {
        a[b] = malloc(sizeof(double) * (size_t)V * P);
        e[b] = malloc(sizeof(double) * (size_t)V);
    }
    double xn[4];
    for (int p = 0; p < P; p++) {
        lq_session *s;
        int32_t pr[8];
        make_ids(pr, 8, V, 777 + (unsigned)p);
        if (lq_session_create(m, 16, &s, &err) || lq_session_eval_capture(s, pr, 8, NULL, res, &err))
            die("lmbits", &err);
        const float *h = res + (size_t)(L - 1) * D;
        double ss = 0;
        for (int i = 0; i < D; i++)
            ss += (double)h[i] * h[i];
        double r = 1.0 / sqrt(ss / D + in->norm_eps);
        xn[p] = 0;
        for (int i = 0; i < D; i++) {
            x[(size_t)p * D + i] = (float)(h[i] * r);
            xn[p] += (double)x[(size_t)p * D + i] * x[(size_t)p * D + i];
        }
        xn[p] = sqrt(xn[p]);
        lq_session_free(s);
    }
    const int bits[NB] = {8, 7, 6, 5, 4, 2};
    for (int r0 = 0; r0 < V; r0 += CH) {
        int n = V - r0 < CH ? V - r0 : CH;
        for (int i = 0; i < n; i++)
            ids[i] = r0 + i;
        if (lq_model_output_rows(m, ids, (size_t)n, rows, &err))
            die("lmbits rows", &err);
        for (int i = 0; i < n; i++) {
            const float *w = rows + (size_t)i * D;
            for (int p = 0; p < P; p++) {
                double d = 0;
                for (int c = 0; c < D; c++)
                    d += (double)w[c] * x[(size_t)p * D + c];
                ex[(size_t)(r0 + i) * P + p] = d;
            }
            for (int b = 0; b < NB; b++) {
                e[b][r0 + i] = quant_err(w, D, bits[b], wq);
                for (int p = 0; p < P; p++) {
                    double d = 0;
                    for (int c = 0; c < D; c++)
                        d += (double)wq[c] * x[(size_t)p * D + c];
                    a[b][(size_t)(r0 + i) * P + p] = d;
                }
            }
        }
    }
    double row_bytes = 2.0 * D; /* f16 rows */
    printf("\n### compact lm_head copies: rows whose bound reaches the best lower bound (k = 1), %d positions\n\n",
           P);
    printf("| copy | bytes of the copy | mean err_r (row error norm) | rows rescored per token (mean, min-max) | lm_head MB per token | top-1 of the copy = exact |\n|---|---|---|---|---|---|\n");
    for (int b = 0; b < NB; b++) {
        double copy = bits[b] == 2 ? (double)V * (D / 4 + 4) : (double)V * (D * bits[b] / 8.0 + 4);
        double cnt_sum = 0, cmin = 1e30, cmax = 0, rel = 0;
        int agree = 0;
        for (int p = 0; p < P; p++) {
            double best_lo = -1e300;
            int ia = 0, ie = 0;
            for (int r = 0; r < V; r++) {
                double lo = a[b][(size_t)r * P + p] - e[b][r] * xn[p];
                best_lo = lo > best_lo ? lo : best_lo;
                ia = a[b][(size_t)r * P + p] > a[b][(size_t)ia * P + p] ? r : ia;
                ie = ex[(size_t)r * P + p] > ex[(size_t)ie * P + p] ? r : ie;
            }
            agree += ia == ie;
            double c = 0;
            for (int r = 0; r < V; r++)
                c += a[b][(size_t)r * P + p] + e[b][r] * xn[p] >= best_lo;
            cnt_sum += c;
            cmin = c < cmin ? c : cmin;
            cmax = c > cmax ? c : cmax;
        }
        for (int r = 0; r < V; r += 97) /* a sample of rows for the relative error */
            rel += e[b][r];
        double cnt = cnt_sum / P;
        char name[64];
        snprintf(name, sizeof name, bits[b] == 2 ? "2-bit sketch (vindex)" : "int%d per-row absmax", bits[b]);
        printf("| %s | %.0f MB | %.4f (sampled) | %.0f (%.0f-%.0f) of %d | %.1f | %d/%d |\n", name,
               copy / 1e6, rel / ((V + 96) / 97), cnt, cmin, cmax, V, (copy + cnt * row_bytes) / 1e6, agree, P);
    }
    printf("(exact f16 lm_head: %.1f MB per token)\n", (double)V * row_bytes / 1e6);
    for (int b = 0; b < NB; b++) {
        free(a[b]);
        free(e[b]);
    }
    free(ex);
    free(x);
    free(res);
    free(rows);
    free(wq);
    free(ids);
    lq_model_close(m);
}

/* ---- lmhead: generation decode, exact vs bounded ---- */

typedef struct tokrec {
    int32_t ids[4096];
    int n;
} tokrec;

static int rec_tok(void *u, int32_t id, const char *t, size_t l, float lp, const float *lg)
{
    (void)t, (void)l, (void)lp, (void)lg;
    tokrec *r = u;
    if (id >= 0 && r->n < 4096)
        r->ids[r->n++] = id;
    return 0;
}

static void bench_lmhead(const char *path, int nt, int runs, int n_decode, double bw)
{
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts o = {.n_threads = nt, .lm_head_mode = LQ_LM_HEAD_BOUNDED};
    double t0 = lq_bw_now();
    if (lq_model_open(path, &o, &m, &err))
        die(path, &err);
    lq_model_weights_copied(m, 1);
    double load = (lq_bw_now() - t0) * 1e3;
    const lq_model_info *in = lq_model_get_info(m);
    const int V = in->n_vocab;
    lq_head_stats hs;
    lq_model_head_stats(m, &hs);
    if (!hs.enabled) {
        printf("\n### lm_head exact vs bounded: the model's lm_head is not dense (no bounded head)\n");
        lq_model_close(m);
        return;
    }
    lq_session *s;
    if (lq_session_create(m, n_decode + 16, &s, &err))
        die("session", &err);
    int32_t prompt[8];
    make_ids(prompt, 8, V, 12345);
    double *te = malloc(sizeof(double) * (size_t)runs), *tb = malloc(sizeof(double) * (size_t)runs);
    double rows_sum = 0;
    int steps = 0, full = 0, same = 1;
    static tokrec re, rb;
    for (int r = -1; r < runs; r++) { /* run -1: warm-up */
        for (int mode = 0; mode < 2; mode++) {
            /* alternate which mode goes first, so that drifts of the host hit both */
            int bounded = (r & 1) ? !mode : mode;
            lq_generate_params p;
            lq_generate_defaults(&p);
            p.max_tokens = n_decode + 1;
            p.sampling.temperature = 0;
            p.ignore_eos = 1;
            p.full_logits = !bounded;
            lq_generate_result res;
            tokrec *out = bounded ? &rb : &re;
            out->n = 0;
            lq_session_reset(s);
            if (lq_generate(s, prompt, 8, &p, rec_tok, out, &res, &err))
                die("generate", &err);
            double tps = res.decode_ms > 0 ? (res.n_generated - 1) * 1e3 / res.decode_ms : 0;
            if (r >= 0) {
                (bounded ? tb : te)[r] = tps;
                if (bounded) {
                    rows_sum += (double)res.lm_rows_exact;
                    steps += res.lm_steps;
                    full += res.lm_full;
                }
            }
        }
        same &= re.n == rb.n && !memcmp(re.ids, rb.ids, sizeof(int32_t) * (size_t)re.n);
    }
    double *pr = malloc(sizeof(double) * (size_t)runs);
    for (int r = 0; r < runs; r++) /* each run's pair: the two modes back to back */
        pr[r] = te[r] > 0 ? tb[r] / te[r] : 0;
    lq_bw_stat sp = lq_bw_stats(pr, runs);
    free(pr);
    lq_bw_stat se = lq_bw_stats(te, runs), sb = lq_bw_stats(tb, runs);
    double per = steps ? rows_sum / steps : 0;
    double lm_exact = (double)hs.exact_bytes, lm_b = (double)hs.copy_bytes + per * lm_exact / V;
    double tot_e = (double)in->bytes_per_token, tot_b = tot_e - lm_exact + lm_b;
    printf("\n### lm_head exact vs bounded (lq_generate greedy, %d tokens after 8, %d thread%s, alternating runs; load %.0f ms)\n\n",
           n_decode, nt, nt > 1 ? "s" : "", load);
    printf("| lm_head | decode tok/s median | min | max | lm_head MB per token | all weights MB per token | read roofline tok/s (%.1f GB/s) | fraction |\n|---|---|---|---|---|---|---|---|\n", bw);
    printf("| exact (f16) | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %.0f%% |\n", se.med, se.min, se.max,
           lm_exact / 1e6, tot_e / 1e6, bw * 1e9 / tot_e, 100 * se.med / (bw * 1e9 / tot_e));
    printf("| bounded (int8 copy + %.1f exact rows per token) | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %.0f%% |\n",
           per, sb.med, sb.min, sb.max, lm_b / 1e6, tot_b / 1e6, bw * 1e9 / tot_b, 100 * sb.med / (bw * 1e9 / tot_b));
    printf("\nbounded / exact: %.2fx (medians), same-run pairs %.2fx (%.2f-%.2f); tokens identical in every run: %s; %d of %d steps over the whole head; load %.2f\n",
           se.med > 0 ? sb.med / se.med : 0, sp.med, sp.min, sp.max, same ? "yes" : "NO", full, steps,
           lq_bench_loadavg());
    fflush(stdout);
    free(te);
    free(tb);
    lq_session_free(s);
    lq_model_close(m);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_engine MODEL [--runs N] [--decode N] [--threads-list 1,2] "
                        "[--prefill-list 128,512] [--batch-list 1,2,4,8] [--lm-head f16|q8] "
                        "[--only refs,decode,prefill,batch,q8acc,ctx,lmhead,lmbits,vs] [--vs MODEL2,...]\n");
        return 2;
    }
    const char *path = argv[1];
    int runs = 5, n_decode = 32;
    int threads[MAXL] = {1, 2}, n_threads = 2;
    int prefill[MAXL] = {128, 512}, n_prefill = 2;
    int batch[MAXL] = {1, 2, 4, 8}, n_batch = 4;
    int lm_q8 = 0;
    const char *vs_list = NULL;
    for (int i = 2; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = !v;
        if (v && !strcmp(a, "--runs")) runs = atoi(v);
        else if (v && !strcmp(a, "--decode")) n_decode = atoi(v);
        else if (v && !strcmp(a, "--threads-list")) bad = (n_threads = parse_list(v, threads)) < 1;
        else if (v && !strcmp(a, "--prefill-list")) bad = (n_prefill = parse_list(v, prefill)) < 1;
        else if (v && !strcmp(a, "--batch-list")) bad = (n_batch = parse_list(v, batch)) < 1;
        else if (v && !strcmp(a, "--lm-head")) { lm_q8 = !strcmp(v, "q8"); bad = !lm_q8 && strcmp(v, "f16"); }
        else if (v && !strcmp(a, "--only")) only = v;
        else if (v && !strcmp(a, "--vs")) vs_list = v;
        else bad = 1;
        if (bad) {
            fprintf(stderr, "bench_engine: bad argument %s\n", a);
            return 2;
        }
    }
    if (runs < 1 || runs > 64 || n_decode < 1 || n_decode > 4096)
        return 2;

    /* references, one per thread count */
    double bw[MAXL] = {0}, peak[MAXL] = {0};
    if (want("refs") || want("decode") || want("prefill") || want("batch")) {
        printf("### references (bench/membw.h)\n\n| threads | read GB/s (min-max) | load | int8 G MAC/s (min-max) | load |\n|---|---|---|---|---|\n");
        for (int t = 0; t < n_threads; t++) {
            lq_bw_stat b = lq_bench_read_bw_stat(threads[t], runs);
            double lb = lq_bench_loadavg();
            lq_bw_stat p = lq_bench_mac_peak_stat(threads[t], runs);
            bw[t] = b.med;
            peak[t] = p.med;
            printf("| %d | %.1f (%.1f-%.1f) | %.2f | %.0f (%.0f-%.0f) | %.2f |\n", threads[t], b.med,
                   b.min, b.max, lb, p.med, p.min, p.max, lq_bench_loadavg());
            fflush(stdout);
        }
    }

    if (want("q8acc")) { /* effect of --lm-head q8 on the logits: one model of each kind */
        lq_model *mf = NULL, *mq = NULL;
        lq_err err = {0};
        lq_model_opts of = {.n_threads = threads[n_threads - 1], .lm_head_mode = LQ_LM_HEAD_EXACT}, oq = of;
        oq.lm_head_q8 = 1;
        if (lq_model_open(path, &of, &mf, &err) || lq_model_open(path, &oq, &mq, &err))
            die(path, &err);
        const int V = lq_model_get_info(mf)->n_vocab, N = 64;
        int32_t ids[64];
        make_ids(ids, N, V, 4242);
        float *a = malloc(sizeof(float) * (size_t)V * N), *b = malloc(sizeof(float) * (size_t)V * N);
        lq_session *sf, *sq;
        if (!a || !b || lq_session_create(mf, N, &sf, &err) || lq_session_create(mq, N, &sq, &err) ||
            lq_session_eval(sf, ids, N, NULL, a, &err) || lq_session_eval(sq, ids, N, NULL, b, &err))
            die("q8acc", &err);
        int agree = 0;
        double maxerr = 0, maxmag = 0;
        for (int p = 0; p < N; p++) {
            const float *x = a + (size_t)p * V, *y = b + (size_t)p * V;
            int ia = 0, ib = 0;
            for (int i = 1; i < V; i++) {
                ia = x[i] > x[ia] ? i : ia;
                ib = y[i] > y[ib] ? i : ib;
            }
            agree += ia == ib;
            for (int i = 0; i < V; i++) {
                double e = x[i] > y[i] ? x[i] - y[i] : y[i] - x[i];
                maxerr = e > maxerr ? e : maxerr;
                double mg = x[i] > 0 ? x[i] : -x[i];
                maxmag = mg > maxmag ? mg : maxmag;
            }
        }
        printf("\n### --lm-head q8 vs as stored (%s, %d positions)\n\ntop-1 agreement %d/%d; max |logit error| %.4g (largest |logit| %.3g)\n",
               path, N, agree, N, maxerr, maxmag);
        lq_session_free(sf);
        lq_session_free(sq);
        lq_model_close(mf);
        lq_model_close(mq);
        free(a);
        free(b);
    }

    if (want("lmhead")) {
        double bwl = bw[n_threads - 1];
        if (bwl <= 0)
            bwl = lq_bench_read_bw_stat(threads[n_threads - 1], 3).med;
        bench_lmhead(path, threads[n_threads - 1], runs, n_decode, bwl);
    }
    if (want("lmbits"))
        bench_lmbits(path, threads[n_threads - 1]);
    if (vs_list && want("vs")) {
        double bwl = bw[n_threads - 1];
        if (bwl <= 0)
            bwl = lq_bench_read_bw_stat(threads[n_threads - 1], 3).med;
        bench_vs(path, vs_list, threads[n_threads - 1], runs, n_decode, bwl);
    }

    double *v = malloc(sizeof(double) * (size_t)runs);
    double load_ms[MAXL] = {0};
    int engine = want("decode") || want("prefill") || want("batch");
    for (int ti = 0; ti < n_threads && engine; ti++) {
        lq_model_opts o = {.n_threads = threads[ti], .lm_head_q8 = lm_q8, .lm_head_mode = LQ_LM_HEAD_EXACT};
        lq_model *m;
        lq_err err = {0};
        double t0 = lq_bw_now();
        if (lq_model_open(path, &o, &m, &err))
            die(path, &err);
        lq_model_weights_copied(m, 1); /* measure the weights as they end up held */
        load_ms[ti] = (lq_bw_now() - t0) * 1e3;
        const lq_model_info *in = lq_model_get_info(m);
        const int V = in->n_vocab;
        const double qd = (double)in->n_head * in->head_dim, kvd = (double)in->n_head_kv * in->head_dim;
        /* ternary MACs per token: q,k,v,o + gate,up,down in every layer */
        const double macs = in->n_layer * ((double)in->n_embd * (qd + 2 * kvd) + qd * in->n_embd +
                                           3.0 * in->n_embd * in->n_ff);
        const double bpt = (double)in->bytes_per_token;
        const double roof_dec = bw[ti] * 1e9 / bpt, roof_pf = peak[ti] * 1e9 / macs;
        int max_pf = 8;
        for (int i = 0; i < n_prefill; i++)
            max_pf = prefill[i] > max_pf ? prefill[i] : max_pf;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_pf);
        float *logits = malloc(sizeof(float) * (size_t)V * MAXL * 8);
        if (!ids || !logits)
            return 1;
        make_ids(ids, max_pf, V, 12345);
        if (ti == 0) {
            printf("\nmodel: %s, %s, %d layers, dim %d, ffn %d, heads %d/%d, vocab %d; kernels %s; lm_head %s\n",
                   path, in->arch_name, in->n_layer, in->n_embd, in->n_ff, in->n_head, in->n_head_kv,
                   V, in->kernels, lm_q8 ? "q8 (int8 per-row copy)" : "as stored");
            printf("per decoded token: %.1f MB of weights read (%.1f MB mapped); %.3f G ternary MACs per token\n",
                   bpt / 1e6, in->weight_bytes / 1e6, macs / 1e9);
        }
        printf("\n### %d thread%s (load %.0f ms)\n\n", threads[ti], threads[ti] > 1 ? "s" : "", load_ms[ti]);
        printf("| measure | median | min | max | roofline | fraction | load |\n|---|---|---|---|---|---|---|\n");

        lq_session *s;
        if (lq_session_create(m, max_pf + n_decode + 16, &s, &err))
            die("session", &err);
        /* warm-up: touches every weight page once */
        if (lq_session_eval(s, ids, 8, logits, NULL, &err))
            die("eval", &err);

        if (want("decode")) {
            /* each run is paired with read-bandwidth passes taken just before and after it */
            size_t bwb_bytes = 0;
            uint8_t *bwb = lq_bw_buf_new(&bwb_bytes);
            double frac[64];
            for (int r = 0; r < runs; r++) {
                double run_bw = bwb ? lq_bw_buf_read(bwb, bwb_bytes, threads[ti]) : 0;
                v[r] = decode_run(s, ids, V, logits, n_decode);
                if (bwb) /* bracketed: the mean of a pass before and one after the run */
                    run_bw = 0.5 * (run_bw + lq_bw_buf_read(bwb, bwb_bytes, threads[ti]));
                frac[r] = run_bw > 0 ? v[r] * bpt / 1e9 / run_bw : 0;
            }
            if (bwb)
                munmap(bwb, bwb_bytes);
            lq_bw_stat d = lq_bw_stats(v, runs), f = lq_bw_stats(frac, runs);
            printf("| decode tok/s (%d tokens after 8) | %.2f | %.2f | %.2f | %.1f tok/s (%.1f GB/s / %.0f MB) | %.0f%% (%.1f GB/s); same-run pairs %.0f%% (%.0f-%.0f%%) | %.2f |\n",
                   n_decode, d.med, d.min, d.max, roof_dec, bw[ti], bpt / 1e6,
                   100 * d.med / roof_dec, d.med * bpt / 1e9, 100 * f.med, 100 * f.min,
                   100 * f.max, lq_bench_loadavg());
            fflush(stdout);
        }
        if (want("prefill")) {
            for (int pi = 0; pi < n_prefill; pi++) {
                int n = prefill[pi];
                double frac[64];
                for (int r = 0; r < runs; r++) {
                    /* bracketed by two short int8 MAC peak passes, as decode is by bandwidth */
                    double run_peak = lq_bench_mac_peak_stat(threads[ti], 1).med;
                    lq_session_reset(s);
                    double a = lq_bw_now();
                    if (lq_session_eval(s, ids, (size_t)n, logits, NULL, &err))
                        die("prefill", &err);
                    v[r] = n / (lq_bw_now() - a);
                    run_peak = 0.5 * (run_peak + lq_bench_mac_peak_stat(threads[ti], 1).med);
                    frac[r] = run_peak > 0 ? v[r] * macs / 1e9 / run_peak : 0;
                }
                lq_bw_stat p = lq_bw_stats(v, runs), f = lq_bw_stats(frac, runs);
                printf("| prefill %d tok/s | %.1f | %.1f | %.1f | %.0f tok/s (%.0f G MAC/s / %.2f G) | %.0f%% (%.0f G MAC/s); same-run pairs %.0f%% (%.0f-%.0f%%) | %.2f |\n",
                       n, p.med, p.min, p.max, roof_pf, peak[ti], macs / 1e9, 100 * p.med / roof_pf,
                       p.med * macs / 1e9, 100 * f.med, 100 * f.min, 100 * f.max, lq_bench_loadavg());
                fflush(stdout);
            }
        }
        lq_session_free(s);

        if (want("batch") && ti == n_threads - 1) {
            /* The batch sizes take turns within each run, so that every B sees the same
             * machine (neighbours move the bandwidth by 2x here, sometimes within seconds);
             * the gain is the median of the per-run ratios to B=1 of that same run. */
            lq_session **ss[MAXL];
            int32_t *tok[MAXL];
            float **lp[MAXL];
            float *lbuf[MAXL];
            double vb[MAXL][64];
            for (int bi = 0; bi < n_batch; bi++) {
                int B = batch[bi];
                ss[bi] = calloc((size_t)B, sizeof **ss);
                tok[bi] = calloc((size_t)B, sizeof **tok);
                lp[bi] = calloc((size_t)B, sizeof **lp);
                lbuf[bi] = malloc(sizeof(float) * (size_t)V * (size_t)B);
                if (!ss[bi] || !tok[bi] || !lp[bi] || !lbuf[bi])
                    return 1;
                for (int b = 0; b < B; b++) {
                    if (lq_session_create(m, 8 + n_decode + 8, &ss[bi][b], &err))
                        die("session", &err);
                    lp[bi][b] = lbuf[bi] + (size_t)b * V;
                }
            }
            /* Within a run the batch sizes alternate every SLICE steps (not every run), so
             * that the B=1 and B=4 steps of one run see the same seconds of the machine. */
            enum { SLICE = 4 };
            for (int r = 0; r < runs; r++) {
                double spent[MAXL] = {0};
                for (int bi = 0; bi < n_batch; bi++) {
                    int B = batch[bi];
                    for (int b = 0; b < B; b++) { /* different prompts per stream */
                        int32_t pr[8];
                        make_ids(pr, 8, V, 777u + (unsigned)b);
                        lq_session_reset(ss[bi][b]);
                        lq_session_eval(ss[bi][b], pr, 8, lp[bi][b], NULL, &err);
                        float best;
                        lq_top_k(lp[bi][b], V, 1, &tok[bi][b], &best);
                    }
                }
                for (int k0 = 0; k0 < n_decode; k0 += SLICE) {
                    int nk = n_decode - k0 < SLICE ? n_decode - k0 : SLICE;
                    for (int bi = 0; bi < n_batch; bi++) {
                        int B = batch[bi];
                        double a = lq_bw_now();
                        for (int k = 0; k < nk; k++) {
                            if (lq_session_decode_batch(ss[bi], tok[bi], B, lp[bi], &err))
                                die("decode_batch", &err);
                            for (int b = 0; b < B; b++) {
                                float best;
                                lq_top_k(lp[bi][b], V, 1, &tok[bi][b], &best);
                            }
                        }
                        spent[bi] += lq_bw_now() - a;
                    }
                }
                for (int bi = 0; bi < n_batch; bi++)
                    vb[bi][r] = (double)batch[bi] * n_decode / spent[bi];
            }
            double ratio[MAXL][64]; /* against the first B of the same run (before sorting) */
            for (int bi = 0; bi < n_batch; bi++)
                for (int r = 0; r < runs; r++)
                    ratio[bi][r] = vb[bi][r] / vb[0][r];
            for (int bi = 0; bi < n_batch; bi++) {
                int B = batch[bi];
                lq_bw_stat p = lq_bw_stats(vb[bi], runs);
                lq_bw_stat q = lq_bw_stats(ratio[bi], runs);
                printf("| batched decode B=%d aggregate tok/s | %.2f | %.2f | %.2f | %.1f tok/s (B x decode roofline) | %.2fx B=%d (%.2f-%.2f) | %.2f |\n",
                       B, p.med, p.min, p.max, B * roof_dec, q.med, batch[0], q.min, q.max,
                       lq_bench_loadavg());
                for (int b = 0; b < B; b++)
                    lq_session_free(ss[bi][b]);
                free(ss[bi]);
                free(tok[bi]);
                free(lp[bi]);
                free(lbuf[bi]);
            }
            fflush(stdout);
        }
        lq_model_close(m);
        free(ids);
        free(logits);
    }
    if (want("ctx")) {
        /* Decode at a long context against a short one, per KV cache type, on the last thread
         * count: the session is prefilled once to P positions, each run truncates back to P
         * and decodes n_decode tokens (runs alternate short / long, ratios within a run).
         * The roofline ratio is (weights + K/V at 16) / (weights + K/V at P) bytes a token. */
        int nt = threads[n_threads - 1];
        printf("\n### decode at a long context (%d thread%s, %d tokens a run, %d runs)\n\n", nt, nt > 1 ? "s" : "",
               n_decode, runs);
        printf("| KV cache | K/V MB read a token at P | decode tok/s at 16 | at P | ratio P / 16 (min-max) | roofline ratio | load |\n"
               "|---|---|---|---|---|---|---|\n");
        for (int kt = LQ_KV_F32; kt <= LQ_KV_Q8; kt++) {
            lq_model_opts o = {.n_threads = nt, .lm_head_q8 = lm_q8, .kv_type = kt, .lm_head_mode = LQ_LM_HEAD_EXACT};
            lq_model *m;
            lq_err err = {0};
            if (lq_model_open(path, &o, &m, &err)) {
                printf("| %s | %s | | | | | |\n", lq_kv_type_name(kt), err.msg);
                continue;
            }
            lq_model_weights_copied(m, 1);
            const lq_model_info *in = lq_model_get_info(m);
            int n_ctx = in->n_ctx_train < 4096 ? in->n_ctx_train : 4096;
            int P = n_ctx - n_decode - 1;
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)(P + n_decode));
            float *logits = malloc(sizeof(float) * (size_t)in->n_vocab);
            lq_session *sl = NULL, *ss = NULL;
            if (!ids || !logits || lq_session_create(m, n_ctx, &sl, &err) || lq_session_create(m, 64, &ss, &err))
                die("ctx session", &err);
            make_ids(ids, P + n_decode, in->n_vocab, 777);
            if (lq_session_eval(sl, ids, (size_t)P, NULL, NULL, &err) || lq_session_eval(ss, ids, 16, NULL, NULL, &err))
                die("ctx prefill", &err);
            double vs[64], vl[64], ratio[64];
            for (int r = 0; r < runs; r++) {
                for (int which = 0; which < 2; which++) {
                    lq_session *s = which ? sl : ss;
                    if (lq_session_truncate(s, which ? P : 16, &err))
                        die("ctx truncate", &err);
                    double t0 = lq_bw_now();
                    for (int k = 0; k < n_decode; k++)
                        if (lq_session_decode(s, ids[P + k], logits, &err))
                            die("ctx decode", &err);
                    (which ? vl : vs)[r] = n_decode / (lq_bw_now() - t0);
                }
                ratio[r] = vl[r] / vs[r];
            }
            double kvb = 2.0 * in->n_layer * in->n_head_kv *
                         (kt == LQ_KV_Q8 ? in->head_dim * 1.125 : in->head_dim * (kt == LQ_KV_F16 ? 2.0 : 4.0));
            double w = (double)in->bytes_per_token;
            lq_bw_stat a = lq_bw_stats(vs, runs), b = lq_bw_stats(vl, runs), q = lq_bw_stats(ratio, runs);
            printf("| %s | %.0f (P = %d) | %.2f | %.2f | %.3f (%.3f-%.3f) | %.3f | %.2f |\n", lq_kv_type_name(kt),
                   kvb * P / 1e6, P, a.med, b.med, q.med, q.min, q.max, (w + kvb * 16) / (w + kvb * P),
                   lq_bench_loadavg());
            fflush(stdout);
            lq_session_free(sl);
            lq_session_free(ss);
            lq_model_close(m);
            free(ids);
            free(logits);
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("\npeak RSS: %.1f MB (includes the 1 GiB bandwidth buffer when refs ran; the model's pages are file-backed and shared)\n",
           ru.ru_maxrss / 1024.0);
    free(v);
    return 0;
}
