/* Patches: named lists of LARQL's operations, and the .vlp JSON they travel in
 * (gburd/larql crates/larql-vindex/src/patch/format.rs: version, base_model, base_checksum,
 * created_at, description, author, tags, operations tagged by "op"; vectors as standard
 * base64 of little-endian f32). Reading checks every field LARQL's serde would, plus the
 * vector widths; the overlay checks ranges against its base when a patch is applied. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>

#include "core/json_obj.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base64.h"
#include "larql/patch.h"
#include "vindex/vindex_internal.h"

#define PATCH_MAX_OPS (1u << 22)
#define PATCH_MAX_FILE ((size_t)1 << 31)

/* an owned copy of one op */
typedef struct pop {
    lq_patch_op op;  /* strings and vectors point into the allocations below */
    char *s[6];      /* entity, relation, target, reason, dm_token, id */
    float *v[4];     /* gate, up, down, key */
    float *unit;     /* insert_knn: the key at unit length, as KNN stores hold it (overlays
                        borrow it, so every overlay folding this patch shares one copy) */
} pop;

struct lq_patch {
    char *name, *base_model, *base_checksum, *created_at, *description, *author;
    int hidden;
    pop *ops;
    size_t n, cap;
    int refs;        /* overlays share patches (a session's clone of the global state): the
                        last lq_patch_free frees; a shared patch is never changed in place */
};

void lq_patch_op_init(lq_patch_op *op, int kind)
{
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->target_id = -1;
    op->confidence = NAN;
    op->dm_id = -1;
}

static char *dupz(const char *s) { return s ? strdup(s) : NULL; }

int lq_patch_create(const char *name, const char *base_model, int hidden, lq_patch **out, lq_err *err)
{
    *out = NULL;
    if (hidden < 0 || hidden > LQ_VINDEX_MAX_HIDDEN)
        return lq_err_set(err, LQ_EINVAL, "patch: hidden %d outside [0, %d]", hidden, LQ_VINDEX_MAX_HIDDEN);
    lq_patch *p = calloc(1, sizeof *p);
    if (!p)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    p->name = strdup(name && *name ? name : "unnamed");
    p->base_model = strdup(base_model ? base_model : "");
    p->created_at = strdup("");
    p->hidden = hidden;
    p->refs = 1;
    if (!p->name || !p->base_model || !p->created_at) {
        lq_patch_free(p);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    *out = p;
    return LQ_OK;
}

int lq_patch_set_info(lq_patch *p, const char *created_at, const char *base_checksum, const char *author,
                      lq_err *err)
{
    char now[32];
    if (!created_at) { /* RFC 3339, UTC */
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
        created_at = now;
    }
    char *c = strdup(created_at), *b = base_checksum && *base_checksum ? strdup(base_checksum) : NULL;
    char *a = author && *author ? strdup(author) : NULL;
    if (!c || (base_checksum && *base_checksum && !b) || (author && *author && !a)) {
        free(c), free(b), free(a);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    free(p->created_at), free(p->base_checksum), free(p->author);
    p->created_at = c;
    p->base_checksum = b;
    p->author = a;
    return LQ_OK;
}

static void pop_free(pop *o)
{
    for (int i = 0; i < 6; i++)
        free(o->s[i]);
    for (int i = 0; i < 4; i++)
        free(o->v[i]);
    free(o->unit);
}

lq_patch *lq_vx_patch_ref(lq_patch *p)
{
    __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

int lq_vx_patch_shared(const lq_patch *p) { return __atomic_load_n(&p->refs, __ATOMIC_ACQUIRE) > 1; }

void lq_patch_free(lq_patch *p)
{
    if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (size_t i = 0; i < p->n; i++)
        pop_free(&p->ops[i]);
    free(p->ops);
    free(p->name);
    free(p->base_model);
    free(p->base_checksum);
    free(p->created_at);
    free(p->description);
    free(p->author);
    free(p);
}

static int kind_ok(int k) { return k >= LQ_OP_INSERT && k <= LQ_OP_DELETE_EDIT; }

int lq_patch_add(lq_patch *p, const lq_patch_op *op, lq_err *err)
{
    if (!p || !op || !kind_ok(op->kind))
        return lq_err_set(err, LQ_EINVAL, "patch: unknown operation kind %d", op ? op->kind : -1);
    if (p->n >= PATCH_MAX_OPS)
        return lq_err_set(err, LQ_ERANGE, "patch '%s': more than %u operations", p->name, PATCH_MAX_OPS);
    const float *vin[4] = {op->gate, op->up, op->down, op->key};
    if (p->hidden == 0)
        for (int i = 0; i < 4; i++)
            if (vin[i])
                return lq_err_set(err, LQ_EINVAL, "patch '%s': vectors need a known hidden size", p->name);
    if (op->kind == LQ_OP_INSERT_KNN && !op->key)
        return lq_err_set(err, LQ_EINVAL, "patch '%s': insert_knn needs a key vector", p->name);
    if (op->kind == LQ_OP_INSERT_SUBJECT && !op->gate && (op->feature == 0 || !op->down))
        return lq_err_set(err, LQ_EINVAL,
                          "patch '%s': insert_subject needs a gate vector (its first target token) or a down vector",
                          p->name);
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        pop *n = realloc(p->ops, cap * sizeof *n);
        if (!n)
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        p->ops = n;
        p->cap = cap;
    }
    pop *o = &p->ops[p->n];
    memset(o, 0, sizeof *o);
    o->op = *op;
    const char *sin[6] = {op->entity, op->relation, op->target, op->reason, op->dm_token, op->id};
    int bad = 0;
    if (op->id && strlen(op->id) > LQ_EDIT_ID_MAX)
        return lq_err_set(err, LQ_ERANGE, "patch '%s': an edit id is at most %d bytes", p->name, LQ_EDIT_ID_MAX);
    if (op->kind == LQ_OP_DELETE_EDIT && !op->id)
        return lq_err_set(err, LQ_EINVAL, "patch '%s': delete_edit needs an id", p->name);
    for (int i = 0; i < 6; i++)
        if (sin[i] && !(o->s[i] = strdup(sin[i])))
            bad = 1;
    for (int i = 0; i < 4; i++)
        if (vin[i]) {
            if (!(o->v[i] = malloc((size_t)p->hidden * sizeof(float))))
                bad = 1;
            else
                memcpy(o->v[i], vin[i], (size_t)p->hidden * sizeof(float));
        }
    if (!bad && op->kind == LQ_OP_INSERT_KNN) {
        if (!(o->unit = malloc((size_t)p->hidden * sizeof(float))))
            bad = 1;
        else if (lq_vx_knn_unit_key(op->key, p->hidden, o->unit)) {
            free(o->unit); /* a zero key: the store's own add refuses it when it is applied */
            o->unit = NULL;
        }
    }
    if (bad) {
        pop_free(o);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    o->op.entity = o->s[0];
    o->op.relation = o->s[1];
    o->op.target = o->s[2];
    o->op.reason = o->s[3];
    o->op.dm_token = o->s[4];
    o->op.id = o->s[5];
    o->op.gate = o->v[0];
    o->op.up = o->v[1];
    o->op.down = o->v[2];
    o->op.key = o->v[3];
    p->n++;
    return LQ_OK;
}

size_t lq_patch_n_ops(const lq_patch *p) { return p ? p->n : 0; }

int lq_patch_op_at(const lq_patch *p, size_t i, lq_patch_op *op)
{
    if (!p || i >= p->n)
        return 0;
    *op = p->ops[i].op;
    return 1;
}

const float *lq_vx_patch_unit_key(const lq_patch *p, size_t i) { return p && i < p->n ? p->ops[i].unit : NULL; }

const char *lq_patch_name(const lq_patch *p) { return p ? p->name : NULL; }
const char *lq_patch_base_model(const lq_patch *p) { return p ? p->base_model : NULL; }
int lq_vx_patch_hidden(const lq_patch *p) { return p->hidden; }
const char *lq_patch_base_checksum(const lq_patch *p) { return p->base_checksum; }
const char *lq_patch_created_at(const lq_patch *p) { return p->created_at; }
const char *lq_patch_author(const lq_patch *p) { return p->author; }

void lq_patch_counts(const lq_patch *p, size_t *ins, size_t *upd, size_t *del)
{
    *ins = *upd = *del = 0;
    for (size_t i = 0; p && i < p->n; i++) {
        int k = p->ops[i].op.kind;
        if (k == LQ_OP_INSERT || k == LQ_OP_INSERT_KNN ||
            (k == LQ_OP_INSERT_SUBJECT && p->ops[i].op.feature == 0 && p->ops[i].op.down))
            (*ins)++;
        else if (k == LQ_OP_INSERT_SUBJECT)
            ; /* one subject edit is several ops: counted once, at its first */
        else if (k == LQ_OP_UPDATE)
            (*upd)++;
        else
            (*del)++;
    }
}

int lq_vx_patch_copy(const lq_patch *src, lq_patch **out, lq_err *err)
{
    int rc = lq_patch_create(src->name, src->base_model, src->hidden, out, err);
    if (rc)
        return rc;
    lq_patch *p = *out;
    free(p->created_at);
    p->created_at = dupz(src->created_at);
    p->base_checksum = dupz(src->base_checksum);
    p->description = dupz(src->description);
    p->author = dupz(src->author);
    for (size_t i = 0; !rc && i < src->n; i++)
        rc = lq_patch_add(p, &src->ops[i].op, err);
    if (!rc && (!p->created_at || (src->base_checksum && !p->base_checksum) ||
                (src->description && !p->description) || (src->author && !p->author)))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (rc) {
        lq_patch_free(p);
        *out = NULL;
    }
    return rc;
}

/* ---- reading ---- */

static const char *const OP_NAMES[] = {NULL,         "insert",     "update",         "delete",
                                       "insert_knn", "delete_knn", "insert_subject", "delete_edit"};

typedef struct rd {
    const char *name;  /* for messages */
    size_t idx;
    lq_err *err;
} rd;

static int bad(const rd *r, const char *field, const char *what)
{
    return lq_err_set(r->err, LQ_EFORMAT, "patch '%s': operations[%zu].%s %s", r->name, r->idx, field, what);
}

/* 0 absent, 1 present (out set), <0 error */
static int get_str(const rd *r, json_t *o, const char *k, int required, const char **out)
{
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x))
        return required ? bad(r, k, "is missing") : 0;
    if (!json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x))
        return bad(r, k, "must be a string without NUL characters");
    *out = json_string_value(x);
    return 1;
}

static int get_int(const rd *r, json_t *o, const char *k, int required, long long lo, long long hi, long long *out)
{
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x))
        return required ? bad(r, k, "is missing") : 0;
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi)
        return bad(r, k, "must be an integer in range");
    *out = json_integer_value(x);
    return 1;
}

static int get_num(const rd *r, json_t *o, const char *k, float *out)
{
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x))
        return 0;
    if (!json_is_number(x) || !isfinite(json_number_value(x)))
        return bad(r, k, "must be a finite number");
    *out = (float)json_number_value(x);
    return 1;
}

/* A base64 vector field into buf (hidden floats; *hidden fixed by the first vector when 0). */
static int get_vec(const rd *r, json_t *o, const char *k, int *hidden, float **buf, const float **out)
{
    const char *s;
    int rc = get_str(r, o, k, 0, &s);
    if (rc <= 0)
        return rc;
    size_t n = strlen(s);
    if (n % 4 || n / 4 * 3 > (size_t)LQ_VINDEX_MAX_HIDDEN * 4 + 3)
        return bad(r, k, "is not base64 of at most the largest hidden size of f32");
    unsigned char *raw = malloc(n / 4 * 3 + 1);
    if (!raw)
        return lq_err_set(r->err, LQ_ENOMEM, "out of memory");
    long got = lq_base64_decode(s, n, raw);
    if (got < 0 || got % 4 || got == 0) {
        free(raw);
        return bad(r, k, "is not base64 of little-endian f32 values");
    }
    int w = (int)(got / 4);
    if (*hidden == 0)
        *hidden = w;
    if (w != *hidden) {
        free(raw);
        char what[96];
        snprintf(what, sizeof what, "has %d values; the model's hidden size is %d", w, *hidden);
        return bad(r, k, what);
    }
    float *v = malloc((size_t)w * sizeof *v);
    if (!v) {
        free(raw);
        return lq_err_set(r->err, LQ_ENOMEM, "out of memory");
    }
    for (int i = 0; i < w; i++) {
        uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 |
                     (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&v[i], &u, 4);
        if (!isfinite(v[i])) {
            free(raw);
            free(v);
            return bad(r, k, "holds a value that is not finite");
        }
    }
    free(raw);
    *buf = v;
    *out = v;
    return 1;
}

static int read_op(const rd *r, json_t *o, lq_patch *p, int *hidden)
{
    if (!json_is_object(o))
        return lq_err_set(r->err, LQ_EFORMAT, "patch '%s': operations[%zu] is not an object", r->name, r->idx);
    const char *opn;
    int rc = get_str(r, o, "op", 1, &opn);
    if (rc < 0)
        return rc;
    int kind = 0;
    for (int k = 1; k <= LQ_OP_DELETE_EDIT; k++)
        if (!strcmp(opn, OP_NAMES[k]))
            kind = k;
    if (!kind)
        return bad(r, "op", "is not one of insert, update, delete, insert_knn, delete_knn, insert_subject, delete_edit");
    lq_patch_op op;
    lq_patch_op_init(&op, kind);
    long long v;
    float *bufs[4] = {0};
    int need_slot = kind == LQ_OP_INSERT || kind == LQ_OP_UPDATE || kind == LQ_OP_DELETE;
    int subj = kind == LQ_OP_INSERT_SUBJECT;
    if (need_slot || kind == LQ_OP_INSERT_KNN || subj) {
        if ((rc = get_int(r, o, "layer", 1, 0, LQ_VINDEX_MAX_LAYERS - 1, &v)) < 0)
            return rc;
        op.layer = (int)v;
    }
    if (need_slot || subj) {
        if ((rc = get_int(r, o, "feature", 1, 0, LQ_VINDEX_MAX_FEATURES - 1, &v)) < 0)
            return rc;
        op.feature = (int)v;
    }
    if (subj) {
        if ((rc = get_num(r, o, "gate_threshold", &op.gate_threshold)) < 0)
            return rc;
        if (op.gate_threshold < -1 || op.gate_threshold > 1)
            return bad(r, "gate_threshold", "must be a cosine in [-1, 1]");
        json_t *f = json_object_get(o, "force");
        if (f && !json_is_boolean(f))
            return bad(r, "force", "must be true or false");
        op.force = f && json_is_true(f);
        json_t *rp = json_object_get(o, "replaces"), *x;
        size_t k;
        if (rp && !json_is_null(rp) && (!json_is_array(rp) || json_array_size(rp) > LQ_EDIT_MAX_REPLACED))
            return bad(r, "replaces", "must be an array of at most 4 token ids");
        json_array_foreach(rp, k, x) {
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
                return bad(r, "replaces", "must hold token ids (integers from 0)");
            op.replaces[op.n_replaces++] = (int32_t)json_integer_value(x);
        }
    }
    if ((rc = get_str(r, o, "entity", kind == LQ_OP_INSERT || (kind >= LQ_OP_INSERT_KNN && kind != LQ_OP_DELETE_EDIT),
                      &op.entity)) < 0 ||
        (rc = get_str(r, o, "relation", kind == LQ_OP_INSERT_KNN, &op.relation)) < 0 ||
        (rc = get_str(r, o, "target", kind == LQ_OP_INSERT || kind == LQ_OP_INSERT_KNN || subj, &op.target)) < 0 ||
        (rc = get_str(r, o, "reason", 0, &op.reason)) < 0 || (rc = get_num(r, o, "confidence", &op.confidence)) < 0 ||
        (rc = get_str(r, o, "id", kind == LQ_OP_DELETE_EDIT, &op.id)) < 0)
        return rc;
    if (op.id && (!*op.id || strlen(op.id) > LQ_EDIT_ID_MAX))
        return bad(r, "id", "must be 1 to 64 bytes");
    if (kind == LQ_OP_INSERT_KNN || subj) {
        if ((rc = get_int(r, o, "target_id", 1, 0, INT32_MAX, &v)) < 0)
            return rc;
        op.target_id = (int32_t)v;
    }
    if ((kind == LQ_OP_INSERT || kind == LQ_OP_UPDATE) &&
        ((rc = get_vec(r, o, "gate_vector_b64", hidden, &bufs[0], &op.gate)) < 0 ||
         (rc = get_vec(r, o, "up_vector_b64", hidden, &bufs[1], &op.up)) < 0 ||
         (rc = get_vec(r, o, "down_vector_b64", hidden, &bufs[2], &op.down)) < 0))
        goto out;
    if (subj && ((rc = get_vec(r, o, "gate_vector_b64", hidden, &bufs[0], &op.gate)) < 0 ||
                 (rc = get_vec(r, o, "down_vector_b64", hidden, &bufs[2], &op.down)) < 0))
        goto out;
    if (subj && !op.gate && (op.feature == 0 || !op.down)) {
        rc = bad(r, "gate_vector_b64", "is missing (the first target token needs gates, a later one its down vector)");
        goto out;
    }
    if (kind == LQ_OP_INSERT_KNN &&
        (rc = get_vec(r, o, "key_vector_b64", hidden, &bufs[3], &op.key)) <= 0) {
        if (rc == 0)
            rc = bad(r, "key_vector_b64", "is missing");
        goto out;
    }
    json_t *dm = json_object_get(o, "down_meta");
    if ((kind == LQ_OP_INSERT || kind == LQ_OP_UPDATE) && dm && !json_is_null(dm)) {
        if (!json_is_object(dm) || !json_is_string(json_object_get(dm, "t")) ||
            !json_is_integer(json_object_get(dm, "i")) || !json_is_number(json_object_get(dm, "c")) ||
            json_integer_value(json_object_get(dm, "i")) < 0 ||
            json_integer_value(json_object_get(dm, "i")) > INT32_MAX) {
            rc = bad(r, "down_meta", "must be {\"t\": token, \"i\": id, \"c\": score}");
            goto out;
        }
        op.has_down_meta = 1;
        op.dm_token = json_string_value(json_object_get(dm, "t"));
        op.dm_id = (int32_t)json_integer_value(json_object_get(dm, "i"));
        op.dm_c = (float)json_number_value(json_object_get(dm, "c"));
    }
    if (p->hidden == 0)
        p->hidden = *hidden;
    rc = lq_patch_add(p, &op, r->err);
out:
    for (int i = 0; i < 4; i++)
        free(bufs[i]);
    return rc;
}

static int opt_str(json_t *root, const char *k, char **dst, const char *pname, lq_err *err)
{
    json_t *x = json_object_get(root, k);
    if (!x || json_is_null(x))
        return LQ_OK;
    if (!json_is_string(x))
        return lq_err_set(err, LQ_EFORMAT, "patch '%s': %s must be a string", pname, k);
    free(*dst);
    if (!(*dst = strdup(json_string_value(x))))
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    return LQ_OK;
}

int lq_patch_parse(const char *json, size_t len, const char *name, int hidden, lq_patch **out, lq_err *err)
{
    *out = NULL;
    if (!json)
        return lq_err_set(err, LQ_EINVAL, "patch: no text");
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return lq_err_set(err, LQ_EFORMAT, "patch: malformed JSON at line %d column %d: %s", je.line, je.column,
                          je.text);
    int rc = lq_vx_patch_from_json(root, name, hidden, out, err);
    json_decref(root);
    return rc;
}

int lq_vx_patch_from_json(json_t *root, const char *name, int hidden, lq_patch **out, lq_err *err)
{
    *out = NULL;
    int rc = LQ_OK;
    lq_patch *p = NULL;
    json_t *ops = json_object_get(root, "operations");
    json_t *ver = json_object_get(root, "version");
    const char *desc = json_string_value(json_object_get(root, "description"));
    const char *pname = name && *name ? name : desc && *desc ? desc : "unnamed";
    if (!json_is_object(root))
        rc = lq_err_set(err, LQ_EFORMAT, "patch: top level is not an object");
    else if (!json_is_array(ops))
        rc = lq_err_set(err, LQ_EFORMAT, "patch '%s': operations must be an array", pname);
    else if (ver && !json_is_null(ver) && (!json_is_integer(ver) || json_integer_value(ver) < 0))
        rc = lq_err_set(err, LQ_EFORMAT, "patch '%s': version must be a non-negative integer", pname);
    else if (json_object_get(root, "base_model") && !json_is_string(json_object_get(root, "base_model")))
        rc = lq_err_set(err, LQ_EFORMAT, "patch '%s': base_model must be a string", pname);
    else if (json_array_size(ops) > PATCH_MAX_OPS)
        rc = lq_err_set(err, LQ_ERANGE, "patch '%s': more than %u operations", pname, PATCH_MAX_OPS);
    if (!rc)
        rc = lq_patch_create(pname, json_string_value(json_object_get(root, "base_model")), hidden, &p, err);
    if (!rc)
        rc = opt_str(root, "base_checksum", &p->base_checksum, pname, err);
    if (!rc)
        rc = opt_str(root, "created_at", &p->created_at, pname, err);
    if (!rc)
        rc = opt_str(root, "description", &p->description, pname, err);
    if (!rc)
        rc = opt_str(root, "author", &p->author, pname, err);
    int hid = hidden;
    for (size_t i = 0; !rc && i < json_array_size(ops); i++) {
        rd r = {pname, i, err};
        rc = read_op(&r, json_array_get(ops, i), p, &hid);
    }
    if (rc) {
        lq_patch_free(p);
        return rc;
    }
    *out = p;
    return LQ_OK;
}

/* The patch in f (closed here); shown: how errors name the file; base: its file name. */
static int read_stream(FILE *f, const char *shown, const char *base, int hidden, lq_patch **out, lq_err *err)
{
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || st.st_size < 0 || (size_t)st.st_size > PATCH_MAX_FILE) {
        fclose(f);
        return lq_err_set(err, LQ_EFORMAT, "%s: not a regular file of at most 2 GiB", shown);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return lq_err_set(err, LQ_ENOMEM, "%s: out of memory for %zu bytes", shown, n);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        free(buf);
        return lq_err_set(err, LQ_EIO, "%s: short read", shown);
    }
    int rc = lq_patch_parse(buf, n, NULL, hidden, out, err);
    free(buf);
    if (rc)
        lq_err_prefix(err, "%s", shown);
    else if (!(*out)->description) { /* the file name (without .vlp) names a patch without a description */
        size_t bl = strlen(base);
        if (bl > 4 && !strcmp(base + bl - 4, ".vlp"))
            bl -= 4;
        char *nm = strndup(base, bl);
        if (nm) {
            free((*out)->name);
            (*out)->name = nm;
        }
    }
    return rc;
}

int lq_patch_read(const char *path, int hidden, lq_patch **out, lq_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return lq_err_set(err, LQ_ENOTFOUND, "%s: cannot open the patch file", path);
    const char *base = strrchr(path, '/');
    return read_stream(f, path, base ? base + 1 : path, hidden, out, err);
}

int lq_patch_read_in(const char *dir, const char *file, int hidden, lq_patch **out, lq_err *err)
{
    *out = NULL;
    if (!dir || !file || !*file || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, ".."))
        return lq_err_set(err, LQ_EINVAL, "'%s' is not a plain file name", file ? file : "");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return lq_err_set(err, LQ_EIO, "the patch directory cannot be opened: %s", strerror(errno));
    /* O_NOFOLLOW: a symbolic link is refused by the open itself, not by a check before it */
    int fd = openat(dfd, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int e = errno;
    close(dfd);
    if (fd < 0)
        return e == ENOENT ? lq_err_set(err, LQ_ENOTFOUND, "%s: no such patch file", file)
               : e == ELOOP ? lq_err_set(err, LQ_EINVAL, "%s: a symbolic link, not a regular file: refused", file)
                            : lq_err_set(err, LQ_EINVAL, "%s: cannot open the patch file: %s", file, strerror(e));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        int links = (int)st.st_nlink;
        int reg = S_ISREG(st.st_mode);
        close(fd);
        return reg ? lq_err_set(err, LQ_EINVAL,
                                "%s: the file has %d hard links (one of them may lead outside the patch "
                                "directory): refused",
                                file, links)
                   : lq_err_set(err, LQ_EINVAL, "%s: not a regular file (a directory or a device): refused", file);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    return read_stream(f, file, file, hidden, out, err);
}

/* ---- writing ---- */

static json_t *vec_b64(const float *v, int n)
{
    size_t len = (size_t)n * 4;
    unsigned char *raw = malloc(len);
    char *s = malloc((len + 2) / 3 * 4 + 1);
    json_t *j = NULL;
    if (raw && s) {
        for (int i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            raw[4 * i] = (unsigned char)u;
            raw[4 * i + 1] = (unsigned char)(u >> 8);
            raw[4 * i + 2] = (unsigned char)(u >> 16);
            raw[4 * i + 3] = (unsigned char)(u >> 24);
        }
        lq_base64_encode(raw, len, s);
        j = json_string(s);
    }
    free(raw);
    free(s);
    return j;
}

static void set_str(json_t *o, const char *k, const char *v)
{
    if (v)
        json_object_set_new(o, k, json_string(v));
}

static json_t *op_json(const lq_patch *p, const lq_patch_op *op)
{
    json_t *o = lq_json_object();
    json_object_set_new(o, "op", json_string(OP_NAMES[op->kind]));
    if (op->kind != LQ_OP_DELETE_KNN && op->kind != LQ_OP_DELETE_EDIT)
        json_object_set_new(o, "layer", json_integer(op->layer));
    set_str(o, "id", op->id);
    int subj = op->kind == LQ_OP_INSERT_SUBJECT;
    if (op->kind == LQ_OP_INSERT || op->kind == LQ_OP_UPDATE || op->kind == LQ_OP_DELETE || subj)
        json_object_set_new(o, "feature", json_integer(op->feature));
    if (op->kind == LQ_OP_INSERT || op->kind == LQ_OP_INSERT_KNN || subj)
        set_str(o, "relation", op->relation);
    set_str(o, "entity", op->entity);
    set_str(o, "target", op->target);
    if (op->kind == LQ_OP_INSERT_KNN || subj)
        json_object_set_new(o, "target_id", json_integer(op->target_id));
    if (subj) {
        if (op->gate)
            json_object_set_new(o, "gate_threshold", json_real(op->gate_threshold));
        if (op->force)
            json_object_set_new(o, "force", json_true());
        if (op->n_replaces > 0) {
            json_t *rp = json_array();
            for (int k = 0; k < op->n_replaces && k < LQ_EDIT_MAX_REPLACED; k++)
                json_array_append_new(rp, json_integer(op->replaces[k]));
            json_object_set_new(o, "replaces", rp);
        }
    }
    if (!isnan(op->confidence))
        json_object_set_new(o, "confidence", json_real(op->confidence));
    if (op->kind == LQ_OP_DELETE)
        set_str(o, "reason", op->reason);
    const float *vs[4] = {op->gate, op->up, op->down, op->key};
    const char *ks[4] = {"gate_vector_b64", "up_vector_b64", "down_vector_b64", "key_vector_b64"};
    for (int i = 0; i < 4; i++)
        if (vs[i])
            json_object_set_new(o, ks[i], vec_b64(vs[i], p->hidden));
    /* "i" is a u32 in LARQL (and our reader): a target that is not one vocabulary token
     * (id -1) is written as 0; the text "t" is what names it */
    if (op->has_down_meta)
        json_object_set_new(o, "down_meta", json_pack("{s:s,s:i,s:f}", "t", op->dm_token ? op->dm_token : "", "i",
                                                      op->dm_id < 0 ? 0 : (int)op->dm_id, "c", (double)op->dm_c));
    return o;
}

int lq_patch_json(const lq_patch *p, char **out, lq_err *err)
{
    *out = NULL;
    json_t *root = lq_json_object(), *ops = json_array(), *tags = json_array();
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "base_model", json_string(p->base_model));
    if (p->base_checksum)
        json_object_set_new(root, "base_checksum", json_string(p->base_checksum));
    json_object_set_new(root, "created_at", json_string(p->created_at ? p->created_at : ""));
    json_object_set_new(root, "description", json_string(p->description ? p->description : p->name));
    if (p->author)
        json_object_set_new(root, "author", json_string(p->author));
    json_object_set_new(root, "tags", tags);
    for (size_t i = 0; i < p->n; i++)
        json_array_append_new(ops, op_json(p, &p->ops[i].op));
    json_object_set_new(root, "operations", ops);
    lq_sb b = {0};
    lq_sb_json_pretty(&b, root, 0);
    lq_sb_puts(&b, "\n");
    json_decref(root);
    return lq_sb_finish(&b, out, err);
}

int lq_patch_write(const lq_patch *p, const char *path, lq_err *err)
{
    char *text = NULL;
    int rc = lq_patch_json(p, &text, err);
    if (rc)
        return rc;
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 9);
    if (!tmp) {
        free(text);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".partial", 9);
    FILE *f = fopen(tmp, "wb");
    size_t n = strlen(text);
    if (!f)
        rc = lq_err_set(err, LQ_EIO, "%s: cannot create", tmp);
    else if (fwrite(text, 1, n, f) != n || fflush(f) || fsync(fileno(f)))
        rc = lq_err_set(err, LQ_EIO, "%s: write failed (disk full?)", tmp);
    if (f && fclose(f) && !rc)
        rc = lq_err_set(err, LQ_EIO, "%s: close failed", tmp);
    if (!rc && rename(tmp, path))
        rc = lq_err_set(err, LQ_EIO, "%s: cannot rename over %s", tmp, path);
    if (rc)
        unlink(tmp);
    free(tmp);
    free(text);
    return rc;
}
