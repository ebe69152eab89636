/* The Jinja subset interpreter's shared types (lexer, parser, evaluator, built-ins).
 *
 * Semantics follow Python Jinja2 as Hugging Face transformers configures it for chat
 * templates (ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on, the loopcontrols
 * extension, tojson as json.dumps with ensure_ascii=False, raise_exception and strftime_now
 * as globals), because the rendered text must match what the model was trained on byte for
 * byte. Anything outside the subset is an error naming the template line, never a guess. */
#ifndef LQ_ENGINE_JINJA_INTERNAL_H
#define LQ_ENGINE_JINJA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/sb.h"
#include "larql/status.h"

/* Bounds for untrusted templates: a template is data from a model file. */
#define JJ_MAX_SRC (1u << 20)          /* template source bytes */
#define JJ_MAX_DEPTH 200               /* parser nesting, macro call depth */
#define JJ_MAX_RECURSION 2000          /* nested evaluations (expressions, statements, macro
                                        * calls together): the C stack a render may use */
#define JJ_MAX_STEPS 5000000ull        /* evaluated nodes + loop iterations per render */
#define JJ_MAX_OUT ((size_t)16 << 20)  /* rendered bytes (also the bound on any one string) */
#define JJ_MAX_ITEMS 1000000u          /* elements of one list (range(), repetition) */
#define JJ_MAX_NEST 256                /* lists/dicts inside each other (values are walked
                                        * recursively: printed, compared, freed) */
#define JJ_MAX_WORK ((size_t)256 << 20) /* bytes of strings, list and dict entries made by one
                                        * parse or render: a loop that keeps growing a string
                                        * (quadratic copying) stops here, not after hours */

/* The allocation budget of the current parse or render (per thread): every string, list
 * element and dict entry made is charged; when it runs out, making values fails like an
 * allocation failure. */
void jj_budget_reset(void);
int jj_budget_spent(void);

/* ---- values ---- */
typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC
} jv_type;

typedef struct jstr {
    int rc;
    size_t n;
    char s[];
} jstr;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;

typedef struct jv {
    jv_type t;
    unsigned char safe; /* a string marked |safe (markupsafe.Markup): '+' escapes the other side */
    union {
        int b;
        int64_t i;
        double f;
        jstr *s;
        jlist *l;
        jdict *d;
        jfunc *fn;
    } u;
} jv;

struct jlist {
    int rc;
    int depth; /* 1 + the deepest element's depth */
    int tuple; /* a Python tuple (items() pairs, "(a, b)"): printed with parentheses */
    int gen; /* the result of map/select/selectattr...: a Python generator (always true, no len(),
              * not printable or JSON) */
    size_t n, cap;
    jv *v;
};
struct jdict {
    int rc;
    int depth;
    int ns; /* a namespace(): attribute assignment allowed */
    size_t n, cap;
    jstr **k;
    jv *v;
};
struct jnode;
struct jfunc {
    int rc;
    int builtin;              /* JF_* or 0 for a macro */
    const struct jnode *macro; /* the macro's definition */
};
enum { JF_RANGE = 1, JF_NAMESPACE, JF_RAISE, JF_STRFTIME, JF_DICT };

jv jv_undef(void);
jv jv_none(void);
jv jv_bool(int b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_str(const char *s, size_t n); /* JV_UNDEF t with u.s NULL on OOM is never returned: see jv_ok */
jv jv_cstr(const char *s);
jv jv_list(void);
jv jv_dict(void);
jv jv_func(int builtin, const struct jnode *macro);
jv jv_ref(jv v);
void jv_free(jv v);
/* A value whose allocation failed has t JV_STR/LIST/DICT/FUNC and a NULL pointer. */
int jv_oom(jv v);
int jl_push(jlist *l, jv v);          /* takes v */
int jd_set(jdict *d, const char *k, size_t kn, jv v); /* takes v */
jv *jd_get(const jdict *d, const char *k, size_t kn);
int jv_truthy(jv v);
int jv_equal(jv a, jv b);
/* Python str() of v appended to b (strings raw, others as Python prints them). */
void jv_to_str(lq_sb *b, jv v);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys) into b; -1 if v holds
 * something JSON cannot (undefined, a function). */
int jv_to_json(lq_sb *b, jv v, int indent, int sort_keys, const char *item_sep, const char *key_sep);
const char *jv_type_name(jv v);
int jv_depth(jv v);
/* Does v hold a namespace() (itself, or inside a list or dict)? Namespaces are the only
 * mutable values; one may not be stored in another, so values never form a cycle. */
int jv_has_namespace(jv v);
/* Number of code points of a UTF-8 string (Python's len()). */
size_t jj_utf8_len(const char *s, size_t n);
/* Byte offset of code point index cp (clamped to n). */
size_t jj_utf8_off(const char *s, size_t n, size_t cp);

struct json_t;
/* JSON (jansson) -> value; depth-bounded. */
int jv_from_json(const struct json_t *j, jv *out, int depth);

/* ---- lexer ---- */
typedef enum {
    JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP, JT_EOF
} jtok_type;

typedef struct jtok {
    jtok_type t;
    int line;
    const char *s; /* into the lexer's buffer (TEXT, NAME, OP) or an owned decoded string */
    size_t n;
    int64_t i;
    double f;
} jtok;

typedef struct jlex {
    jtok *t;
    size_t n, cap;
    char **owned; /* decoded string literals and trimmed text */
    size_t n_owned, cap_owned;
    char *src;    /* the normalised source */
} jlex;

int jj_lex(const char *src, size_t n, jlex *out, lq_err *err);
void jj_lex_free(jlex *lx);

/* ---- AST ---- */
typedef enum {
    /* statements */
    JN_BODY, JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_BREAK,
    JN_CONTINUE, JN_FILTER_BLOCK,
    /* expressions */
    JN_CONST, JN_NAME, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST, JN_NOT, JN_NEG,
    JN_POS, JN_BIN, JN_AND, JN_OR, JN_CMP, JN_COND, JN_LIST, JN_DICT, JN_KWARG
} jn_type;

typedef struct jnode {
    jn_type t;
    int line;
    int op;          /* JN_BIN / JN_CMP operator, JN_TEST negation */
    const char *s;   /* names, text */
    size_t n;
    jv val;          /* JN_CONST */
    struct jnode **kid;
    size_t nkid;
    /* JN_IF: kid = cond0, body0, cond1, body1, ..., [else body] (else when nkid is odd).
     * JN_FOR: kid = target(s) list (JN_LIST of JN_NAME), iter, body, else body or NULL,
     *         filter cond or NULL.
     * JN_FILTER_BLOCK: kid = the filter chain (reading the name " filter body"), body.
     * JN_SET: kid = target (JN_NAME or JN_ATTR), value. JN_SET_BLOCK: target, body.
     * JN_MACRO: s = name; kid = body, then params (JN_NAME, or JN_KWARG for a default).
     * JN_CALL/FILTER/TEST: kid[0] = callee/operand, then args (JN_KWARG: s = key, kid[0]). */
} jnode;

enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_CAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef struct jtemplate {
    jlex lx;
    jnode *root;
    jnode **nodes; /* every node, for freeing */
    size_t n_nodes, cap_nodes;
} jtemplate;

int jj_parse(jtemplate *t, lq_err *err);

/* ---- evaluation ---- */
typedef struct jframe jframe;
typedef struct jctx {
    const jtemplate *tpl;
    jframe *top;
    jframe *root;
    lq_sb *out;
    uint64_t steps;
    int depth;      /* macro calls */
    int recursion;  /* nested eval/exec frames */
    lq_err *err;
    int failed;
} jctx;

/* Sets the error "template line L: ..." once; returns -1. */
int jj_fail(jctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Built-ins (jinja_builtins.c). Names are checked at parse time. */
int jj_filter_known(const char *name, size_t n);
int jj_test_known(const char *name, size_t n);
/* args[0] is the operand; kw are (name, value) pairs. */
typedef struct jarg {
    const char *name; /* NULL: positional */
    size_t nn;
    jv v;
} jarg;
int jj_filter(jctx *c, int line, const char *name, size_t n, jv in, jarg *args, size_t na, jv *out);
int jj_test(jctx *c, int line, const char *name, size_t n, jv in, jarg *args, size_t na, int *out);
/* A method call obj.name(args): 1 when handled (result in *out), 0 when obj has no such
 * method, -1 on error. */
int jj_method(jctx *c, int line, jv obj, const char *name, size_t n, jarg *args, size_t na, jv *out);
int jj_call_builtin(jctx *c, int line, int which, jarg *args, size_t na, jv *out);
int jj_as_list(jctx *c, int line, jv v, jv *out);

/* Helpers the filters, tests and methods share (jinja_text.c). */
static inline int jj_eq(const char *s, size_t n, const char *lit) { return n == strlen(lit) && !memcmp(s, lit, n); }
int jj_in_list(const char *const *names, const char *s, size_t n); /* names ends with NULL */
int jj_oom(jctx *c, int line);
int jj_put_str(jctx *c, int line, lq_sb *b, jv *out); /* b's text as a value; frees b */
jv *jj_arg(jarg *a, size_t na, size_t pos, const char *name); /* positional pos or keyword name */
int jj_check_args(jctx *c, int line, const char *what, jarg *a, size_t na, size_t max_pos,
                  const char *const *kw);
size_t jj_prev_char(const char *s, size_t e);
int jj_is_alpha(unsigned char ch);
/* which: 1 left, 2 right, 3 both; chars NULL: Unicode whitespace */
void jj_strip(const char *s, size_t n, int which, const char *chars, size_t cn, size_t *a, size_t *b);
int jj_to_str(jctx *c, int line, jv v, jv *out);
int jj_case_map(jctx *c, int line, jv v, int mode, jv *out); /* 0 upper, 1 lower, 2 title, 3 capitalize */
int jj_replace(jctx *c, int line, jv s, jv *old, jv *nw, jv *cnt, jv *out);
int jj_split(jctx *c, int line, jv s, jv *sep, jv *maxs, jv *out);
size_t jj_len_of(jv v);
jv jj_attr_path(jv item, jv path);
int jj_items_list(jctx *c, int line, jv v, jv *out);
int jj_join(jctx *c, int line, jv in, jarg *a, size_t na, jv *out);
/* obj.name as Jinja's getattr: dict key, namespace attribute; Undefined when absent. */
jv jj_getattr(jv obj, const char *name, size_t n);

#endif
