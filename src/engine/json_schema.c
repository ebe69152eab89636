/* JSON Schema -> GBNF, the subset llama.cpp's json-schema-to-grammar handles (see
 * larql/grammar.h). Each sub-schema becomes a rule; properties come out in the schema's
 * order, required ones always and optional ones possibly omitted; JSON whitespace is
 * bounded (the `ws` rule). A keyword that would narrow the language in a way the grammar
 * cannot express is refused (LQ_EUNSUPPORTED) rather than ignored, so that every output
 * validates against the schema. Annotations (title, description, default, examples,
 * $schema, $id, $comment) are ignored. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "core/sb.h"
#include "engine/json_internal.h"
#include "larql/grammar.h"

#define JS_MAX_DEPTH 64
#define JS_MAX_REPEAT 10000

/* The JSON values every schema can use. `value` is any JSON value; strings exclude
 * control characters as JSON requires, and \u escapes of surrogates (a lone one is not
 * valid text, and parsers such as jansson refuse it); numbers are bounded to 16 digits
 * and exponents to 2, so that every number fits a double. */
#define PRIMITIVES_TEXT \
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n" \
    "value ::= object | array | string | number | boolean | null\n" \
    "object ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? \"}\" ws\n" \
    "array ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n" \
    "string ::= \"\\\"\" char* \"\\\"\" ws\n" \
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] hex{3} | [dD] [0-7] hex{2} ))\n" \
    "integral-part ::= [0] | [1-9] [0-9]{0,15}\n" \
    "number ::= \"-\"? integral-part ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )? ws\n" \
    "integer ::= \"-\"? integral-part ws\n" \
    "boolean ::= ( \"true\" | \"false\" ) ws\n" \
    "null ::= \"null\" ws\n" \
    "date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )\n" \
    "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? " \
    "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n" \
    "hex ::= [0-9a-fA-F]\n" \
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
static const char PRIMITIVES[] = PRIMITIVES_TEXT;
static const char ANY_OBJECT_GBNF[] = "root ::= object\n" PRIMITIVES_TEXT;

const char *lq_grammar_json_object_gbnf(void) { return ANY_OBJECT_GBNF; }

typedef struct ref_rule {
    char *ref, *rule;
} ref_rule;

typedef struct conv {
    json_t *root;
    lq_sb out;     /* the rules */
    ref_rule *refs;
    size_t n_refs, cap_refs;
    unsigned n_rules;
    int depth;
    lq_err *err;
    int rc;
} conv;

static int bad(conv *C, int code, const char *fmt, const char *arg)
{
    if (!C->rc) {
        char msg[400];
        snprintf(msg, sizeof msg, fmt, arg);
        C->rc = lq_err_set(C->err, code, "json schema: %s", msg);
    }
    return C->rc;
}

/* A fresh rule name into buf. */
static void new_rule(conv *C, char *buf, size_t cap)
{
    snprintf(buf, cap, "r%u", ++C->n_rules);
}

void js_put_literal(lq_sb *b, const char *s, size_t n)
{
    lq_sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            lq_sb_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            lq_sb_printf(b, "\\x%02X", c);
        else
            lq_sb_put(b, (const char *)&c, 1);
    }
    lq_sb_put(b, "\"", 1);
}

/* A JSON value as a GBNF literal of its compact encoding. */
static int put_json_literal(conv *C, lq_sb *b, const json_t *v)
{
    char *enc = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!enc)
        return bad(C, LQ_ENOMEM, "%s", "out of memory");
    js_put_literal(b, enc, strlen(enc));
    free(enc);
    return 0;
}

static int gen(conv *C, json_t *s, char *name, size_t cap);

/* ---- schemas ---- */

static int get_count(conv *C, json_t *s, const char *key, long long dflt, long long *v)
{
    json_t *x = json_object_get(s, key);
    *v = dflt;
    if (!x)
        return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0 ||
        json_integer_value(x) > JS_MAX_REPEAT)
        return bad(C, LQ_EINVAL, "'%s' must be an integer in [0, 10000]", key);
    *v = json_integer_value(x);
    return 0;
}

/* Resolves "#/..." (a JSON pointer into the root document). */
static json_t *resolve(conv *C, const char *ref)
{
    if (strncmp(ref, "#", 1)) {
        bad(C, LQ_EUNSUPPORTED, "$ref \"%.200s\": only local references (#/...) are "
            "supported", ref);
        return NULL;
    }
    json_t *cur = C->root;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char key[256];
        size_t k = 0;
        for (size_t i = 0; i < n && k + 1 < sizeof key; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                key[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                key[k++] = p[i];
            }
        }
        key[k] = 0;
        if (json_is_object(cur))
            cur = json_object_get(cur, key);
        else if (json_is_array(cur))
            cur = json_array_get(cur, (size_t)strtoul(key, NULL, 10));
        else
            cur = NULL;
        p += n;
    }
    if (!cur || *p)
        bad(C, LQ_EINVAL, "$ref \"%.200s\" points at nothing", ref);
    return cur;
}

static int gen_ref(conv *C, const char *ref, char *name, size_t cap)
{
    for (size_t i = 0; i < C->n_refs; i++)
        if (!strcmp(C->refs[i].ref, ref)) {
            snprintf(name, cap, "%s", C->refs[i].rule);
            return 0;
        }
    /* a chain of schemas that are only references must end somewhere */
    json_t *t = resolve(C, ref);
    const char *seen[JS_MAX_DEPTH];
    int n_seen = 0;
    seen[n_seen++] = ref;
    while (t && json_is_object(t) && json_object_size(t) == 1 &&
           json_is_string(json_object_get(t, "$ref"))) {
        const char *r2 = json_string_value(json_object_get(t, "$ref"));
        for (int i = 0; i < n_seen; i++)
            if (!strcmp(seen[i], r2))
                return bad(C, LQ_EINVAL, "$ref loop through \"%.200s\" (the references "
                           "never reach a schema)", r2);
        if (n_seen == JS_MAX_DEPTH)
            return bad(C, LQ_EINVAL, "%s", "$ref chain too long");
        seen[n_seen++] = r2;
        t = resolve(C, r2);
    }
    if (!t)
        return C->rc;
    if (C->n_refs == C->cap_refs) {
        size_t nc = C->cap_refs ? 2 * C->cap_refs : 8;
        ref_rule *nr = realloc(C->refs, nc * sizeof *nr);
        if (!nr)
            return bad(C, LQ_ENOMEM, "%s", "out of memory");
        C->refs = nr;
        C->cap_refs = nc;
    }
    char rule[32];
    new_rule(C, rule, sizeof rule);
    ref_rule *rr = &C->refs[C->n_refs];
    rr->ref = strdup(ref);
    rr->rule = strdup(rule);
    if (!rr->ref || !rr->rule) {
        free(rr->ref);
        free(rr->rule);
        return bad(C, LQ_ENOMEM, "%s", "out of memory");
    }
    C->n_refs++;
    /* registered before generating, so recursive schemas refer to the rule */
    char body[32];
    if (gen(C, t, body, sizeof body))
        return C->rc;
    lq_sb_printf(&C->out, "%s ::= %s\n", rule, body);
    snprintf(name, cap, "%s", rule);
    return 0;
}

static int gen_object(conv *C, json_t *s, char *name, size_t cap)
{
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return bad(C, LQ_EINVAL, "%s", "'properties' must be an object");
    if (req && !json_is_array(req))
        return bad(C, LQ_EINVAL, "%s", "'required' must be an array");
    if (json_object_get(s, "patternProperties"))
        return bad(C, LQ_EUNSUPPORTED, "%s", "'patternProperties' is not supported");
    size_t n = props ? json_object_size(props) : 0;
    if (n == 0 && (!addl || json_is_true(addl))) {
        snprintf(name, cap, "object");
        return 0;
    }
    /* extra members: none (additionalProperties absent or false, as llama.cpp and OpenAI's
     * strict mode read it), or any key with a value of the given schema */
    char extra[32] = "";
    if (addl && !json_is_false(addl)) {
        char vrule[32] = "value";
        if (json_is_object(addl) && gen(C, addl, vrule, sizeof vrule))
            return C->rc;
        new_rule(C, extra, sizeof extra);
        lq_sb_printf(&C->out, "%s ::= string \":\" ws %s\n", extra, vrule);
    }
    /* kv_i, then T_i (nothing emitted yet) and C_i (a member before) for i = n .. 0 */
    char (*kv)[32] = calloc(n ? n : 1, sizeof *kv);
    int *required = calloc(n ? n : 1, sizeof *required);
    if (!kv || !required) {
        free(kv);
        free(required);
        return bad(C, LQ_ENOMEM, "%s", "out of memory");
    }
    const char *key;
    json_t *sub;
    size_t i = 0;
    json_object_foreach(props, key, sub) {
        char vrule[32];
        if (gen(C, sub, vrule, sizeof vrule))
            break;
        new_rule(C, kv[i], sizeof kv[i]);
        json_t *k = json_string(key);
        lq_sb_printf(&C->out, "%s ::= ", kv[i]);
        put_json_literal(C, &C->out, k);
        json_decref(k);
        lq_sb_printf(&C->out, " ws \":\" ws %s\n", vrule);
        size_t j;
        json_t *r;
        json_array_foreach(req, j, r) {
            if (json_is_string(r) && !strcmp(json_string_value(r), key))
                required[i] = 1;
        }
        i++;
    }
    size_t j;
    json_t *r;
    json_array_foreach(req, j, r) {
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r))) {
            if (!C->rc)
                bad(C, LQ_EINVAL, "required property \"%.200s\" is not among the "
                    "properties", json_is_string(r) ? json_string_value(r) : "?");
        }
    }
    if (C->rc) {
        free(kv);
        free(required);
        return C->rc;
    }
    char t_next[32], c_next[32], t_cur[32], c_cur[32];
    /* after the last property: the extra members, if any */
    new_rule(C, t_next, sizeof t_next);
    new_rule(C, c_next, sizeof c_next);
    if (extra[0]) {
        lq_sb_printf(&C->out, "%s ::= ( %s ( \",\" ws %s )* )?\n", t_next, extra, extra);
        lq_sb_printf(&C->out, "%s ::= ( \",\" ws %s )*\n", c_next, extra);
    } else {
        lq_sb_printf(&C->out, "%s ::= \"\"\n%s ::= \"\"\n", t_next, c_next);
    }
    for (size_t k = n; k-- > 0;) {
        new_rule(C, t_cur, sizeof t_cur);
        new_rule(C, c_cur, sizeof c_cur);
        if (required[k]) {
            lq_sb_printf(&C->out, "%s ::= %s %s\n", t_cur, kv[k], c_next);
            lq_sb_printf(&C->out, "%s ::= \",\" ws %s %s\n", c_cur, kv[k], c_next);
        } else {
            lq_sb_printf(&C->out, "%s ::= %s %s | %s\n", t_cur, kv[k], c_next, t_next);
            lq_sb_printf(&C->out, "%s ::= ( \",\" ws %s )? %s\n", c_cur, kv[k], c_next);
        }
        memcpy(t_next, t_cur, sizeof t_next);
        memcpy(c_next, c_cur, sizeof c_next);
    }
    free(kv);
    free(required);
    new_rule(C, name, cap);
    lq_sb_printf(&C->out, "%s ::= \"{\" ws %s \"}\" ws\n", name, t_next);
    return 0;
}

static int gen_array(conv *C, json_t *s, char *name, size_t cap)
{
    json_t *items = json_object_get(s, "items");
    if (json_object_get(s, "prefixItems") || json_is_array(items))
        return bad(C, LQ_EUNSUPPORTED, "%s", "tuple arrays (prefixItems, items as an array) "
                   "are not supported");
    if (json_object_get(s, "uniqueItems") && json_is_true(json_object_get(s, "uniqueItems")))
        return bad(C, LQ_EUNSUPPORTED, "%s", "'uniqueItems' is not supported");
    long long mn, mx;
    if (get_count(C, s, "minItems", 0, &mn) || get_count(C, s, "maxItems", -1, &mx))
        return C->rc;
    if (mx >= 0 && mx < mn)
        return bad(C, LQ_EINVAL, "%s", "maxItems below minItems (no array fits)");
    char item[32] = "value";
    if (items && gen(C, items, item, sizeof item))
        return C->rc;
    new_rule(C, name, cap);
    lq_sb_printf(&C->out, "%s ::= \"[\" ws ", name);
    if (mx == 0) {
        /* only [] */
    } else if (mn == 0) {
        if (mx < 0)
            lq_sb_printf(&C->out, "( %s ( \",\" ws %s )* )? ", item, item);
        else
            lq_sb_printf(&C->out, "( %s ( \",\" ws %s ){0,%lld} )? ", item, item, mx - 1);
    } else {
        if (mx < 0)
            lq_sb_printf(&C->out, "%s ( \",\" ws %s ){%lld,} ", item, item, mn - 1);
        else
            lq_sb_printf(&C->out, "%s ( \",\" ws %s ){%lld,%lld} ", item, item, mn - 1,
                         mx - 1);
    }
    lq_sb_puts(&C->out, "\"]\" ws\n");
    return 0;
}

static int gen_string(conv *C, json_t *s, char *name, size_t cap)
{
    json_t *fmt = json_object_get(s, "format");
    json_t *pat = json_object_get(s, "pattern");
    long long mn, mx;
    if (get_count(C, s, "minLength", 0, &mn) || get_count(C, s, "maxLength", -1, &mx))
        return C->rc;
    if (mx >= 0 && mx < mn)
        return bad(C, LQ_EINVAL, "%s", "maxLength below minLength (no string fits)");
    const char *f = json_is_string(fmt) ? json_string_value(fmt) : NULL;
    const char *fr = NULL;
    if (f && !strcmp(f, "date"))
        fr = "date";
    else if (f && !strcmp(f, "time"))
        fr = "time";
    else if (f && !strcmp(f, "date-time"))
        fr = "date \"T\" time";
    else if (f && !strcmp(f, "uuid"))
        fr = "uuid";
    if ((fr || pat) && (mn > 0 || mx >= 0))
        return bad(C, LQ_EUNSUPPORTED, "%s", "minLength/maxLength together with a format or "
                   "a pattern are not supported");
    if (fr && pat)
        return bad(C, LQ_EUNSUPPORTED, "%s", "a format together with a pattern is not "
                   "supported");
    new_rule(C, name, cap);
    lq_sb_printf(&C->out, "%s ::= ", name);
    if (pat) {
        if (!json_is_string(pat))
            return bad(C, LQ_EINVAL, "%s", "'pattern' must be a string");
        int prc = js_pattern(json_string_value(pat), &C->out, C->err);
        if (prc)
            return C->rc = prc;
    } else if (fr) {
        lq_sb_printf(&C->out, "\"\\\"\" %s \"\\\"\" ws", fr);
    } else if (mn == 0 && mx < 0) {
        lq_sb_puts(&C->out, "string");
    } else if (mx < 0) {
        lq_sb_printf(&C->out, "\"\\\"\" char{%lld,} \"\\\"\" ws", mn);
    } else {
        lq_sb_printf(&C->out, "\"\\\"\" char{%lld,%lld} \"\\\"\" ws", mn, mx);
    }
    lq_sb_puts(&C->out, "\n");
    return 0;
}

static int has_range(json_t *s)
{
    return json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
           json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum");
}

/* One bound: key's number, made an inclusive integer bound (ceil for a lower one, floor for
 * an upper one, +-1 when exclusive). Returns 1 when present, 0 when absent, -1 on error. */
static int int_bound(conv *C, json_t *s, const char *key, int lower, int exclusive, long long *v)
{
    json_t *x = json_object_get(s, key);
    if (!x)
        return 0;
    /* generators write safe-integer bounds (zod's int(): +-(2^53 - 1)); up to +-10^18 */
    if (!json_is_number(x) || fabs(json_number_value(x)) > 1e18) {
        bad(C, exclusive && json_is_boolean(x) ? LQ_EUNSUPPORTED : LQ_EINVAL,
            "'%s' must be a number within +-10^18 (draft-4 boolean exclusive bounds are not "
            "supported)", key);
        return -1;
    }
    double d = json_number_value(x), r = lower ? ceil(d) : floor(d);
    if (exclusive && r == d)
        r += lower ? 1 : -1;
    *v = (long long)r;
    return 1;
}

/* "type": "integer" with minimum / maximum / exclusive bounds. */
static int gen_int_range(conv *C, json_t *s, char *name, size_t cap)
{
    long long lo = 0, hi = 0, x;
    int has_lo = 0, has_hi = 0, r;
    if ((r = int_bound(C, s, "minimum", 1, 0, &x)) < 0)
        return C->rc;
    if (r)
        lo = x, has_lo = 1;
    if ((r = int_bound(C, s, "exclusiveMinimum", 1, 1, &x)) < 0)
        return C->rc;
    if (r && (!has_lo || x > lo))
        lo = x, has_lo = 1;
    if ((r = int_bound(C, s, "maximum", 0, 0, &x)) < 0)
        return C->rc;
    if (r)
        hi = x, has_hi = 1;
    if ((r = int_bound(C, s, "exclusiveMaximum", 0, 1, &x)) < 0)
        return C->rc;
    if (r && (!has_hi || x < hi))
        hi = x, has_hi = 1;
    /* integers are written with at most 16 digits: a bound past 10^16 on the far side binds
     * none of them (the grammar stays that of an open side) */
    const long long far = 10000000000000000LL;
    if (has_hi && hi >= far && (!has_lo || lo < far))
        has_hi = 0;
    if (has_lo && lo <= -far && (!has_hi || hi > -far))
        has_lo = 0;
    new_rule(C, name, cap);
    lq_sb_printf(&C->out, "%s ::= ", name);
    if (gr_int_range(lo, has_lo, hi, has_hi, &C->out))
        return bad(C, LQ_EINVAL, "%s", "the integer bounds leave no value (minimum above maximum)");
    lq_sb_puts(&C->out, " ws\n");
    return 0;
}

static int gen_type(conv *C, json_t *s, const char *type, char *name, size_t cap)
{
    if (has_range(s) && !strcmp(type, "integer"))
        return gen_int_range(C, s, name, cap);
    if (has_range(s) && !strcmp(type, "number"))
        return bad(C, LQ_EUNSUPPORTED, "%s", "minimum/maximum are supported on integers only, "
                   "not on \"type\": \"number\"");
    if (!strcmp(type, "object"))
        return gen_object(C, s, name, cap);
    if (!strcmp(type, "array"))
        return gen_array(C, s, name, cap);
    if (!strcmp(type, "string"))
        return gen_string(C, s, name, cap);
    if (!strcmp(type, "number") || !strcmp(type, "integer") || !strcmp(type, "boolean") ||
        !strcmp(type, "null")) {
        snprintf(name, cap, "%s", type);
        return 0;
    }
    return bad(C, LQ_EINVAL, "unknown type \"%.100s\"", type);
}

/* Alternatives of a list of schemas (anyOf, oneOf) or of type names (type arrays). */
static int gen_alts(conv *C, json_t *s, json_t *list, int types, char *name, size_t cap)
{
    if (!json_is_array(list) || json_array_size(list) == 0)
        return bad(C, LQ_EINVAL, "%s", types ? "'type' must be a string or a non-empty array"
                                             : "anyOf/oneOf must be a non-empty array");
    size_t n = json_array_size(list);
    char (*alt)[32] = calloc(n, sizeof *alt);
    if (!alt)
        return bad(C, LQ_ENOMEM, "%s", "out of memory");
    for (size_t i = 0; i < n && !C->rc; i++) {
        json_t *e = json_array_get(list, i);
        if (types) {
            if (!json_is_string(e))
                bad(C, LQ_EINVAL, "%s", "'type' array entries must be strings");
            else
                gen_type(C, s, json_string_value(e), alt[i], sizeof alt[i]);
        } else {
            gen(C, e, alt[i], sizeof alt[i]);
        }
    }
    if (!C->rc) {
        new_rule(C, name, cap);
        lq_sb_printf(&C->out, "%s ::=", name);
        for (size_t i = 0; i < n; i++)
            lq_sb_printf(&C->out, "%s %s", i ? " |" : "", alt[i]);
        lq_sb_puts(&C->out, "\n");
    }
    free(alt);
    return C->rc;
}

static const char *const UNSUPPORTED[] = {
    "allOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired",
    "multipleOf",
    "minProperties", "maxProperties", "propertyNames", "contains", "unevaluatedProperties",
    "unevaluatedItems", NULL,
};

static int gen(conv *C, json_t *s, char *name, size_t cap)
{
    if (C->rc)
        return C->rc;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        snprintf(name, cap, "value");
        return 0;
    }
    if (json_is_false(s))
        return bad(C, LQ_EINVAL, "%s", "the schema false matches nothing");
    if (!json_is_object(s))
        return bad(C, LQ_EINVAL, "%s", "a schema must be an object or a boolean");
    if (++C->depth > JS_MAX_DEPTH) {
        C->depth--;
        return bad(C, LQ_EINVAL, "%s", "schema nested deeper than 64 levels");
    }
    for (int i = 0; UNSUPPORTED[i]; i++)
        if (json_object_get(s, UNSUPPORTED[i])) {
            C->depth--;
            return bad(C, LQ_EUNSUPPORTED, "'%s' is not supported", UNSUPPORTED[i]);
        }
    if (has_range(s) && !json_object_get(s, "type") && !json_object_get(s, "enum") &&
        !json_object_get(s, "const")) {
        C->depth--;
        return bad(C, LQ_EUNSUPPORTED, "%s", "minimum/maximum need \"type\": \"integer\"");
    }
    json_t *ref = json_object_get(s, "$ref");
    json_t *cst = json_object_get(s, "const");
    json_t *en = json_object_get(s, "enum");
    json_t *any = json_object_get(s, "anyOf");
    json_t *one = json_object_get(s, "oneOf");
    json_t *type = json_object_get(s, "type");
    if (ref) {
        if (!json_is_string(ref))
            bad(C, LQ_EINVAL, "%s", "'$ref' must be a string");
        else
            gen_ref(C, json_string_value(ref), name, cap);
    } else if (cst || en) {
        if (en && (!json_is_array(en) || json_array_size(en) == 0)) {
            bad(C, LQ_EINVAL, "%s", "'enum' must be a non-empty array");
        } else {
            new_rule(C, name, cap);
            lq_sb_printf(&C->out, "%s ::= ( ", name);
            if (cst) {
                put_json_literal(C, &C->out, cst);
            } else {
                size_t i;
                json_t *e;
                json_array_foreach(en, i, e) {
                    if (i)
                        lq_sb_puts(&C->out, " | ");
                    put_json_literal(C, &C->out, e);
                }
            }
            lq_sb_puts(&C->out, " ) ws\n");
        }
    } else if (any || one) {
        gen_alts(C, s, any ? any : one, 0, name, cap);
    } else if (json_is_array(type)) {
        gen_alts(C, s, type, 1, name, cap);
    } else if (type) {
        if (!json_is_string(type))
            bad(C, LQ_EINVAL, "%s", "'type' must be a string or an array");
        else
            gen_type(C, s, json_string_value(type), name, cap);
    } else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties")) {
        gen_object(C, s, name, cap);
    } else if (json_object_get(s, "items")) {
        gen_array(C, s, name, cap);
    } else {
        snprintf(name, cap, "value");
    }
    C->depth--;
    return C->rc;
}

int lq_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, lq_err *err)
{
    if (!gbnf)
        return lq_err_set(err, LQ_EINVAL, "json schema: NULL argument");
    *gbnf = NULL;
    if (!schema)
        return lq_err_set(err, LQ_EINVAL, "json schema: NULL schema");
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!root)
        return lq_err_set(err, LQ_EINVAL, "json schema: not JSON (line %d, column %d: %s)",
                          je.line, je.column, je.text);
    conv C = {.root = root, .err = err};
    char top[32];
    if (!gen(&C, root, top, sizeof top)) {
        lq_sb_printf(&C.out, "root ::= %s\n", top);
        lq_sb_puts(&C.out, PRIMITIVES);
    }
    for (size_t i = 0; i < C.n_refs; i++) {
        free(C.refs[i].ref);
        free(C.refs[i].rule);
    }
    free(C.refs);
    json_decref(root);
    if (C.rc) {
        lq_sb_free(&C.out);
        return C.rc;
    }
    return lq_sb_finish(&C.out, gbnf, err);
}

int lq_grammar_from_json_schema(const char *schema, size_t len, lq_grammar **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "json schema: NULL argument");
    *out = NULL;
    char *text;
    int rc = lq_json_schema_to_gbnf(schema, len, &text, err);
    if (rc)
        return rc;
    rc = lq_grammar_parse(text, strlen(text), out, err);
    free(text);
    if (rc == LQ_EINVAL && err && strstr(err->msg, "left recursion"))
        return lq_err_set(err, LQ_EINVAL, "json schema: a $ref loop (a schema that refers "
                          "to itself before any JSON text)");
    if (rc == LQ_EINVAL && err && strstr(err->msg, "is empty"))
        return lq_err_set(err, LQ_EINVAL, "json schema: no JSON value matches it (a "
                          "required recursion that never ends)");
    if (rc)
        lq_err_prefix(err, "json schema");
    return rc;
}
