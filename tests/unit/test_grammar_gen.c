/* Constrained generation end to end: on the trained model (models/tinystories-ternary.gguf)
 * and on a random fixture, 50 sampled outputs at temperature 1 under a JSON schema all
 * parse (jansson) and validate against the schema (a validator for the supported subset,
 * below), and outputs under llama.cpp's example GBNF grammars are accepted by the
 * recogniser. Also: greedy output is in the language, the scheduler path gives the same
 * tokens as lq_generate, and logit_bias bans a token. */
#include <jansson.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "larql/fixture.h"
#include "larql/generate.h"
#include "larql/grammar.h"
#include "larql/model.h"
#include "larql/scheduler.h"
#include "larql/tokenizer.h"

#define TRAINED "models/tinystories-ternary.gguf"
#define GDIR "tests/data/grammars"

/* Ten fields covering the converter's keywords; every string and number is bounded, so an
 * output always fits the trained model's 256-token context. */
static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\"},"
    "\"score\":{\"type\":[\"number\",\"null\"]},"
    "\"ok\":{\"type\":\"boolean\"},"
    "\"kind\":{\"enum\":[\"cat\",\"dog\",3,null]},"
    "\"ver\":{\"const\":\"v1\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":4},"
    "\"minItems\":1,\"maxItems\":2},"
    "\"when\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]{3}$\"},"
    "\"pt\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/pt\"}]}},"
    "\"required\":[\"name\",\"age\",\"kind\",\"ver\",\"tags\"],"
    "\"additionalProperties\":false,"
    "\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},"
    "\"y\":{\"type\":\"boolean\"}},\"required\":[\"x\",\"y\"]}}}";

/* ---- a validator for the supported subset ---- */

static size_t utf8_len(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int type_ok(const json_t *v, const char *t)
{
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return 0;
}

static int valid_date(const char *s)
{
    int y, m, d;
    char tail;
    return strlen(s) == 10 && sscanf(s, "%4d-%2d-%2d%c", &y, &m, &d, &tail) == 3 && m >= 1 &&
           m <= 12 && d >= 1 && d <= 31;
}

static int validate(const json_t *v, const json_t *s, const json_t *root, char *why, size_t cap)
{
#define FAILV(...) do { snprintf(why, cap, __VA_ARGS__); return 0; } while (0)
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const char *r = json_string_value(ref);
        const json_t *t = json_object_get(json_object_get(root, "$defs"), r + strlen("#/$defs/"));
        return t ? validate(v, t, root, why, cap) : 0;
    }
    const json_t *any = json_object_get(s, "anyOf");
    if (any) {
        size_t i;
        const json_t *alt;
        json_array_foreach(any, i, alt) if (validate(v, alt, root, why, cap)) return 1;
        FAILV("no anyOf alternative matches");
    }
    const json_t *en = json_object_get(s, "enum");
    if (en) {
        size_t i;
        const json_t *e;
        json_array_foreach(en, i, e) if (json_equal(e, v)) return 1;
        FAILV("not in enum");
    }
    const json_t *cst = json_object_get(s, "const");
    if (cst && !json_equal(cst, v))
        FAILV("const differs");
    const json_t *ty = json_object_get(s, "type");
    if (json_is_string(ty) && !type_ok(v, json_string_value(ty)))
        FAILV("not a %s", json_string_value(ty));
    if (json_is_array(ty)) {
        int ok = 0;
        size_t i;
        const json_t *t;
        json_array_foreach(ty, i, t) ok |= type_ok(v, json_string_value(t));
        if (!ok)
            FAILV("none of the types");
    }
    if (json_is_string(v)) {
        const char *str = json_string_value(v);
        json_int_t mn = json_integer_value(json_object_get(s, "minLength"));
        const json_t *mx = json_object_get(s, "maxLength");
        if ((json_int_t)utf8_len(str) < mn || (mx && (json_int_t)utf8_len(str) > json_integer_value(mx)))
            FAILV("string length %zu", utf8_len(str));
        const char *fmt = json_string_value(json_object_get(s, "format"));
        if (fmt && !strcmp(fmt, "date") && !valid_date(str))
            FAILV("not a date: %s", str);
        const char *pat = json_string_value(json_object_get(s, "pattern"));
        if (pat) {
            regex_t re;
            if (regcomp(&re, pat, REG_EXTENDED | REG_NOSUB))
                FAILV("regcomp");
            int m = regexec(&re, str, 0, NULL, 0);
            regfree(&re);
            if (m)
                FAILV("'%s' does not match %s", str, pat);
        }
    }
    if (json_is_array(v)) {
        const json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
        size_t n = json_array_size(v);
        if ((mn && (json_int_t)n < json_integer_value(mn)) || (mx && (json_int_t)n > json_integer_value(mx)))
            FAILV("%zu items", n);
        const json_t *items = json_object_get(s, "items");
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e) if (items && !validate(e, items, root, why, cap)) return 0;
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(s, "properties");
        const json_t *req = json_object_get(s, "required");
        size_t i;
        const json_t *r;
        json_array_foreach(req, i, r) if (!json_object_get(v, json_string_value(r)))
            FAILV("missing required '%s'", json_string_value(r));
        const char *k;
        const json_t *e;
        json_object_foreach((json_t *)v, k, e) {
            const json_t *ps = json_object_get(props, k);
            if (!ps) {
                if (json_is_false(json_object_get(s, "additionalProperties")))
                    FAILV("unexpected property '%s'", k);
                continue;
            }
            if (!validate(e, ps, root, why, cap))
                return 0;
        }
    }
    return 1;
#undef FAILV
}

/* ---- generation ---- */

typedef struct outbuf {
    char s[8192];
    size_t n;
} outbuf;

static int collect(void *user, int32_t id, const char *text, size_t len, float lp,
                   const float *logits)
{
    (void)id, (void)lp, (void)logits;
    outbuf *o = user;
    if (o->n + len < sizeof o->s) {
        memcpy(o->s + o->n, text, len);
        o->n += len;
        o->s[o->n] = 0;
    }
    return 0;
}

static lq_model *open_model(const char *path)
{
    lq_model_opts opts = {0};
    opts.n_threads = 1;
    lq_model *m = NULL;
    lq_err err = {0};
    if (lq_model_open(path, &opts, &m, &err))
        printf("#   %s: %s\n", path, err.msg);
    return m;
}

static lq_model *fixture_model(void)
{
    static char path[4200];
    lq_fixture_opts o;
    lq_err err = {0};
    snprintf(path, sizeof path, "%s/fx.gguf", harness_tmpdir());
    if (lq_fixture_preset(&o, "tiny", &err))
        return NULL;
    o.ctx = 1024;
    if (lq_fixture_write(&o, path, &err)) {
        printf("#   fixture: %s\n", err.msg);
        return NULL;
    }
    return open_model(path);
}

static int prompt_ids(lq_model *m, int32_t **ids, size_t *n)
{
    const lq_tokenizer *t = lq_model_tokenizer(m);
    const char *p = "Once upon a time, a JSON record:";
    return lq_tokenizer_encode(t, p, strlen(p), lq_tokenizer_add_bos(t) ? LQ_TOK_ADD_BOS : 0,
                               ids, n, NULL);
}

/* 50 samples at temperature 1 (seeds 1..50): each output parses and validates. */
static void schema_samples(lq_model *m, const char *label)
{
    lq_grammar *g = NULL;
    lq_err err = {0};
    CHECK_EQ_INT(lq_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &g, &err), LQ_OK);
    json_t *schema = json_loads(SCHEMA, 0, NULL);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(prompt_ids(m, &ids, &n), LQ_OK);
    int good = 0, max_tok = 0;
    int ctx = lq_model_get_info(m)->n_ctx_train < 1024 ? lq_model_get_info(m)->n_ctx_train : 1024;
    for (int seed = 1; seed <= 50 && g; seed++) {
        lq_session *s = NULL;
        CHECK_EQ_INT(lq_session_create(m, ctx, &s, &err), LQ_OK);
        lq_generate_params p;
        lq_generate_defaults(&p);
        p.max_tokens = ctx;
        p.sampling.temperature = 1.0f;
        p.sampling.top_k = 0;
        p.sampling.top_p = 1.0f;
        p.sampling.min_p = 0.0f;
        p.sampling.seed = (uint64_t)seed;
        p.sampling.has_seed = 1;
        p.grammar = g;
        outbuf o = {{0}, 0};
        lq_generate_result res;
        int rc = lq_generate(s, ids, n, &p, collect, &o, &res, &err);
        CHECK_MSG(rc == LQ_OK, "%s seed %d: %s", label, seed, err.msg);
        CHECK_MSG(res.finish == LQ_FINISH_EOS || res.finish == LQ_FINISH_STOP,
                  "%s seed %d: finish %d after %d tokens", label, seed, res.finish, res.n_generated);
        if (res.n_generated > max_tok)
            max_tok = res.n_generated;
        json_error_t je;
        json_t *v = json_loads(o.s, JSON_ALLOW_NUL, &je);
        char why[256] = "";
        if (!v)
            CHECK_MSG(0, "%s seed %d: not JSON (%s): %s", label, seed, je.text, o.s);
        else if (!validate(v, schema, schema, why, sizeof why))
            CHECK_MSG(0, "%s seed %d: %s: %s", label, seed, why, o.s);
        else
            good++;
        json_decref(v);
        lq_session_free(s);
    }
    CHECK_EQ_INT(good, 50);
    printf("#   %s: %d/50 outputs valid, longest %d tokens\n", label, good, max_tok);
    free(ids);
    json_decref(schema);
    lq_grammar_free(g);
}

/* Sampled outputs under each example grammar: complete ones match, cut ones are prefixes. */
static void gbnf_samples(lq_model *m, const char *label)
{
    static const char *const files[] = {"json.gbnf", "arithmetic.gbnf", "list.gbnf", "chess.gbnf"};
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(prompt_ids(m, &ids, &n), LQ_OK);
    for (size_t f = 0; f < 4; f++) {
        char path[256];
        snprintf(path, sizeof path, GDIR "/%s", files[f]);
        size_t len;
        char *text = harness_read_file(path, &len);
        lq_grammar *g = NULL;
        CHECK(text && lq_grammar_parse(text, len, &g, NULL) == LQ_OK);
        free(text);
        int complete = 0;
        for (int seed = 1; seed <= 10 && g; seed++) {
            lq_session *s = NULL;
            lq_err err = {0};
            CHECK_EQ_INT(lq_session_create(m, 256, &s, &err), LQ_OK);
            lq_generate_params p;
            lq_generate_defaults(&p);
            p.max_tokens = 120;
            p.sampling.temperature = 1.0f;
            p.sampling.seed = (uint64_t)seed;
            p.sampling.has_seed = 1;
            p.grammar = g;
            outbuf o = {{0}, 0};
            lq_generate_result res;
            CHECK_EQ_INT(lq_generate(s, ids, n, &p, collect, &o, &res, &err), LQ_OK);
            lq_grammar_state *st;
            CHECK_EQ_INT(lq_grammar_state_create(g, &st, NULL), LQ_OK);
            CHECK_MSG(lq_grammar_state_accept(st, o.s, o.n, NULL) == LQ_OK,
                      "%s %s seed %d: output leaves the grammar: %s", label, files[f], seed, o.s);
            if (res.finish != LQ_FINISH_LENGTH) {
                complete++;
                CHECK_MSG(lq_grammar_state_can_end(st), "%s %s seed %d: ended early: %s",
                          label, files[f], seed, o.s);
            }
            lq_grammar_state_free(st);
            lq_session_free(s);
        }
        printf("#   %s %s: 10 outputs in the grammar, %d complete\n", label, files[f], complete);
        lq_grammar_free(g);
    }
    free(ids);
}

/* Greedy under a schema; the scheduler's batched path gives the same text. */
static void greedy_and_scheduler(lq_model *m)
{
    lq_grammar *g = NULL;
    CHECK_EQ_INT(lq_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &g, NULL), LQ_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(prompt_ids(m, &ids, &n), LQ_OK);
    lq_generate_params p;
    lq_generate_defaults(&p);
    p.max_tokens = 250;
    p.sampling.temperature = 0;
    p.grammar = g;
    lq_session *s = NULL;
    CHECK_EQ_INT(lq_session_create(m, 256, &s, NULL), LQ_OK);
    outbuf a = {{0}, 0}, b = {{0}, 0};
    lq_generate_result res;
    CHECK_EQ_INT(lq_generate(s, ids, n, &p, collect, &a, &res, NULL), LQ_OK);
    json_t *v = json_loads(a.s, 0, NULL);
    CHECK_MSG(v != NULL, "greedy output is not JSON: %s", a.s);
    json_decref(v);
    lq_session_free(s);

    lq_scheduler_opts so;
    lq_scheduler_opts_init(&so);
    so.n_ctx = 256;
    lq_scheduler *sc = NULL;
    lq_err err = {0};
    CHECK_EQ_INT(lq_scheduler_create(m, &so, &sc, &err), LQ_OK);
    lq_sched_req *h = NULL;
    if (sc && lq_scheduler_submit(sc, ids, n, &p, collect, NULL, &b, &h, &err) == LQ_OK) {
        lq_grammar_free(g); /* submit copied it */
        g = NULL;
        lq_sched_wait(h, -1);
        lq_sched_release(h);
        CHECK_MSG(!strcmp(a.s, b.s), "scheduler: '%s' vs lq_generate: '%s'", b.s, a.s);
    } else {
        CHECK_MSG(0, "scheduler: %s", err.msg);
    }
    lq_scheduler_free(sc);
    lq_grammar_free(g);
    free(ids);
}

static void bias_bans(lq_model *m)
{
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(prompt_ids(m, &ids, &n), LQ_OK);
    lq_session *s = NULL;
    CHECK_EQ_INT(lq_session_create(m, 256, &s, NULL), LQ_OK);
    lq_generate_params p;
    lq_generate_defaults(&p);
    p.max_tokens = 8;
    p.sampling.temperature = 0;
    p.ignore_eos = 1;
    int32_t got[8];
    int ng = 0;
    lq_generate_result res;
    /* greedy first token, then ban it */
    outbuf o = {{0}, 0};
    CHECK_EQ_INT(lq_generate(s, ids, n, &p, collect, &o, &res, NULL), LQ_OK);
    lq_session_free(s);
    const lq_tokenizer *t = lq_model_tokenizer(m);
    int32_t *oids = NULL;
    size_t on = 0;
    lq_tokenizer_encode(t, o.s, o.n, 0, &oids, &on, NULL);
    (void)got, (void)ng;
    if (on == 0) {
        free(ids);
        return;
    }
    lq_logit_bias b = {oids[0], -100.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    p.max_tokens = 1;
    CHECK_EQ_INT(lq_session_create(m, 256, &s, NULL), LQ_OK);
    outbuf o2 = {{0}, 0};
    CHECK_EQ_INT(lq_generate(s, ids, n, &p, collect, &o2, &res, NULL), LQ_OK);
    CHECK(o2.n == 0 || strncmp(o2.s, o.s, o2.n) != 0 || o2.n != o.n);
    lq_session_free(s);
    /* a bad bias is refused */
    lq_logit_bias bad = {1 << 30, 1.0f};
    p.logit_bias = &bad;
    lq_err err = {0};
    CHECK_EQ_INT(lq_session_create(m, 256, &s, NULL), LQ_OK);
    CHECK_EQ_INT(lq_generate(s, ids, n, &p, NULL, NULL, &res, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "logit_bias");
    lq_session_free(s);
    free(oids);
    free(ids);
}

/* The grammar's end is the end of the output: text a stop string held back is delivered,
 * and the finish is STOP without a wasted decode. */
static void grammar_end_flushes(lq_model *m)
{
    lq_grammar *g = NULL;
    const char *gb = "root ::= \"ab\"\n";
    CHECK_EQ_INT(lq_grammar_parse(gb, strlen(gb), &g, NULL), LQ_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(prompt_ids(m, &ids, &n), LQ_OK);
    const char *stop[] = {"bX"};
    lq_generate_params p;
    lq_generate_defaults(&p);
    p.max_tokens = 10;
    p.sampling.temperature = 0;
    p.grammar = g;
    p.stop = stop;
    p.n_stop = 1;
    lq_session *s = NULL;
    CHECK_EQ_INT(lq_session_create(m, 256, &s, NULL), LQ_OK);
    outbuf o = {{0}, 0};
    lq_generate_result res;
    CHECK_EQ_INT(lq_generate(s, ids, n, &p, collect, &o, &res, NULL), LQ_OK);
    CHECK_MSG(!strcmp(o.s, "ab"), "output '%s'", o.s);
    CHECK_EQ_INT(res.finish, LQ_FINISH_STOP);
    /* the last token is not decoded: the session holds the prompt and all but the last */
    CHECK_EQ_INT(lq_session_pos(s), (int)n + res.n_generated - 1);
    lq_session_free(s);
    lq_grammar_free(g);
    free(ids);
}

/* The trie walk (with its shortcuts: whole subtrees allowed when their bytes loop the state,
 * merged partial characters) against a token-by-token walk of the same state, at states
 * along JSON texts, on the trained model's 4,096-token vocabulary (byte-level BPE, so the
 * start-of-text form of each token, which lq_grammar_mask walks one token at a time, is
 * the same bytes). */
static void trie_vs_tokens(lq_model *m)
{
    const lq_tokenizer *t = lq_model_tokenizer(m);
    lq_grammar_vocab *v = NULL;
    CHECK_EQ_INT(lq_grammar_vocab_create(t, &v, NULL), LQ_OK);
    lq_grammar *g = NULL, *jo = NULL;
    CHECK_EQ_INT(lq_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &g, NULL), LQ_OK);
    const char *any = lq_grammar_json_object_gbnf();
    CHECK_EQ_INT(lq_grammar_parse(any, strlen(any), &jo, NULL), LQ_OK);
    if (!v || !g || !jo) {
        lq_grammar_free(g);
        lq_grammar_free(jo);
        lq_grammar_vocab_free(v);
        return;
    }
    int32_t nv = lq_grammar_vocab_size(v);
    uint8_t *a = malloc((size_t)nv), *b = malloc((size_t)nv);
    static const char text1[] = "{ \"name\": \"Tim \xc3\xa9\xe2\x82\xac\", \"age\": -12, \"kind\": \"dog\", "
                                "\"ver\": \"v1\", \"tags\": [\"ab\"], \"code\": \"AB-12";
    static const char text2[] = "{\"a\": [1.5e3, {\"b\": \"x\\u00e9 \xf0\x9f\x98\x80\"}], \"c\": nul";
    const struct { const lq_grammar *g; const char *t; size_t n; } cases[2] = {
        {g, text1, sizeof text1 - 1}, {jo, text2, sizeof text2 - 1}};
    int checked = 0;
    for (int c = 0; c < 2; c++) {
        lq_grammar_state *st = NULL;
        CHECK_EQ_INT(lq_grammar_state_create(cases[c].g, &st, NULL), LQ_OK);
        for (size_t i = 0; st && i <= cases[c].n; i++) {
            int na = lq_grammar_mask(st, v, 0, a, NULL), nb = lq_grammar_mask(st, v, 1, b, NULL);
            CHECK_MSG(na == nb && !memcmp(a, b, (size_t)nv), "case %d after %zu bytes: trie %d, "
                      "tokens %d allowed", c, i, na, nb);
            checked++;
            if (i < cases[c].n)
                CHECK_EQ_INT(lq_grammar_state_accept(st, cases[c].t + i, 1, NULL), LQ_OK);
        }
        lq_grammar_state_free(st);
    }
    printf("#   trie walk = token walk at %d states\n", checked);
    free(a);
    free(b);
    lq_grammar_free(g);
    lq_grammar_free(jo);
    lq_grammar_vocab_free(v);
}

static lq_model *g_trained, *g_fixture;

static void test_trie_vs_tokens(void)
{
    if (!g_trained)
        SKIP("%s not readable", TRAINED);
    trie_vs_tokens(g_trained);
}

static void test_grammar_end(void)
{
    if (!g_trained)
        SKIP("%s not readable", TRAINED);
    grammar_end_flushes(g_trained);
}

static void test_trained_schema(void)
{
    if (!g_trained)
        SKIP("%s not readable", TRAINED);
    schema_samples(g_trained, "trained");
}

static void test_fixture_schema(void)
{
    if (!g_fixture)
        SKIP("fixture not written");
    schema_samples(g_fixture, "fixture");
}

static void test_trained_gbnf(void)
{
    if (!g_trained)
        SKIP("%s not readable", TRAINED);
    gbnf_samples(g_trained, "trained");
}

static void test_fixture_gbnf(void)
{
    if (!g_fixture)
        SKIP("fixture not written");
    gbnf_samples(g_fixture, "fixture");
}

static void test_greedy_scheduler(void)
{
    if (!g_trained)
        SKIP("%s not readable", TRAINED);
    greedy_and_scheduler(g_trained);
}

static void test_logit_bias(void)
{
    if (!g_trained)
        SKIP("%s not readable", TRAINED);
    bias_bans(g_trained);
}

int main(void)
{
    g_trained = open_model(TRAINED);
    g_fixture = fixture_model();
    RUN(test_trained_schema);
    RUN(test_fixture_schema);
    RUN(test_trained_gbnf);
    RUN(test_fixture_gbnf);
    RUN(test_greedy_scheduler);
    RUN(test_logit_bias);
    RUN(test_grammar_end);
    RUN(test_trie_vs_tokens);
    lq_model_close(g_trained);
    lq_model_close(g_fixture);
    return harness_done();
}
