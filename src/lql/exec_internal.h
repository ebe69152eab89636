/* What the LQL executor's files share: the session and the output helpers. */
#ifndef LQ_LQL_EXEC_INTERNAL_H
#define LQ_LQL_EXEC_INTERNAL_H

#include "larql/model.h"
#include "larql/patch.h"
#include "larql/vindex.h"
#include "lql/lql_internal.h"

struct lq_lql {
    lq_lql_opts opts;
    char *path;              /* USE'd directory */
    lq_vindex *v;            /* the base vindex (read-only) */
    struct lq_model *m;      /* its weights, opened on first need (borrows v) */
    lq_overlay *o;           /* edits and applied patches over v */
    /* patch recording: LARQL starts an anonymous one at the first edit; BEGIN PATCH names
     * it. The ops recorded are those of the overlay's live "edits" patch from mark on. */
    int recording;
    char *patch_name;        /* BEGIN PATCH file, NULL = anonymous */
    size_t patch_mark;
    char *model_tmp;         /* USE MODEL: the temporary vindex built from the model file */
    unsigned epoch;          /* COMPACTs run on this session */
    char *author;            /* opts.author, owned */
    char *remote;            /* USE REMOTE: the server's URL; statements go there */
};

/* USE "dir" (backend.c): opens it, replacing the session's vindex, with an empty overlay. */
int lq_lql_use(lq_lql *q, const char *path, lq_sb *out, lq_err *err);
/* USE REMOTE and the statements a remote session sends to the server (remote.c). */
int lq_lql_exec_remote(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err);
/* ---- the backend (backend.c) ---- */
/* INFER's walk-mode inference with the session's edits. */
int lq_lql_infer(lq_lql *q, const char *prompt, int top, lq_infer_result *r, lq_err *err);
/* The same with compare mode and a statement's ROUTE clause (route NULL: none). */
int lq_lql_run_infer(lq_lql *q, const char *prompt, int top, int compare, const lq_lql_stmt *route,
                     lq_infer_result *r, lq_err *err);
/* The session's KNN store: the overlay's, else the vindex's (NULL: none). */
const lq_knn_store *lq_lql_session_knn(const lq_lql *q);
/* Closes the session's vindex, model and overlay. */
void lq_lql_close_backend(lq_lql *q);
/* Lifecycle statements (exec_life.c): TRACE, EXTRACT, USE MODEL / REMOTE, DIFF, MERGE,
 * COMPACT, SHOW COMPACT STATUS, REBALANCE, COMPILE. */
int lq_lql_exec_life(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err);

/* The vindex every read statement runs on: the patched view. */
const lq_vindex *lq_lql_view(const lq_lql *q);
/* LQ_EINVAL "No backend loaded..." when no USE yet. */
int lq_lql_need_vindex(const lq_lql *q, lq_err *err);
/* Opens the model from the vindex's weights on first use. */
int lq_lql_need_model(lq_lql *q, lq_err *err);

/* ---- output helpers (format.c) ---- */
/* s left-aligned (right when right != 0) in width columns, counting UTF-8 characters (as
 * Rust's {:20} does); longer text is not cut. */
void lq_lql_pad(lq_sb *b, const char *s, int width, int right);
/* s as Rust's {:?} writes a string: quoted, with \" \\ \n \t \r escaped. */
void lq_lql_quoted(lq_sb *b, const char *s);
/* A LIKE pattern's core: "%paris%" -> "paris" (patterns match substrings). */
const char *lq_lql_like_core(const char *s, char *buf, size_t cap);
/* LARQL's format_number: 1234 -> "1.2K", 3480000 -> "3.48M". */
void lq_lql_fmt_count(char *buf, size_t cap, uint64_t n);

/* ---- WHERE on rows (exec_where.c) ---- */
enum { LQ_LQL_FSTR_TOKEN = 0, LQ_LQL_FSTR_RELATION, LQ_LQL_FNUM_LAYER, LQ_LQL_FNUM_FEATURE, LQ_LQL_FNUM_SCORE };
typedef struct lq_lql_row {
    const char *token, *relation; /* NULL = none */
    int layer, feature;
    double score;                 /* NaN = unknown */
} lq_lql_row;
/* The field's kind (entity/token/target, relation, layer, feature, confidence/score), -1 if
 * rows have no such field. */
int lq_lql_field_kind(const char *field);
/* 1 if the row satisfies c (any operator, IN lists; IN () matches nothing). */
int lq_lql_row_match(const lq_lql_cond *c, const lq_lql_row *r);
int lq_lql_rows_match(const lq_lql_cond *const *cs, size_t n, const lq_lql_row *r);

/* ---- statements (exec_edit.c) ---- */
int lq_lql_exec_edit(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err);
/* "Edits:" summary line for STATS. */
void lq_lql_edit_summary(const lq_lql *q, lq_sb *out);

#endif
