/* JSON Schema -> GBNF: each supported keyword accepts the JSON it should and refuses the
 * rest (checked through the recogniser); bad schemas are clear errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "larql/grammar.h"

static lq_grammar *schema(const char *s)
{
    lq_grammar *g = NULL;
    lq_err err = {0};
    if (lq_grammar_from_json_schema(s, strlen(s), &g, &err))
        printf("#   schema %s: %s\n", s, err.msg);
    return g;
}

static int m(const lq_grammar *g, const char *text)
{
    return g && lq_grammar_match(g, text, strlen(text), NULL) == 1;
}

#define YES(g, t) CHECK_MSG(m(g, t), "should match: %s", t)
#define NO(g, t) CHECK_MSG(!m(g, t), "should not match: %s", t)

static void test_types(void)
{
    lq_grammar *g = schema("{\"type\":\"string\"}");
    YES(g, "\"hi\"");
    YES(g, "\"a\\\"b\\u00e9\\n\"");
    YES(g, "\"caf\xc3\xa9\"");
    NO(g, "\"a\nb\"");      /* raw control characters are not JSON */
    NO(g, "\"\\ud800\"");   /* a lone surrogate escape */
    NO(g, "12");
    lq_grammar_free(g);
    g = schema("{\"type\":\"integer\"}");
    YES(g, "0");
    YES(g, "-42");
    NO(g, "01");
    NO(g, "1.5");
    NO(g, "12345678901234567"); /* 17 digits: beyond the bound */
    lq_grammar_free(g);
    g = schema("{\"type\":\"number\"}");
    YES(g, "1.5");
    YES(g, "-0.25e-3");
    YES(g, "7E12");
    NO(g, "1.");
    NO(g, "1e400");
    lq_grammar_free(g);
    g = schema("{\"type\":\"boolean\"}");
    YES(g, "true");
    YES(g, "false");
    NO(g, "null");
    lq_grammar_free(g);
    g = schema("{\"type\":\"null\"}");
    YES(g, "null");
    NO(g, "0");
    lq_grammar_free(g);
    g = schema("{\"type\":[\"integer\",\"null\"]}");
    YES(g, "3");
    YES(g, "null");
    NO(g, "\"3\"");
    lq_grammar_free(g);
    g = schema("{}");
    YES(g, "[1, {\"a\": [true, null]}, \"x\"]");
    lq_grammar_free(g);
    g = schema("true");
    YES(g, "{}");
    lq_grammar_free(g);
}

static void test_objects(void)
{
    lq_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                           "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"}},"
                           "\"required\":[\"b\"]}");
    YES(g, "{\"b\":\"x\"}");
    YES(g, "{\"a\":1,\"b\":\"x\"}");
    YES(g, "{\"a\": 1, \"b\": \"x\", \"c\": true}");
    YES(g, "{\"b\":\"x\",\"c\":false}");
    YES(g, "{\n  \"b\": \"x\"\n}");
    NO(g, "{}");                        /* b is required */
    NO(g, "{\"a\":1}");
    NO(g, "{\"b\":\"x\",\"d\":1}");     /* no additional properties by default */
    NO(g, "{\"b\":\"x\",}");
    NO(g, "{\"b\":1}");
    lq_grammar_free(g);
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
               "\"additionalProperties\":{\"type\":\"string\"}}");
    YES(g, "{}");
    YES(g, "{\"a\":1,\"z\":\"s\"}");
    YES(g, "{\"z\":\"s\",\"y\":\"t\"}");
    NO(g, "{\"a\":1,\"z\":2}");
    lq_grammar_free(g);
    g = schema("{\"type\":\"object\"}");
    YES(g, "{\"anything\": [1, 2]}");
    NO(g, "[]");
    lq_grammar_free(g);
    /* bounded whitespace: a space, or a newline and at most 20 spaces/tabs */
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}");
    YES(g, "{\n                    \"a\": 1}");
    NO(g, "{\n                     \"a\": 1}");
    NO(g, "{  \"a\": 1}");
    lq_grammar_free(g);
    /* the json_object grammar */
    lq_grammar *jo = NULL;
    const char *t = lq_grammar_json_object_gbnf();
    CHECK_EQ_INT(lq_grammar_parse(t, strlen(t), &jo, NULL), LQ_OK);
    YES(jo, "{\"a\": {\"b\": [1.5, \"c\", null, false]}}");
    NO(jo, "[1]");
    NO(jo, "\"s\"");
    lq_grammar_free(jo);
}

static void test_enum_const_arrays(void)
{
    lq_grammar *g = schema("{\"enum\":[\"red\",\"green\",1,null,{\"k\":[1]}]}");
    YES(g, "\"red\"");
    YES(g, "1");
    YES(g, "null");
    YES(g, "{\"k\":[1]}");
    NO(g, "\"blue\"");
    NO(g, "2");
    lq_grammar_free(g);
    g = schema("{\"const\":\"v1\"}");
    YES(g, "\"v1\"");
    NO(g, "\"v2\"");
    lq_grammar_free(g);
    g = schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}");
    YES(g, "[1,2]");
    YES(g, "[1, 2, 3]");
    NO(g, "[1]");
    NO(g, "[1,2,3,4]");
    NO(g, "[1,\"a\"]");
    lq_grammar_free(g);
    g = schema("{\"type\":\"array\",\"maxItems\":0}");
    YES(g, "[]");
    NO(g, "[1]");
    lq_grammar_free(g);
    g = schema("{\"type\":\"array\"}");
    YES(g, "[]");
    YES(g, "[1, \"a\", [null]]");
    lq_grammar_free(g);
    g = schema("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}");
    YES(g, "5");
    YES(g, "\"ab\"");
    NO(g, "\"abc\"");
    lq_grammar_free(g);
    g = schema("{\"oneOf\":[{\"const\":1},{\"const\":2}]}");
    YES(g, "2");
    NO(g, "3");
    lq_grammar_free(g);
}

static void test_strings(void)
{
    lq_grammar *g = schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    YES(g, "\"ab\"");
    YES(g, "\"\xc3\xa9\xc3\xa9\xc3\xa9\""); /* length counts characters */
    NO(g, "\"a\"");
    NO(g, "\"abcd\"");
    lq_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"date\"}");
    YES(g, "\"2024-02-29\"");
    NO(g, "\"2024-13-01\"");
    NO(g, "\"24-01-01\"");
    lq_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"time\"}");
    YES(g, "\"23:59:59Z\"");
    YES(g, "\"08:00:00.123+02:00\"");
    NO(g, "\"24:00:00Z\"");
    lq_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"date-time\"}");
    YES(g, "\"2024-01-02T03:04:05Z\"");
    NO(g, "\"2024-01-02 03:04:05Z\"");
    lq_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"uuid\"}");
    YES(g, "\"123e4567-e89b-12d3-a456-426614174000\"");
    NO(g, "\"123e4567-e89b-12d3-a456-42661417400\"");
    lq_grammar_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}");
    YES(g, "\"AB-123\"");
    YES(g, "\"QQ-000yz\"");
    NO(g, "\"AB-12\"");
    NO(g, "\"ab-123\"");
    NO(g, "\"AB-123y\"");
    lq_grammar_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^[^0-9]+\\\\.txt$\"}");
    YES(g, "\"notes.txt\"");
    NO(g, "\"n0tes.txt\"");
    NO(g, "\"no\\\"tes.txt\""); /* the negated class never produces a quote */
    lq_grammar_free(g);
}

static void test_refs(void)
{
    lq_grammar *g = schema("{\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":"
                           "{\"type\":\"integer\"}},\"required\":[\"x\"]}},"
                           "\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/pt\"}}");
    YES(g, "[{\"x\":1},{\"x\":2}]");
    NO(g, "[{\"y\":1}]");
    lq_grammar_free(g);
    g = schema("{\"definitions\":{\"a\":{\"$ref\":\"#/definitions/b\"},\"b\":{\"type\":\"null\"}},"
               "\"$ref\":\"#/definitions/a\"}");
    YES(g, "null");
    lq_grammar_free(g);
    /* recursion through an object is a fine (infinite) language */
    g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
               "\"integer\"},\"next\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/node\"}]}},"
               "\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}");
    YES(g, "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}");
    NO(g, "{\"v\":1}");
    lq_grammar_free(g);
}

/* Integer bounds: every integer of a window matches exactly when it is in range, for
 * ranges with one, two or no ends, exclusive ones and fractional ones. */
static void test_int_ranges(void)
{
    static const char *const cases[][4] = {
        /* minimum, maximum, exclusiveMinimum, exclusiveMaximum ("" = absent) */
        {"0", "", "", ""}, {"1", "", "", ""}, {"", "0", "", ""}, {"", "-1", "", ""},
        {"-17", "4", "", ""}, {"3", "3", "", ""}, {"10", "99", "", ""}, {"-100", "-10", "", ""},
        {"7", "1234", "", ""}, {"-1234", "-7", "", ""}, {"", "", "0", ""}, {"", "", "", "100"},
        {"", "", "-5", "5"}, {"1.5", "9.5", "", ""}, {"-999", "1000", "", ""}, {"45", "", "", ""},
        {"", "-45", "", ""}, {"19", "201", "", ""}, {"0", "0", "", ""}, {"-1", "1", "", ""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char sch[256] = "{\"type\":\"integer\"";
        static const char *const keys[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        double b[4];
        int has[4];
        for (int k = 0; k < 4; k++) {
            has[k] = cases[c][k][0] != 0;
            b[k] = has[k] ? atof(cases[c][k]) : 0;
            if (has[k])
                snprintf(sch + strlen(sch), sizeof sch - strlen(sch), ",\"%s\":%s", keys[k], cases[c][k]);
        }
        strcat(sch, "}");
        lq_grammar *g = schema(sch);
        CHECK_MSG(g != NULL, "%s", sch);
        if (!g)
            continue;
        int wrong = 0;
        for (int x = -1500; x <= 1500 && wrong < 3; x++) {
            int in = (!has[0] || x >= b[0]) && (!has[1] || x <= b[1]) && (!has[2] || x > b[2]) &&
                     (!has[3] || x < b[3]);
            char t[32];
            snprintf(t, sizeof t, "%d", x);
            if (m(g, t) != in) {
                wrong++;
                CHECK_MSG(0, "%s: %d %s", sch, x, in ? "should match" : "should not match");
            }
        }
        NO(g, "007");
        NO(g, "-0");
        lq_grammar_free(g);
    }
    /* far ends */
    lq_grammar *g = schema("{\"type\":\"integer\",\"minimum\":999999999999999}");
    YES(g, "999999999999999");
    YES(g, "1000000000000000");
    NO(g, "999999999999998");
    lq_grammar_free(g);
    /* zod's int(): the safe-integer bounds +-(2^53 - 1) */
    g = schema("{\"type\":\"integer\",\"minimum\":-9007199254740991,\"maximum\":9007199254740991}");
    CHECK(g != NULL);
    YES(g, "9007199254740991");
    YES(g, "-9007199254740991");
    YES(g, "42");
    NO(g, "9007199254740992");
    NO(g, "-9007199254740992");
    lq_grammar_free(g);
    /* a far bound binds no 16-digit integer: the side stays open */
    g = schema("{\"type\":\"integer\",\"minimum\":0,\"maximum\":1e17}");
    CHECK(g != NULL);
    YES(g, "9999999999999999");
    NO(g, "-1");
    lq_grammar_free(g);
}

static void bad(const char *s, int code, const char *needle)
{
    lq_grammar *g = NULL;
    lq_err err = {0};
    int rc = lq_grammar_from_json_schema(s, strlen(s), &g, &err);
    CHECK_MSG(rc == code, "%s: rc %d, want %d (%s)", s, rc, code, err.msg);
    CHECK(g == NULL);
    CHECK_STR_CONTAINS(err.msg, needle);
}

static void test_bad_schemas(void)
{
    bad("{\"type\":", LQ_EINVAL, "not JSON");
    bad("not json at all", LQ_EINVAL, "not JSON");
    bad("{\"type\":\"strin\"}", LQ_EINVAL, "unknown type \"strin\"");
    bad("{\"type\":[\"string\",7]}", LQ_EINVAL, "'type' array entries must be strings");
    bad("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},"
        "\"$ref\":\"#/$defs/a\"}", LQ_EINVAL, "$ref loop");
    bad("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},"
        "\"$ref\":\"#/$defs/a\"}", LQ_EINVAL, "$ref loop");
    bad("{\"$ref\":\"#/$defs/missing\"}", LQ_EINVAL, "points at nothing");
    bad("{\"$ref\":\"http://example.com/s.json\"}", LQ_EUNSUPPORTED, "only local references");
    bad("{\"allOf\":[{\"type\":\"string\"}]}", LQ_EUNSUPPORTED, "'allOf' is not supported");
    bad("{\"type\":\"number\",\"minimum\":0}", LQ_EUNSUPPORTED, "integers only");
    bad("{\"minimum\":0}", LQ_EUNSUPPORTED, "need \"type\": \"integer\"");
    bad("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", LQ_EINVAL, "leave no value");
    bad("{\"type\":\"integer\",\"minimum\":\"3\"}", LQ_EINVAL, "'minimum' must be a number");
    bad("{\"type\":\"integer\",\"maximum\":1e19}", LQ_EINVAL, "within +-10^18");
    bad("{\"type\":\"string\",\"pattern\":\"abc\"}", LQ_EUNSUPPORTED, "anchored");
    bad("{\"type\":\"string\",\"pattern\":\"^(a$\"}", LQ_EINVAL, "unbalanced");
    bad("{\"type\":\"string\",\"pattern\":\"^(?=a)b$\"}", LQ_EUNSUPPORTED, "lookaround");
    bad("{\"type\":\"string\",\"pattern\":\"^(a)\\\\1$\"}", LQ_EUNSUPPORTED, "back-references");
    bad("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", LQ_EINVAL, "maxItems below minItems");
    bad("{\"type\":\"array\",\"maxItems\":-1}", LQ_EINVAL, "'maxItems'");
    bad("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", LQ_EINVAL,
        "required property \"b\"");
    bad("false", LQ_EINVAL, "matches nothing");
    bad("7", LQ_EINVAL, "a schema must be an object");
    bad("{\"enum\":[]}", LQ_EINVAL, "'enum' must be a non-empty array");
    /* deep nesting is refused, not a stack overflow */
    char deep[4096] = "";
    for (int i = 0; i < 100; i++)
        strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++)
        strcat(deep, "}");
    bad(deep, LQ_EINVAL, "deeper than 64");
}

static void test_gbnf_text(void)
{
    char *t = NULL;
    CHECK_EQ_INT(lq_json_schema_to_gbnf("{\"type\":\"boolean\"}", 18, &t, NULL), LQ_OK);
    CHECK_STR_CONTAINS(t, "root ::= boolean");
    free(t);
}

int main(void)
{
    RUN(test_types);
    RUN(test_objects);
    RUN(test_enum_const_arrays);
    RUN(test_strings);
    RUN(test_refs);
    RUN(test_int_ranges);
    RUN(test_bad_schemas);
    RUN(test_gbnf_text);
    return harness_done();
}
