/* Grammar mask cost next to decode time, on one model (same run):
 *
 *   vocab     building the token-byte trie of the tokenizer (once per tokenizer)
 *   decode    unconstrained generation: ms per token of the decode step
 *   masked    generation under a 10-field JSON schema (temperature 1): mask ms per token
 *             (computing the mask, applying it, advancing the grammar) and its ratio to the
 *             decode step's own time
 *   cold      the same tokens replayed with a fresh recogniser at every step, so no mask
 *             comes from the per-state cache: the worst case of each step
 *
 * Usage: bench_grammar MODEL [--tokens N] [--runs N] [--threads N]
 * Prints a Markdown table. Figures are medians over the runs (seeds 1..runs). No pass/fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "larql/generate.h"
#include "larql/grammar.h"
#include "larql/model.h"
#include "larql/tokenizer.h"

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\"},"
    "\"email\":{\"type\":\"string\"},"
    "\"score\":{\"type\":\"number\"},"
    "\"active\":{\"type\":\"boolean\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4},"
    "\"joined\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
    "\"note\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"name\",\"age\",\"email\",\"score\",\"active\",\"role\",\"tags\",\"joined\","
    "\"id\",\"note\"],\"additionalProperties\":false}";

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void die(const char *what, const lq_err *e)
{
    fprintf(stderr, "bench_grammar: %s: %s\n", what, e->msg);
    exit(1);
}

typedef struct toks {
    int32_t ids[4096];
    int n;
} toks;

static int on_tok(void *u, int32_t id, const char *t, size_t l, float lp, const float *lg)
{
    (void)t, (void)l, (void)lp, (void)lg;
    toks *k = u;
    if (id >= 0 && k->n < 4096)
        k->ids[k->n++] = id;
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n ? v[n / 2] : 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int n_tok = 128, runs = 3, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            n_tok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!path)
            path = argv[i];
    }
    if (!path || n_tok < 2 || runs < 1 || runs > 64) {
        fprintf(stderr, "usage: bench_grammar MODEL [--tokens N] [--runs N] [--threads N]\n");
        return 2;
    }
    lq_err err = {0};
    lq_model_opts mo = {0};
    mo.n_threads = threads;
    lq_model *m = NULL;
    if (lq_model_open(path, &mo, &m, &err))
        die(path, &err);
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    int32_t nv = lq_tokenizer_n_vocab(tok);
    double t0 = now_ms();
    lq_grammar_vocab *v = NULL;
    if (lq_grammar_vocab_create(tok, &v, &err))
        die("vocab", &err);
    double vocab_ms = now_ms() - t0;
    lq_grammar *g = NULL;
    if (lq_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &g, &err))
        die("schema", &err);
    const char *prompt = "Once upon a time";
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (lq_tokenizer_encode(tok, prompt, strlen(prompt),
                            lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0, &ids, &n_ids, &err))
        die("encode", &err);
    int ctx = (int)n_ids + n_tok + 1;
    const lq_model_info *info = lq_model_get_info(m);
    if (ctx > info->n_ctx_train)
        ctx = info->n_ctx_train;

    double dec[64], mdec[64], mask[64], ratio[64], cold[64], cold_max[64];
    int ntok_masked[64];
    uint8_t *allowed = malloc((size_t)nv);
    for (int r = 0; r < runs; r++) {
        lq_generate_params p;
        lq_generate_defaults(&p);
        p.max_tokens = n_tok;
        p.sampling.temperature = 1.0f;
        p.sampling.top_k = 0;
        p.sampling.top_p = 1.0f;
        p.sampling.min_p = 0.0f;
        p.sampling.seed = (uint64_t)(r + 1);
        p.sampling.has_seed = 1;
        lq_generate_result res;
        lq_session *s = NULL;
        /* unconstrained: the decode step alone */
        p.ignore_eos = 1;
        if (lq_session_create(m, ctx, &s, &err) ||
            lq_generate(s, ids, n_ids, &p, NULL, NULL, &res, &err))
            die("generate", &err);
        dec[r] = res.decode_ms / (res.n_generated > 1 ? res.n_generated - 1 : 1);
        lq_session_free(s);
        /* under the schema */
        p.ignore_eos = 0;
        p.grammar = g;
        toks k = {{0}, 0};
        if (lq_session_create(m, ctx, &s, &err) ||
            lq_generate(s, ids, n_ids, &p, on_tok, &k, &res, &err))
            die("generate (grammar)", &err);
        lq_session_free(s);
        ntok_masked[r] = res.n_generated;
        mask[r] = res.mask_ms / (res.n_generated ? res.n_generated : 1);
        mdec[r] = (res.decode_ms - res.mask_ms) / (res.n_generated > 1 ? res.n_generated - 1 : 1);
        ratio[r] = mdec[r] > 0 ? 100.0 * mask[r] / mdec[r] : 0;
        /* cold: each step's mask from a fresh recogniser (no cached masks); the least of 3
         * tries, so that a preemption on a shared machine is not taken for the step's cost */
        double sum = 0, mx = 0;
        for (int step = 0; step < k.n; step++) {
            double best = 1e30;
            for (int tr = 0; tr < 3; tr++) {
                lq_grammar_state *st = NULL;
                if (lq_grammar_state_create(g, &st, &err))
                    die("state", &err);
                for (int j = 0; j < step; j++)
                    if (lq_grammar_accept_token(st, v, k.ids[j], 0, &err))
                        die("replay", &err);
                double a = now_ms();
                if (lq_grammar_mask(st, v, 0, allowed, &err) < 0)
                    die("mask", &err);
                double d = now_ms() - a;
                if (d < best)
                    best = d;
                lq_grammar_state_free(st);
            }
            sum += best;
            if (best > mx)
                mx = best;
        }
        cold[r] = k.n ? sum / k.n : 0;
        cold_max[r] = mx;
    }
    int nt = 0;
    for (int r = 0; r < runs; r++)
        nt += ntok_masked[r];
    printf("| model | vocab | trie build ms | decode ms/token | tokens under the schema | mask ms/token | mask / decode step | cold mask ms/token (max) |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    double dm = median(dec, runs), mm = median(mask, runs), rr = median(ratio, runs);
    double cm = median(cold, runs), cx = median(cold_max, runs);
    printf("| %s | %d | %.1f | %.2f | %.0f | %.3f | %.1f%% | %.2f (%.2f) |\n", info->name ? info->name : path,
           (int)nv, vocab_ms, dm, (double)nt / runs, mm, rr, cm, cx);
    printf("\n(%d runs, medians; %d threads; the masked run's own decode step: %.2f ms/token)\n",
           runs, threads, median(mdec, runs));
    free(allowed);
    free(ids);
    lq_grammar_free(g);
    lq_grammar_vocab_free(v);
    lq_model_close(m);
    return 0;
}
