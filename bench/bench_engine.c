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
 * ctx: decode at a long context (the model's, at most 4096) against 16 positions, for each KV
 * cache type (f32, f16, q8).
 *
 * Usage: bench_engine MODEL [--runs N] [--decode N] [--threads-list 1,2]
 *                           [--prefill-list 128,512] [--batch-list 1,2,4,8] [--lm-head f16|q8]
 *                           [--only refs,decode,prefill,batch,q8acc,ctx]
 * q8acc: top-1 agreement and max logit error of --lm-head q8 against the stored lm_head.
 * Prints Markdown tables. No pass/fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/membw.h"
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
static int want(const char *section)
{
    if (!only || !*only)
        return 1;
    size_t n = strlen(section);
    for (const char *p = only; (p = strstr(p, section)); p += n)
        if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return 1;
    return 0;
}

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

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_engine MODEL [--runs N] [--decode N] [--threads-list 1,2] "
                        "[--prefill-list 128,512] [--batch-list 1,2,4,8] [--lm-head f16|q8] "
                        "[--only refs,decode,prefill,batch,q8acc,ctx]\n");
        return 2;
    }
    const char *path = argv[1];
    int runs = 5, n_decode = 32;
    int threads[MAXL] = {1, 2}, n_threads = 2;
    int prefill[MAXL] = {128, 512}, n_prefill = 2;
    int batch[MAXL] = {1, 2, 4, 8}, n_batch = 4;
    int lm_q8 = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = !v;
        if (v && !strcmp(a, "--runs")) runs = atoi(v);
        else if (v && !strcmp(a, "--decode")) n_decode = atoi(v);
        else if (v && !strcmp(a, "--threads-list")) bad = (n_threads = parse_list(v, threads)) < 1;
        else if (v && !strcmp(a, "--prefill-list")) bad = (n_prefill = parse_list(v, prefill)) < 1;
        else if (v && !strcmp(a, "--batch-list")) bad = (n_batch = parse_list(v, batch)) < 1;
        else if (v && !strcmp(a, "--lm-head")) { lm_q8 = !strcmp(v, "q8"); bad = !lm_q8 && strcmp(v, "f16"); }
        else if (v && !strcmp(a, "--only")) only = v;
        else bad = 1;
        if (bad) {
            fprintf(stderr, "bench_engine: bad argument %s\n", a);
            return 2;
        }
        i++;
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
        lq_model_opts of = {.n_threads = threads[n_threads - 1]}, oq = of;
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

    double *v = malloc(sizeof(double) * (size_t)runs);
    double load_ms[MAXL] = {0};
    int engine = want("decode") || want("prefill") || want("batch");
    for (int ti = 0; ti < n_threads && engine; ti++) {
        lq_model_opts o = {.n_threads = threads[ti], .lm_head_q8 = lm_q8};
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
                lq_session_reset(s);
                lq_session_eval(s, ids, 8, logits, NULL, &err);
                int32_t tok;
                float best;
                lq_top_k(logits, V, 1, &tok, &best);
                double a = lq_bw_now();
                for (int k = 0; k < n_decode; k++) {
                    if (lq_session_decode(s, tok, logits, &err))
                        die("decode", &err);
                    lq_top_k(logits, V, 1, &tok, &best);
                }
                v[r] = n_decode / (lq_bw_now() - a);
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
            lq_model_opts o = {.n_threads = nt, .lm_head_q8 = lm_q8, .kv_type = kt};
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
            lq_session *sl, *ss;
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
