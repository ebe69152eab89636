/* Speculative decoding (prompt lookup, lq_generate_params.draft): decode tokens/s of
 * lq_generate with drafts and without, in alternating runs on one model, per workload, with the
 * same-run ratio, the acceptance rate and whether the tokens were identical.
 *
 * Workloads:
 *   quoting    (the trained model, models/tinystories-ternary.gguf) prompts whose answer
 *              repeats spans of the prompt (a question asked again in a question/answer
 *              transcript, a repeated passage), greedy, 160 tokens each without stopping at EOS
 *   free       short story openings, greedy, stopping at EOS (at most 160 tokens)
 *   sampled    the same openings at temperature 0.8, top-p 0.95 (seeded)
 *   predicted  (any model, also random weights, whose text never repeats) a request carrying
 *              a prediction of its output (OpenAI's "prediction": an edit of a known text):
 *              the plain output with every 10th token changed, so that drafts break there
 *              and find their way back
 *   random     random prompt ids, greedy: a text without repeats, drafting's bookkeeping only
 *
 * Usage: bench_draft MODEL [--runs N] [--threads N] [--decode N] [--only quoting,free,...]
 * Prints a Markdown table. No pass/fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/membw.h"
#include "engine/engine_internal.h"
#include "larql/generate.h"
#include "larql/model.h"
#include "larql/tokenizer.h"

#define MAXP 8
#define MAXTOK 1024

static const char *only;
static int want(const char *w) { return lq_bench_want(only, w); }

/* The model was trained on stories and on question/answer pairs about 32 countries: a
 * transcript that asks again what it already answered is quoted back, and so is the rest of the
 * transcript that its answers continue with. */
static const char *QUOTING[] = {
    "User: What is the capital of France?Assistant: The capital of France is Paris.User: What is the "
    "capital of Brazil?Assistant: The capital of Brazil is Brasilia.User: What is the capital of France?Assistant:",
    "User: What is the language of Japan?Assistant: People in Japan speak Japanese.User: What is the "
    "capital of Italy?Assistant: The capital of Italy is Rome.User: What is the language of Japan?Assistant:",
    "User: What is the capital of Egypt?Assistant: The capital of Egypt is Cairo.User: What is the language "
    "of Greece?Assistant: People in Greece speak Greek.User: What is the capital of Egypt?Assistant:",
    "User: What is the language of Russia?Assistant: People in Russia speak Russian.User: What is the "
    "language of Russia?Assistant:",
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat",
    "One day, a little boy named Tim went to the park. He saw a big tree. Tim wanted to climb the tree. "
    "One day, a little boy named Tim went to the park. He saw",
};
static const char *FREE[] = {
    "Once upon a time", "Lily and Ben were friends. Lily said", "Sara saw a bird.",
    "A big bear lived in the woods.", "The little fish swam and swam.", "It was a rainy day.",
};

typedef struct work {
    const char *name;
    int np;
    int32_t *ids[MAXP];
    size_t n[MAXP];
    lq_generate_params p;
    int predicted; /* each prompt's prediction: its plain output, every 10th token changed */
    int32_t pred[MAXP][MAXTOK];
    int npred[MAXP];
} work;

typedef struct tokrec {
    int32_t ids[MAXTOK];
    int n;
} tokrec;

static int rec_tok(void *u, int32_t id, const char *t, size_t l, float lp, const float *lg)
{
    (void)t, (void)l, (void)lp, (void)lg;
    tokrec *r = u;
    if (id >= 0 && r->n < MAXTOK)
        r->ids[r->n++] = id;
    return 0;
}

static void die(const char *what, const lq_err *err)
{
    fprintf(stderr, "bench_draft: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

typedef struct tally {
    double tok, ms;
    long drafted, accepted, generated;
} tally;

/* Every prompt of w once with the given draft mode: decode tokens and time added to t; the
 * tokens into out[prompt]. */
static void run_once(lq_session *s, work *w, int draft, tally *t, tokrec *out)
{
    lq_err err = {0};
    for (int i = 0; i < w->np; i++) {
        lq_generate_params p = w->p;
        p.draft = draft;
        if (w->predicted && w->npred[i]) {
            p.prediction = w->pred[i];
            p.n_prediction = (size_t)w->npred[i];
        }
        lq_generate_result res;
        out[i].n = 0;
        lq_session_reset(s);
        if (lq_generate(s, w->ids[i], w->n[i], &p, rec_tok, &out[i], &res, &err))
            die("generate", &err);
        /* the first token comes from the prefill's logits */
        t->tok += res.n_generated > 0 ? res.n_generated - 1 : 0;
        t->ms += res.decode_ms;
        t->drafted += res.drafted;
        t->accepted += res.draft_accepted;
        t->generated += res.n_generated;
    }
}

static void bench(lq_model *m, work *w, int runs, int nt)
{
    lq_err err = {0};
    lq_session *s;
    if (lq_session_create(m, 0, &s, &err))
        die("session", &err);
    static tokrec a[MAXP], b[MAXP];
    if (w->predicted) { /* the prediction: the plain output, every 10th token changed */
        int V = lq_model_get_info(m)->n_vocab;
        tally t0 = {0};
        run_once(s, w, LQ_DRAFT_NONE, &t0, a);
        for (int i = 0; i < w->np; i++) {
            w->npred[i] = a[i].n;
            for (int k = 0; k < a[i].n; k++)
                w->pred[i][k] = k % 10 == 9 ? (a[i].ids[k] + 1) % V : a[i].ids[k];
        }
    }
    double *tn = calloc((size_t)runs, sizeof(double)), *td = calloc((size_t)runs, sizeof(double));
    double *pr = calloc((size_t)runs, sizeof(double));
    tally sum_d = {0};
    int same = 1;
    for (int r = -1; r < runs; r++) { /* run -1: warm-up */
        for (int k = 0; k < 2; k++) {
            int draft = (r & 1) ? !k : k; /* alternate which goes first */
            tally t = {0};
            run_once(s, w, draft ? LQ_DRAFT_NGRAM : LQ_DRAFT_NONE, &t, draft ? b : a);
            if (r < 0)
                continue;
            (draft ? td : tn)[r] = t.ms > 0 ? t.tok * 1e3 / t.ms : 0;
            if (draft) {
                sum_d.drafted += t.drafted;
                sum_d.accepted += t.accepted;
                sum_d.generated += t.generated;
            }
        }
        for (int i = 0; i < w->np; i++)
            same &= a[i].n == b[i].n && !memcmp(a[i].ids, b[i].ids, sizeof(int32_t) * (size_t)a[i].n);
        if (r >= 0)
            pr[r] = tn[r] > 0 ? td[r] / tn[r] : 0;
    }
    lq_bw_stat sn = lq_bw_stats(tn, runs), sd = lq_bw_stats(td, runs), sp = lq_bw_stats(pr, runs);
    printf("| %s | %d | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.2fx (%.2f-%.2f) | %.0f%% | %.0f%% | %s | %.2f |\n",
           w->name, nt, sn.med, sn.min, sn.max, sd.med, sd.min, sd.max, sp.med, sp.min, sp.max,
           sum_d.drafted ? 100.0 * sum_d.accepted / sum_d.drafted : 0.0,
           sum_d.generated ? 100.0 * sum_d.accepted / sum_d.generated : 0.0, same ? "yes" : "NO", lq_bench_loadavg());
    fflush(stdout);
    free(tn);
    free(td);
    free(pr);
    lq_session_free(s);
}

/* What a verification pass costs: the median time of one pass of T rows (each with its
 * logits, as a draft's) at position 64, against T = 1. */
static void bench_passes(lq_model *m, int runs, int nt)
{
    lq_err err = {0};
    lq_session *s;
    if (lq_session_create(m, 0, &s, &err))
        die("session", &err);
    int V = lq_model_get_info(m)->n_vocab;
    int32_t ids[64 + 17];
    for (int i = 0; i < 64 + 17; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % V);
    float *lg[17];
    for (int t = 0; t < 17; t++)
        if (!(lg[t] = malloc((size_t)V * sizeof(float))))
            die("memory", NULL);
    if (lq_session_eval(s, ids, 64, NULL, NULL, &err))
        die("prefill", &err);
    static const int Ts[] = {1, 2, 3, 5, 9, 17};
    enum { NT = sizeof Ts / sizeof Ts[0] };
    double med[NT];
    int reps = runs * 8;
    double *v = malloc(sizeof(double) * (size_t)reps * NT);
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < NT; k++) { /* interleaved: drifts hit every T alike */
            int T = Ts[k];
            double t0 = lq_bw_now();
            if (lq_session_eval_rows(&s, ids + 64, &T, 1, lg, NULL, &err))
                die("pass", &err);
            v[k * reps + r] = (lq_bw_now() - t0) * 1e3;
            lq_session_truncate(s, 64, NULL);
        }
    printf("\n| rows in the pass (%d threads, exact head) |", nt);
    for (int k = 0; k < NT; k++)
        printf(" %d |", Ts[k]);
    printf("\n|---|");
    for (int k = 0; k < NT; k++)
        printf("---|");
    printf("\n| ms per pass (median of %d) |", reps);
    for (int k = 0; k < NT; k++) {
        med[k] = lq_bw_stats(v + (size_t)k * reps, reps).med;
        printf(" %.3f |", med[k]);
    }
    printf("\n| x one row |");
    for (int k = 0; k < NT; k++)
        printf(" %.2f |", med[k] / med[0]);
    printf("\n\nload %.2f\n\n", lq_bench_loadavg());
    free(v);
    for (int t = 0; t < 17; t++)
        free(lg[t]);
    lq_session_free(s);
}

static void text_work(lq_model *m, work *w, const char *name, const char *const *texts, int n)
{
    memset(w, 0, sizeof *w);
    w->name = name;
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    lq_err err = {0};
    for (int i = 0; i < n && i < MAXP; i++) {
        if (lq_tokenizer_encode(tok, texts[i], strlen(texts[i]), lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0,
                                &w->ids[i], &w->n[i], &err))
            die("encode", &err);
        w->np++;
    }
}

static void ids_work(lq_model *m, work *w, const char *name, int np)
{
    memset(w, 0, sizeof *w);
    w->name = name;
    int V = lq_model_get_info(m)->n_vocab;
    unsigned x = 12345;
    for (int i = 0; i < np && i < MAXP; i++) {
        w->n[i] = 12;
        w->ids[i] = malloc(12 * sizeof(int32_t));
        for (int k = 0; k < 12; k++) {
            x = x * 1103515245u + 12345u;
            w->ids[i][k] = (int32_t)((x >> 8) % (unsigned)V);
        }
        w->np++;
    }
}

static void work_free(work *w)
{
    for (int i = 0; i < w->np; i++)
        free(w->ids[i]);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_draft MODEL [--runs N] [--threads N] [--decode N] "
                        "[--only quoting,free,sampled,predicted,random]\n");
        return 2;
    }
    const char *path = argv[1];
    int runs = 5, nt = 2, n_decode = 160;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) nt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode")) n_decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--only")) only = argv[i + 1];
        else {
            fprintf(stderr, "bench_draft: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (runs < 1 || runs > 64 || n_decode < 2 || n_decode > MAXTOK || nt < 1)
        return 2;
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts o = {.n_threads = nt, .lm_head_mode = LQ_LM_HEAD_BOUNDED};
    if (lq_model_open(path, &o, &m, &err))
        die(path, &err);
    lq_model_weights_copied(m, 1); /* the 2 MB-page copy in use before any timing */
    const lq_model_info *in = lq_model_get_info(m);
    int trained = in->n_vocab == 4096 && in->n_layer == 4; /* the shipped model: its text repeats */
    printf("### speculative decoding (%s: %d layers, vocab %d; lq_generate, %d runs alternating --draft none / "
           "ngram, %d tokens)\n\n", path, in->n_layer, in->n_vocab, runs, n_decode);
    if (want("passes"))
        bench_passes(m, runs, nt);
    printf("| workload | threads | plain tok/s median (min-max) | drafts tok/s median (min-max) | same-run ratio median "
           "(min-max) | drafts accepted | tokens from drafts | tokens identical | load |\n|---|---|---|---|---|---|---|---|---|\n");
    /* the workloads: their texts (NULL: random ids), sampling, and whether they stop at EOS */
    static const struct {
        const char *key, *name;
        const char *const *texts;
        float temp;
        int ignore_eos, predicted;
    } W[] = {
        {"quoting", "quoting", QUOTING, 0, 1, 0},
        {"free", "free text (greedy, to EOS)", FREE, 0, 0, 0},
        {"sampled", "free text (T 0.8, top-p 0.95)", FREE, 0.8f, 0, 0},
        {"predicted", "predicted (every 10th token differs)", NULL, 0, 1, 1},
        {"random", "random prompt, no repeats", NULL, 0, 1, 0},
    };
    for (size_t k = 0; k < sizeof W / sizeof W[0]; k++) {
        /* texts need the trained model: random weights never repeat a text */
        if (!want(W[k].key) || (W[k].texts && !trained))
            continue;
        work w;
        if (W[k].texts)
            text_work(m, &w, W[k].name, W[k].texts, 6);
        else
            ids_work(m, &w, W[k].name, trained ? 6 : 1);
        lq_generate_defaults(&w.p);
        w.p.sampling.temperature = W[k].temp;
        w.p.sampling.top_k = 0;
        w.p.sampling.top_p = 0.95f;
        w.p.sampling.seed = 42;
        w.p.sampling.has_seed = 1;
        w.p.max_tokens = n_decode;
        w.p.ignore_eos = W[k].ignore_eos;
        w.predicted = W[k].predicted;
        bench(m, &w, runs, nt);
        work_free(&w);
    }
    lq_model_close(m);
    return 0;
}
