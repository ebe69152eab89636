/* The edit statements over an overlay: INSERT (KNN, COMPOSE with LARQL's balance, SUBJECT),
 * DELETE and UPDATE with WHERE, edits as rows (list, delete by id) and REBALANCE. Each builds
 * its ops and records them through ov_edit (overlay.c), which checks them whole and applies
 * all or none. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/f16.h"
#include "core/json_obj.h"
#include "core/softmax.h"
#include "larql/model.h"
#include "vindex/overlay_internal.h"
#include "core/str.h"

void lq_insert_params_init(lq_insert_params *p)
{
    memset(p, 0, sizeof *p);
    p->layer = -1;
    p->mode = LQ_INSERT_KNN;
    p->confidence = NAN;
    p->alpha = 0.25f;
}

static void unit(float *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    if (s > 0) {
        float inv = (float)(1.0 / sqrt(s));
        for (int i = 0; i < n; i++)
            v[i] *= inv;
    }
}

/* mean norm of the layer's first (up to) 100 gate rows: the scale a composed gate gets */
static float gate_ref_norm(const lq_vindex *v, int layer)
{
    const void *rows;
    int nf = 0;
    if (lq_vindex_gate_layer(v, layer, &rows, &nf, NULL) || nf <= 0)
        return 1.0f;
    int n = nf < 100 ? nf : 100, D = v->info.hidden_size, f16 = v->info.dtype == LQ_VDT_F16;
    double sum = 0;
    for (int r = 0; r < n; r++) {
        double s = 0;
        for (int i = 0; i < D; i++) {
            float x;
            if (f16) {
                uint16_t h;
                memcpy(&h, (const uint8_t *)rows + 2 * ((size_t)r * D + i), 2);
                x = lq_f16_to_f32(h);
            } else {
                x = ((const float *)rows)[(size_t)r * D + i];
            }
            s += (double)x * x;
        }
        sum += sqrt(s);
    }
    return sum > 0 ? (float)(sum / n) : 1.0f;
}

/* COMPOSE slot: the first with no base meta and no override, else the non-overridden one with
 * the lowest base c_score (LARQL's find_free_feature). */
static int free_feature(const lq_overlay *o, int layer)
{
    const lq_vx_layer *ly = &o->base->layers[layer];
    int best = -1;
    float bc = INFINITY;
    for (int f = 0; f < ly->num_features; f++) {
        if (ov_find(o, layer, f))
            continue;
        lq_feature_meta m;
        if (!lq_vindex_feature_meta(o->base, layer, f, &m))
            return f;
        if (m.c_score < bc)
            bc = m.c_score, best = f;
    }
    return best;
}

/* LARQL's greedy balance of a COMPOSE insert: run the canonical prompt with the overlay's
 * edits plus the n new features, and scale their down vectors (x1.6 while the target's
 * probability is below 0.30 or another token comes first, x0.7 while above 0.95, at most 16
 * rounds). *factor: the scale
 * found; *prob: the target's probability with it. */
static int compose_balance(lq_overlay *o, struct lq_model *m, const char *prompt, const lq_patch_op *ops,
                           size_t n, int32_t target, float *factor, float *prob, int *first_out, lq_err *err)
{
    *factor = 1.0f;
    *prob = 0.0f;
    *first_out = 0;
    const lq_model_info *mi = lq_model_get_info(m);
    lq_edit_set *s = ov_build_full_edit_set(o, err);
    lq_resid_hook *h = NULL;
    float *lg = malloc((size_t)mi->n_vocab * sizeof *lg);
    int rc = s && lg ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n; i++)
        if (lq_vx_edit_set_add_feature(s, ops[i].layer, ops[i].gate, ops[i].down, 1.0f))
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = lq_edit_set_hook(s, LQ_EDITS_COMPOSE, &h, err);
    for (int round = 0; !rc && round <= 16; round++) {
        if ((rc = lq_vx_prompt_logits(m, prompt, h, lg, err)))
            break;
        int finite = 1;
        for (int j = 0; j < mi->n_vocab; j++)
            finite &= isfinite(lg[j]) != 0;
        if (!finite) { /* an edit must never make the forward pass NaN or infinite */
            *prob = 0.0f;
            *first_out = 0;
            break;
        }
        double mx;
        double z = lq_softmax_denominator(lg, (size_t)mi->n_vocab, &mx);
        *prob = (float)(exp((double)lg[target] - mx) / z);
        /* LARQL's band, and (ours) the target must also be the first prediction */
        int first = lg[target] >= mx;
        *first_out = first;
        float step = *prob < 0.30f || !first ? 1.6f : *prob > 0.95f ? 0.7f : 1.0f;
        if (step == 1.0f || round == 16)
            break;
        *factor *= step;
        for (size_t i = 0; i < n; i++)
            lq_vx_edit_set_scale_last(s, ops[i].layer, 1, step);
    }
    lq_edit_hook_free(h);
    lq_edit_set_unref(s);
    free(lg);
    return rc;
}

/* A subject edit: its ops computed on the model, then checked with every edit of the overlay
 * (greedy decoding of the canonical prompt must write the whole target), and only then
 * recorded: an edit that does not take is refused and leaves the overlay as it was. */
/* A new edit's id: unique across restarts of one state (seconds, process, a counter). */
static void new_edit_id(char *out)
{
    static unsigned long counter;
    unsigned long c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, LQ_EDIT_ID_MAX + 1, "e%lx%05lx%lx", (unsigned long)ts.tv_sec, (unsigned long)getpid() & 0xfffff, c);
}

static int subject_insert(lq_overlay *o, struct lq_model *m, const lq_insert_params *p, lq_insert_result *r,
                          lq_err *err)
{
    if (!m)
        return lq_err_set(err, LQ_EUNSUPPORTED, "insert: a subject edit needs the model's weights (a vindex built "
                                                "with --level inference, or MODE KNN / COMPOSE)");
    lq_patch *ops = NULL;
    int rc = lq_vx_subject_insert(o, m, p, &ops, r, err);
    size_t n = lq_patch_n_ops(ops);
    lq_patch_op *arr = rc ? NULL : malloc((n ? n : 1) * sizeof *arr);
    if (!rc && !arr)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    new_edit_id(r->id);
    for (size_t i = 0; !rc && i < n; i++) {
        lq_patch_op_at(ops, i, &arr[i]);
        arr[i].id = r->id;
    }
    lq_edit_set *s = rc ? NULL : ov_build_full_edit_set(o, err);
    if (!rc && (!s || lq_vx_edit_set_add_subject(s, lq_model_tokenizer(m), arr, n)))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory for an edit set");
    float p0 = 0;
    int32_t tt[64];
    size_t nt = 0;
    for (size_t i = 0; !rc && i < n && nt < 64; i++)
        if (arr[i].down) /* the first op of each target token */
            tt[nt++] = arr[i].target_id;
    int ok = rc ? 0 : lq_vx_subject_check(m, s, p, tt, nt, &p0, err);
    if (!rc && ok < 0)
        rc = ok;
    else if (!rc && !ok)
        rc = lq_err_set(err, LQ_EREFUSED,
                        "insert: with the edit, \"The %s of %s is\" does not continue with \"%s\" (first token at "
                        "probability %.3f); nothing was changed",
                        p->relation, p->entity, p->target, p0);
    if (!rc)
        rc = ov_edit(o, arr, n, err);
    if (!rc) {
        r->target_prob = p0;
        r->knn_total = o->knn->n;
    }
    lq_edit_set_unref(s);
    lq_patch_free(ops);
    free(arr);
    return rc;
}

int lq_overlay_insert(lq_overlay *o, struct lq_model *m, const lq_insert_params *p, lq_insert_result *r,
                      lq_err *err)
{
    lq_insert_result dummy;
    if (!r)
        r = &dummy;
    memset(r, 0, sizeof *r);
    if (!o || !p || !p->entity || !*p->entity || !p->relation || !*p->relation || !p->target || !*p->target)
        return lq_err_set(err, LQ_EINVAL, "insert: entity, relation and target are required");
    if (strlen(p->entity) > LQ_EDIT_MAX_TEXT || strlen(p->relation) > LQ_EDIT_MAX_TEXT ||
        strlen(p->target) > LQ_EDIT_MAX_TEXT)
        return lq_err_set(err, LQ_ERANGE, "insert: entity, relation and target are at most %d bytes each",
                          LQ_EDIT_MAX_TEXT);
    if (!isfinite(p->alpha) || fabsf(p->alpha) > LQ_EDIT_MAX_ALPHA)
        return lq_err_set(err, LQ_ERANGE, "insert: alpha %g outside [-%d, %d]", (double)p->alpha, LQ_EDIT_MAX_ALPHA,
                          LQ_EDIT_MAX_ALPHA);
    if (!isnan(p->confidence) && !isfinite(p->confidence))
        return lq_err_set(err, LQ_ERANGE, "insert: confidence must be finite");
    if (p->mode != LQ_INSERT_KNN && p->mode != LQ_INSERT_COMPOSE && p->mode != LQ_INSERT_SUBJECT)
        return lq_err_set(err, LQ_EINVAL, "insert: mode %d is not KNN (0), COMPOSE (1) or SUBJECT (2)", p->mode);
    const lq_vindex *v = o->base;
    int L = o->n_layers, D = o->hidden;
    if (p->layer >= L)
        return lq_err_set(err, LQ_ERANGE, "insert: layer %d outside the model's %d layers", p->layer, L);
    if (p->layer < -1)
        return lq_err_set(err, LQ_ERANGE, "insert: layer %d is negative", p->layer);
    if (m && lq_model_get_info(m)->n_embd != D)
        return lq_err_set(err, LQ_EINVAL, "insert: model hidden %d, vindex hidden %d", lq_model_get_info(m)->n_embd, D);
    if (p->mode == LQ_INSERT_SUBJECT)
        return subject_insert(o, m, p, r, err);
    /* layers written */
    int kb_lo = v->info.bands[1].start, kb_hi = v->info.bands[1].end;
    int l0, l1;
    if (p->layer >= 0)
        l0 = l1 = p->layer;
    else if (p->mode == LQ_INSERT_KNN)
        l0 = l1 = kb_hi - 1 < 0 ? 0 : kb_hi - 1;
    else
        l0 = (kb_lo + kb_hi) / 2, l1 = kb_hi;
    if (l1 - l0 + 1 > 64)
        l0 = l1 - 63;
    /* keys: the residuals of the canonical prompt (weights) or the entity's embedding */
    float *resid = malloc((size_t)L * D * sizeof *resid), *down = malloc((size_t)D * sizeof *down);
    lq_patch_op *ops = calloc((size_t)(l1 - l0 + 1), sizeof *ops);
    float *vecs = malloc((size_t)(l1 - l0 + 1) * 2 * D * sizeof *vecs);
    int32_t *tids = NULL;
    size_t nt = 0, ne = 0;
    int rc = resid && down && ops && vecs ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    const lq_tokenizer *tok = m ? lq_model_tokenizer(m) : v->tok;
    if (!rc) {
        size_t tl = strlen(p->target);
        char *sp = malloc(tl + 2);
        if (!sp)
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        else {
            sp[0] = ' ';
            memcpy(sp + 1, p->target, tl + 1);
            rc = lq_tokenizer_encode(tok, sp, tl + 1, 0, &tids, &nt, err);
            free(sp);
        }
        if (!rc && nt == 0)
            rc = lq_err_set(err, LQ_EINVAL, "insert: target '%s' encodes to no tokens", p->target);
        for (size_t i = 0; !rc && i < nt; i++)
            if (tids[i] < 0 || tids[i] >= v->info.vocab_size)
                rc = lq_err_set(err, LQ_ERANGE, "insert: target token %d outside the vocabulary", (int)tids[i]);
    }
    if (!rc && m) {
        char *prompt = lq_vx_canonical_prompt(p->entity, p->relation);
        rc = prompt ? lq_infer_residuals(m, prompt, resid, err) : lq_err_set(err, LQ_ENOMEM, "out of memory");
        free(prompt);
        r->weights = 1;
    } else if (!rc) {
        rc = lq_vindex_entity_vector(v, p->entity, resid, &ne, err);
        if (!rc && ne == 0)
            rc = lq_err_set(err, LQ_EINVAL, "insert: entity '%s' encodes to no tokens", p->entity);
        for (int l = 1; !rc && l < L; l++)
            memcpy(resid + (size_t)l * D, resid, (size_t)D * sizeof *resid);
    }
    size_t n = 0;
    if (!rc && p->mode == LQ_INSERT_COMPOSE) {
        /* down = alpha * mean embedding of the target's tokens */
        memset(down, 0, (size_t)D * sizeof *down);
        float *row = vecs; /* scratch before the vectors are laid out */
        for (size_t i = 0; !rc && i < nt; i++) {
            rc = lq_vindex_embed_row(v, tids[i], row, err);
            for (int d = 0; !rc && d < D; d++)
                down[d] += row[d];
        }
        for (int d = 0; d < D; d++)
            down[d] *= p->alpha / (float)nt;
    }
    for (int l = l0; !rc && l <= l1; l++, n++) {
        lq_patch_op *op = &ops[n];
        float *key = vecs + n * 2 * D, *up = key + D;
        memcpy(key, resid + (size_t)l * D, (size_t)D * sizeof *key);
        unit(key, D);
        if (p->mode == LQ_INSERT_KNN) {
            lq_patch_op_init(op, LQ_OP_INSERT_KNN);
            op->key = key;
            op->target_id = tids[0];
            op->confidence = isnan(p->confidence) ? 1.0f : p->confidence;
        } else {
            int f = free_feature(o, l);
            if (f < 0) {
                rc = lq_err_set(err, LQ_ERANGE, "insert: layer %d has no feature slot to use", l);
                break;
            }
            memcpy(up, key, (size_t)D * sizeof *up);
            float g = gate_ref_norm(v, l);
            for (int d = 0; d < D; d++)
                key[d] *= g;
            lq_patch_op_init(op, LQ_OP_INSERT);
            op->feature = f;
            op->gate = key;
            op->up = up;
            op->down = down;
            op->target_id = tids[0];
            op->confidence = isnan(p->confidence) ? 0.9f : p->confidence;
            op->has_down_meta = 1; /* LARQL's insert carries the slot's down_meta */
            op->dm_token = p->target;
            op->dm_id = tids[0];
            op->dm_c = op->confidence;
            r->features[n] = f;
        }
        op->layer = l;
        op->entity = p->entity;
        op->relation = p->relation;
        op->target = p->target;
        r->layers[n] = l;
    }
    if (!rc && p->mode == LQ_INSERT_COMPOSE && m) {
        char *prompt = lq_vx_canonical_prompt(p->entity, p->relation);
        float factor = 1.0f;
        int first = 0;
        rc = prompt ? compose_balance(o, m, prompt, ops, n, tids[0], &factor, &r->target_prob, &first, err)
                    : lq_err_set(err, LQ_ENOMEM, "out of memory");
        /* applied or refused, never half-applied: a balance that does not put the target first
         * with probability >= 0.30 leaves the overlay as it was */
        if (!rc && (!first || r->target_prob < 0.30f))
            rc = lq_err_set(err, LQ_EREFUSED,
                            "insert: COMPOSE could not balance \"%s\" after \"%s\" (target probability %.3f%s, down "
                            "scale %.4g after 16 rounds); nothing was changed — MODE SUBJECT writes targets of several "
                            "tokens",
                            p->target, prompt ? prompt : "", r->target_prob, first ? "" : ", not the first prediction",
                            p->alpha * factor);
        free(prompt);
        for (int d = 0; !rc && d < D; d++) /* every layer's op shares the down vector */
            down[d] *= factor;
        r->down_scale = p->alpha * factor;
    }
    if (!rc) {
        new_edit_id(r->id);
        for (size_t i = 0; i < n; i++)
            ops[i].id = r->id;
        rc = ov_edit(o, ops, n, err);
    }
    if (!rc) {
        r->mode = p->mode;
        r->n_layers = (int)n;
        r->knn_total = o->knn->n;
    }
    free(tids);
    free(resid);
    free(down);
    free(ops);
    free(vecs);
    return rc;
}

void lq_edit_where_init(lq_edit_where *w)
{
    memset(w, 0, sizeof *w);
    w->layer = w->feature = -1;
}

/* Does (layer, feature) as the overlay shows it match w? */
static int feat_matches(const lq_overlay *o, int l, int f, const lq_edit_where *w)
{
    if ((w->layer >= 0 && l != w->layer) || (w->feature >= 0 && f != w->feature))
        return 0;
    const ov_feat *e = ov_find(o, l, f);
    if (e && e->deleted)
        return 0;
    if (w->entity) {
        lq_feature_meta m;
        int has = lq_vindex_feature_meta(&o->view, l, f, &m);
        const char *t = has ? lq_vx_meta_text(&o->view, &m) : NULL;
        if (!lq_icontains(t, w->entity) && !(e && lq_icontains(e->entity, w->entity)))
            return 0;
    }
    if (w->relation && !lq_icontains(lq_vindex_probe_label(&o->view, l, f), w->relation))
        return 0;
    if (w->match) {
        lq_feature_meta m;
        int has = lq_vindex_feature_meta(&o->view, l, f, &m);
        const char *t = has ? lq_vx_meta_text(&o->view, &m) : NULL;
        if (!w->match(w->match_ctx, l, f, t ? t : "", lq_vindex_probe_label(&o->view, l, f)))
            return 0;
    }
    return 1;
}

static int where_ok(const lq_edit_where *w, lq_err *err)
{
    if (!w || (!w->entity && !w->relation && w->layer < 0 && w->feature < 0 && !w->match))
        return lq_err_set(err, LQ_EINVAL, "a WHERE condition on entity, relation, layer or feature is required");
    return LQ_OK;
}

/* every matching feature as (layer, feature) pairs; *out malloc'd */
static int collect(const lq_overlay *o, const lq_edit_where *w, int **out, size_t *n, lq_err *err)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    int lo = w->layer >= 0 ? w->layer : 0, hi = w->layer >= 0 ? w->layer : o->n_layers - 1;
    if (w->layer >= o->n_layers)
        return lq_err_set(err, LQ_ERANGE, "layer %d outside the model's %d layers", w->layer, o->n_layers);
    for (int l = lo; l <= hi; l++) {
        int nf = o->base->layers[l].present ? o->base->layers[l].num_features : 0;
        int f0 = w->feature >= 0 ? w->feature : 0, f1 = w->feature >= 0 ? w->feature + 1 : nf;
        if (w->feature >= nf && w->feature >= 0) {
            if (w->layer < 0) /* feature at every layer: layers without it have nothing to match */
                continue;
            return lq_err_set(err, LQ_ERANGE, "feature %d outside layer %d's %d features", w->feature, l, nf);
        }
        for (int f = f0; f < f1; f++) {
            if (!feat_matches(o, l, f, w))
                continue;
            if (*n + 2 > cap) {
                cap = cap ? cap * 2 : 64;
                int *p = realloc(*out, cap * sizeof *p);
                if (!p) {
                    free(*out);
                    *out = NULL;
                    return lq_err_set(err, LQ_ENOMEM, "out of memory");
                }
                *out = p;
            }
            (*out)[(*n)++] = l;
            (*out)[(*n)++] = f;
        }
    }
    *n /= 2;
    return LQ_OK;
}

int lq_overlay_delete(lq_overlay *o, const lq_edit_where *w, size_t *n_out, lq_err *err)
{
    size_t dummy;
    if (!n_out)
        n_out = &dummy;
    *n_out = 0;
    int rc = o ? where_ok(w, err) : lq_err_set(err, LQ_EINVAL, "delete: no overlay");
    int *lf = NULL;
    size_t n = 0;
    if (!rc)
        rc = collect(o, w, &lf, &n, err);
    /* KNN entries of the entity (at the layer when one is given) */
    size_t nk = 0;
    for (size_t i = 0; !rc && w->entity && w->feature < 0 && i < o->knn->n; i++) {
        const lq_vx_knn_entry *e = &o->knn->e[i];
        if (lq_icontains(e->entity, w->entity) && (w->layer < 0 || e->layer == w->layer) &&
            (!w->relation || lq_icontains(e->relation, w->relation)) &&
            (!w->match || w->match(w->match_ctx, e->layer, -1, e->entity, e->relation)))
            nk++;
    }
    /* subject edits of the entity (one per edit: counted at its key) */
    lq_patch_op sop;
    for (size_t i = 0; !rc && w->entity && w->feature < 0 && ov_subj_at(o, i, &sop); i++)
        if (sop.feature == 0 && sop.down && sop.entity && !strcasecmp(sop.entity, w->entity) && (w->layer < 0 || sop.layer == w->layer) &&
            (!w->relation || lq_icontains(sop.relation, w->relation)))
            nk++;
    lq_patch_op *ops = rc ? NULL : calloc(n + 1, sizeof *ops);
    if (!rc && !ops)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        lq_patch_op_init(&ops[i], LQ_OP_DELETE);
        ops[i].layer = lf[2 * i];
        ops[i].feature = lf[2 * i + 1];
        ops[i].reason = "DELETE FROM EDGES";
    }
    if (!rc && nk) {
        lq_patch_op_init(&ops[n], LQ_OP_DELETE_KNN);
        ops[n].entity = w->entity;
    }
    if (!rc && (n || nk))
        rc = ov_edit(o, ops, n + (nk ? 1 : 0), err);
    if (!rc)
        *n_out = n + nk;
    free(ops);
    free(lf);
    return rc;
}

/* The vocabulary id of a target text: one token as written, or after a leading space (the
 * way a continuation spells it); -1 when it is neither. A compiled down_meta.bin keeps ids
 * only, so an UPDATE's target needs one to survive COMPILE / COMPACT. */
static int32_t single_token(const lq_tokenizer *tok, const char *text)
{
    int32_t id = -1;
    size_t tl = strlen(text);
    char *sp = tok && tl ? malloc(tl + 2) : NULL;
    if (!sp)
        return -1;
    sp[0] = ' ';
    memcpy(sp + 1, text, tl + 1);
    for (int k = 0; k < 2 && id < 0; k++) {
        int32_t *ids = NULL;
        size_t n = 0;
        lq_err e = {0};
        if (!lq_tokenizer_encode(tok, k ? sp : text, k ? tl + 1 : tl, 0, &ids, &n, &e) && n == 1)
            id = ids[0];
        free(ids);
    }
    free(sp);
    return id;
}

int lq_overlay_update(lq_overlay *o, const lq_edit_where *w, const char *set_target, float set_conf, size_t *n_out,
                      lq_err *err)
{
    size_t dummy;
    if (!n_out)
        n_out = &dummy;
    *n_out = 0;
    int rc = o ? where_ok(w, err) : lq_err_set(err, LQ_EINVAL, "update: no overlay");
    if (!rc && !set_target && isnan(set_conf))
        rc = lq_err_set(err, LQ_EINVAL, "update: nothing to SET (target or confidence)");
    int *lf = NULL;
    size_t n = 0;
    if (!rc)
        rc = collect(o, w, &lf, &n, err);
    lq_patch_op *ops = rc ? NULL : calloc(n + 1, sizeof *ops);
    if (!rc && !ops)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        int l = lf[2 * i], f = lf[2 * i + 1];
        lq_feature_meta m;
        int has = lq_vindex_feature_meta(&o->view, l, f, &m);
        lq_patch_op_init(&ops[i], LQ_OP_UPDATE);
        ops[i].layer = l;
        ops[i].feature = f;
        ops[i].has_down_meta = 1;
        ops[i].dm_token = set_target ? set_target : has ? lq_vx_meta_text(&o->view, &m) : "";
        ops[i].dm_id = set_target ? single_token(o->base->tok, set_target) : has ? m.top_token_id : -1;
        ops[i].dm_c = !isnan(set_conf) ? set_conf : has ? m.c_score : 0.0f;
    }
    /* the texts point into the overlay's tables, which the edit replaces: copy them first */
    char **keep = rc || !n ? NULL : calloc(n, sizeof *keep);
    for (size_t i = 0; !rc && keep && i < n; i++)
        if (!(keep[i] = strdup(ops[i].dm_token)))
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        else
            ops[i].dm_token = keep[i];
    if (!rc && n && !keep)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc && n)
        rc = ov_edit(o, ops, n, err);
    if (!rc)
        *n_out = n;
    for (size_t i = 0; keep && i < n; i++)
        free(keep[i]);
    free(keep);
    free(ops);
    free(lf);
    return rc;
}

/* ---- edits as rows ---- */

static const char *op_mode(int kind)
{
    return kind == LQ_OP_INSERT_SUBJECT ? "subject" : kind == LQ_OP_INSERT_KNN ? "knn" : "compose";
}

int lq_overlay_edit_rows_json(const lq_overlay *o, char **json_out, lq_err *err)
{
    *json_out = NULL;
    json_t *rows = json_array(), *seen = lq_json_object();
    for (size_t i = 0; o && i < o->np; i++) {
        lq_patch_op op;
        for (size_t k = 0; lq_patch_op_at(o->patches[i], k, &op); k++) {
            if (!op.id || op.kind == LQ_OP_DELETE_EDIT || ov_is_dead(o, op.id) || json_object_get(seen, op.id))
                continue;
            json_object_set_new(seen, op.id, json_true());
            json_array_append_new(rows, json_pack("{s:s,s:s?,s:s?,s:s?,s:s,s:i,s:s}", "id", op.id, "entity",
                                                  op.entity, "relation", op.relation, "target", op.target, "mode",
                                                  op_mode(op.kind), "layer", op.layer, "patch",
                                                  lq_patch_name(o->patches[i])));
        }
    }
    json_decref(seen);
    *json_out = json_dumps(rows, JSON_COMPACT);
    json_decref(rows);
    return *json_out ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
}

int lq_overlay_delete_edit(lq_overlay *o, const char *id, lq_err *err)
{
    if (!o || !id || !*id)
        return lq_err_set(err, LQ_EINVAL, "delete edit: an id is required");
    int found = 0;
    for (size_t i = 0; !found && i < o->np; i++) {
        lq_patch_op op;
        for (size_t k = 0; !found && lq_patch_op_at(o->patches[i], k, &op); k++)
            found = op.id && op.kind != LQ_OP_DELETE_EDIT && !strcmp(op.id, id) && !ov_is_dead(o, id);
    }
    if (!found)
        return lq_err_set(err, LQ_ENOTFOUND, "edit '%.64s' not found", id);
    lq_patch_op op;
    lq_patch_op_init(&op, LQ_OP_DELETE_EDIT);
    op.id = id;
    return ov_edit(o, &op, 1, err);
}

/* ---- REBALANCE (LARQL's executor/mutation/rebalance.rs) ----
 * Every compose-mode fact of the overlay (slots with gate and down vectors, grouped by
 * entity, relation and target) is run through its canonical prompt with all the edits; a
 * fact whose target probability is below the floor gets its down vectors scaled by 1.6, one
 * above the ceiling by 0.7 (recorded as UPDATE operations in the live edits), until all are
 * in the band or max_iters passes ran. */

void lq_rebalance_params_init(lq_rebalance_params *p)
{
    p->max_iters = 16;
    p->floor = 0.30f;
    p->ceiling = 0.95f;
}

typedef struct rb_fact {
    size_t first;     /* index in o->f of its first slot */
    float step;
} rb_fact;

static int same_fact(const ov_feat *a, const ov_feat *b)
{
    return a->target_id == b->target_id && !strcmp(a->entity, b->entity) && !strcmp(a->relation, b->relation);
}

static int is_compose(const ov_feat *e)
{
    return !e->deleted && e->gate && e->down && e->entity && e->relation && e->target_id >= 0;
}

int lq_overlay_rebalance(lq_overlay *o, struct lq_model *m, const lq_rebalance_params *p, lq_rebalance_result *r,
                         lq_err *err)
{
    memset(r, 0, sizeof *r);
    if (!o || !p)
        return lq_err_set(err, LQ_EINVAL, "rebalance: overlay and parameters are required");
    rb_fact *fs = calloc(o->nf + 1, sizeof *fs);
    if (!fs)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; i < o->nf; i++) {
        if (!is_compose(&o->f[i]))
            continue;
        size_t k = 0;
        while (k < r->n_facts && !same_fact(&o->f[fs[k].first], &o->f[i]))
            k++;
        if (k == r->n_facts)
            fs[r->n_facts++].first = i;
    }
    int rc = LQ_OK;
    if (r->n_facts && !m)
        rc = lq_err_set(err, LQ_EUNSUPPORTED, "REBALANCE needs the model's weights (a vindex built with --level inference)");
    const lq_model_info *mi = m ? lq_model_get_info(m) : NULL;
    float *lg = r->n_facts && !rc ? malloc((size_t)mi->n_vocab * sizeof *lg) : NULL;
    float *vecs = r->n_facts && !rc ? malloc(o->nf * (size_t)o->hidden * sizeof *vecs) : NULL;
    lq_patch_op *ops = r->n_facts && !rc ? calloc(o->nf, sizeof *ops) : NULL;
    if (r->n_facts && !rc && (!lg || !vecs || !ops))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int it = 0; !rc && r->n_facts && it < p->max_iters; it++) {
        r->iters = it + 1;
        lq_edit_set *s = ov_build_full_edit_set(o, err);
        lq_resid_hook *h = NULL;
        rc = s ? lq_edit_set_hook(s, LQ_EDITS_COMPOSE, &h, err) : LQ_ENOMEM;
        r->in_band = r->below = r->above = 0;
        for (size_t k = 0; !rc && k < r->n_facts; k++) {
            const ov_feat *e = &o->f[fs[k].first];
            char *prompt = lq_vx_canonical_prompt(e->entity, e->relation);
            rc = prompt ? lq_vx_prompt_logits(m, prompt, h, lg, err) : lq_err_set(err, LQ_ENOMEM, "out of memory");
            free(prompt);
            if (rc)
                break;
            double mx, z = lq_softmax_denominator(lg, (size_t)mi->n_vocab, &mx);
            double prob = exp((double)lg[e->target_id] - mx) / z;
            fs[k].step = prob < p->floor ? 1.6f : prob > p->ceiling ? 0.7f : 1.0f;
            r->below += prob < p->floor;
            r->above += prob > p->ceiling;
            r->in_band += fs[k].step == 1.0f;
        }
        lq_edit_hook_free(h);
        lq_edit_set_unref(s);
        if (rc || (!r->below && !r->above) || it + 1 == p->max_iters)
            break;
        size_t n = 0; /* the out-of-band facts' slots, their down vectors scaled */
        for (size_t k = 0; k < r->n_facts; k++) {
            if (fs[k].step == 1.0f)
                continue;
            for (size_t i = 0; i < o->nf; i++) {
                const ov_feat *e = &o->f[i];
                if (!is_compose(e) || !same_fact(e, &o->f[fs[k].first]))
                    continue;
                float *d = vecs + n * (size_t)o->hidden;
                for (int j = 0; j < o->hidden; j++)
                    d[j] = e->down[j] * fs[k].step;
                lq_patch_op_init(&ops[n], LQ_OP_UPDATE);
                ops[n].layer = e->layer;
                ops[n].feature = e->feature;
                ops[n].down = d;
                n++;
            }
        }
        if (n)
            rc = ov_edit(o, ops, n, err);
    }
    free(lg);
    free(vecs);
    free(ops);
    free(fs);
    return rc;
}

size_t lq_overlay_n_composed(const lq_overlay *o)
{
    size_t n = 0;
    for (size_t i = 0; o && i < o->nf; i++)
        n += !o->f[i].deleted && o->f[i].down != NULL;
    return n;
}
