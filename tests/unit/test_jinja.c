/* The Jinja chat-template interpreter: expected renderings of the constructs templates use
 * (outputs checked against Python Jinja2 as transformers configures it), every error case
 * with its line, the bounds on untrusted templates, and the lq_chat_format API. */
#include <string.h>

#include "harness.h"
#include "tiny_gguf.h"

#include "larql/chat.h"
#include "larql/model.h"

/* renders src with vars (a JSON object text); returns the output or NULL (err filled) */
static char *render(const char *src, const char *vars, lq_err *err)
{
    lq_jinja *t = NULL;
    char *out = NULL;
    memset(err, 0, sizeof *err);
    if (lq_jinja_parse(src, strlen(src), &t, err))
        return NULL;
    if (lq_jinja_render(t, vars, vars ? strlen(vars) : 0, &out, NULL, err))
        out = NULL;
    lq_jinja_free(t);
    return out;
}

static void expect(const char *src, const char *vars, const char *want)
{
    lq_err err;
    char *out = render(src, vars, &err);
    CHECK_MSG(out && !strcmp(out, want), "%s\n got: [%s]\nwant: [%s]", src, out ? out : err.msg, want);
    free(out);
}

/* fails, with a message containing each of the given pieces */
static void expect_error(const char *src, const char *vars, const char *piece1, const char *piece2)
{
    lq_err err;
    char *out = render(src, vars, &err);
    CHECK_MSG(!out, "%s: expected an error, got [%s]", src, out ? out : "");
    CHECK_MSG(err.code != 0 && strstr(err.msg, piece1) && (!piece2 || strstr(err.msg, piece2)),
              "%s: error [%s] lacks '%s' / '%s'", src, err.msg, piece1, piece2 ? piece2 : "");
    free(out);
}

static void test_expressions(void)
{
    expect("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 % 3 }}|{{ 1 / 2 }}|{{ 4 / 2 }}|{{ 2 ** 10 }}", NULL,
           "7|3|2|0.5|2.0|1024");
    expect("{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ 'abc'[::-1] }}|{{ [1,2,3][1:] }}", NULL,
           "a1NoneTrue|ababab|cba|[2, 3]");
    expect("{{ [1, 'a', none, true, 1.5, {'k': 2}] }}|{{ 0.1 + 0.2 }}|{{ 1e20 }}", NULL,
           "[1, 'a', None, True, 1.5, {'k': 2}]|0.30000000000000004|1e+20");
    expect("{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ 1 < 2 < 3 }}{{ 'x' in 'xyz' }}{{ 3 not in [1] }}", NULL,
           "TrueTrueTrueTrueTrueTrue");
    expect("{{ x or 'd' }}|{{ 'y' if x else 'n' }}|{{ not x }}|{{ x and 1 }}", "{\"x\": \"\"}", "d|n|True|");
    expect("{{ \"a\\tb\\n\" | tojson }}|{{ '\\u00e9' }}|{{ 'x' 'y' }}", NULL, "\"a\\tb\\n\"|\xc3\xa9|xy");
}

static void test_statements(void)
{
    expect("{% for m in ms %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }}"
           "{{ loop.length }};{% else %}E{% endfor %}",
           "{\"ms\": [\"a\", \"b\"]}", "10TrueFalse22;21FalseTrue12;");
    expect("{% for m in [] %}x{% else %}E{% endfor %}{% for k, v in d.items() %}{{k}}={{v}},{% endfor %}",
           "{\"d\": {\"b\": 1, \"a\": 2}}", "Eb=1,a=2,");
    expect("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}", NULL, "2242");
    expect("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% elif x == 3 %}{% break %}{% endif %}{{ x }}"
           "{% endfor %}", NULL, "02");
    /* a set inside a loop does not survive the iteration; a namespace does */
    expect("{% set x = 1 %}{% set ns = namespace(n=0) %}{% for i in [1,2] %}{% set x = x + 10 %}"
           "{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}", NULL, "1 3");
    expect("{% macro f(a, b='x') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}", NULL, "[1x][12]");
    expect("{% set b %}in{{ 1 }}{% endset %}{{ b | upper }}{# gone #}", NULL, "IN1");
    expect("{% filter upper %}a{{ 'b' }}{% endfilter %}{% raw %}{{ x }}{% endraw %}", NULL, "AB{{ x }}");
}

/* trim_blocks and lstrip_blocks on, as transformers renders chat templates */
static void test_whitespace(void)
{
    expect("a\n  {% if true %}\n  b\n  {% endif %}\nc\n", NULL, "a\n  b\nc");
    expect("a  {{- ' b ' -}}  c", NULL, "a b c");
    expect("x {%- if true -%} y {%- endif %}\n\nz", NULL, "xy\nz");
    expect("  {%+ if true %}k{% endif %}", NULL, "  k");
    expect("a {# c #}\nb\r\nc", NULL, "a b\nc");
}

static void test_filters_methods(void)
{
    expect("{{ '  hi \\n' | trim }}|{{ 'aBC' | capitalize }}|{{ 'hello wor-ld' | title }}|{{ 'a' | upper }}"
           "|{{ 'ab' | length }}|{{ 'a-b-c' | replace('-', '+') }}|{{ u | default('d') }}",
           NULL, "hi|Abc|Hello Wor-Ld|A|2|a+b+c|d");
    expect("{{ [3,4] | first }}{{ [3,4] | last }}|{{ [1,2] | join(', ') }}|{{ 'ab' | list }}|{{ 12 | string }}"
           "|{{ '42' | int + 1 }}|{{ {'a': 1} | items | list }}",
           NULL, "34|1, 2|['a', 'b']|12|43|[('a', 1)]");
    expect("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}"
           "{{ ms | rejectattr('role', 'equalto', 'user') | list | length }}",
           "{\"ms\": [{\"role\": \"user\", \"c\": 1}, {\"role\": \"sys\", \"c\": 2}]}", "[1]1");
    expect("{{ d | tojson }}|{{ d | tojson(indent=2) }}", "{\"d\": {\"a\": [1, \"\\u00e9\"]}}",
           "{\"a\": [1, \"\xc3\xa9\"]}|{\n  \"a\": [\n    1,\n    \"\xc3\xa9\"\n  ]\n}");
    expect("{{ ' a b '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'a b'.split() }}|{{ 'abc'.startswith('ab') }}"
           "{{ 'abc'.endswith('x') }}|{{ d.get('k', 0) }}{{ d.get('z', 0) }}|{{ 'Ab'.lower() }}{{ 'ab'.upper() }}"
           "|{{ 'aa'.replace('a', 'b') }}",
           "{\"d\": {\"k\": 1}}", "a b|['a', 'b']|['a', 'b']|TrueFalse|10|abAB|bb");
    expect("{{ x is defined }}{{ y is defined }}{{ none is none }}{{ 's' is string }}{{ d is mapping }}"
           "{{ d is iterable }}{{ 1 is string }}{{ 'a' is in 'abc' }}",
           "{\"x\": 1, \"d\": {}}", "TrueFalseTrueTrueTrueTrueFalseTrue");
    /* Markup: '"x"|safe + value' escapes value, as markupsafe does */
    expect("{{ 'a'|safe + '<\"' }}", NULL, "a&lt;&#34;");
}

static void test_errors(void)
{
    expect_error("{{ x | nosuchfilter }}", NULL, "line 1", "unknown filter 'nosuchfilter'");
    expect_error("a\n{% if x is nosuchtest %}{% endif %}", NULL, "line 2", "unknown test");
    expect_error("a\n\n{% for x in y %}", NULL, "line 3", "never closed");
    expect_error("{% if true %}{% endfor %}", NULL, "line 1", "unexpected tag 'endfor'");
    expect_error("{% include 'x' %}", NULL, "line 1", "unknown (not supported) tag 'include'");
    expect_error("{{ 1 + }}", NULL, "line 1", "expected an expression");
    expect_error("{{ 'abc }}", NULL, "line 1", "unterminated string");
    expect_error("{{ x", NULL, "line 1", NULL);
    expect_error("{# never closed", NULL, "line 1", "comment");
    expect_error("\n{{ raise_exception('Roles must alternate') }}", NULL, "line 2",
                 "raised an exception: Roles must alternate");
    expect_error("{{ u.x }}", NULL, "'u' is undefined", NULL);
    expect_error("{{ 'a' + 1 }}", NULL, "unsupported operand types for +: string and int", NULL);
    expect_error("{{ 1 // 0 }}", NULL, "division by zero", NULL);
    expect_error("{{ 'x'.zfill(3) }}", NULL, "'zfill' is not a supported method of string", NULL);
    expect_error("{{ nosuch() }}", NULL, "'nosuch' is undefined, not a function", NULL);
    expect_error("{% set x.y = 1 %}", "{\"x\": {}}", "only on a namespace()", NULL);
    expect_error("{{ [1] | map(attribute='a') }}", NULL, "printing a generator", NULL);
    expect_error("{{ x }}", "[1]", "must be a JSON object", NULL);
    expect_error("{{ x }}", "{bad", "not JSON", NULL);
}

/* a template is untrusted data: loops, recursion, output and nesting are bounded */
static void test_bounds(void)
{
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
                 "more than", "steps");
    expect_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", NULL, "macro calls nested", NULL);
    /* nesting inside each macro level counts too: the C stack is bounded, not just the calls */
    {
        char src[1024] = "{% macro f() %}";
        for (int i = 0; i < 30; i++)
            strcat(src, "{% if true %}");
        strcat(src, "{{ f() }}");
        for (int i = 0; i < 30; i++)
            strcat(src, "{% endif %}");
        strcat(src, "{% endmacro %}{{ f() }}");
        expect_error(src, NULL, "nests evaluations more than", NULL);
    }
    expect_error("{% set s = 'xxxxxxxxxxxxxxxx' * 1048576 %}{% for i in range(4) %}{{ s }}{% endfor %}", NULL,
                 "output is over", NULL);
    expect_error("{{ range(100000000) }}", NULL, "range of more than", NULL);
    /* growing a string in a loop copies quadratically: the allocation budget stops it */
    expect_error("{% set ns = namespace(s='') %}{% for i in range(1000000) %}{% set ns.s = ns.s ~ 'xxxxxxxxxx' %}"
                 "{% endfor %}", NULL, "built more than", NULL);
    /* values cannot nest without bound, and a namespace cannot hold itself (no cycles) */
    expect_error("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}",
                 NULL, "nesting bound", NULL);
    expect_error("{% set ns = namespace() %}{% set ns.me = [ns] %}", NULL, "cannot hold another namespace", NULL);
    char deep[2000];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 600; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 600; i++)
        deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    expect_error(deep, NULL, "nested too deeply", NULL);
    lq_jinja *t = NULL;
    lq_err err = {0};
    CHECK(lq_jinja_parse(NULL, 5, &t, &err) == LQ_EINVAL && !t);
}

static void test_chat_format(void)
{
    const lq_chat_msg conv[] = {{"system", "Be brief."}, {"user", " Hi "}};
    const char *tpl = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{{ eos_token }}"
                      "{% endfor %}{% if tools %}T{{ tools | length }}{% endif %}"
                      "{% if add_generation_prompt %}<assistant>{% endif %}";
    lq_chat_format *f = NULL;
    lq_err err = {0};
    char *out = NULL;
    CHECK(lq_chat_format_jinja(tpl, strlen(tpl), "<s>", "</s>", 0, &f, &err) == LQ_OK);
    CHECK(!strcmp(lq_chat_format_name(f), "jinja"));
    CHECK(lq_chat_format_render(f, conv, 2, 1, NULL, &out, &err) == LQ_OK);
    CHECK_MSG(out && !strcmp(out, "<s><system>Be brief.</s><user>Hi</s><assistant>"), "got [%s]", out ? out : err.msg);
    free(out);
    CHECK(lq_chat_format_render(f, conv, 2, 0, "[{\"type\": \"function\"}]", &out, &err) == LQ_OK);
    CHECK_MSG(out && !strcmp(out, "<s><system>Be brief.</s><user>Hi</s>T1"), "got [%s]", out ? out : err.msg);
    free(out);
    const char *js = "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"tool\", \"content\": \"r\"}]";
    CHECK(lq_chat_format_render_json(f, js, strlen(js), 1, NULL, &out, &err) == LQ_OK);
    CHECK_MSG(out && !strcmp(out, "<s><user>q</s><tool>r</s><assistant>"), "got [%s]", out ? out : err.msg);
    free(out);
    CHECK(lq_chat_format_render(f, conv, 2, 1, "{\"not\": \"a list\"}", &out, &err) == LQ_EINVAL && !out);
    CHECK(lq_chat_format_render_json(f, "[]", 2, 1, NULL, &out, &err) == LQ_EINVAL && !out);
    CHECK(lq_chat_format_render_json(f, "[{\"content\": 1}]", 16, 1, NULL, &out, &err) == LQ_EINVAL && !out);
    lq_chat_format_free(f);
    /* strip_bos: the tokenizer adds BOS itself, so a leading bos_token is dropped */
    CHECK(lq_chat_format_jinja(tpl, strlen(tpl), "<s>", "</s>", 1, &f, &err) == LQ_OK);
    CHECK(lq_chat_format_render(f, conv + 1, 1, 0, NULL, &out, &err) == LQ_OK);
    CHECK_MSG(out && !strcmp(out, "<user>Hi</s>"), "got [%s]", out ? out : err.msg);
    free(out);
    lq_chat_format_free(f);
    /* a template error names its source and line */
    CHECK(lq_chat_format_jinja("{{ raise_exception('no') }}", 27, "", "", 0, &f, &err) == LQ_OK);
    CHECK(lq_chat_format_render(f, conv, 2, 1, NULL, &out, &err) == LQ_EINVAL && !out);
    CHECK_MSG(strstr(err.msg, "line 1") && strstr(err.msg, "no"), "%s", err.msg);
    lq_chat_format_free(f);
    /* built-in names without a model */
    CHECK(lq_chat_format_open(NULL, "llama3", &f, &err) == LQ_OK);
    CHECK(!strcmp(lq_chat_format_name(f), "llama3"));
    CHECK(lq_chat_format_render(f, conv + 1, 1, 1, NULL, &out, &err) == LQ_OK);
    CHECK(out && !strcmp(out, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    free(out);
    lq_chat_format_free(f);
    CHECK(lq_chat_format_open(NULL, "{% if %}", &f, &err) == LQ_EINVAL && !f);
}

/* a model file's template: rendered from the file; microsoft's 2B-4T GGUF placeholder and a
 * file without a template get the built-in format */
static void test_model_template(void)
{
    char path[4200];
    const char *dir = harness_tmpdir();
    static const char *const tpl[] = {
        "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}",
        "{% for message in messages %}{% if loop.first %}{{ bos_token }}{% endif %}{% if message['role'] == 'user' %}"
        "{{ 'Human: ' + message['content'] + '\n\nBITNETAssistant: ' + eos_token }}{% elif message['role'] == "
        "'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
        NULL};
    /* (no template and no vocabulary: the built-in plain format, as lq_chat_template_for_model) */
    static const char *const name[] = {"jinja", "bitnet", "plain"};
    static const char *const want[] = {"[user:Hi]", "User: Hi<|eot_id|>Assistant: ", "User: Hi\nAssistant: "};
    for (int k = 0; k < 3; k++) {
        tg_opts o = tg_default();
        o.chat_template = tpl[k];
        snprintf(path, sizeof path, "%s/t%d.gguf", dir, k);
        lq_err err = {0};
        lq_model *m = NULL;
        lq_model_opts mo = {0};
        mo.n_threads = 1;
        if (tg_write(&o, path, &err) || lq_model_open(path, &mo, &m, &err)) {
            CHECK_MSG(0, "fixture: %s", err.msg);
            continue;
        }
        lq_chat_format *f = NULL;
        char *out = NULL;
        const lq_chat_msg msg = {"user", "Hi"};
        CHECK(lq_chat_format_open(m, NULL, &f, &err) == LQ_OK);
        CHECK_MSG(f && !strcmp(lq_chat_format_name(f), name[k]), "%d: %s (%s)", k, lq_chat_format_name(f),
                  lq_chat_format_source(f));
        CHECK(lq_chat_format_render(f, &msg, 1, 1, NULL, &out, &err) == LQ_OK);
        CHECK_MSG(out && !strcmp(out, want[k]), "%d: got [%s]", k, out ? out : err.msg);
        free(out);
        lq_chat_format_free(f);
        lq_model_close(m);
    }
}

int main(void)
{
    RUN(test_expressions);
    RUN(test_statements);
    RUN(test_whitespace);
    RUN(test_filters_methods);
    RUN(test_errors);
    RUN(test_bounds);
    RUN(test_chat_format);
    RUN(test_model_template);
    return harness_done();
}
