/* LQL internals: tokens (lexer.c), the statement AST (parser.c) and what the executor
 * (exec_*.c) shares. Symbols are lq_-prefixed because they live in liblarql.a. */
#ifndef LQ_LQL_INTERNAL_H
#define LQ_LQL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/sb.h"
#include "larql/lql.h"
#include "larql/status.h"

/* ---- lexer ---- */

typedef enum lq_ltok_kind {
    LQ_LT_EOF = 0,
    LQ_LT_KEYWORD, /* text = the keyword in upper case */
    LQ_LT_IDENT,   /* text = as written */
    LQ_LT_STRING,  /* text = decoded (escapes resolved), may hold NUL-free UTF-8 */
    LQ_LT_INT,     /* ival (and num) */
    LQ_LT_NUMBER,  /* num: a decimal "1.5" */
    LQ_LT_STAR, LQ_LT_COMMA, LQ_LT_SEMI, LQ_LT_LPAREN, LQ_LT_RPAREN, LQ_LT_DOT,
    LQ_LT_PIPE,    /* |> */
    LQ_LT_EQ, LQ_LT_NEQ, LQ_LT_GT, LQ_LT_LT, LQ_LT_GTE, LQ_LT_LTE,
    LQ_LT_DASH,    /* '-': ranges "0-3"; the parser turns DASH number into a negative */
} lq_ltok_kind;

typedef struct lq_ltok {
    int kind;
    char *text;        /* KEYWORD / IDENT / STRING (malloc'd), else NULL */
    long long ival;
    double num;
    size_t off, len;   /* bytes of the source it came from */
    int line, col;     /* 1-based; col counts bytes */
} lq_ltok;

typedef struct lq_ltoks {
    lq_ltok *t;
    size_t n;          /* the last one is LQ_LT_EOF */
} lq_ltoks;

/* Tokenises src. line/col: position of src[0] in its script. Errors are LQ_EINVAL with a
 * message carrying position and caret (lq_lql_diag). */
int lq_lql_lex(const char *src, size_t len, int line, int col, lq_ltoks *out, lq_err *err);
void lq_lql_toks_free(lq_ltoks *t);
/* Human name of a token for messages: "';'", "string \"x\"", "keyword WHERE", "end of input". */
void lq_lql_tok_describe(const lq_ltok *t, char *buf, size_t cap);
/* 1 if word (any case) is an LQL keyword. */
int lq_lql_is_keyword(const char *word, size_t len);

/* "Parse error at line L, column C: msg\n  <source line>\n  <caret>" into err (LQ_EINVAL).
 * off: byte offset of the error in src; line/col its position. */
int lq_lql_diag(lq_err *err, const char *kind, const char *src, size_t len, size_t off,
                int line, int col, const char *fmt, ...) __attribute__((format(printf, 8, 9)));

/* ---- AST ---- */

typedef enum lq_lql_kind {
    LQ_LS_USE = 1,
    LQ_LS_STATS,
    LQ_LS_DESCRIBE,
    LQ_LS_WALK,
    LQ_LS_INFER,
    LQ_LS_EXPLAIN_WALK,
    LQ_LS_EXPLAIN_INFER,
    LQ_LS_SELECT,
    LQ_LS_INSERT,
    LQ_LS_DELETE,
    LQ_LS_UPDATE,
    LQ_LS_BEGIN_PATCH,
    LQ_LS_SAVE_PATCH,
    LQ_LS_APPLY_PATCH,
    LQ_LS_REMOVE_PATCH,
    LQ_LS_SHOW_PATCHES,
    LQ_LS_SHOW_RELATIONS,
    LQ_LS_SHOW_LAYERS,
    LQ_LS_SHOW_FEATURES,
    LQ_LS_SHOW_ENTITIES,
    LQ_LS_SHOW_MODELS,
    LQ_LS_COMPILE,
    LQ_LS_USE_MODEL,
    LQ_LS_USE_REMOTE,
    LQ_LS_EXTRACT,
    LQ_LS_DIFF,
    LQ_LS_MERGE,
    LQ_LS_TRACE,
    LQ_LS_COMPACT,
    LQ_LS_SHOW_COMPACT_STATUS,
    LQ_LS_REBALANCE,
} lq_lql_kind;

/* ON CONFLICT of COMPILE INTO VINDEX and MERGE */
typedef enum lq_lql_conflict {
    LQ_LC_NONE = 0, LQ_LC_LAST_WINS, LQ_LC_HIGHEST_CONFIDENCE, LQ_LC_FAIL, LQ_LC_KEEP_SOURCE, LQ_LC_KEEP_TARGET
} lq_lql_conflict;

typedef enum lq_lql_band { LQ_LB_NONE = -1, LQ_LB_SYNTAX = 0, LQ_LB_KNOWLEDGE, LQ_LB_OUTPUT, LQ_LB_ALL } lq_lql_band;
typedef enum lq_lql_dmode { LQ_LD_BRIEF = 0, LQ_LD_VERBOSE, LQ_LD_RAW } lq_lql_dmode;
typedef enum lq_lql_wmode { LQ_LW_HYBRID = 0, LQ_LW_PURE, LQ_LW_DENSE } lq_lql_wmode;
typedef enum lq_lql_from { LQ_LF_EDGES = 0, LQ_LF_FEATURES, LQ_LF_ENTITIES } lq_lql_from;
typedef enum lq_lql_op { LQ_LO_EQ = 0, LQ_LO_NEQ, LQ_LO_GT, LQ_LO_LT, LQ_LO_GTE, LQ_LO_LTE, LQ_LO_LIKE, LQ_LO_IN } lq_lql_op;
typedef enum lq_lql_vkind { LQ_LV_STRING = 0, LQ_LV_INT, LQ_LV_NUMBER } lq_lql_vkind;

typedef struct lq_lql_value {
    int kind;           /* lq_lql_vkind */
    char *s;            /* STRING */
    double num;         /* INT and NUMBER */
} lq_lql_value;

/* field op value; IN has a list of values. field is lower case ("entity", "layer", ...). */
typedef struct lq_lql_cond {
    char *field;
    int op;
    lq_lql_value v;
    lq_lql_value *list; /* IN */
    size_t n_list;
} lq_lql_cond;

typedef struct lq_lql_assign {
    char *field;
    lq_lql_value v;
} lq_lql_assign;

typedef struct lq_lql_stmt {
    int kind;                 /* lq_lql_kind */
    int line, col;            /* where the statement starts */
    char *str;                /* USE/STATS path, DESCRIBE entity, WALK/INFER prompt, patch
                                 name, COMPILE output dir (NULL when absent) */
    /* options; -1 = not given */
    int top;
    int has_range, range_lo, range_hi; /* LAYERS a-b / RANGE a-b */
    int all_layers;           /* LAYERS ALL / ALL LAYERS */
    int layer;                /* AT LAYER n, SHOW FEATURES n, SHOW ENTITIES n */
    int band;                 /* lq_lql_band */
    int dmode;                /* lq_lql_dmode */
    int wmode;                /* lq_lql_wmode */
    int compare, verbose, relations_only, with_examples, with_attention;
    /* SELECT */
    int from;                 /* lq_lql_from */
    char **cols;              /* NULL with n_cols 0 = "*" */
    size_t n_cols;
    char *nearest;            /* NEAREST TO "e" (with layer) */
    lq_lql_cond *where;
    size_t n_where;
    char *order_by;           /* lower case field, NULL = none */
    int order_desc;           /* 1 DESC (default), 0 ASC */
    int limit;
    /* INSERT */
    char *entity, *relation, *target;
    double confidence, alpha; /* NaN = not given */
    int insert_mode;          /* -1 none, 0 KNN, 1 COMPOSE, 2 SUBJECT */
    /* UPDATE */
    lq_lql_assign *set;
    size_t n_set;
    /* COMPILE */
    int compile_current;      /* COMPILE CURRENT (else str_src) */
    char *str_src;
    int compile_model;        /* INTO MODEL (else INTO VINDEX) */
    int format;               /* FORMAT: 0 none, 1 SAFETENSORS, 2 GGUF */
    int conflict;             /* lq_lql_conflict (COMPILE, MERGE) */
    /* DIFF a b / MERGE src INTO dst / EXTRACT MODEL m INTO out / TRACE ... SAVE path:
       str = a / src / m / prompt, str2 = b / dst / out / save path; current_a/b: CURRENT */
    char *str2;
    int current_a, current_b;
    char *into_patch;         /* DIFF ... INTO PATCH "p" */
    char *into_report;        /* DIFF ... INTO REPORT "r" (LARQL's docs) */
    int extract_level;        /* EXTRACT WITH: 0 browse, 1 inference, 2 all */
    unsigned components;      /* EXTRACT COMPONENTS: bit per component (accepted, all are built) */
    int auto_extract;         /* USE MODEL ... AUTO_EXTRACT */
    /* TRACE: target = FOR token */
    int decompose, positions_all;
    /* INFER ROUTE VERIFY [FALLBACK] [TOPK n] [EXIT] */
    int route, route_fallback, route_topk, route_exit;
    /* COMPACT MINOR | MAJOR [FULL] [WITH LAMBDA = x] */
    int compact_major, compact_full;
    double lambda;            /* NaN = not given */
    /* REBALANCE [UNTIL CONVERGED] [MAX n] [FLOOR x] [CEILING x] */
    int max_iters;
    double floor_p, ceiling_p; /* NaN = not given */
    int stream;               /* DESCRIBE ... STREAM (LARQL's docs; output is whole anyway) */
    /* stmt |> next */
    struct lq_lql_stmt *next;
} lq_lql_stmt;

/* Parses exactly one statement (optional "|> stmt" chain, optional ';', then end of input).
 * line/col as lq_lql_lex. */
int lq_lql_parse(const char *src, size_t len, int line, int col, lq_lql_stmt **out, lq_err *err);
void lq_lql_stmt_free(lq_lql_stmt *s);
/* Statement name for messages ("DESCRIBE", "SHOW LAYERS", ...). */
const char *lq_lql_kind_name(int kind);

#endif
