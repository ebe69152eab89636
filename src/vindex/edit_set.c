/* Edit sets: what an overlay changes inside the forward pass, as an immutable snapshot that
 * a generation can hold while the overlay goes on changing.
 *
 * Two kinds of edit act on the residual stream (lq_resid_hook, called after each layer's FFN
 * add):
 *   - KNN entries (INSERT ... MODE KNN): LARQL's "Legacy" router. For the row whose logits are
 *     computed, the first layer (ascending) whose best entry has cosine > the threshold
 *     matches; with LQ_EDITS_KNN_FORCE its target becomes the next token (its logit is raised
 *     far above every other, so any sampler picks it).
 *   - Composed features (INSERT ... MODE COMPOSE, .vlp inserts with vectors): a feature with a
 *     gate and a down vector at layer l fires on the residual after layer l by its cosine with
 *     the gate, a = ((cos - t) / (1 - t))^2 above t = LQ_KNN_COSINE_THRESHOLD and 0 below, and
 *     adds a * scale * down to it. LARQL's walk FFN adds a composed slot's down vector scaled
 *     by its activation; our forward pass is the dense one, so the slot acts beside the
 *     layer's FFN, and only on residuals close to the one it was written for (the same bound
 *     as the KNN override): prompts far from the insert are computed exactly as before.
 *   - Subject edits (INSERT ... MODE SUBJECT, src/vindex/subject_edit.c): a subject key at one
 *     layer marks the positions whose residual is the subject's (cosine >= its threshold);
 *     from there on, a position whose residual at the edit's layer matches one of a target
 *     token's gate keys (cosine >= that key's threshold) gets the token's value vector added.
 *     Of the groups that match at one position only the best (largest margin over its
 *     threshold) acts. Where the subject stands, the probability of the edit's old answers
 *     (the model's answers before it) moves to the target's first token on the logits. A
 *     sequence that never mentions the subject is computed bit for bit as without the edit.
 * Deleted features are not removed from the dense FFN (they leave describe/walk/select).
 *
 * A set is reference counted; lq_edit_set_hook makes the per-request hook (its match state
 * is the request's own) that holds a reference until it is released. */
#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "vindex/vindex_internal.h"

typedef struct es_layer {
    int n_knn, cap_knn;
    float *keys;        /* [n_knn, D] unit keys */
    int *entry;         /* [n_knn] index into set->ent */
    int n_feat, cap_feat;
    float *gates;       /* [n_feat, D] unit gates */
    float *downs;       /* [n_feat, D] */
    float *scale;       /* [n_feat] */
    int n_sgate;        /* subject edits' groups whose gates read this layer */
} es_layer;

typedef struct es_entry {
    int32_t target_id;
    char *target, *entity, *relation;
} es_entry;

/* a subject: the token sequences that spell it (with and without a leading space) */
#define SUBJ_VARIANTS 4
#define SUBJ_MAX_TOKENS 32
typedef struct es_subj {
    int n_var;
    int len[SUBJ_VARIANTS];
    int32_t ids[SUBJ_VARIANTS][SUBJ_MAX_TOKENS];
} es_subj;

/* one target token of a subject edit: its gate keys and the value they add */
typedef struct es_group {
    int subj, layer, n_gates, cap_gates;
    float *gates;       /* [n_gates, D] unit */
    float *thr;         /* [n_gates] */
    float *down;        /* [D] */
    int32_t tok;        /* the target token */
    int force;          /* written on the logits where the group fires */
    int index;          /* which target token of its edit (0 = the first) */
    int first, n_tok;   /* the edit's groups: [first, first + n_tok) */
    int n_replaces;     /* the edit's first group: the old answers' tokens */
    int32_t replaces[LQ_EDIT_MAX_REPLACED];
} es_group;

struct lq_edit_set {
    int refs;
    lq_edit_set *lower; /* a session's set stacked on the global one (held; never stacked
                         * itself): the hook reads both as if this set's entries followed
                         * the lower's, so the lower's arrays are shared, not copied */
    uint64_t serial;    /* unique for the process's life (prompt-cache keys) */
    int n_layer, D;
    es_layer *ly;       /* [n_layer] */
    es_entry *ent;
    int n_ent, cap_ent;
    size_t n_knn, n_feat;
    es_subj *subj;
    int n_subj, cap_subj;
    es_group *grp;
    int n_grp, cap_grp;
};

lq_edit_set *lq_vx_edit_set_new(int n_layer, int hidden)
{
    if (n_layer < 1 || hidden < 1)
        return NULL;
    lq_edit_set *s = calloc(1, sizeof *s);
    if (!s || !(s->ly = calloc((size_t)n_layer, sizeof *s->ly))) {
        free(s);
        return NULL;
    }
    static uint64_t next_serial;
    s->refs = 1;
    s->serial = __atomic_add_fetch(&next_serial, 1, __ATOMIC_RELAXED);
    s->n_layer = n_layer;
    s->D = hidden;
    return s;
}

static void unit_into(float *dst, const float *src, int D)
{
    double ss = 0;
    for (int i = 0; i < D; i++)
        ss += (double)src[i] * src[i];
    float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int i = 0; i < D; i++)
        dst[i] = src[i] * inv;
}

static int grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int c = *cap ? *cap * 2 : 8;
    while (c < need)
        c *= 2;
    void *n = realloc(*p, (size_t)c * elem);
    if (!n)
        return -1;
    *p = n;
    *cap = c;
    return 0;
}

static char *dup0(const char *s) { return strdup(s ? s : ""); }

int lq_vx_edit_set_add_knn(lq_edit_set *s, const lq_knn_entry *e)
{
    if (e->layer < 0 || e->layer >= s->n_layer)
        return LQ_OK; /* a store entry for a layer this model lacks never fires */
    es_layer *L = &s->ly[e->layer];
    int D = s->D, n = L->n_knn, cap = L->cap_knn;
    if (grow((void **)&s->ent, &s->cap_ent, s->n_ent + 1, sizeof *s->ent) ||
        grow((void **)&L->entry, &cap, n + 1, sizeof *L->entry))
        return LQ_ENOMEM;
    cap = L->cap_knn;
    if (grow((void **)&L->keys, &cap, n + 1, (size_t)D * sizeof *L->keys))
        return LQ_ENOMEM;
    L->cap_knn = cap;
    es_entry *x = &s->ent[s->n_ent];
    x->target_id = e->target_id;
    x->target = dup0(e->target_token);
    x->entity = dup0(e->entity);
    x->relation = dup0(e->relation);
    if (!x->target || !x->entity || !x->relation) {
        free(x->target), free(x->entity), free(x->relation);
        return LQ_ENOMEM;
    }
    unit_into(L->keys + (size_t)n * D, e->key, D);
    L->entry[n] = s->n_ent++;
    L->n_knn++;
    s->n_knn++;
    return LQ_OK;
}

int lq_vx_edit_set_add_feature(lq_edit_set *s, int layer, const float *gate, const float *down,
                               float scale)
{
    if (layer < 0 || layer >= s->n_layer || !gate || !down)
        return LQ_OK;
    es_layer *L = &s->ly[layer];
    int D = s->D, n = L->n_feat, cap = L->cap_feat;
    if (grow((void **)&L->scale, &cap, n + 1, sizeof *L->scale))
        return LQ_ENOMEM;
    cap = L->cap_feat;
    if (grow((void **)&L->gates, &cap, n + 1, (size_t)D * sizeof *L->gates))
        return LQ_ENOMEM;
    cap = L->cap_feat;
    if (grow((void **)&L->downs, &cap, n + 1, (size_t)D * sizeof *L->downs))
        return LQ_ENOMEM;
    L->cap_feat = cap;
    unit_into(L->gates + (size_t)n * D, gate, D);
    memcpy(L->downs + (size_t)n * D, down, (size_t)D * sizeof *down);
    L->scale[n] = scale;
    L->n_feat++;
    s->n_feat++;
    return LQ_OK;
}

/* Scales the down vectors of the last n composed features added to layer (the calibration of
 * a COMPOSE insert in a private set). */
void lq_vx_edit_set_scale_last(lq_edit_set *s, int layer, int n, float factor)
{
    es_layer *L = &s->ly[layer];
    for (int i = L->n_feat - n; i < L->n_feat; i++)
        if (i >= 0)
            L->scale[i] *= factor;
}

/* The spellings of a subject as token sequences: "Entity" and " Entity" (mid-sentence), as
 * the tokenizer writes them (without BOS). Sequences past SUBJ_MAX_TOKENS are left out. */
static void subject_spellings(const lq_tokenizer *tok, const char *entity, es_subj *x)
{
    x->n_var = 0;
    size_t el = strlen(entity);
    char *sp = malloc(el + 2);
    for (int v = 0; tok && sp && v < 2; v++) {
        snprintf(sp, el + 2, "%s%s", v ? " " : "", entity);
        int32_t *ids = NULL;
        size_t n = 0;
        if (lq_tokenizer_encode(tok, sp, strlen(sp), 0, &ids, &n, NULL) == 0 && n > 0 && n <= SUBJ_MAX_TOKENS) {
            int dup = 0;
            for (int w = 0; w < x->n_var; w++)
                dup |= x->len[w] == (int)n && !memcmp(x->ids[w], ids, n * sizeof *ids);
            if (!dup) {
                memcpy(x->ids[x->n_var], ids, n * sizeof *ids);
                x->len[x->n_var++] = (int)n;
            }
        }
        free(ids);
    }
    free(sp);
}

/* Subject ops, in their order: an op with feature 0 and a down vector starts an edit (a
 * subject, spelt by the tokenizer), an op with a down vector starts a target token's group,
 * every op with a gate adds it to the current group. A run that breaks this (the overlay
 * checks it) -> LQ_EINVAL. */
int lq_vx_edit_set_add_subject(lq_edit_set *s, const lq_tokenizer *tok, const lq_patch_op *ops, size_t n)
{
    int D = s->D;
    for (size_t i = 0; i < n; i++) {
        const lq_patch_op *op = &ops[i];
        if (op->kind != LQ_OP_INSERT_SUBJECT || op->layer < 0 || op->layer >= s->n_layer ||
            (!op->gate && op->feature == 0) || !op->entity)
            return LQ_EINVAL;
        if (op->down && op->feature == 0) {
            if (grow((void **)&s->subj, &s->cap_subj, s->n_subj + 1, sizeof *s->subj))
                return LQ_ENOMEM;
            subject_spellings(tok, op->entity, &s->subj[s->n_subj++]);
        }
        if (op->down) {
            if (!s->n_subj || grow((void **)&s->grp, &s->cap_grp, s->n_grp + 1, sizeof *s->grp))
                return s->n_subj ? LQ_ENOMEM : LQ_EINVAL;
            es_group *g = &s->grp[s->n_grp];
            memset(g, 0, sizeof *g);
            if (!(g->down = malloc((size_t)D * sizeof *g->down)))
                return LQ_ENOMEM;
            memcpy(g->down, op->down, (size_t)D * sizeof *g->down);
            g->subj = s->n_subj - 1;
            g->layer = op->layer;
            g->tok = op->target_id;
            g->force = op->force;
            if (op->feature == 0 && op->n_replaces > 0 && op->n_replaces <= LQ_EDIT_MAX_REPLACED) {
                g->n_replaces = op->n_replaces;
                memcpy(g->replaces, op->replaces, (size_t)op->n_replaces * sizeof *g->replaces);
            }
            g->index = op->feature;
            g->first = op->feature == 0 || s->n_grp == 0 ? s->n_grp : s->grp[s->n_grp - 1].first;
            g->n_tok = 1;
            s->grp[g->first].n_tok = s->n_grp - g->first + 1;
            s->n_grp++;
        }
        if (!op->gate) /* a later target token: written after the ones before it, no gate */
            continue;
        if (!s->n_grp || s->grp[s->n_grp - 1].layer != op->layer)
            return LQ_EINVAL;
        es_group *g = &s->grp[s->n_grp - 1];
        if (!g->n_gates)
            s->ly[op->layer].n_sgate++;
        int cap = g->cap_gates;
        if (grow((void **)&g->thr, &cap, g->n_gates + 1, sizeof *g->thr))
            return LQ_ENOMEM;
        cap = g->cap_gates;
        if (grow((void **)&g->gates, &cap, g->n_gates + 1, (size_t)D * sizeof *g->gates))
            return LQ_ENOMEM;
        g->cap_gates = cap;
        unit_into(g->gates + (size_t)g->n_gates * D, op->gate, D);
        g->thr[g->n_gates++] = op->gate_threshold;
    }
    return LQ_OK;
}

lq_edit_set *lq_edit_set_from_knn(const lq_knn_store *ks, int n_layer, int hidden, lq_err *err)
{
    lq_edit_set *s = lq_vx_edit_set_new(n_layer, hidden);
    if (!s) {
        lq_err_set(err, LQ_ENOMEM, "out of memory for an edit set");
        return NULL;
    }
    if (ks && ks->hidden == hidden)
        for (size_t i = 0; i < ks->n; i++) {
            lq_knn_entry e;
            if (lq_knn_store_get(ks, i, &e) && lq_vx_edit_set_add_knn(s, &e)) {
                lq_edit_set_unref(s);
                lq_err_set(err, LQ_ENOMEM, "out of memory for an edit set");
                return NULL;
            }
        }
    return s;
}

uint64_t lq_edit_set_serial(const lq_edit_set *s) { return s ? s->serial : 0; }

lq_edit_set *lq_edit_set_ref(lq_edit_set *s)
{
    if (s)
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    return s;
}

void lq_edit_set_unref(lq_edit_set *s)
{
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (int l = 0; l < s->n_layer; l++) {
        es_layer *L = &s->ly[l];
        free(L->keys), free(L->entry), free(L->gates), free(L->downs), free(L->scale);
    }
    for (int i = 0; i < s->n_ent; i++)
        free(s->ent[i].target), free(s->ent[i].entity), free(s->ent[i].relation);
    free(s->ent);
    for (int i = 0; i < s->n_grp; i++)
        free(s->grp[i].gates), free(s->grp[i].thr), free(s->grp[i].down);
    free(s->subj);
    free(s->grp);
    free(s->ly);
    lq_edit_set *lower = s->lower;
    free(s);
    lq_edit_set_unref(lower);
}

int lq_vx_edit_set_stack(lq_edit_set *upper, lq_edit_set *lower)
{
    if (!upper || !lower || upper->lower || lower->lower || upper->n_layer != lower->n_layer ||
        upper->D != lower->D)
        return LQ_EINVAL;
    upper->lower = lq_edit_set_ref(lower);
    return LQ_OK;
}

size_t lq_edit_set_n_knn(const lq_edit_set *s) { return s ? s->n_knn + lq_edit_set_n_knn(s->lower) : 0; }
size_t lq_edit_set_n_features(const lq_edit_set *s) { return s ? s->n_feat + lq_edit_set_n_features(s->lower) : 0; }
size_t lq_edit_set_n_subject(const lq_edit_set *s)
{
    return s ? (size_t)s->n_subj + lq_edit_set_n_subject(s->lower) : 0;
}

/* ---- the per-request hook ---- */

#define MATCH_RING 64 /* rows of one session in one forward pass never exceed this */

typedef struct es_hook {
    lq_resid_hook h;     /* first: h.ctx points here */
    lq_edit_set *s;
    /* the sets read, lower first (one, or a stacked set's lower and itself), and where each
     * one's entries, groups and subjects start in the hook's numbering of them */
    const lq_edit_set *part[2];
    int n_part;
    int ent_off[2], grp_off[2], subj_off[2];
    int n_grp, n_subj;   /* over every part */
    int n_layer, D;
    int flags;
    const lq_kernels *kern; /* the CPU's gate kernel scores the KNN keys */
    float *sc;           /* [n_sc] key scores of one layer */
    int n_sc;
    int *subj_pos;       /* [n_subj]: the first position where the subject stands, INT_MAX none */
    struct {
        int pos, entry, layer;
        float cos;
        int32_t force_tok; /* a subject edit's token written on this row's logits, -1 none */
        int sgroup;        /* the subject edit's group whose gate fired on this row, -1 none */
        int cont;          /* the group that continues an edit's target on this row, -1 none */
        int32_t id;        /* the row's token */
    } m[MATCH_RING];
    struct {
        int g0, p0, next;  /* an edit writing its target: first group, where token 0 was
                            * predicted, the index of the token it predicts next */
    } wr[8];
    int n_wr;
    int debug;           /* LQ_SUBJECT_DEBUG: the subject edits' scores on stderr */
    int last_pos;        /* the last position on_token announced (-1: none) */     /* by pos % MATCH_RING: the KNN match of the row at pos */
} es_hook;

static float dot(const float *a, const float *b, int D)
{
    float s = 0;
    for (int i = 0; i < D; i++)
        s += a[i] * b[i];
    return s;
}

/* The hook's numbering: part 0's entries, groups and subjects, then part 1's. */
static int part_of_grp(const es_hook *k, int gi) { return k->n_part > 1 && gi >= k->grp_off[1]; }
static const es_group *hgrp(const es_hook *k, int gi)
{
    int p = part_of_grp(k, gi);
    return &k->part[p]->grp[gi - k->grp_off[p]];
}
/* the first group of gi's edit, in the hook's numbering */
static int hgrp_first(const es_hook *k, int gi) { return hgrp(k, gi)->first + k->grp_off[part_of_grp(k, gi)]; }
static const es_subj *hsubj(const es_hook *k, int i)
{
    int p = k->n_part > 1 && i >= k->subj_off[1];
    return &k->part[p]->subj[i - k->subj_off[p]];
}
static const es_entry *hent(const es_hook *k, int i)
{
    int p = k->n_part > 1 && i >= k->ent_off[1];
    return &k->part[p]->ent[i - k->ent_off[p]];
}

/* Subject edits at a gate layer, on x as it entered: the group whose subject stands at or
 * before pos and whose gate fires with the best margin (-1 none). */
static int subject_pass(es_hook *k, int layer, int pos, const float *x, float inv)
{
    int D = k->D;
    int best = -1;
    float bm = 0;
    for (int p = 0; p < k->n_part; p++) {
        const lq_edit_set *s = k->part[p];
        if (!s->ly[layer].n_sgate)
            continue;
        for (int gi = 0; gi < s->n_grp; gi++) {
            const es_group *g = &s->grp[gi];
            if (g->layer != layer || k->subj_pos[g->subj + k->subj_off[p]] > pos)
                continue;
            for (int j = 0; j < g->n_gates; j++) {
                float m = dot(g->gates + (size_t)j * D, x, D) * inv - g->thr[j];
                if (k->debug)
                    fprintf(stderr, "  [gate %d.%d at pos %d: margin %.3f]\n", gi + k->grp_off[p], j, pos, m);
                if (m >= 0 && (best < 0 || m > bm))
                    best = gi + k->grp_off[p], bm = m;
            }
        }
    }
    return best;
}

static void slot_reset(es_hook *k, int pos)
{
    int slot = pos % MATCH_RING;
    k->m[slot].pos = pos;
    k->m[slot].entry = -1;
    k->m[slot].force_tok = -1;
    k->m[slot].sgroup = -1;
    k->m[slot].cont = -1;
    k->m[slot].id = -1;
}

/* Follows the writes in progress over the token at pos: a write whose next token position
 * this is continues when the token is the one it wrote last (the row then predicts its
 * next target token), and ends otherwise or when its target is complete. */
static void follow_writes(es_hook *k, int pos, int32_t id)
{
    for (int w = 0; w < k->n_wr;) {
        int g0 = k->wr[w].g0, at = k->wr[w].p0 + k->wr[w].next;
        int keep = 0, n_tok = hgrp(k, g0)->n_tok;
        if (pos == at && k->wr[w].next < n_tok && id == hgrp(k, g0 + k->wr[w].next - 1)->tok) {
            k->m[pos % MATCH_RING].cont = g0 + k->wr[w].next;
            k->wr[w].next++;
            keep = k->wr[w].next < n_tok;
        } else if (pos < at) {
            keep = 1; /* not there yet */
        }
        if (keep)
            w++;
        else
            k->wr[w] = k->wr[--k->n_wr];
    }
}

static void hook_on_token(void *ctx, int pos, int32_t id)
{
    es_hook *k = ctx;
    if (pos < 0)
        return;
    /* a position at or before the last one announced: a new sequence (or the session cut
     * back) — what this hook learnt about those positions and after is gone */
    if (pos <= k->last_pos) {
        for (int i = 0; i < k->n_subj; i++)
            if (k->subj_pos[i] >= pos)
                k->subj_pos[i] = INT_MAX;
        for (int w = 0; w < k->n_wr;)
            if (k->wr[w].p0 >= pos)
                k->wr[w] = k->wr[--k->n_wr];
            else
                w++;
    }
    k->last_pos = pos;
    slot_reset(k, pos);
    k->m[pos % MATCH_RING].id = id;
    /* a subject whose spelling ends here stands from here on */
    for (int i = 0; i < k->n_subj; i++) {
        const es_subj *u = hsubj(k, i);
        for (int v = 0; v < u->n_var && k->subj_pos[i] > pos; v++) {
            int L = u->len[v], ok = L <= MATCH_RING && L <= pos + 1;
            for (int j = 0; ok && j < L; j++) {
                int q = pos - j, sl = q % MATCH_RING;
                ok = k->m[sl].pos == q && k->m[sl].id == u->ids[v][L - 1 - j];
            }
            if (ok)
                k->subj_pos[i] = pos;
        }
    }
    if (k->n_wr)
        follow_writes(k, pos, id);
}

/* An edit's first target token was written at pos: its next ones follow the tokens that come
 * after it, those already known (a prompt that holds them) at once, the rest as they come. */
static void start_write(es_hook *k, int g0, int pos)
{
    int n_tok = hgrp(k, g0)->n_tok;
    if (n_tok < 2)
        return;
    int next = 1;
    for (; next < n_tok; next++) {
        int p = pos + next, slot = p % MATCH_RING;
        if (p > k->last_pos || k->m[slot].pos != p || next >= MATCH_RING)
            break; /* not announced yet */
        if (k->m[slot].id != hgrp(k, g0 + next - 1)->tok)
            return;
        k->m[slot].cont = g0 + next;
    }
    if (next == n_tok)
        return;
    if (k->n_wr == (int)(sizeof k->wr / sizeof k->wr[0]))
        k->wr[0] = k->wr[--k->n_wr]; /* the oldest gives way */
    k->wr[k->n_wr].g0 = g0;
    k->wr[k->n_wr].p0 = pos;
    k->wr[k->n_wr].next = next;
    k->n_wr++;
}

/* Composed features of a layer on x, the parts' features read as one list (lower's first):
 * the activations of each run of 64 from x as it entered the run, then the run's adds. */
static void feature_pass(es_hook *k, int layer, float *x, float inv)
{
    int D = k->D;
    const float t = LQ_KNN_COSINE_THRESHOLD;
    const es_layer *L0 = &k->part[0]->ly[layer];
    const es_layer *L1 = k->n_part > 1 ? &k->part[1]->ly[layer] : NULL;
    int n0 = L0->n_feat, n = n0 + (L1 ? L1->n_feat : 0);
    float act[64];
    for (int f0 = 0; f0 < n; f0 += 64) {
        int nb = n - f0 < 64 ? n - f0 : 64;
        for (int j = 0; j < nb; j++) {
            int f = f0 + j;
            const es_layer *L = f < n0 ? L0 : L1;
            int i = f < n0 ? f : f - n0;
            float c = dot(L->gates + (size_t)i * D, x, D) * inv;
            float a = c > t ? (c - t) / (1.0f - t) : 0.0f;
            act[j] = a * a * L->scale[i];
        }
        for (int j = 0; j < nb; j++) {
            if (act[j] == 0)
                continue;
            int f = f0 + j;
            const float *d = f < n0 ? L0->downs + (size_t)f * D : L1->downs + (size_t)(f - n0) * D;
            for (int i = 0; i < D; i++)
                x[i] += act[j] * d[i];
        }
    }
}

/* The best KNN key of the layer over every part (the first of equals: lower before upper),
 * as an entry in the hook's numbering, or -1. */
static int knn_best(es_hook *k, int layer, const float *x, float inv, float *cos_out)
{
    int D = k->D, best = -1;
    float bc = -INFINITY;
    for (int p = 0; p < k->n_part; p++) {
        const es_layer *L = &k->part[p]->ly[layer];
        if (!L->n_knn)
            continue;
        /* every key of the layer against x in one gate-kernel call (the keys are one matrix) */
        float *sc = k->n_sc >= L->n_knn ? k->sc : realloc(k->sc, (size_t)L->n_knn * sizeof *sc);
        if (sc) {
            k->sc = sc;
            k->n_sc = k->n_sc > L->n_knn ? k->n_sc : L->n_knn;
            k->kern->gate_scores(L->keys, 0, (size_t)D, 0, (size_t)L->n_knn, x, 1, sc, (size_t)L->n_knn);
        }
        for (int e = 0; e < L->n_knn; e++) {
            float c = (sc ? sc[e] : dot(L->keys + (size_t)e * D, x, D)) * inv;
            if (c > bc)
                bc = c, best = L->entry[e] + k->ent_off[p];
        }
    }
    *cos_out = bc;
    return best;
}

static void hook_after_layer(void *ctx, int layer, int pos, int logits, float *x, int D)
{
    es_hook *k = ctx;
    if (D != k->D || layer < 0 || layer >= k->n_layer)
        return;
    int slot = pos % MATCH_RING;
    if (k->m[slot].pos != pos)
        slot_reset(k, pos); /* a forward pass that did not announce its tokens */
    /* a layer with no KNN key, no composed feature and no subject gate (the value goes in
     * after the last layer) has nothing to do */
    int n_knn = 0, n_feat = 0, n_sgate = 0;
    for (int p = 0; p < k->n_part; p++) {
        const es_layer *L = &k->part[p]->ly[layer];
        n_knn += L->n_knn, n_feat += L->n_feat, n_sgate += L->n_sgate;
    }
    if (!n_knn && !n_feat && !(k->n_subj && (n_sgate || layer == k->n_layer - 1)))
        return;
    double xx = 0;
    for (int i = 0; i < D; i++)
        xx += (double)x[i] * x[i];
    if (!(xx > 0) || !isfinite(xx))
        return;
    float inv = (float)(1.0 / sqrt(xx));

    const float t = LQ_KNN_COSINE_THRESHOLD;
    if (logits && n_knn && (k->flags & (LQ_EDITS_KNN_FORCE | LQ_EDITS_KNN_MATCH)) && k->m[slot].entry < 0) {
        float bc;
        int bi = knn_best(k, layer, x, inv, &bc);
        if (bi >= 0 && bc > t) {
            k->m[slot].entry = bi;
            k->m[slot].layer = layer;
            k->m[slot].cos = bc;
        }
    }
    if (!(k->flags & LQ_EDITS_COMPOSE))
        return;
    /* every edit of the layer scores x as it entered; the adds come after */
    if (k->n_subj && n_sgate) {
        int g = subject_pass(k, layer, pos, x, inv);
        if (g >= 0)
            k->m[slot].sgroup = g;
    }
    if (n_feat)
        feature_pass(k, layer, x, inv);
    /* after the last layer, the value of the subject edit that writes on this row: the
     * continuation of a target in progress, else the group whose gate fired */
    int gi = k->m[slot].cont >= 0 ? k->m[slot].cont : k->m[slot].sgroup;
    if (layer == k->n_layer - 1 && gi >= 0) {
        const es_group *sg = hgrp(k, gi);
        for (int i = 0; i < D; i++)
            x[i] += sg->down[i];
        if (sg->force && logits)
            k->m[slot].force_tok = sg->tok;
        if (k->m[slot].cont < 0)
            start_write(k, hgrp_first(k, gi), pos);
    }
}

/* Where a subject stands, the probability its edits' old answers had moves to their targets:
 * p'(target) = p(target) + p(old), p'(old) ~ 0. The gate writes the target where the question
 * is asked the way the edit was written; this carries the edit to every other sentence about
 * the subject in which the model would have said the old answer (a paraphrase it does not
 * read as the question, a story that names the fact in passing). One way only: a target's
 * own probability is never given to the old answer. */
static void move_old_answers(es_hook *k, int pos, float *logits, int V)
{
    for (int p = 0; p < k->n_part; p++) {
        const lq_edit_set *s = k->part[p];
        for (int gi = 0; gi < s->n_grp; gi++) {
            const es_group *g = &s->grp[gi];
            int32_t t = g->tok;
            if (!g->n_replaces || g->first != gi || k->subj_pos[g->subj + k->subj_off[p]] > pos || t < 0 || t >= V)
                continue;
            for (int r = 0; r < g->n_replaces; r++) {
                int32_t o = g->replaces[r];
                if (o == t || o < 0 || o >= V)
                    continue;
                float lo = logits[o], lt = logits[t], mx = lo > lt ? lo : lt;
                logits[t] = mx + log1pf(expf(-fabsf(lo - lt)));
                logits[o] = lo - 1000.0f; /* finite: logprobs stay numbers */
            }
            start_write(k, gi + k->grp_off[p], pos); /* a target of several tokens goes on */
        }
    }
}

static void hook_on_logits(void *ctx, int pos, float *logits, int V)
{
    es_hook *k = ctx;
    int slot = pos % MATCH_RING;
    if (k->n_subj && (k->flags & LQ_EDITS_COMPOSE) && k->m[slot].pos == pos && k->m[slot].cont < 0 &&
        k->m[slot].force_tok < 0)
        move_old_answers(k, pos, logits, V);
    if (k->m[slot].pos == pos && k->m[slot].force_tok >= 0 && k->m[slot].force_tok < V) {
        /* a subject edit's token the head cannot put first: first by a wide margin */
        float mx = -INFINITY;
        for (int i = 0; i < V; i++)
            mx = logits[i] > mx ? logits[i] : mx;
        logits[k->m[slot].force_tok] = mx + 20.0f;
        return;
    }
    if (!(k->flags & LQ_EDITS_KNN_FORCE) || k->m[slot].pos != pos || k->m[slot].entry < 0)
        return;
    int32_t id = hent(k, k->m[slot].entry)->target_id;
    if (id < 0 || id >= V)
        return;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (logits[i] > mx)
            mx = logits[i];
    /* far above the rest (every other probability underflows at any temperature <= 100),
     * yet finite: logprobs of the others stay numbers */
    logits[id] = mx + 1000.0f;
}

static void hook_release(void *ctx)
{
    es_hook *k = ctx;
    lq_edit_set_unref(k->s);
    free(k->sc);
    free(k->subj_pos);
    free(k);
}

int lq_edit_set_hook(lq_edit_set *s, int flags, lq_resid_hook **out, lq_err *err)
{
    if (!s || !out)
        return lq_err_set(err, LQ_EINVAL, "edit hook: set and out are required");
    es_hook *k = calloc(1, sizeof *k);
    if (!k)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int i = 0; i < MATCH_RING; i++) {
        slot_reset(k, i);
        k->m[i].pos = -1;
    }
    if (s->lower)
        k->part[k->n_part++] = s->lower;
    k->part[k->n_part++] = s;
    for (int p = 0; p < k->n_part; p++) {
        k->ent_off[p] = p ? k->ent_off[p - 1] + k->part[p - 1]->n_ent : 0;
        k->grp_off[p] = p ? k->grp_off[p - 1] + k->part[p - 1]->n_grp : 0;
        k->subj_off[p] = k->n_subj;
        k->n_subj += k->part[p]->n_subj;
        k->n_grp += k->part[p]->n_grp;
    }
    k->n_layer = s->n_layer;
    k->D = s->D;
    if (k->n_subj && !(k->subj_pos = malloc((size_t)k->n_subj * sizeof *k->subj_pos))) {
        free(k);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    for (int i = 0; i < k->n_subj; i++)
        k->subj_pos[i] = INT_MAX;
    k->s = lq_edit_set_ref(s);
    k->flags = flags;
    k->kern = lq_kernels_best();
    k->h.after_layer = hook_after_layer;
    k->h.on_logits = hook_on_logits;
    k->h.release = hook_release;
    k->h.on_token = hook_on_token;
    k->debug = getenv("LQ_SUBJECT_DEBUG") != NULL;
    k->last_pos = -1;
    k->h.ctx = k;
    *out = &k->h;
    return LQ_OK;
}

void lq_edit_hook_free(lq_resid_hook *h)
{
    if (h && h->release)
        h->release(h->ctx);
}

int lq_edit_hook_match(const lq_resid_hook *h, int pos, lq_edit_match *out)
{
    if (!h || h->after_layer != hook_after_layer || pos < 0)
        return 0;
    const es_hook *k = h->ctx;
    int slot = pos % MATCH_RING;
    if (k->m[slot].pos != pos || k->m[slot].entry < 0)
        return 0;
    const es_entry *e = hent(k, k->m[slot].entry);
    if (out) {
        out->layer = k->m[slot].layer;
        out->cosine = k->m[slot].cos;
        out->target_id = e->target_id;
        out->target = e->target;
        out->entity = e->entity;
        out->relation = e->relation;
    }
    return 1;
}
