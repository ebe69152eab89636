/* LQL lifecycle statements over the library (crates/larql-lql/src/executor/lifecycle,
 * trace.rs, compact.rs, mutation/merge.rs and rebalance.rs, with LARQL's messages): TRACE,
 * EXTRACT, USE MODEL / USE REMOTE, DIFF [INTO PATCH], MERGE, COMPACT, SHOW COMPACT STATUS,
 * REBALANCE and COMPILE. The computations are the library's (lq_infer_trace, lq_vindex_build,
 * lq_vindex_diff, lq_overlay_merge_*, lq_overlay_compact, lq_overlay_resolve,
 * lq_overlay_compile); this file parses nothing and only formats. */
#include <jansson.h>

#include "core/json_obj.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lql/exec_internal.h"

static const lq_vindex_info *vinfo(const lq_lql *q) { return lq_vindex_get_info(q->v); }

/* ---- TRACE ---- */

static const char *who(const lq_trace_layer *y)
{
    if (y->layer < 0)
        return "embed";
    double a = y->attn_logit, f = y->ffn_logit;
    if (a > 0.5 && f > 0.5)
        return "BOTH \xe2\x86\x91";
    if (a > 0.5)
        return "ATTN \xe2\x86\x91";
    if (f > 0.5)
        return "FFN \xe2\x86\x91";
    if (a < -0.5 && f < -0.5)
        return "both \xe2\x86\x93";
    if (a < -0.5)
        return "attn \xe2\x86\x93";
    if (f < -0.5)
        return "ffn \xe2\x86\x93";
    return "~";
}

static void layer_name(char *b, size_t cap, int l)
{
    if (l < 0)
        snprintf(b, cap, "emb");
    else
        snprintf(b, cap, "L%d", l);
}

/* TRACE ... SAVE "path": the table as JSON (not LARQL's binary .trace format). */
static int save_trace(const lq_lql *q, const lq_lql_stmt *s, const lq_trace_result *r, lq_err *err)
{
    json_t *j = lq_json_object(), *ls = json_array();
    json_object_set_new(j, "prompt", json_string(s->str));
    json_object_set_new(j, "tokens", json_integer((json_int_t)r->n_tokens));
    json_object_set_new(j, "layers", ls);
    for (size_t i = 0; i < r->n; i++) {
        const lq_trace_layer *y = &r->layers[i];
        json_t *o = lq_json_object();
        json_object_set_new(o, "layer", json_integer(y->layer));
        json_object_set_new(o, "top1", json_string(lq_vindex_token_text(q->v, y->top1_id)));
        json_object_set_new(o, "top1_prob", json_real(y->top1_prob));
        json_object_set_new(o, "residual_norm", json_real(y->resid_norm));
        json_object_set_new(o, "attn_delta_norm", json_real(y->attn_norm));
        json_object_set_new(o, "ffn_delta_norm", json_real(y->ffn_norm));
        if (r->answer_id >= 0) {
            json_object_set_new(o, "rank", json_integer(y->rank));
            json_object_set_new(o, "prob", json_real(y->prob));
            json_object_set_new(o, "attn_logit", json_real(y->attn_logit));
            json_object_set_new(o, "ffn_logit", json_real(y->ffn_logit));
        }
        json_array_append_new(ls, o);
    }
    int rc = json_dump_file(j, s->str2, JSON_INDENT(1)) ? lq_err_set(err, LQ_EIO, "TRACE SAVE: cannot write %s", s->str2)
                                                        : 0;
    json_decref(j);
    return rc;
}

static int exec_trace(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (lq_lql_need_model(q, err))
        return err->code ? err->code : LQ_EINVAL;
    if (s->has_range && s->range_hi >= vinfo(q)->num_layers)
        return lq_err_set(err, LQ_ERANGE, "layer %d is outside the model (layers 0-%d)", s->range_hi,
                          vinfo(q)->num_layers - 1);
    lq_edit_set *es = q->o ? lq_overlay_edit_set(q->o, err) : NULL;
    if (q->o && !es)
        return LQ_ENOMEM;
    lq_trace_result r;
    int rc = lq_infer_trace(q->m, s->str, s->target, es, &r, err);
    lq_edit_set_unref(es);
    if (rc)
        return rc;
    lq_sb_puts(out, "Trace: ");
    lq_lql_quoted(out, s->str);
    lq_sb_printf(out, " (%zu tokens, %d layers, %.0fms)\n", r.n_tokens, r.n_layers, r.ms);
    int lo = s->has_range ? s->range_lo : -1, hi = s->has_range ? s->range_hi : r.n_layers - 1;
    char ln[16], num[64];
    if (s->target) {
        lq_sb_printf(out, "\nAnswer trajectory for '%s':\n", s->target);
        lq_sb_printf(out, "  %5s %6s %8s %9s %9s %8s\n", "Layer", "Rank", "Prob", "Attn", "FFN", "Who");
        for (size_t i = 0; i < r.n; i++) {
            const lq_trace_layer *y = &r.layers[i];
            if (y->layer < lo || y->layer > hi)
                continue;
            layer_name(ln, sizeof ln, y->layer);
            lq_sb_printf(out, "  %5s %6d %8.4f %+9.1f %+9.1f ", ln, y->rank, y->prob, y->attn_logit, y->ffn_logit);
            lq_lql_pad(out, who(y), 8, 1);
            lq_sb_puts(out, "\n");
        }
    } else if (s->decompose) {
        lq_sb_puts(out, "\n  Layer ");
        lq_lql_pad(out, "|attn_\xce\x94|", 10, 1);
        lq_sb_puts(out, " ");
        lq_lql_pad(out, "|ffn_\xce\x94|", 10, 1);
        lq_sb_printf(out, " %10s %10s\n", "|residual|", "attn%");
        for (size_t i = 0; i < r.n; i++) {
            const lq_trace_layer *y = &r.layers[i];
            if (y->layer < lo || y->layer > hi)
                continue;
            layer_name(ln, sizeof ln, y->layer);
            double tot = y->attn_norm + y->ffn_norm, ratio = tot > 0 ? y->attn_norm / tot * 100.0 : 0.0;
            lq_sb_printf(out, "  %5s %10.0f %10.0f %10.0f %9.0f%%\n", ln, y->attn_norm, y->ffn_norm, y->resid_norm,
                         ratio);
        }
    } else {
        lq_sb_printf(out, "\n  %5s %12s %8s ", "Layer", "Top-1", "Prob");
        lq_lql_pad(out, "|attn_\xce\x94|", 10, 1);
        lq_sb_puts(out, " ");
        lq_lql_pad(out, "|ffn_\xce\x94|", 10, 1);
        lq_sb_puts(out, "\n");
        for (size_t i = 0; i < r.n; i++) {
            const lq_trace_layer *y = &r.layers[i];
            if (y->layer < lo || y->layer > hi)
                continue;
            layer_name(ln, sizeof ln, y->layer);
            lq_sb_printf(out, "  %5s ", ln);
            lq_lql_pad(out, lq_vindex_token_text(q->v, y->top1_id), 12, 1);
            snprintf(num, sizeof num, " %8.3f %10.0f %10.0f\n", y->top1_prob, y->attn_norm, y->ffn_norm);
            lq_sb_puts(out, num);
        }
    }
    const lq_knn_store *ks = lq_overlay_knn(q->o);
    lq_infer_result ir;
    if (ks && lq_knn_store_count(ks) && lq_lql_infer(q, s->str, 1, &ir, err) == 0) {
        if (ir.knn_fired) { /* LARQL: what INFER would answer, outside the traced DAG */
            lq_sb_printf(out, "\nPending retrieval override:\n  %s (source=knn_override/post_logits, cos=%.2f, L%d",
                         ir.knn_token, (double)ir.knn_cosine, ir.knn_layer);
            if (ir.model_top1.token)
                lq_sb_printf(out, ", model_top1=%s (%.2f%%)", ir.model_top1.token, ir.model_top1.probability * 100.0);
            lq_sb_puts(out, ")\n  note: KNN sidecar is applied after logits; it is not part of this residual/FFN DAG.\n");
        }
        lq_infer_result_free(&ir);
    }
    if (s->str2) {
        rc = save_trace(q, s, &r, err);
        if (!rc)
            lq_sb_printf(out, "\nSaved the trace (%zu layers, JSON) to %s\n", r.n, s->str2);
    }
    lq_trace_result_free(&r);
    return rc;
}

/* ---- EXTRACT and USE MODEL: the builder ---- */

static int build(const char *model, const char *outdir, int level, lq_err *err)
{
    lq_vindex_build_opts o;
    lq_vindex_build_opts_init(&o);
    o.level = level == 2 ? LQ_VLEVEL_ALL : level == 1 ? LQ_VLEVEL_INFERENCE : LQ_VLEVEL_BROWSE;
    o.keep_quant = 1; /* BitNet: the packed ternary weights (ignored for other GGUFs) */
    struct stat st;
    if (stat(model, &st) != 0)
        return lq_err_set(err, LQ_ENOTFOUND, "model file not found: %s (EXTRACT and USE MODEL read a local GGUF "
                                             "file, not a hub id)", model);
    return lq_vindex_build(model, outdir, &o, err);
}

static int exec_extract(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    lq_sb_printf(out, "Loading model: %s...\n", s->str);
    int rc = build(s->str, s->str2, s->extract_level, err);
    if (rc)
        return rc;
    lq_sb_printf(out, "Extraction complete: %s\n", s->str2);
    if (s->components || s->has_range)
        lq_sb_puts(out, "  note: COMPONENTS / LAYERS are accepted; the builder writes every component of every layer\n");
    return lq_lql_use(q, s->str2, out, err); /* LARQL uses the new vindex */
}

static int exec_use_model(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    const char *td = getenv("TMPDIR");
    char *dir = malloc(4096);
    if (!dir)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    snprintf(dir, 4096, "%s/larql-model.XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(dir)) {
        free(dir);
        return lq_err_set(err, LQ_EIO, "USE MODEL: cannot create a temporary directory in %s", td ? td : "/tmp");
    }
    int rc = build(s->str, dir, 1, err); /* the builder fills an empty directory */
    if (!rc) {
        lq_sb_printf(out, "Model: %s (a vindex built from it for this session)\n", s->str);
        rc = lq_lql_use(q, dir, out, err);
    }
    if (!rc) {
        q->model_tmp = dir; /* removed when the session leaves it */
        /* a file COMPILE ... INTO MODEL wrote carries its edits: they apply as patches */
        size_t n = 0;
        if ((rc = lq_overlay_apply_carried(q->o, s->str, &n, err))) {
            lq_lql_close_backend(q);
            return rc;
        }
        if (n)
            lq_sb_printf(out, "Applied the %zu patch(es) the model carries (larql.patches)\n", n);
        return 0;
    }
    lq_vindex_remove_dir(dir);
    rmdir(dir);
    free(dir);
    return rc;
}

/* ---- DIFF ---- */

typedef struct diff_out {
    lq_sb *out;
    size_t shown, limit;
} diff_out;

static int diff_row(void *ctx, const lq_diff_row *r)
{
    diff_out *d = ctx;
    if (d->shown >= d->limit)
        return 1;
    static const char *const ST[] = {"modified", "removed", "added"};
    char lf[24], ff[24];
    snprintf(lf, sizeof lf, "L%d", r->layer);
    snprintf(ff, sizeof ff, "F%d", r->feature);
    lq_sb_printf(d->out, "%-8s %-8s ", lf, ff);
    lq_lql_pad(d->out, r->tok_a ? r->tok_a : "-", 20, 0);
    lq_sb_puts(d->out, " ");
    lq_lql_pad(d->out, r->tok_b ? r->tok_b : "-", 20, 0);
    lq_sb_printf(d->out, " %10s\n", ST[r->status]);
    d->shown++;
    return 0;
}

/* CURRENT (the session's patched view) or a vindex opened for the statement */
static int open_ref(lq_lql *q, int current, const char *path, const lq_vindex **v, lq_vindex **owned,
                    lq_err *err)
{
    *owned = NULL;
    if (current) {
        if (lq_lql_need_vindex(q, err))
            return LQ_EINVAL;
        *v = lq_lql_view(q);
        return 0;
    }
    lq_vindex_open_opts vo = {.n_threads = q->opts.n_threads};
    int rc = lq_vindex_open(path, &vo, owned, err);
    *v = *owned;
    return rc;
}

static int exec_diff(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    const lq_vindex *a = NULL, *b = NULL;
    lq_vindex *oa = NULL, *ob = NULL;
    int rc = open_ref(q, s->current_a, s->str, &a, &oa, err);
    if (!rc)
        rc = open_ref(q, s->current_b, s->str2, &b, &ob, err);
    lq_diff_params p = {s->layer, s->relation, s->entity};
    lq_sb text = {0};
    if (!rc) {
        lq_sb_printf(&text, "Diff: %s vs %s\n", s->current_a ? "CURRENT" : s->str, s->current_b ? "CURRENT" : s->str2);
        lq_sb_printf(&text, "%-8s %-8s %-20s %-20s %10s\n", "Layer", "Feature", "A (token)", "B (token)", "Status");
        for (int i = 0; i < 70; i++)
            lq_sb_puts(&text, "-");
        lq_sb_puts(&text, "\n");
        diff_out d = {&text, 0, s->limit >= 0 ? (size_t)s->limit : 20}; /* LARQL: LIMIT 20 */
        rc = lq_vindex_diff(a, b, &p, diff_row, &d, err);
        if (!rc && !d.shown)
            lq_sb_puts(&text, "  (no differences found)\n");
        else if (!rc)
            lq_sb_printf(&text, "\n%zu differences shown (limit %zu)\n", d.shown, d.limit);
    }
    if (!rc && s->into_patch) {
        lq_patch *pt = NULL;
        char name[512];
        snprintf(name, sizeof name, "Diff: %s vs %s", s->current_a ? "CURRENT" : s->str,
                 s->current_b ? "CURRENT" : s->str2);
        rc = lq_vindex_diff_patch(a, b, &p, name, &pt, err);
        if (!rc) /* it takes a to b: a's checksum */
            rc = lq_patch_set_info(pt, NULL, lq_vindex_base_checksum(a), q->opts.author, err);
        if (!rc)
            rc = lq_patch_write(pt, s->into_patch, err);
        if (!rc) {
            size_t ni, nu, nd;
            lq_patch_counts(pt, &ni, &nu, &nd);
            lq_sb_printf(&text, "Extracted: %s (%zu ops: %zu inserts, %zu updates, %zu deletes)\n", s->into_patch,
                         lq_patch_n_ops(pt), ni, nu, nd);
        }
        lq_patch_free(pt);
    }
    if (!rc && s->into_report && !text.oom) { /* LARQL's docs: the diff as a text report */
        FILE *f = fopen(s->into_report, "w");
        int ok = f && fwrite(text.s, 1, text.n, f) == text.n;
        if (f)
            ok &= fclose(f) == 0;
        rc = ok ? 0 : lq_err_set(err, LQ_EIO, "DIFF INTO REPORT: cannot write %s", s->into_report);
        if (!rc)
            lq_sb_printf(&text, "Report: %s\n", s->into_report);
    }
    if (text.s)
        lq_sb_puts(out, text.s);
    lq_sb_free(&text);
    lq_vindex_close(oa);
    lq_vindex_close(ob);
    return rc;
}

/* ---- MERGE ---- */

static int same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static int exec_merge(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    struct stat st;
    if (stat(s->str, &st) != 0)
        return lq_err_set(err, LQ_ENOTFOUND, "source vindex not found: %s", s->str);
    if (s->str2 && stat(s->str2, &st) != 0)
        return lq_err_set(err, LQ_ENOTFOUND, "target vindex not found: %s", s->str2);
    if (s->str2 && !same_dir(s->str2, q->path)) /* LARQL merges into the session whatever it names */
        return lq_err_set(err, LQ_EUNSUPPORTED, "MERGE INTO \"%s\": merges go into the vindex in use (%s); USE it first",
                          s->str2, q->path);
    if (stat(s->str, &st) != 0)
        return lq_err_set(err, LQ_ENOTFOUND, "source vindex not found: %s", s->str);
    int strategy = s->conflict == LQ_LC_KEEP_TARGET ? LQ_MERGE_KEEP_TARGET
                   : s->conflict == LQ_LC_HIGHEST_CONFIDENCE ? LQ_MERGE_HIGHEST_CONFIDENCE : LQ_MERGE_KEEP_SOURCE;
    static const char *const SN[] = {"KeepSource", "KeepTarget", "HighestConfidence"};
    size_t merged = 0, skipped = 0;
    int rc;
    if (S_ISDIR(st.st_mode)) {
        lq_vindex *src = NULL;
        lq_vindex_open_opts vo = {.n_threads = q->opts.n_threads};
        rc = lq_vindex_open(s->str, &vo, &src, err);
        if (!rc)
            rc = lq_overlay_merge_vindex(q->o, src, strategy, &merged, &skipped, err);
        lq_vindex_close(src);
    } else { /* a .vlp patch: its operations under the same rules */
        lq_patch *p = NULL;
        rc = lq_patch_read(s->str, vinfo(q)->hidden_size, &p, err);
        if (!rc)
            rc = lq_overlay_merge_patch(q->o, p, strategy, &merged, &skipped, err);
        lq_patch_free(p);
    }
    if (rc)
        return rc;
    lq_sb_printf(out, "Merged %s \xe2\x86\x92 %s (patch overlay)\n", s->str, s->str2 ? s->str2 : q->path);
    lq_sb_printf(out, "  %zu features merged, %zu skipped (strategy: %s)\n", merged, skipped, SN[strategy]);
    return 0;
}

/* ---- COMPACT ---- */

/* patched feature slots and the layers they are on, over the applied patches and edits */
static void slot_counts(const lq_lql *q, size_t *edges, size_t *layers)
{
    int L = vinfo(q)->num_layers;
    unsigned char *seen = calloc((size_t)L + 1, 1);
    *edges = lq_overlay_n_features(q->o);
    *layers = 0;
    size_t np = lq_overlay_n_patches(q->o);
    for (size_t i = 0; seen && i <= np; i++) {
        const lq_patch *p = i < np ? lq_overlay_patch_at(q->o, i) : lq_overlay_edits(q->o);
        for (size_t k = 0; p && k < lq_patch_n_ops(p); k++) {
            lq_patch_op op;
            if (lq_patch_op_at(p, k, &op) && op.kind != LQ_OP_INSERT_KNN && op.kind != LQ_OP_DELETE_KNN &&
                op.layer >= 0 && op.layer < L && !seen[op.layer]) {
                seen[op.layer] = 1;
                (*layers)++;
            }
        }
    }
    free(seen);
}

static int exec_compact_status(lq_lql *q, lq_sb *out)
{
    const lq_knn_store *ks = lq_overlay_knn(q->o);
    size_t edges, layers;
    slot_counts(q, &edges, &layers);
    lq_sb_printf(out, "Storage engine status (epoch %u):\n", q->epoch);
    lq_sb_printf(out, "  L0 (WAL/KNN):    %zu entries (0 tombstones)\n", ks ? lq_knn_store_count(ks) : 0);
    lq_sb_printf(out, "  L1 (arch-A):     %zu edges across %zu layers\n", edges, layers);
    lq_sb_puts(out, "  L2 (MEMIT):      not available (COMPACT folds the overlay into the base files)\n");
    lq_sb_printf(out, "  Base model:      %d layers \xc3\x97 %d features\n", vinfo(q)->num_layers,
                 vinfo(q)->features_per_layer);
    return 0;
}

/* Both LARQL's MINOR (KNN -> feature slots) and MAJOR (MEMIT) end with the edits in the
 * base; here both fold the whole overlay into the USE'd directory, crash-safe. */
static int exec_compact(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    const char *what = s->compact_major ? "COMPACT MAJOR" : "COMPACT MINOR";
    const lq_knn_store *ks = lq_overlay_knn(q->o), *base_ks = lq_vindex_knn_store(q->v);
    size_t nf = lq_overlay_n_features(q->o), nk = ks ? lq_knn_store_count(ks) : 0;
    size_t nb = base_ks ? lq_knn_store_count(base_ks) : 0;
    if (!nf && nk == nb) {
        lq_sb_printf(out, "%s: the overlay is empty, nothing to compact.\n", what);
        return 0;
    }
    if (q->recording && q->patch_name)
        return lq_err_set(err, LQ_EINVAL, "patch '%s' is being recorded: SAVE PATCH before COMPACT", q->patch_name);
    size_t nc = lq_overlay_n_composed(q->o);
    if (nc) /* folding would keep their gates and drop what they add to the residual */
        return lq_err_set(err, LQ_EUNSUPPORTED, "%s: %zu composed features (MODE COMPOSE) carry down vectors the base "
                                                "files cannot hold; keep them in a patch (BEGIN PATCH ... SAVE PATCH)",
                          what, nc);
    char *dir = strdup(q->path);
    if (!dir)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    int rc = lq_overlay_compact(q->o, dir, err);
    if (!rc) {
        unsigned ep = q->epoch + 1;
        lq_sb_printf(out, "%s: folded %zu patched features and %zu KNN entries into %s\n", what, nf, nk, dir);
        lq_sb tmp = {0}; /* reopen: the base is the compacted files, the overlay starts empty */
        char *keep = q->model_tmp; /* USE MODEL's directory is the one reopened: not removed */
        q->model_tmp = NULL;
        rc = lq_lql_use(q, dir, &tmp, err);
        q->model_tmp = keep;
        lq_sb_free(&tmp);
        q->epoch = ep;
        if (!rc)
            lq_sb_printf(out, "%s complete (epoch %u).\n", what, q->epoch);
    }
    free(dir);
    return rc;
}

/* ---- REBALANCE ---- */

static int exec_rebalance(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    lq_rebalance_params p;
    lq_rebalance_params_init(&p);
    if (s->max_iters >= 0)
        p.max_iters = s->max_iters;
    if (!isnan(s->floor_p))
        p.floor = (float)s->floor_p;
    if (!isnan(s->ceiling_p))
        p.ceiling = (float)s->ceiling_p;
    if (!(p.floor >= 0 && p.floor <= p.ceiling && p.ceiling <= 1))
        return lq_err_set(err, LQ_EINVAL, "REBALANCE: need 0 <= FLOOR <= CEILING <= 1 (got %g, %g)", p.floor, p.ceiling);
    lq_rebalance_result r;
    int has_w = vinfo(q)->has_model_weights;
    if (has_w && lq_lql_need_model(q, err))
        return err->code ? err->code : LQ_EINVAL;
    int rc = lq_overlay_rebalance(q->o, has_w ? q->m : NULL, &p, &r, err);
    if (rc)
        return rc;
    if (!r.n_facts) {
        lq_sb_puts(out, "Rebalance: no compose-mode installs to rebalance (KNN installs don't need it)\n");
        return 0;
    }
    lq_sb_printf(out, "Rebalance: %zu compose installs, %d iterations\n", r.n_facts, r.iters);
    lq_sb_printf(out, "  band [%.2f, %.2f]: %zu in band, %zu below (amplifying), %zu above (shrinking)\n", p.floor,
                 p.ceiling, r.in_band, r.below, r.above);
    lq_sb_printf(out, "  %s\n", r.below || r.above ? "saturated (some facts hit oscillation limit \xe2\x80\x94 "
                                                     "template-competition at this layer)"
                                                   : "all converged in band");
    return 0;
}

/* ---- COMPILE ---- */

/* The GGUF's path: "out/" or an existing directory (LARQL writes a directory) holds
 * model.gguf; anything else is the file. */
static char *model_out_path(const char *dst, lq_err *err)
{
    size_t n = strlen(dst);
    struct stat st;
    int dir = (n && dst[n - 1] == '/') || (stat(dst, &st) == 0 && S_ISDIR(st.st_mode));
    char *p = malloc(n + 16);
    if (!p) {
        lq_err_set(err, LQ_ENOMEM, "out of memory");
        return NULL;
    }
    if (!dir) {
        memcpy(p, dst, n + 1);
        return p;
    }
    snprintf(p, n + 16, "%s%smodel.gguf", dst, dst[n - 1] == '/' ? "" : "/");
    if (mkdir(dst, 0777) != 0 && errno != EEXIST) {
        lq_err_set(err, LQ_EIO, "COMPILE INTO MODEL: cannot create the directory %s", dst);
        free(p);
        return NULL;
    }
    return p;
}

static int exec_compile_model(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (s->format == 1) /* LARQL's default is a safetensors directory for its own loader */
        return lq_err_set(err, LQ_EUNSUPPORTED, "COMPILE INTO MODEL ... FORMAT safetensors is not supported: it "
                                                "writes GGUF (FORMAT GGUF, the default here), the file llama.cpp "
                                                "and larql load");
    lq_vindex *src = NULL;
    lq_overlay *o = NULL;
    lq_model *m = NULL;
    const char *dir = s->str_src;
    int rc = 0;
    if (!s->compile_current && !(q->path && same_dir(s->str_src, q->path))) {
        lq_vindex_open_opts vo = {.n_threads = q->opts.n_threads};
        rc = lq_vindex_open(s->str_src, &vo, &src, err);
        if (!rc && !lq_vindex_get_info(src)->has_model_weights)
            rc = LQ_EUNSUPPORTED;
        if (!rc)
            rc = lq_overlay_create(src, lq_vindex_knn_store(src), &o, err);
        if (!rc) {
            lq_model_opts mo;
            memset(&mo, 0, sizeof mo);
            mo.n_threads = q->opts.n_threads;
            rc = lq_vindex_model_open(src, &mo, &m, err);
        }
    } else if (lq_lql_need_vindex(q, err)) {
        return LQ_EINVAL;
    } else {
        dir = q->path;
        rc = lq_vindex_get_info(q->v)->has_model_weights ? lq_lql_need_model(q, err) : LQ_EUNSUPPORTED;
    }
    const lq_vindex *v = src ? src : q->v;
    if (rc == LQ_EUNSUPPORTED && v && !lq_vindex_get_info(v)->has_model_weights)
        rc = lq_err_set(err, LQ_EUNSUPPORTED, "COMPILE INTO MODEL requires model weights in the vindex; this one was "
                                              "built without them. Rebuild: EXTRACT MODEL \"model.gguf\" INTO \"%s\" "
                                              "WITH INFERENCE", dir);
    char *path = rc ? NULL : model_out_path(s->str, err);
    size_t np = 0;
    if (!rc && !path)
        rc = LQ_ENOMEM;
    if (!rc)
        rc = lq_overlay_compile_model(o ? o : q->o, lq_vindex_knn_store(v), m ? m : q->m, dir, path, &np, err);
    if (!rc) {
        struct stat st;
        double mb = stat(path, &st) == 0 ? (double)st.st_size / 1e6 : 0;
        lq_sb_printf(out, "Compiled %s \xe2\x86\x92 %s\n", dir, path);
        lq_sb_printf(out, "Model: %s\n", lq_vindex_get_info(v)->model);
        lq_sb_printf(out, "Size: %.1f MB\n", mb);
        if (np)
            lq_sb_printf(out, "Edits: %zu patch(es) carried as GGUF metadata larql.patches (not folded into weights); "
                              "larql applies them (USE MODEL, run, logits, serve), other engines run the base model\n", np);
        else
            lq_sb_puts(out, "Edits: none (the base model)\n");
    }
    free(path);
    lq_model_close(m);
    lq_overlay_free(o);
    lq_vindex_close(src);
    return rc;
}

static int exec_compile(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (s->compile_model)
        return exec_compile_model(q, s, out, err);
    lq_vindex *src = NULL;
    lq_overlay *o = NULL, *resolved = NULL;
    int rc = 0;
    if (!s->compile_current && !(q->path && same_dir(s->str_src, q->path))) {
        /* another vindex: compiled as it is (with its knn_store.bin) */
        lq_vindex_open_opts vo = {.n_threads = q->opts.n_threads};
        rc = lq_vindex_open(s->str_src, &vo, &src, err);
        if (!rc)
            rc = lq_overlay_create(src, lq_vindex_knn_store(src), &o, err);
    } else if (lq_lql_need_vindex(q, err)) {
        return LQ_EINVAL;
    }
    const lq_overlay *use = o ? o : q->o;
    if (!rc && s->conflict != LQ_LC_NONE) {
        int rule = s->conflict == LQ_LC_FAIL ? LQ_CONFLICT_FAIL
                   : s->conflict == LQ_LC_HIGHEST_CONFIDENCE ? LQ_CONFLICT_HIGHEST_CONFIDENCE : LQ_CONFLICT_LAST_WINS;
        rc = lq_overlay_resolve(use, rule, &resolved, err);
        if (resolved)
            use = resolved;
    }
    if (!rc)
        rc = lq_overlay_compile(use, s->str, err);
    if (!rc) {
        const lq_knn_store *ks = lq_overlay_knn(use);
        lq_sb_printf(out, "Compiled: %s (%zu patched features, %zu KNN entries)\n", s->str, lq_overlay_n_features(use),
                     ks ? lq_knn_store_count(ks) : 0);
    }
    lq_overlay_free(resolved);
    lq_overlay_free(o);
    lq_vindex_close(src);
    return rc;
}

int lq_lql_exec_life(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    switch (s->kind) {
    case LQ_LS_TRACE: return exec_trace(q, s, out, err);
    case LQ_LS_EXTRACT: return exec_extract(q, s, out, err);
    case LQ_LS_USE_MODEL: return exec_use_model(q, s, out, err);
    case LQ_LS_DIFF: return exec_diff(q, s, out, err);
    case LQ_LS_MERGE: return exec_merge(q, s, out, err);
    case LQ_LS_COMPACT: return exec_compact(q, s, out, err);
    case LQ_LS_SHOW_COMPACT_STATUS: return exec_compact_status(q, out);
    case LQ_LS_REBALANCE: return exec_rebalance(q, s, out, err);
    case LQ_LS_COMPILE: return exec_compile(q, s, out, err);
    default: return lq_err_set(err, LQ_EINVAL, "statement kind %d cannot be executed", s->kind);
    }
}
