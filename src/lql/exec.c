/* LQL executor: the session, statement dispatch and the read statements (USE, STATS,
 * DESCRIBE, WALK, INFER, EXPLAIN, SELECT, SHOW ...), printed in LARQL's formats
 * (crates/larql-lql/src/executor/). Every query goes through the library's public vindex
 * API on the patched view, so the session's edits show in every read. */
#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/clock.h"
#include "lql/exec_internal.h"

/* ---- output helpers ---- */




/* Quoted text padded to width (Rust: format!("{:15}", format!("{:?}", s))). */
static void pad_quoted(lq_sb *b, const char *s, int width)
{
    lq_sb t = {0};
    lq_lql_quoted(&t, s);
    lq_lql_pad(b, t.s ? t.s : "\"\"", width, 0);
    lq_sb_free(&t);
}


static void fmt_bytes(char *buf, size_t cap, uint64_t b)
{
    if (b >= 1073741824ull)
        snprintf(buf, cap, "%.2f GB", (double)b / 1073741824.0);
    else if (b >= 1048576ull)
        snprintf(buf, cap, "%.1f MB", (double)b / 1048576.0);
    else if (b >= 1024)
        snprintf(buf, cap, "%.1f KB", (double)b / 1024.0);
    else
        snprintf(buf, cap, "%llu B", (unsigned long long)b);
}

/* Rust pads the last column too; trailing blanks carry nothing, so rows end at their text */
static void end_row(lq_sb *b)
{
    while (b->n && b->s[b->n - 1] == ' ')
        b->s[--b->n] = 0;
    lq_sb_puts(b, "\n");
}

static void dashes(lq_sb *b, int n)
{
    for (int i = 0; i < n; i++)
        lq_sb_put(b, "-", 1);
    lq_sb_put(b, "\n", 1);
}

/* The text of a feature's top token: an overlay's target text, else the vocabulary's. */
static const char *meta_text(const lq_vindex *v, const lq_feature_meta *m)
{
    return m->top_token ? m->top_token : lq_vindex_token_text(v, m->top_token_id);
}

/* ---- session ---- */

int lq_lql_create(const lq_lql_opts *opts, lq_lql **out, lq_err *err)
{
    lq_lql *q = calloc(1, sizeof *q);
    if (!q)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (opts)
        q->opts = *opts;
    q->opts.author = NULL;
    if (opts && opts->author && !(q->author = strdup(opts->author))) {
        free(q);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    q->opts.author = q->author; /* the session's own copy */
    *out = q;
    return 0;
}


void lq_lql_free(lq_lql *q)
{
    if (!q)
        return;
    lq_lql_close_backend(q);
    free(q->remote);
    free(q->author);
    free(q);
}





static const lq_vindex_info *vinfo(const lq_lql *q) { return lq_vindex_get_info(q->v); }

/* Layers that hold features (LARQL's loaded_layers), ascending; *n of them. */
static int loaded_layers(const lq_lql *q, int **out, int *n, lq_err *err)
{
    int L = vinfo(q)->num_layers;
    *out = malloc((size_t)(L > 0 ? L : 1) * sizeof **out);
    if (!*out)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    *n = 0;
    for (int l = 0; l < L; l++) {
        const void *rows;
        int nf = 0;
        if (lq_vindex_gate_layer(lq_lql_view(q), l, &rows, &nf, NULL) == 0 && nf > 0)
            (*out)[(*n)++] = l;
    }
    return 0;
}

static int check_layer(const lq_lql *q, int layer, lq_err *err)
{
    int L = vinfo(q)->num_layers;
    if (layer < 0 || layer >= L)
        return lq_err_set(err, LQ_ERANGE, "layer %d is outside the model (layers 0-%d)", layer, L - 1);
    return 0;
}

/* ---- USE / STATS ---- */


/* Bytes of the files in dir and one level of subdirectories (bitnet/). */
static uint64_t dir_size(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint64_t total = 0;
    struct dirent *e;
    char p[4200];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st))
            continue;
        if (S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size;
        else if (S_ISDIR(st.st_mode) && depth > 0)
            total += dir_size(p, depth - 1);
    }
    closedir(d);
    return total;
}

static const char *const BAND_TITLE[3] = {"Syntax", "Knowledge", "Output"};

static void stats_of(const lq_lql *q, const lq_vindex *v, const char *path, lq_sb *out)
{
    const lq_vindex_info *vi = lq_vindex_get_info(v);
    char a[32], b[32], sz[32];
    lq_lql_fmt_count(a, sizeof a, vi->total_features);
    lq_lql_fmt_count(b, sizeof b, (uint64_t)vi->intermediate_size);
    lq_sb_printf(out, "Model:           %s\n", vi->model ? vi->model : "");
    lq_sb_printf(out, "Family:          %s\n", vi->family ? vi->family : "");
    lq_sb_printf(out, "Layers:          %d\n", vi->num_layers);
    lq_sb_printf(out, "Hidden size:     %d\n", vi->hidden_size);
    lq_sb_printf(out, "Intermediate:    %d\n", vi->intermediate_size);
    lq_sb_printf(out, "Vocab size:      %d\n", vi->vocab_size);
    lq_sb_printf(out, "Extract level:   %s (model weights: %s)\n",
                 vi->extract_level_str ? vi->extract_level_str : "", vi->has_model_weights ? "yes" : "no");
    lq_sb_printf(out, "\nFeatures:        %s (%s x %d layers)\n", a, b, vi->num_layers);
    lq_sb_puts(out, "\nKnowledge Graph:\n");
    if (vi->n_probe_labels)
        lq_sb_printf(out, "  Mapped relations:  %d features (probe-confirmed)\n", vi->n_probe_labels);
    else
        lq_sb_puts(out, "  (no relation labels found)\n");
    /* LARQL hard-codes Gemma's L0-13/14-27/28-33 here; the vindex's own bands are used */
    lq_sb_puts(out, "\n  By layer band:\n");
    for (int k = 0; k < 3; k++) {
        uint64_t nfeat = 0;
        for (int l = vi->bands[k].start; l <= vi->bands[k].end && l < vi->num_layers; l++) {
            const void *rows;
            int nf = 0;
            if (l >= 0 && lq_vindex_gate_layer(v, l, &rows, &nf, NULL) == 0)
                nfeat += (uint64_t)nf;
        }
        char title[48], n[32];
        snprintf(title, sizeof title, "%s (L%d-%d):", BAND_TITLE[k], vi->bands[k].start, vi->bands[k].end);
        lq_lql_fmt_count(n, sizeof n, nfeat);
        lq_sb_puts(out, "    ");
        lq_lql_pad(out, title, 20, 0);
        lq_sb_printf(out, " %s features\n", n);
    }
    if (q && v == q->v) {
        lq_sb_puts(out, "\n");
        lq_lql_edit_summary(q, out);
    }
    fmt_bytes(sz, sizeof sz, dir_size(path, 1));
    lq_sb_printf(out, "\nIndex size:      %s\n", sz);
    lq_sb_printf(out, "Path:            %s\n", path);
}

static int exec_stats(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (s->str && (!q->path || strcmp(s->str, q->path))) { /* STATS "other.vindex" */
        lq_vindex *v = NULL;
        lq_vindex_open_opts vo = {.n_threads = q->opts.n_threads};
        int rc = lq_vindex_open(s->str, &vo, &v, err);
        if (rc)
            return rc;
        stats_of(NULL, v, s->str, out);
        lq_vindex_close(v);
        return 0;
    }
    if (lq_lql_need_vindex(q, err))
        return LQ_EINVAL;
    stats_of(q, q->v, q->path, out);
    return 0;
}

/* ---- DESCRIBE ---- */

typedef struct dedge {
    const char *target;
    float gate;
    int layer, lmin, lmax, count;
    const char *relation;
    int n_also;
    const char *also[3];
    char knn_also[96];      /* "[knn:relation]" for KNN-store entries */
} dedge;

static int dedge_cmp(const void *a, const void *b)
{
    float x = ((const dedge *)a)->gate, y = ((const dedge *)b)->gate;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void describe_row(lq_sb *out, const dedge *e, int mode)
{
    char g[32], lay[32];
    snprintf(g, sizeof g, "%.1f", (double)e->gate);
    lq_sb_puts(out, "    ");
    if (mode == LQ_LD_BRIEF) {
        lq_lql_pad(out, e->relation ? e->relation : "", 12, 0);
        lq_sb_puts(out, " \xe2\x86\x92 ");
        lq_lql_pad(out, e->target, 20, 0);
        lq_sb_puts(out, " ");
        lq_lql_pad(out, g, 7, 1);
        snprintf(lay, sizeof lay, "%d", e->layer);
        lq_sb_puts(out, "  L");
        lq_lql_pad(out, lay, 3, 0);
    } else {
        char label[96];
        if (mode == LQ_LD_RAW)
            label[0] = 0;
        else if (e->relation)
            snprintf(label, sizeof label, "[%s]", e->relation);
        else
            snprintf(label, sizeof label, "[\xe2\x80\x94]");
        lq_lql_pad(out, label, 14, 0);
        lq_sb_puts(out, " \xe2\x86\x92 ");
        lq_lql_pad(out, e->target, 20, 0);
        lq_sb_puts(out, " ");
        lq_lql_pad(out, g, 7, 1);
        if (e->lmin == e->lmax)
            snprintf(lay, sizeof lay, "L%d", e->lmin);
        else
            snprintf(lay, sizeof lay, "L%d-%d", e->lmin, e->lmax);
        lq_sb_puts(out, "  ");
        lq_lql_pad(out, lay, 8, 0);
        lq_sb_printf(out, " %dx", e->count);
        for (int k = 0; k < e->n_also; k++)
            lq_sb_printf(out, k ? ", %s" : "  also: %s", e->also[k]);
    }
    end_row(out);
}

static int exec_describe(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (s->layer >= 0 && check_layer(q, s->layer, err))
        return LQ_ERANGE;
    static const char *const bands[] = {"syntax", "knowledge", "output", "all"};
    lq_describe_params p;
    lq_describe_params_init(&p);
    p.entity = s->str;
    /* LQL scans all loaded layers unless a band is named (the server defaults to knowledge) */
    p.band = s->band == LQ_LB_NONE ? "all" : bands[s->band];
    p.limit = 20;      /* LARQL's DESCRIBE_WALK_TOP_K */
    p.verbose = 1;     /* layer_min/max and count for the VERBOSE rows */
    if (s->layer >= 0) { /* AT LAYER n: that layer's hits only, unmerged */
        p.band = "all";
        p.per_layer = 1;
    }
    if (!*s->str) { /* LARQL: an entity that encodes to nothing is not found */
        lq_sb_puts(out, "\n  (not found)\n");
        return 0;
    }
    lq_describe_result r;
    int rc = lq_vindex_describe(lq_lql_view(q), &p, &r, err);
    if (rc)
        return rc;
    if (r.n_tokens == 0) {
        lq_sb_printf(out, "%s\n  (not found)\n", s->str);
        lq_describe_result_free(&r);
        return 0;
    }
    const lq_knn_store *ks = lq_lql_session_knn(q);
    size_t nk = ks ? lq_knn_store_count(ks) : 0;
    dedge *e = calloc(r.n_edges + nk + 1, sizeof *e);
    if (!e) {
        lq_describe_result_free(&r);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; i < r.n_edges; i++) {
        const lq_describe_edge *d = &r.edges[i];
        if (s->layer >= 0 && d->layer != s->layer)
            continue;
        if (s->relations_only && !d->relation)
            continue;
        dedge *x = &e[n++];
        x->target = d->target;
        x->gate = d->gate_score;
        x->layer = d->layer;
        x->lmin = s->layer >= 0 ? d->layer : d->layer_min;
        x->lmax = s->layer >= 0 ? d->layer : d->layer_max;
        x->count = s->layer >= 0 ? 1 : d->count;
        x->relation = d->relation;
        x->n_also = d->n_also;
        for (int k = 0; k < d->n_also && k < 3; k++)
            x->also[k] = d->also[k];
    }
    /* KNN-store facts about the entity (LARQL: gate = confidence x 10, also [knn:rel]) */
    for (size_t i = 0; i < nk && !s->relations_only; i++) {
        lq_knn_entry ke;
        if (!lq_knn_store_get(ks, i, &ke) || !ke.entity || strcasecmp(ke.entity, s->str))
            continue;
        if (s->layer >= 0 && ke.layer != s->layer)
            continue;
        dedge *x = &e[n++];
        x->target = ke.target_token ? ke.target_token : "";
        x->gate = ke.confidence * 10.0f;
        x->layer = x->lmin = x->lmax = ke.layer;
        x->count = 1;
        snprintf(x->knn_also, sizeof x->knn_also, "[knn:%s]", ke.relation ? ke.relation : "");
        x->also[0] = x->knn_also;
        x->n_also = 1;
    }
    qsort(e, n, sizeof *e, dedge_cmp);
    lq_sb_printf(out, "%s\n", s->str);
    if (!n) {
        lq_sb_puts(out, "  (no edges found)\n");
    } else {
        float mx = 0;
        for (size_t i = 0; i < n; i++)
            mx = e[i].gate > mx ? e[i].gate : mx;
        lq_sb_printf(out, "  signal: %s (%zu edges, max gate %.1f)\n",
                     mx >= 20 ? "clean" : mx >= 10 ? "moderate" : "diffuse", n, (double)mx);
        const lq_vindex_info *vi = vinfo(q);
        /* bucket by the best layer: syntax / output band, anything else knowledge */
        static const char *const head[3] = {"Syntax", "Edges", "Output"};
        int maxrows = s->dmode == LQ_LD_BRIEF ? 10 : 30;
        for (int k = 0; k < 3; k++) {
            int shown = 0, cap = k == 2 && s->dmode == LQ_LD_BRIEF ? 5 : maxrows;
            for (size_t i = 0; i < n; i++) {
                int l = e[i].layer, bucket;
                if (l >= vi->bands[0].start && l <= vi->bands[0].end)
                    bucket = 0;
                else if (l >= vi->bands[2].start && l <= vi->bands[2].end)
                    bucket = 2;
                else
                    bucket = 1;
                if (bucket != k || shown >= cap)
                    continue;
                if (!shown)
                    lq_sb_printf(out, "  %s (L%d-%d):\n", head[k], vi->bands[k].start, vi->bands[k].end);
                describe_row(out, &e[i], s->dmode);
                shown++;
            }
        }
    }
    free(e);
    lq_describe_result_free(&r);
    return 0;
}

/* ---- WALK / EXPLAIN WALK ---- */

/* The last token of prompt (encoded with special tokens, as walk does), decoded and trimmed. */
static int last_token_text(const lq_lql *q, const char *prompt, char *buf, size_t cap, lq_err *err)
{
    const lq_tokenizer *t = lq_vindex_tokenizer(q->v);
    int32_t *ids = NULL;
    size_t n = 0;
    unsigned fl = lq_tokenizer_add_bos(t) ? LQ_TOK_ADD_BOS : 0;
    int rc = lq_tokenizer_encode(t, prompt, strlen(prompt), fl, &ids, &n, err);
    if (rc)
        return rc;
    if (!n) {
        free(ids);
        return lq_err_set(err, LQ_EINVAL, "empty prompt");
    }
    char *txt = NULL;
    size_t tl = 0;
    rc = lq_tokenizer_decode(t, &ids[n - 1], 1, LQ_DETOK_SKIP_SPECIAL, &txt, &tl, err);
    free(ids);
    if (rc)
        return rc;
    const char *a = txt;
    while (*a && isspace((unsigned char)*a))
        a++;
    size_t l = strlen(a);
    while (l && isspace((unsigned char)a[l - 1]))
        l--;
    snprintf(buf, cap, "%.*s", (int)l, a);
    free(txt);
    return 0;
}

/* "  L{l:2}: F{f:<5} gate={g:+.1}  top={"tok":15}  down=[t1, t2, t3]" */
static void walk_row(const lq_lql *q, lq_sb *out, int layer, int feature, float gate,
                     const char *target, const char *relation)
{
    const lq_vindex *v = lq_lql_view(q);
    char f[24];
    snprintf(f, sizeof f, "%d", feature);
    lq_sb_printf(out, "  L%2d: F", layer);
    lq_lql_pad(out, f, 5, 0);
    lq_sb_printf(out, " gate=%+.1f  top=", (double)gate);
    pad_quoted(out, target ? target : "", 15);
    lq_sb_puts(out, "  down=[");
    lq_feature_meta m = {0};
    if (lq_vindex_feature_meta(v, layer, feature, &m))
        for (int k = 0; k < m.n_top && k < 3; k++)
            lq_sb_printf(out, k ? ", %s" : "%s", lq_vindex_token_text(v, m.top_ids[k]));
    lq_sb_puts(out, "]");
    if (relation)
        lq_sb_printf(out, "  [%s]", relation);
    lq_sb_puts(out, "\n");
}

static int exec_walk(lq_lql *q, const lq_lql_stmt *s, int explain, lq_sb *out, lq_err *err)
{
    if (!*s->str)
        return lq_err_set(err, LQ_EINVAL, "empty prompt");
    int k = s->top >= 0 ? s->top : explain ? (s->verbose ? 10 : 5) : 10;
    int show = explain ? k : s->compare ? 5 : 3;
    int *layers = NULL, nl = 0;
    if (loaded_layers(q, &layers, &nl, err))
        return LQ_ENOMEM;
    /* LAYERS a-b: the loaded layers inside the range */
    lq_sb ls = {0};
    int n_scan = 0;
    for (int i = 0; i < nl; i++) {
        if (s->has_range && (layers[i] < s->range_lo || layers[i] > s->range_hi))
            continue;
        lq_sb_printf(&ls, n_scan++ ? ",%d" : "%d", layers[i]);
    }
    free(layers);
    char tok[256];
    int rc = last_token_text(q, s->str, tok, sizeof tok, err);
    lq_walk_result r = {0};
    if (!rc && (n_scan || vinfo(q)->dense_only)) { /* dense-only: the library says why not */
        lq_walk_params p;
        lq_walk_params_init(&p);
        p.prompt = s->str;
        p.top = k;
        p.layers = ls.s;
        rc = lq_vindex_walk(lq_lql_view(q), &p, &r, err);
    }
    lq_sb_free(&ls);
    if (rc)
        return rc;
    static const char *const modes[] = {"hybrid (default)", "pure (sparse KNN only)", "dense (full matmul)"};
    lq_sb_puts(out, explain ? "Walk trace for " : "Feature scan for ");
    lq_lql_quoted(out, s->str);
    lq_sb_puts(out, " (token ");
    lq_lql_quoted(out, tok);
    if (explain)
        lq_sb_printf(out, ", %d layers, top %d per layer)\n\n", n_scan, k);
    else
        lq_sb_printf(out, ", %d layers, mode=%s)\n\n", n_scan, modes[s->wmode]);
    int cur = -1, shown = 0;
    for (size_t i = 0; i < r.n_hits; i++) {
        const lq_walk_hit *h = &r.hits[i];
        if (h->layer != cur) {
            cur = h->layer;
            shown = 0;
        }
        if (shown++ >= show)
            continue;
        walk_row(q, out, h->layer, h->feature, h->gate_score, h->target, h->relation);
    }
    lq_sb_printf(out, "\n%.1fms\n\n", r.latency_ms);
    if (explain)
        lq_sb_puts(out, "Note: gate KNN of the last token's embedding per layer (no attention). For "
                        "inference use EXPLAIN INFER.\n");
    else if (s->compare)
        lq_sb_puts(out, "Note: COMPARE shows more features per layer. For inference use INFER.\n");
    else
        lq_sb_puts(out, "Note: pure vindex scan (no attention). For inference use INFER.\n");
    lq_walk_result_free(&r);
    return 0;
}

/* ---- INFER / EXPLAIN INFER ---- */

static void prediction_rows(lq_sb *out, const lq_infer_result *r, const lq_prediction *ps, size_t n,
                            int walk)
{
    for (size_t i = 0; i < n; i++) {
        lq_sb_printf(out, "  %2zu. ", i + 1);
        lq_lql_pad(out, ps[i].token, 20, 0);
        if (walk && i == 0 && r->knn_fired && ps[i].id < 0) {
            /* LARQL's override row: the stored target at 100%, where it came from, and
             * what the model itself would have said */
            lq_sb_printf(out, " (100.00%%, source=knn_override/post_logits, cos=%.2f, L%d",
                         (double)r->knn_cosine, r->knn_layer);
            if (r->model_top1.token)
                lq_sb_printf(out, ", model_top1=%s (%.2f%%)", r->model_top1.token,
                             r->model_top1.probability * 100.0);
            lq_sb_puts(out, ")\n");
        } else {
            lq_sb_printf(out, " (%.2f%%)\n", ps[i].probability * 100.0);
        }
    }
}



static void infer_output(lq_sb *out, const lq_infer_result *r)
{
    if (r->has_walk) {
        lq_sb_puts(out, "Predictions (walk FFN):\n");
        prediction_rows(out, r, r->walk, r->n_walk, 1);
        lq_sb_printf(out, "  %.0fms\n", r->walk_ms);
        if (r->knn_fired)
            lq_sb_puts(out, "  note: KNN override is a post-logits retrieval sidecar, not an FFN/residual edit.\n");
    }
    if (r->has_dense) {
        if (r->has_walk)
            lq_sb_puts(out, "\n");
        lq_sb_puts(out, "Predictions (dense):\n");
        prediction_rows(out, r, r->dense, r->n_dense, 0);
        lq_sb_printf(out, "  %.0fms\n", r->dense_ms);
    }
}

static int exec_infer(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    lq_infer_result r;
    int rc = lq_lql_run_infer(q, s->str, s->top >= 0 ? s->top : 5, s->compare, s, &r, err);
    if (rc)
        return rc;
    infer_output(out, &r);
    lq_infer_result_free(&r);
    return 0;
}

/* Predictions, then per layer the features the prompt's last position fires: each layer's
 * gates scored against that layer's input (the residual after the previous layer; layer 0
 * gets the token embedding), top 3 shown (all K with VERBOSE). */
static int exec_explain_infer(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    lq_infer_result r;
    int rc = lq_lql_run_infer(q, s->str, s->top >= 0 ? s->top : 5, 0, NULL, &r, err);
    if (rc)
        return rc;
    infer_output(out, &r);
    lq_infer_result_free(&r);
    const lq_vindex_info *vi = vinfo(q);
    int L = vi->num_layers, H = vi->hidden_size, K = s->verbose ? 10 : 3;
    float *res = malloc((size_t)L * (size_t)H * sizeof *res), *q0 = malloc((size_t)H * sizeof *q0);
    lq_vindex_hit *hits = malloc((size_t)K * sizeof *hits);
    if (!res || !q0 || !hits) {
        free(res), free(q0), free(hits);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    rc = lq_infer_residuals(q->m, s->str, res, err);
    /* layer 0's input: the last token's embedding */
    const lq_tokenizer *t = lq_vindex_tokenizer(q->v);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!rc)
        rc = lq_tokenizer_encode(t, s->str, strlen(s->str), lq_tokenizer_add_bos(t) ? LQ_TOK_ADD_BOS : 0,
                                 &ids, &n, err);
    if (!rc && n)
        rc = lq_vindex_embed_row(q->v, ids[n - 1], q0, err);
    free(ids);
    if (!rc) {
        const lq_vindex *v = lq_lql_view(q);
        lq_sb_puts(out, "\nInference trace (features that fired with attention):\n");
        for (int l = 0; l < L && !rc; l++) {
            if (s->has_range && (l < s->range_lo || l > s->range_hi))
                continue;
            const float *x = l == 0 ? q0 : res + (size_t)(l - 1) * (size_t)H;
            size_t nh = 0;
            rc = lq_vindex_gate_knn(v, l, x, (size_t)K, hits, &nh, err);
            for (size_t i = 0; !rc && i < nh; i++) {
                lq_feature_meta m = {0};
                const char *tok = lq_vindex_feature_meta(v, l, hits[i].feature, &m)
                                      ? meta_text(v, &m) : "";
                if (s->relations_only && !lq_vindex_probe_label(v, l, hits[i].feature))
                    continue;
                walk_row(q, out, l, hits[i].feature, hits[i].score, tok,
                         lq_vindex_probe_label(v, l, hits[i].feature));
            }
        }
    }
    free(res), free(q0), free(hits);
    return rc;
}

/* ---- SELECT ---- */

static int cond_num(const lq_lql_cond *c, double *x, lq_err *err)
{
    if (c->v.kind == LQ_LV_STRING)
        return lq_err_set(err, LQ_EINVAL, "WHERE %s needs a number", c->field);
    *x = c->v.num;
    return 0;
}


static int also_list(const lq_vindex *v, int layer, int feature, int from, int to, lq_sb *b)
{
    lq_feature_meta m = {0};
    int n = 0;
    if (!lq_vindex_feature_meta(v, layer, feature, &m))
        return 0;
    for (int k = from; k < m.n_top && k < to; k++)
        lq_sb_printf(b, n++ ? ", %s" : "%s", lq_vindex_token_text(v, m.top_ids[k]));
    return n;
}

/* The table of SELECT ... FROM EDGES: Layer Feature Token Also Relation Score. */
static void edge_header(lq_sb *out)
{
    lq_sb_printf(out, "%-6s %-8s ", "Layer", "Feature");
    lq_lql_pad(out, "Token", 20, 0);
    lq_sb_puts(out, " ");
    lq_lql_pad(out, "Also", 30, 0);
    lq_sb_printf(out, " %-20s %10s\n", "Relation", "Score");
    dashes(out, 98);
}

static void edge_row(lq_sb *out, int layer, int feature, const char *tok, const char *also, const char *rel,
                     double score)
{
    char lf[24], ff[24];
    snprintf(lf, sizeof lf, "L%d", layer);
    snprintf(ff, sizeof ff, "F%d", feature);
    lq_sb_printf(out, "%-6s %-8s ", lf, ff);
    lq_lql_pad(out, tok ? tok : "", 20, 0);
    lq_sb_puts(out, " ");
    lq_lql_pad(out, also ? also : "", 30, 0);
    lq_sb_puts(out, " ");
    lq_lql_pad(out, rel ? rel : "", 20, 0);
    lq_sb_printf(out, " %10.4f\n", score);
}

static int select_nearest(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (s->layer < 0)
        return lq_err_set(err, LQ_EINVAL, "NEAREST TO needs AT LAYER n");
    lq_nearest_params p;
    lq_nearest_params_init(&p);
    p.entity = s->nearest;
    p.layer = s->layer;
    if (s->limit >= 0)
        p.top = s->limit;
    char *js = NULL;
    int rc = lq_vindex_nearest_json(lq_lql_view(q), &p, &js, err);
    if (rc)
        return rc;
    json_t *j = json_loads(js, 0, NULL);
    free(js);
    json_t *hits = j ? json_object_get(j, "hits") : NULL;
    edge_header(out);
    size_t i;
    json_t *h;
    json_array_foreach(hits, i, h) {
        int f = (int)json_integer_value(json_object_get(h, "feature"));
        const char *tok = json_string_value(json_object_get(h, "token"));
        const char *also = json_string_value(json_object_get(h, "also"));
        const char *rel = lq_vindex_probe_label(lq_lql_view(q), s->layer, f);
        edge_row(out, s->layer, f, tok, also, rel, json_number_value(json_object_get(h, "score")));
    }
    lq_sb_printf(out, "\n%zu rows\n", json_array_size(hits));
    json_decref(j);
    return 0;
}

/* WHERE: = / LIKE on entity and relation, = on layer and > / >= on the score go to the
 * library's scan; every other condition (ranges, !=, IN, feature, score equality) filters
 * its rows here. A field edges do not have is ignored with a note, as LARQL ignores it. */
static int select_edges(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    lq_select_params p;
    lq_select_params_init(&p);
    char ebuf[256], rbuf[256];
    const lq_lql_cond **post = calloc(s->n_where + 1, sizeof *post);
    if (!post)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    size_t n_post = 0;
    int has_feature = 0;
    lq_sb ignored = {0};
    for (size_t i = 0; i < s->n_where; i++) {
        const lq_lql_cond *c = &s->where[i];
        int k = lq_lql_field_kind(c->field), str = c->v.kind == LQ_LV_STRING;
        int eq = c->op == LQ_LO_EQ || c->op == LQ_LO_LIKE;
        if (k < 0) {
            lq_sb_printf(&ignored, "%s'%s'", ignored.n ? ", " : "", c->field);
        } else if (k == LQ_LQL_FSTR_TOKEN && eq && str && !p.entity) {
            p.entity = lq_lql_like_core(c->v.s, ebuf, sizeof ebuf);
        } else if (k == LQ_LQL_FSTR_RELATION && eq && str && !p.relation) {
            p.relation = lq_lql_like_core(c->v.s, rbuf, sizeof rbuf);
        } else if (k == LQ_LQL_FNUM_LAYER && c->op == LQ_LO_EQ && c->v.kind == LQ_LV_INT && p.layer < 0 &&
                   c->v.num >= 0) {
            if (check_layer(q, (int)c->v.num, err)) {
                free(post);
                lq_sb_free(&ignored);
                return LQ_ERANGE;
            }
            p.layer = (int)c->v.num;
        } else if (k == LQ_LQL_FNUM_SCORE && !str && (c->op == LQ_LO_GT || c->op == LQ_LO_GTE) &&
                   isnan(p.min_confidence)) {
            p.min_confidence = c->op == LQ_LO_GT ? nextafter(c->v.num, INFINITY) : c->v.num;
        } else {
            has_feature |= k == LQ_LQL_FNUM_FEATURE && c->op == LQ_LO_EQ;
            post[n_post++] = c;
        }
    }
    if (s->order_by) {
        const char *o = s->order_by;
        if (!strcmp(o, "confidence") || !strcmp(o, "c_score") || !strcmp(o, "score") || !strcmp(o, "gate_score"))
            p.order_by = "confidence";
        else if (!strcmp(o, "layer"))
            p.order_by = "layer";
        else {
            free(post);
            lq_sb_free(&ignored);
            return lq_err_set(err, LQ_EINVAL, "ORDER BY %s: expected confidence, c_score or layer", o);
        }
        p.order = s->order_desc ? "desc" : "asc";
    }
    /* LARQL: LIMIT default 20, or num_layers with a feature filter */
    int limit = s->limit >= 0 ? s->limit : has_feature ? vinfo(q)->num_layers : 20;
    p.limit = n_post ? (int)(vinfo(q)->total_features < (uint64_t)(1 << 24) ? vinfo(q)->total_features : 1 << 24)
                     : limit;
    lq_select_result r;
    int rc = lq_vindex_select(lq_lql_view(q), &p, &r, err);
    if (rc) {
        free(post);
        lq_sb_free(&ignored);
        return rc;
    }
    const lq_vindex *v = lq_lql_view(q);
    edge_header(out);
    size_t shown = 0, matched = n_post ? 0 : r.total;
    for (size_t i = 0; i < r.n_edges; i++) {
        const lq_select_edge *e = &r.edges[i];
        lq_lql_row row = {e->target, e->relation, e->layer, e->feature, (double)e->c_score};
        if (n_post && !lq_lql_rows_match(post, n_post, &row))
            continue;
        if (n_post)
            matched++;
        if (shown >= (size_t)limit)
            continue;
        shown++;
        lq_sb also = {0};
        also_list(v, e->layer, e->feature, 1, 4, &also);
        edge_row(out, e->layer, e->feature, e->target, also.s, e->relation, (double)e->c_score);
        lq_sb_free(&also);
    }
    lq_sb_printf(out, "\n%zu rows (%zu matched)\n", shown, matched);
    if (ignored.n)
        lq_sb_printf(out, "(ignored: EDGES have no field %s)\n", ignored.s);
    lq_select_result_free(&r);
    lq_sb_free(&ignored);
    free(post);
    return 0;
}

/* Feature rows of one or all loaded layers with their metadata (SELECT ... FROM FEATURES,
 * SHOW FEATURES): token filter (substring, case-insensitive), minimum c_score. */
typedef struct feat_filter {
    const char *token;
    double min_score;       /* NaN none */
    int feature;            /* -1 any */
} feat_filter;

static int feat_match(const lq_vindex *v, const lq_feature_meta *m, const feat_filter *ff)
{
    if (!isnan(ff->min_score) && !(m->c_score >= ff->min_score))
        return 0;
    if (ff->token && !strcasestr(meta_text(v, m), ff->token))
        return 0;
    return 1;
}

static int parse_feat_where(const lq_lql_stmt *s, feat_filter *ff, int *layer, char *buf, size_t cap,
                            lq_err *err)
{
    ff->token = NULL;
    ff->min_score = NAN;
    ff->feature = -1;
    for (size_t i = 0; i < s->n_where; i++) {
        const lq_lql_cond *c = &s->where[i];
        double x = 0;
        if (!strcmp(c->field, "token") || !strcmp(c->field, "relation") || !strcmp(c->field, "entity") ||
            !strcmp(c->field, "target")) {
            if (c->v.kind != LQ_LV_STRING)
                return lq_err_set(err, LQ_EINVAL, "WHERE %s needs a string", c->field);
            ff->token = lq_lql_like_core(c->v.s, buf, cap);
        } else if (!strcmp(c->field, "confidence") || !strcmp(c->field, "c_score") || !strcmp(c->field, "score")) {
            if (cond_num(c, &x, err))
                return LQ_EINVAL;
            ff->min_score = c->op == LQ_LO_GT ? nextafter(x, INFINITY) : x;
        } else if (layer && !strcmp(c->field, "layer")) {
            if (cond_num(c, &x, err))
                return LQ_EINVAL;
            *layer = (int)x;
        } else if (!strcmp(c->field, "feature")) {
            if (cond_num(c, &x, err))
                return LQ_EINVAL;
            ff->feature = (int)x;
        } else {
            return lq_err_set(err, LQ_EINVAL, "unknown field '%s' in WHERE (token, confidence%s)", c->field,
                              layer ? ", layer, feature" : ", feature");
        }
    }
    return 0;
}

static void feature_row(const lq_vindex *v, lq_sb *out, int layer, int f, const lq_feature_meta *m,
                        int with_layer)
{
    char ff[24], sc[32];
    snprintf(ff, sizeof ff, "F%d", f);
    if (with_layer) {
        char lf[24];
        snprintf(lf, sizeof lf, "L%d", layer);
        lq_sb_printf(out, "%-6s ", lf);
    }
    lq_lql_pad(out, ff, 8, 0);
    lq_sb_puts(out, " ");
    lq_lql_pad(out, meta_text(v, m), 20, 0);
    snprintf(sc, sizeof sc, "%.4f", (double)m->c_score);
    lq_sb_puts(out, " ");
    lq_lql_pad(out, sc, 10, 1);
    lq_sb down = {0};
    also_list(v, layer, f, 0, 5, &down);
    lq_sb_puts(out, " ");
    lq_lql_pad(out, down.s ? down.s : "", 30, 1);
    lq_sb_free(&down);
    end_row(out); /* an edited feature may have no down tokens */
}

static int exec_show_features(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (check_layer(q, s->layer, err))
        return LQ_ERANGE;
    feat_filter ff;
    char buf[256];
    if (parse_feat_where(s, &ff, NULL, buf, sizeof buf, err))
        return LQ_EINVAL;
    const lq_vindex *v = lq_lql_view(q);
    const void *rows;
    int nf = 0;
    if (lq_vindex_gate_layer(v, s->layer, &rows, &nf, err) || nf == 0)
        return lq_err_set(err, LQ_EINVAL, "no features at layer %d", s->layer);
    int limit = s->limit >= 0 ? s->limit : vinfo(q)->num_layers;
    lq_lql_pad(out, "Feature", 8, 0);
    lq_sb_puts(out, " ");
    lq_lql_pad(out, "Top Token", 20, 0);
    lq_sb_printf(out, " %10s %30s\n", "Score", "Down outputs");
    dashes(out, 72);
    int count = 0;
    for (int f = 0; f < nf && count < limit; f++) {
        lq_feature_meta m = {0};
        if ((ff.feature >= 0 && f != ff.feature) || !lq_vindex_feature_meta(v, s->layer, f, &m) ||
            !feat_match(v, &m, &ff))
            continue;
        feature_row(v, out, s->layer, f, &m, 0);
        count++;
    }
    return 0;
}

/* WHERE of SELECT ... FROM FEATURES / ENTITIES: the conditions on fields rows have (into
 * cs), the names of the others (ignored, as LARQL does) into ignored; a "layer = n" is checked
 * against the model. */
static int row_conds(lq_lql *q, const lq_lql_stmt *s, const lq_lql_cond **cs, size_t *n, lq_sb *ignored,
                     lq_err *err)
{
    *n = 0;
    for (size_t i = 0; i < s->n_where; i++) {
        const lq_lql_cond *c = &s->where[i];
        int k = lq_lql_field_kind(c->field);
        if (k < 0) {
            lq_sb_printf(ignored, "%s'%s'", ignored->n ? ", " : "", c->field);
            continue;
        }
        if (k == LQ_LQL_FNUM_LAYER && c->op == LQ_LO_EQ && c->v.kind == LQ_LV_INT && c->v.num >= 0 &&
            check_layer(q, (int)c->v.num, err))
            return LQ_ERANGE;
        cs[(*n)++] = c;
    }
    return 0;
}

/* the "layer = n" of a WHERE, or -1 */
static int layer_eq(const lq_lql_stmt *s)
{
    for (size_t i = 0; i < s->n_where; i++)
        if (lq_lql_field_kind(s->where[i].field) == LQ_LQL_FNUM_LAYER && s->where[i].op == LQ_LO_EQ &&
            s->where[i].v.kind == LQ_LV_INT && s->where[i].v.num >= 0)
            return (int)s->where[i].v.num;
    return -1;
}

static int select_features(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    const lq_lql_cond *cs[64];
    size_t nc = 0;
    lq_sb ignored = {0};
    if (s->n_where > 64)
        return lq_err_set(err, LQ_EINVAL, "too many WHERE conditions (at most 64)");
    if (row_conds(q, s, cs, &nc, &ignored, err)) {
        lq_sb_free(&ignored);
        return LQ_ERANGE;
    }
    int *layers = NULL, nl = 0;
    if (loaded_layers(q, &layers, &nl, err)) {
        lq_sb_free(&ignored);
        return LQ_ENOMEM;
    }
    const lq_vindex *v = lq_lql_view(q);
    int limit = s->limit >= 0 ? s->limit : 34, count = 0;
    lq_sb_printf(out, "%-6s ", "Layer");
    lq_lql_pad(out, "Feature", 8, 0);
    lq_sb_puts(out, " ");
    lq_lql_pad(out, "Top Token", 20, 0);
    lq_sb_printf(out, " %10s %30s\n", "Score", "Down outputs");
    dashes(out, 79);
    for (int i = 0; i < nl && count < limit; i++) {
        int l = layers[i];
        const void *rows;
        int nf = 0;
        lq_vindex_gate_layer(v, l, &rows, &nf, NULL);
        for (int f = 0; f < nf && count < limit; f++) {
            lq_feature_meta m = {0};
            if (!lq_vindex_feature_meta(v, l, f, &m))
                continue;
            lq_lql_row row = {meta_text(v, &m), lq_vindex_probe_label(v, l, f), l, f, (double)m.c_score};
            if (!lq_lql_rows_match(cs, nc, &row))
                continue;
            feature_row(v, out, l, f, &m, 1);
            count++;
        }
    }
    free(layers);
    lq_sb_printf(out, "\n%d rows\n", count);
    if (ignored.n)
        lq_sb_printf(out, "(ignored: FEATURES have no field %s)\n", ignored.s);
    lq_sb_free(&ignored);
    return 0;
}

/* ---- entities (SHOW ENTITIES, SELECT ... FROM ENTITIES) ----
 * LARQL's filter for named entities among top tokens: 3+ characters, an upper-case ASCII
 * first letter, letters only. Counted per distinct token (features, max c_score). */

typedef struct ent {
    int32_t id;
    int count;
    float max_score;
} ent;

static int ent_cmp(const void *a, const void *b)
{
    const ent *x = a, *y = b;
    if (x->count != y->count)
        return y->count - x->count;
    return x->id - y->id;
}

static int entity_like(const char *t)
{
    size_t n = strlen(t);
    if (n < 3 || !(t[0] >= 'A' && t[0] <= 'Z'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalpha((unsigned char)t[i]))
            return 0;
    return 1;
}

/* cs: WHERE conditions every counted feature must meet (SELECT ... FROM ENTITIES) */
static int exec_entities(lq_lql *q, int layer, int limit_in, const lq_lql_cond *const *cs, size_t nc, lq_sb *out,
                         lq_err *err)
{
    if (layer >= 0 && check_layer(q, layer, err))
        return LQ_ERANGE;
    const lq_vindex *v = lq_lql_view(q);
    int V = vinfo(q)->vocab_size, L = vinfo(q)->num_layers;
    ent *e = calloc((size_t)(V > 0 ? V : 1), sizeof *e);
    if (!e)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    int n_scan = 0;
    for (int l = 0; l < L; l++) {
        if (layer >= 0 && l != layer)
            continue;
        n_scan++;
        const void *rows;
        int nf = 0;
        lq_vindex_gate_layer(v, l, &rows, &nf, NULL);
        for (int f = 0; f < nf; f++) {
            lq_feature_meta m = {0};
            if (!lq_vindex_feature_meta(v, l, f, &m) || m.top_token_id < 0 || m.top_token_id >= V)
                continue;
            const char *tt = lq_vindex_token_text(v, m.top_token_id);
            lq_lql_row row = {tt, lq_vindex_probe_label(v, l, f), l, f, (double)m.c_score};
            if (!entity_like(tt) || (nc && !lq_lql_rows_match(cs, nc, &row)))
                continue;
            ent *x = &e[m.top_token_id];
            x->id = m.top_token_id;
            x->count++;
            x->max_score = m.c_score > x->max_score ? m.c_score : x->max_score;
        }
    }
    qsort(e, (size_t)V, sizeof *e, ent_cmp);
    int n = 0;
    while (n < V && e[n].count)
        n++;
    int limit = limit_in >= 0 ? limit_in : 50;
    if (layer >= 0)
        lq_sb_printf(out, "Distinct entities at layer %d (%d total, showing top %d):\n", layer, n, limit);
    else
        lq_sb_printf(out, "Distinct entities across %d layers (%d total, showing top %d):\n", n_scan, n, limit);
    lq_lql_pad(out, "Entity", 24, 0);
    lq_sb_printf(out, " %10s %10s\n", "Features", "Max Score");
    dashes(out, 48);
    for (int i = 0; i < n && i < limit; i++) {
        lq_lql_pad(out, lq_vindex_token_text(v, e[i].id), 24, 0);
        lq_sb_printf(out, " %10d %10.4f\n", e[i].count, (double)e[i].max_score);
    }
    if (!n)
        lq_sb_puts(out, "  (no entities found)\n");
    free(e);
    return 0;
}

static int exec_select(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (s->nearest) {
        if (s->from != LQ_LF_EDGES)
            return lq_err_set(err, LQ_EINVAL, "NEAREST TO is only supported FROM EDGES");
        return select_nearest(q, s, out, err);
    }
    if (s->from == LQ_LF_FEATURES)
        return select_features(q, s, out, err);
    if (s->from == LQ_LF_ENTITIES) { /* LARQL: entity / token and layer filters */
        const lq_lql_cond *cs[64];
        size_t nc = 0;
        lq_sb ignored = {0};
        if (s->n_where > 64)
            return lq_err_set(err, LQ_EINVAL, "too many WHERE conditions (at most 64)");
        int rc = row_conds(q, s, cs, &nc, &ignored, err);
        if (!rc)
            rc = exec_entities(q, layer_eq(s), s->limit, cs, nc, out, err);
        if (!rc && ignored.n)
            lq_sb_printf(out, "(ignored: ENTITIES have no field %s)\n", ignored.s);
        lq_sb_free(&ignored);
        return rc;
    }
    return select_edges(q, s, out, err);
}

/* ---- SHOW ---- */

static int exec_show_relations(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    char *js = NULL;
    int rc = s->layer >= 0 ? lq_vindex_relations_layer_json(lq_lql_view(q), s->layer, &js, err)
                           : lq_vindex_relations_json(lq_lql_view(q), &js, err);
    if (rc)
        return rc;
    json_t *j = json_loads(js, 0, NULL);
    free(js);
    json_t *probe = json_object_get(j, "probe_relations"), *rel = json_object_get(j, "relations");
    size_t i, np = json_array_size(probe);
    json_t *x;
    if (np) {
        json_int_t total = 0;
        json_array_foreach(probe, i, x) total += json_integer_value(json_object_get(x, "count"));
        lq_sb_printf(out, "Probe-confirmed relations (%lld labels):\n", (long long)total);
        lq_sb_printf(out, "%-25s %8s\n", "Relation", "Features");
        dashes(out, 35);
        json_array_foreach(probe, i, x) {
            if (s->dmode == LQ_LD_BRIEF && i >= 30)
                break;
            lq_lql_pad(out, json_string_value(json_object_get(x, "name")), 25, 0);
            lq_sb_printf(out, " %8lld\n", (long long)json_integer_value(json_object_get(x, "count")));
        }
    }
    int show_raw = s->dmode != LQ_LD_BRIEF || !np;
    if (show_raw && json_array_size(rel)) {
        const lq_vindex_info *vi = vinfo(q);
        if (np)
            lq_sb_puts(out, "\n");
        if (s->layer >= 0)
            lq_sb_printf(out, "Top output tokens (L%d):\n", s->layer);
        else
            lq_sb_printf(out, "Top output tokens (L%d-%d):\n", vi->bands[1].start, vi->bands[1].end);
        lq_sb_printf(out, "%-25s %8s %8s %10s\n", "Token", "Count", "Score", "Layers");
        dashes(out, 55);
        size_t lim = s->dmode == LQ_LD_VERBOSE ? 50 : 30;
        json_array_foreach(rel, i, x) {
            if (i >= lim)
                break;
            lq_lql_pad(out, json_string_value(json_object_get(x, "name")), 25, 0);
            lq_sb_printf(out, " %8lld %8.2f %5lld-%lld", (long long)json_integer_value(json_object_get(x, "count")),
                         json_number_value(json_object_get(x, "max_score")),
                         (long long)json_integer_value(json_object_get(x, "min_layer")),
                         (long long)json_integer_value(json_object_get(x, "max_layer")));
            json_t *ex = json_object_get(x, "examples");
            if (s->with_examples && json_array_size(ex)) {
                size_t k;
                json_t *y;
                json_array_foreach(ex, k, y) lq_sb_printf(out, k ? ", %s" : "  e.g. %s", json_string_value(y));
            }
            lq_sb_puts(out, "\n");
        }
    }
    if (!np && !json_array_size(rel))
        lq_sb_puts(out, "  (no relations found)\n");
    json_decref(j);
    return 0;
}

static int exec_show_layers(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    const lq_vindex *v = lq_lql_view(q);
    int V = vinfo(q)->vocab_size;
    int *layers = NULL, nl = 0, *freq = calloc((size_t)(V > 0 ? V : 1), sizeof *freq);
    if (!freq || loaded_layers(q, &layers, &nl, err)) {
        free(freq);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    lq_sb_printf(out, "%-8s %10s %10s %15s\n", "Layer", "Features", "With Meta", "Top Token");
    dashes(out, 48);
    for (int i = 0; i < nl; i++) {
        int l = layers[i];
        if (s->has_range && (l < s->range_lo || l > s->range_hi))
            continue;
        const void *rows;
        int nf = 0, with = 0, best = -1;
        lq_vindex_gate_layer(v, l, &rows, &nf, NULL);
        memset(freq, 0, (size_t)(V > 0 ? V : 1) * sizeof *freq);
        for (int f = 0; f < nf; f++) {
            lq_feature_meta m = {0};
            if (!lq_vindex_feature_meta(v, l, f, &m))
                continue;
            with++;
            if (m.top_token_id >= 0 && m.top_token_id < V) {
                freq[m.top_token_id]++;
                if (best < 0 || freq[m.top_token_id] > freq[best] ||
                    (freq[m.top_token_id] == freq[best] && m.top_token_id < best))
                    best = m.top_token_id;
            }
        }
        char ln[24], a[32], b[32];
        snprintf(ln, sizeof ln, "L%d", l);
        lq_lql_fmt_count(a, sizeof a, (uint64_t)nf);
        lq_lql_fmt_count(b, sizeof b, (uint64_t)with);
        lq_sb_printf(out, "%-8s %10s %10s ", ln, a, b);
        lq_lql_pad(out, best >= 0 ? lq_vindex_token_text(v, best) : "", 15, 1);
        lq_sb_puts(out, "\n");
    }
    free(layers);
    free(freq);
    return 0;
}

static int exec_show_models(lq_lql *q, lq_sb *out)
{
    lq_sb_printf(out, "%-35s %10s %8s %12s\n", "Model", "Size", "Layers", "Status");
    dashes(out, 70);
    int rows = 0;
    DIR *d = opendir(".");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char ij[4200];
        snprintf(ij, sizeof ij, "%s/index.json", e->d_name);
        json_t *j = json_load_file(ij, 0, NULL);
        if (!j)
            continue;
        char sz[32];
        fmt_bytes(sz, sizeof sz, dir_size(e->d_name, 1));
        int used = q->path && !strcmp(q->path, e->d_name);
        lq_lql_pad(out, e->d_name, 35, 0);
        lq_sb_printf(out, " %10s %8lld %12s\n", sz, (long long)json_integer_value(json_object_get(j, "num_layers")),
                     used ? "in use" : "ready");
        json_decref(j);
        rows++;
    }
    if (d)
        closedir(d);
    if (!rows)
        lq_sb_puts(out, "  (no vindexes found in current directory)\n");
    return 0;
}

/* ---- dispatch ---- */

static int exec_stmt(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    /* a remote session sends its statements to the server, but for the ones that switch
       away from it or name local files */
    if (s->kind == LQ_LS_USE_REMOTE ||
        (q->remote && s->kind != LQ_LS_USE && s->kind != LQ_LS_USE_MODEL && s->kind != LQ_LS_EXTRACT &&
         s->kind != LQ_LS_SHOW_MODELS && !(s->kind == LQ_LS_STATS && s->str)))
        return lq_lql_exec_remote(q, s, out, err);
    /* everything but USE, STATS "path" and SHOW MODELS acts on the USE'd vindex */
    if (s->kind != LQ_LS_USE && s->kind != LQ_LS_SHOW_MODELS && !(s->kind == LQ_LS_STATS && s->str) &&
        s->kind != LQ_LS_USE_MODEL && s->kind != LQ_LS_EXTRACT &&
        !(s->kind == LQ_LS_DIFF && !s->current_a && !s->current_b) &&
        !(s->kind == LQ_LS_COMPILE && !s->compile_current) && lq_lql_need_vindex(q, err))
        return LQ_EINVAL;
    switch (s->kind) {
    case LQ_LS_USE: return lq_lql_use(q, s->str, out, err);
    case LQ_LS_STATS: return exec_stats(q, s, out, err);
    case LQ_LS_DESCRIBE: return exec_describe(q, s, out, err);
    case LQ_LS_WALK: return exec_walk(q, s, 0, out, err);
    case LQ_LS_EXPLAIN_WALK: return exec_walk(q, s, 1, out, err);
    case LQ_LS_INFER: return exec_infer(q, s, out, err);
    case LQ_LS_EXPLAIN_INFER: return exec_explain_infer(q, s, out, err);
    case LQ_LS_SELECT: return exec_select(q, s, out, err);
    case LQ_LS_SHOW_RELATIONS: return exec_show_relations(q, s, out, err);
    case LQ_LS_SHOW_LAYERS: return exec_show_layers(q, s, out, err);
    case LQ_LS_SHOW_FEATURES: return exec_show_features(q, s, out, err);
    case LQ_LS_SHOW_ENTITIES: return exec_entities(q, s->layer, s->limit, NULL, 0, out, err);
    case LQ_LS_SHOW_MODELS: return exec_show_models(q, out);
    case LQ_LS_TRACE:
    case LQ_LS_EXTRACT:
    case LQ_LS_USE_MODEL:
    case LQ_LS_DIFF:
    case LQ_LS_MERGE:
    case LQ_LS_COMPACT:
    case LQ_LS_SHOW_COMPACT_STATUS:
    case LQ_LS_REBALANCE:
    case LQ_LS_COMPILE: return lq_lql_exec_life(q, s, out, err);
    default: return lq_lql_exec_edit(q, s, out, err);
    }
}

int lq_lql_exec(lq_lql *q, const char *text, size_t len, int line, int col, char **out, lq_err *err)
{
    if (out)
        *out = NULL;
    lq_lql_stmt *st = NULL;
    int rc = lq_lql_parse(text, len, line, col, &st, err);
    if (rc)
        return rc;
    lq_sb b = {0};
    for (lq_lql_stmt *s = st; s && !rc; s = s->next) {
        if (s != st && b.n)
            lq_sb_puts(&b, "\n"); /* |> : outputs one after the other */
        rc = exec_stmt(q, s, &b, err);
    }
    lq_lql_stmt_free(st);
    if (b.oom) {
        lq_sb_free(&b);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    if (out && b.s)
        *out = b.s;
    else
        lq_sb_free(&b);
    return rc;
}
