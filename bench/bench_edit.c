/* Editing benchmark (issue: knowledge editing): INSERT latency in KNN, COMPOSE and SUBJECT
 * mode, greedy decode with 0 vs 1 000 subject edits applied (the edits' cost per token when
 * the prompt names none of their subjects), 
 * walk-mode infer latency with 0, 100 and 10 000 KNN entries, and describe latency with
 * 0 vs 1 000 patched features (the overlay's cost on the read path; goal < 10%).
 * Usage: bench_edit DIR [--runs N] [--only knn,compose,subject,decode,infer,describe]
 *        (DIR: a --keep-quant --level inference vindex; --only: the sections run, default all)
 * Prints Markdown, medians of N runs with min and max, ratios from the same run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/membw.h"
#include "core/clock.h"
#include "larql/generate.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "larql/vindex.h"

static const char *only;
static int want(const char *section) { return lq_bench_want(only, section); }

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void put_stat(const char *what, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    printf("| %s | %.2f | %.2f | %.2f |\n", what, v[n / 2], v[0], v[n - 1]);
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* as the server runs it: the overlay's edit set (built once per overlay version, outside the
 * timing), then the walk-mode infer */
static double infer_ms(lq_model *m, lq_overlay *o, const char *prompt)
{
    lq_infer_params ip;
    lq_infer_params_init(&ip);
    ip.prompt = prompt;
    ip.edits = lq_overlay_edit_set(o, NULL);
    lq_infer_result r;
    double t = lq_now_ms();
    int rc = lq_infer(m, &ip, &r, NULL);
    t = lq_now_ms() - t;
    lq_edit_set_unref(ip.edits);
    if (rc)
        return NAN;
    lq_infer_result_free(&r);
    return t;
}

static double describe_ms(const lq_vindex *v, const char *entity)
{
    lq_describe_params p;
    lq_describe_params_init(&p);
    p.entity = entity;
    p.band = "all";
    lq_describe_result r;
    double t = lq_now_ms();
    if (lq_vindex_describe(v, &p, &r, NULL))
        return NAN;
    t = lq_now_ms() - t;
    lq_describe_result_free(&r);
    return t;
}

/* n ops of one kind with random vectors, recorded as edits */
static int add_random(lq_overlay *o, const lq_vindex *v, int kind, int n)
{
    const lq_vindex_info *vi = lq_vindex_get_info(v);
    int D = vi->hidden_size;
    float *vec = malloc((size_t)D * sizeof *vec);
    lq_patch *p = NULL;
    int rc = vec ? lq_patch_create("bench", "", D, &p, NULL) : LQ_ENOMEM;
    for (int i = 0; !rc && i < n; i++) {
        for (int d = 0; d < D; d++)
            vec[d] = frand();
        lq_patch_op op;
        lq_patch_op_init(&op, kind);
        op.layer = (int)((rng >> 20) % (uint64_t)vi->num_layers);
        char ent[32];
        snprintf(ent, sizeof ent, "E%d", i);
        op.entity = ent;
        op.relation = "r";
        op.target = "t";
        if (kind == LQ_OP_INSERT_KNN) {
            op.key = vec;
            op.target_id = 1;
        } else {
            const void *rows;
            int nf = 0;
            lq_vindex_gate_layer(v, op.layer, &rows, &nf, NULL);
            op.feature = nf ? (int)((rng >> 24) % (uint64_t)nf) : 0;
            op.gate = vec;
        }
        rc = lq_patch_add(p, &op, NULL);
    }
    if (!rc)
        rc = lq_overlay_record(o, p, NULL);
    lq_patch_free(p);
    free(vec);
    return rc;
}

/* copies of the ops of o's live edits (one subject edit) under n other entity names */
static int clone_subject(lq_overlay *o, int hidden, int n)
{
    const lq_patch *e = lq_overlay_edits(o);
    size_t k = lq_patch_n_ops(e);
    lq_patch *p = NULL;
    int rc = lq_patch_create("bench", "", hidden, &p, NULL);
    for (int i = 0; !rc && i < n; i++) {
        char ent[32], id[32];
        snprintf(ent, sizeof ent, "Entity%d", i);
        snprintf(id, sizeof id, "bench%d", i);
        for (size_t j = 0; !rc && j < k; j++) {
            lq_patch_op op;
            lq_patch_op_at(e, j, &op);
            op.entity = ent;
            op.id = id;
            rc = lq_patch_add(p, &op, NULL);
        }
    }
    if (!rc)
        rc = lq_overlay_record(o, p, NULL);
    lq_patch_free(p);
    return rc;
}

static int sink(void *u, int32_t id, const char *t, size_t l, float lp, const float *lg)
{
    (void)u, (void)id, (void)t, (void)l, (void)lp, (void)lg;
    return 0;
}

/* greedy decode of n tokens after prompt under hook h (NULL: none): tokens per second */
static double decode_tps(lq_model *m, const lq_resid_hook *h, const char *prompt, int n)
{
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    int32_t *ids = NULL;
    size_t np = 0;
    lq_session *s = NULL;
    if (lq_tokenizer_encode(tok, prompt, strlen(prompt), LQ_TOK_ADD_BOS, &ids, &np, NULL) ||
        lq_session_create(m, (int)np + n + 1, &s, NULL)) {
        free(ids);
        return NAN;
    }
    lq_generate_params gp;
    lq_generate_defaults(&gp);
    gp.max_tokens = n;
    gp.sampling.temperature = 0;
    gp.ignore_eos = 1;
    gp.hook = h;
    lq_generate_result r;
    int rc = lq_generate(s, ids, np, &gp, sink, NULL, &r, NULL);
    lq_session_free(s);
    free(ids);
    return rc || r.decode_ms <= 0 ? NAN : (r.n_generated - 1) / (r.decode_ms / 1000.0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_edit DIR [--runs N]\n");
        return 2;
    }
    int runs = 9;
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[++i]) > 0 ? atoi(argv[i]) : runs;
        else if (!strcmp(argv[i], "--only"))
            only = argv[++i];
    lq_err err = {0};
    lq_vindex *v = NULL;
    lq_model *m = NULL;
    lq_model_opts mo = {0};
    if (lq_vindex_open(argv[1], NULL, &v, &err) || lq_vindex_model_open(v, &mo, &m, &err)) {
        fprintf(stderr, "bench_edit: %s\n", err.msg);
        return 1;
    }
    /* the steady state a server reaches: the weights in their copy and the bounded lm_head's
     * copy built (both are made by background threads after the open, which would otherwise
     * share the CPU with the first inserts) */
    lq_model_weights_copied(m, 1);
    lq_model_head_wait(m);
    const lq_vindex_info *vi = lq_vindex_get_info(v);
    printf("vindex: %d layers, hidden %d, %llu features; %d threads\n\n", vi->num_layers, vi->hidden_size,
           (unsigned long long)vi->total_features, lq_model_get_info(m)->n_threads);
    printf("| what | median ms | min | max |\n|---|---|---|---|\n");
    double *t = calloc((size_t)runs, sizeof *t), *t2 = calloc((size_t)runs, sizeof *t2);
    lq_overlay *o = NULL;
    lq_overlay_create(v, NULL, &o, &err);
    const char *rel = "capital";
    static const char *const mode_name[3] = {"knn", "compose", "subject"};
    for (int mode = 0; mode < 3; mode++) {
        if (!want(mode_name[mode]))
            continue;
        /* each mode in an overlay of its own: KNN and COMPOSE edits of near-identical prompts
         * fire on each other's canonical prompts, and a subject edit checked among them would
         * be refused */
        lq_overlay_free(o);
        lq_overlay_create(v, NULL, &o, &err);
        for (int r = 0; r < runs; r++) {
            char ent[32];
            snprintf(ent, sizeof ent, "Isle%d%s", r, mode == 2 ? "s" : mode ? "c" : "k");
            lq_insert_params ip;
            lq_insert_params_init(&ip);
            ip.entity = ent;
            ip.relation = rel;
            ip.target = "Paris";
            ip.mode = mode == 2 ? LQ_INSERT_SUBJECT : mode ? LQ_INSERT_COMPOSE : LQ_INSERT_KNN;
            double t0 = lq_now_ms();
            if (lq_overlay_insert(o, m, &ip, NULL, &err)) {
                fprintf(stderr, "insert: %s\n", err.msg);
                if (err.code != LQ_EREFUSED)
                    return 1;
            }
            t[r] = lq_now_ms() - t0;
        }
        double first = t[0];
        put_stat(mode == 2 ? "INSERT SUBJECT (texts in one batched prefill, value by ascent on the head, checked)"
                 : mode    ? "INSERT COMPOSE (residuals of the canonical prompt, slots over the knowledge band)"
                           : "INSERT KNN (one forward pass with residual capture)",
                 t, runs);
        if (mode == 2) /* the model's memo (what depends on the weights alone) filled by it */
            printf("|   the first of them (nothing in the model's memo yet) | %.2f | | |\n", first);
    }
    lq_overlay_free(o);
    /* decode with 1 000 subject edits whose subjects the text never names, alternating runs */
    if (want("decode")) {
        lq_overlay *so = NULL;
        lq_insert_params ip;
        lq_insert_params_init(&ip);
        ip.entity = "Lemuria";
        ip.relation = rel;
        ip.target = "Paris";
        ip.mode = LQ_INSERT_SUBJECT;
        if (lq_overlay_create(v, NULL, &so, &err) || lq_overlay_insert(so, m, &ip, NULL, &err) ||
            clone_subject(so, vi->hidden_size, 999)) {
            fprintf(stderr, "subject edits: %s\n", err.msg);
            return 1;
        }
        lq_edit_set *es = lq_overlay_edit_set(so, NULL);
        lq_resid_hook *h = NULL;
        lq_edit_set_hook(es, LQ_EDITS_COMPOSE | LQ_EDITS_KNN_FORCE, &h, NULL);
        double ratio[64], a[64], b[64];
        int nr = runs < 64 ? runs : 64;
        for (int r = 0; r < nr; r++) {
            a[r] = decode_tps(m, NULL, "Once upon a time there was", 32);
            b[r] = decode_tps(m, h, "Once upon a time there was", 32);
            ratio[r] = a[r] / b[r];
        }
        printf("| decode 32 tokens, no edits (tok/s) | %.2f | | |\n", (qsort(a, (size_t)nr, sizeof *a, cmp_d), a[nr / 2]));
        printf("| decode 32 tokens, %zu subject edits (tok/s) | %.2f | | |\n", lq_edit_set_n_subject(es),
               (qsort(b, (size_t)nr, sizeof *b, cmp_d), b[nr / 2]));
        qsort(ratio, (size_t)nr, sizeof *ratio, cmp_d);
        printf("|   same-run time ratio with / without | %.3f | %.3f | %.3f |\n", ratio[nr / 2], ratio[0], ratio[nr - 1]);
        lq_edit_hook_free(h);
        lq_edit_set_unref(es);
        lq_overlay_free(so);
    }
    /* walk-mode infer vs the store's size */
    static const int sizes[3] = {0, 100, 10000};
    double base = 0;
    for (int k = 0; k < 3 && want("infer"); k++) {
        lq_overlay_create(v, NULL, &o, &err);
        if (sizes[k] && add_random(o, v, LQ_OP_INSERT_KNN, sizes[k])) {
            fprintf(stderr, "knn entries: failed\n");
            return 1;
        }
        for (int r = 0; r < runs; r++)
            t[r] = infer_ms(m, o, "The capital of France is");
        char what[96];
        snprintf(what, sizeof what, "infer walk, %d KNN entries", sizes[k]);
        qsort(t, (size_t)runs, sizeof *t, cmp_d);
        if (k == 0)
            base = t[runs / 2];
        put_stat(what, t, runs);
        printf("|   ratio to 0 entries | %.3f | | |\n", t[runs / 2] / base);
        lq_overlay_free(o);
    }
    /* describe: the base vs 1000 patched features (gate overrides), alternating per run */
    if (!want("describe")) {
        free(t);
        free(t2);
        lq_model_close(m);
        lq_vindex_close(v);
        return 0;
    }
    lq_overlay_create(v, NULL, &o, &err);
    add_random(o, v, LQ_OP_INSERT, 1000);
    const char *ents[4] = {"France", "the", "model", "water"};
    double ratios[64];
    int nr = runs < 64 ? runs : 64;
    for (int r = 0; r < nr; r++) {
        double a = 0, b = 0;
        for (int e = 0; e < 4; e++) {
            a += describe_ms(v, ents[e]);
            b += describe_ms(lq_overlay_vindex(o), ents[e]);
        }
        t[r] = a / 4;
        t2[r] = b / 4;
        ratios[r] = b / a;
    }
    put_stat("describe (all layers), base", t, nr);
    put_stat("describe (all layers), 1000 patched features", t2, nr);
    qsort(ratios, (size_t)nr, sizeof *ratios, cmp_d);
    printf("|   same-run ratio patched / base | %.3f | %.3f | %.3f |\n", ratios[nr / 2], ratios[0], ratios[nr - 1]);
    lq_overlay_free(o);
    free(t);
    free(t2);
    lq_model_close(m);
    lq_vindex_close(v);
    return 0;
}
