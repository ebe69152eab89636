/* GBNF parser and recogniser: llama.cpp's example grammars (tests/data/grammars) parse and
 * accept / reject strings as their authors meant; syntax errors carry line and column;
 * undefined rules, left recursion and empty languages are refused; the byte-level
 * recogniser handles UTF-8 split anywhere; token masks agree with walking each token. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "larql/gguf.h"
#include "larql/grammar.h"
#include "larql/tokenizer.h"

#define GDIR "tests/data/grammars" /* tests run from the project root */

static lq_grammar *load(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, GDIR "/%s", name);
    size_t len;
    char *t = harness_read_file(path, &len);
    if (!t)
        return NULL;
    lq_grammar *g = NULL;
    lq_err err = {0};
    int rc = lq_grammar_parse(t, len, &g, &err);
    if (rc)
        printf("#   %s: %s\n", name, err.msg);
    free(t);
    return g;
}

static lq_grammar *parse(const char *text)
{
    lq_grammar *g = NULL;
    lq_err err = {0};
    if (lq_grammar_parse(text, strlen(text), &g, &err))
        printf("#   parse: %s\n", err.msg);
    return g;
}

static int match(const lq_grammar *g, const char *s)
{
    return lq_grammar_match(g, s, strlen(s), NULL);
}

/* 1 when s is a prefix of some string of the language */
static int prefix_ok(const lq_grammar *g, const char *s)
{
    lq_grammar_state *st;
    if (lq_grammar_state_create(g, &st, NULL))
        return -1;
    int rc = lq_grammar_state_accept(st, s, strlen(s), NULL);
    lq_grammar_state_free(st);
    return rc == LQ_OK;
}

static void test_json_gbnf(void)
{
    lq_grammar *g = load("json.gbnf");
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(match(g, "{}"));
    CHECK(match(g, "{\"a\": 1}"));
    CHECK(match(g, "{\"a\": [1, -2, {\"b\": true}], \"c\": \"x\\ny\\u00e9\"}"));
    CHECK(match(g, "{\"caf\xc3\xa9\": \"\xe2\x82\xac\xf0\x9f\x98\x80\"}")); /* é € 😀 */
    CHECK(!match(g, "[]"));         /* root is an object */
    CHECK(!match(g, "{\"a\": 1.5}")); /* plain integers only */
    CHECK(!match(g, "{\"a\" 1}"));
    CHECK(!match(g, "{\"a\": 1"));  /* incomplete */
    CHECK(prefix_ok(g, "{\"a\": 1"));
    CHECK(!prefix_ok(g, "{\"a\": x"));
    CHECK(!prefix_ok(g, "{\"a\x01"));   /* control characters are outside the class */
    CHECK(!prefix_ok(g, "{\"\xff"));    /* not UTF-8 */
    CHECK(!prefix_ok(g, "{\"\xc3("));   /* broken sequence */
    CHECK(!prefix_ok(g, "{\"\xe0\x81"));  /* overlong: "{" spelt E0 81 BB is not UTF-8 */
    CHECK(!prefix_ok(g, "{\"\xc1"));
    CHECK(!prefix_ok(g, "{\"\xed\xa0"));  /* surrogates */
    CHECK(prefix_ok(g, "{\"\xed\x9f"));   /* ...but U+D7C0..U+D7FF are fine */
    CHECK(!prefix_ok(g, "{\"\xf4\x90"));  /* beyond U+10FFFF */
    lq_grammar_free(g);
}

static void test_arithmetic_gbnf(void)
{
    lq_grammar *g = load("arithmetic.gbnf");
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(match(g, "x=1\n"));
    CHECK(match(g, "(a +2) *b_3 = 17\n1=1\n"));
    CHECK(!match(g, "a + 2=1\n")); /* no space before a term */
    CHECK(match(g, "( x ) = y\n"));
    CHECK(!match(g, "x=1"));      /* each equation ends with a newline */
    CHECK(!match(g, "=1\n"));
    CHECK(!match(g, "X=1\n"));    /* identifiers are lower case */
    CHECK(!match(g, "(a=1\n"));
    lq_grammar_free(g);
}

static void test_list_gbnf(void)
{
    lq_grammar *g = load("list.gbnf");
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(match(g, "- milk\n- eggs \xe2\x9c\x93\n"));
    CHECK(!match(g, ""));
    CHECK(!match(g, "- \n"));                      /* at least one character */
    CHECK(!match(g, "- a\rb\n"));
    CHECK(!prefix_ok(g, "- a\xe2\x80\xa8"));        /* U+2028 is excluded */
    CHECK(prefix_ok(g, "- a\xe2\x80"));             /* ...but U+2000..U+203F are not all */
    CHECK(!prefix_ok(g, "* a"));
    lq_grammar_free(g);
}

static void test_chess_gbnf(void)
{
    lq_grammar *g = load("chess.gbnf");
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(match(g, "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n"));
    CHECK(match(g, "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8+\n"));
    CHECK(match(g, "1. e8=Q Kxe8#\n10. O-O O-O\n"));
    CHECK(!match(g, "1. e4 e5\n"));   /* at least one more numbered move */
    CHECK(!match(g, "1. e9 e5\n2. a3 a6\n"));
    CHECK(!match(g, "1. Zf3 e5\n2. a3 a6\n"));
    lq_grammar_free(g);
}

static void test_repetitions(void)
{
    lq_grammar *g = parse("root ::= \"a\"{2,4} [0-9]{3} (\"x\" | \"y\")* \"z\"? .\n");
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(match(g, "aa123q"));
    CHECK(match(g, "aaaa999xyxyzq"));
    CHECK(match(g, "aaa000z\xc3\xa9")); /* `.` is one code point */
    CHECK(!match(g, "a123q"));
    CHECK(!match(g, "aaaaa123q"));
    CHECK(!match(g, "aa12q"));
    CHECK(!match(g, "aa123zzq"));
    lq_grammar_free(g);

    g = parse("root ::= [a]{3} \"-\" [b]{2,} \"-\" [c]{0,1}\n");
    CHECK(g && match(g, "aaa-bb-") && match(g, "aaa-bbbbb-c") && !match(g, "aaa-b-"));
    lq_grammar_free(g);
    /* escapes, negation, comments, multi-line groups */
    g = parse("# comment\nroot ::= ( \"\\x41\" | \"\\u00e9\" # inside\n  | [^a-z\\n] )+ \"\\t\"\n");
    CHECK(g && match(g, "A\xc3\xa9Z\t") && !match(g, "a\t") && !match(g, "\n\t"));
    lq_grammar_free(g);
}

static void check_err(const char *text, const char *needle)
{
    lq_grammar *g = NULL;
    lq_err err = {0};
    int rc = lq_grammar_parse(text, strlen(text), &g, &err);
    CHECK_EQ_INT(rc, LQ_EINVAL);
    CHECK(g == NULL);
    CHECK_STR_CONTAINS(err.msg, needle);
}

static void test_errors(void)
{
    check_err("root ::= foo\n", "undefined rule 'foo'");
    check_err("root ::= \"a\"\nx ::= y\n", "undefined rule 'y' (referenced at line 2, column 7)");
    check_err("item ::= \"a\"\n", "no 'root' rule");
    check_err("root ::= root \"a\" | \"b\"\n", "left recursion in rule 'root'");
    check_err("root ::= expr\nexpr ::= term? expr \"+\" | \"1\"\nterm ::= \"x\"\n",
              "left recursion");
    check_err("root ::= \"a\" root\n", "language of 'root' is empty");
    check_err("root ::= []\n", "language of 'root' is empty");
    check_err("root ::= [^\\x00-\\U0010FFFF]\n", "language of 'root' is empty");
    check_err("root ::= \"abc\n", "line 1, column 10: unterminated string literal");
    check_err("root ::= \"a\"\n  x := \"b\"\n", "line 2, column 5: expecting '::='");
    check_err("root ::= [a-\n", "line 1");
    check_err("root ::= \"a\" )\n", "line 1, column 14");
    check_err("root ::= * \"a\"\n", "expecting an item before the repetition");
    check_err("root ::= \"a\"{3,1}\n", "n < m");
    check_err("root ::= \"a\"{99999}\n", "above 10000");
    check_err("root ::= \"\\q\"\n", "unknown escape");
    check_err("root ::= [z-a]\n", "range");
    check_err("root ::= \"a\"\nroot ::= \"b\"\n", "defined twice");
    check_err("", "no 'root' rule");
    /* a grammar whose stacks explode (nested optional repetitions of a nullable item) is
     * refused by the recogniser with a message, quickly, not after eating the memory */
    lq_grammar *big = parse("root ::= (((\"a\"{0,3000}){0,3000}){0,3000}){0,300}\n");
    CHECK(big != NULL);
    if (big) {
        lq_grammar_state *st = NULL;
        lq_err e2 = {0};
        CHECK_EQ_INT(lq_grammar_state_create(big, &st, &e2), LQ_EINVAL);
        CHECK_STR_CONTAINS(e2.msg, "ambiguous");
        lq_grammar_free(big);
    }
    /* right recursion is fine, and deep */
    lq_grammar *g = parse("root ::= \"(\" root \")\" | \"x\"\n");
    CHECK(g && match(g, "((((x))))") && !match(g, "((x)"));
    lq_grammar_free(g);
}

/* A tokenizer with a handful of pieces that split UTF-8 characters and JSON tokens. */
static lq_tokenizer *toy_tokenizer(void)
{
    const char *json =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{"
        "\"{\":0,\"}\":1,\"\\\"\":2,\"a\":3,\"b\":4,\"ab\":5,\":\":6,\"1\":7,\"12\":8,"
        "\",\":9,\"\\u0120\":10,\"\\u00c3\":11,\"\\u00a9\":12,\"\\u00c3\\u00a9\":13,"
        "\"{\\\"\":14,\"\\\":\":15,\"x\":16,\"<eos>\":17},\"merges\":[]},"
        "\"added_tokens\":[{\"id\":17,\"content\":\"<eos>\",\"special\":true}],"
        "\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}";
    lq_tokenizer *t = NULL;
    lq_err err = {0};
    if (lq_tokenizer_from_json(json, strlen(json), &t, &err))
        printf("#   toy tokenizer: %s\n", err.msg);
    return t;
}

static void test_mask(void)
{
    lq_tokenizer *t = toy_tokenizer();
    CHECK(t != NULL);
    if (!t)
        return;
    lq_grammar_vocab *v = NULL;
    CHECK_EQ_INT(lq_grammar_vocab_create(t, &v, NULL), LQ_OK);
    lq_grammar *g = parse("root ::= \"{\" (\"\\\"\" [a-z\\u00e9]+ \"\\\":\" \" \"? [0-9]+)? \"}\"\n");
    CHECK(g && v);
    if (!g || !v) {
        lq_grammar_free(g);
        lq_grammar_vocab_free(v);
        lq_tokenizer_free(t);
        return;
    }
    int32_t nv = lq_grammar_vocab_size(v);
    uint8_t *allowed = malloc((size_t)nv);
    lq_grammar_state *st;
    CHECK_EQ_INT(lq_grammar_state_create(g, &st, NULL), LQ_OK);
    /* walk a fixed path; at each step the mask must equal "accepting the token's bytes
     * succeeds" for every token (checked on a scratch copy of the state) */
    int32_t path[] = {14, 3, 11, 12, 13, 15, 10, 8, 7, 1};
    for (size_t k = 0; k < sizeof path / sizeof *path; k++) {
        int n = lq_grammar_mask(st, v, 0, allowed, NULL);
        CHECK(n > 0);
        for (int32_t id = 0; id < nv; id++) {
            char buf[64];
            int32_t two[1] = {id};
            char *txt = NULL;
            size_t len = 0;
            lq_tokenizer_decode(t, two, 1, LQ_DETOK_SKIP_SPECIAL, &txt, &len, NULL);
            (void)buf;
            /* replay the path so far plus this token on a fresh state */
            lq_grammar_state *s2;
            lq_grammar_state_create(g, &s2, NULL);
            int ok = 1;
            for (size_t j = 0; j < k && ok; j++)
                ok = lq_grammar_accept_token(s2, v, path[j], 0, NULL) == LQ_OK;
            int want = len > 0 && ok && lq_grammar_state_accept(s2, txt, len, NULL) == LQ_OK;
            CHECK_MSG(allowed[id] == want, "step %zu token %d: mask %d, walk %d", k, (int)id,
                      allowed[id], want);
            lq_grammar_state_free(s2);
            free(txt);
        }
        CHECK_MSG(allowed[path[k]], "step %zu: path token %d not allowed", k, (int)path[k]);
        CHECK_EQ_INT(lq_grammar_accept_token(st, v, path[k], 0, NULL), LQ_OK);
    }
    CHECK(lq_grammar_state_can_end(st));
    CHECK(lq_grammar_state_done(st));
    CHECK_EQ_INT(lq_grammar_mask(st, v, 0, allowed, NULL), 0);
    /* a rejected token leaves the state as it was */
    lq_grammar_state_free(st);
    CHECK_EQ_INT(lq_grammar_state_create(g, &st, NULL), LQ_OK);
    CHECK_EQ_INT(lq_grammar_accept_token(st, v, 3, 0, NULL), LQ_EINVAL);
    CHECK_EQ_INT(lq_grammar_accept_token(st, v, 17, 0, NULL), LQ_EINVAL); /* no text */
    CHECK_EQ_INT(lq_grammar_accept_token(st, v, 0, 0, NULL), LQ_OK);
    lq_grammar_state_free(st);
    free(allowed);
    lq_grammar_free(g);
    lq_grammar_vocab_free(v);
    lq_tokenizer_free(t);
}

/* SentencePiece drops the leading space of the first token of a text: the mask at the start
 * (strip_space) judges "▁a" by "a". */
static void test_spm_start(void)
{
    const char *tok[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "a", "b"};
    float sc[] = {0, 0, 0, -1, -2, -2};
    int32_t ty[] = {2, 3, 3, 1, 1, 1};
    lq_gguf_writer *w = lq_gguf_writer_create();
    lq_gguf_writer_add_str(w, "general.architecture", "llama");
    lq_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok, 6);
    lq_gguf_writer_add_arr(w, "tokenizer.ggml.scores", LQ_GGUF_F32, sc, 6);
    lq_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LQ_GGUF_I32, ty, 6);
    lq_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    lq_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    uint8_t *buf = NULL;
    size_t len = 0;
    lq_err e = {0};
    lq_gguf *gg = NULL;
    lq_tokenizer *t = NULL;
    int rc = lq_gguf_writer_write_buffer(w, &buf, &len, &e);
    lq_gguf_writer_free(w);
    if (!rc)
        rc = lq_gguf_open_buffer(buf, len, &gg, &e);
    if (!rc)
        rc = lq_tokenizer_from_gguf(gg, &t, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    lq_grammar_vocab *v = NULL;
    lq_grammar *g = parse("root ::= \"a\" \"b\"?\n");
    if (t && g && lq_grammar_vocab_create(t, &v, NULL) == LQ_OK) {
        uint8_t allowed[6];
        lq_grammar_state *st;
        CHECK_EQ_INT(lq_grammar_state_create(g, &st, NULL), LQ_OK);
        CHECK_EQ_INT(lq_grammar_mask(st, v, 1, allowed, NULL), 2); /* "▁a" and "a" */
        CHECK(allowed[3] && allowed[4] && !allowed[5]);
        CHECK_EQ_INT(lq_grammar_mask(st, v, 0, allowed, NULL), 1); /* mid-text " a" is out */
        CHECK(!allowed[3] && allowed[4]);
        CHECK_EQ_INT(lq_grammar_accept_token(st, v, 3, 1, NULL), LQ_OK);
        CHECK(lq_grammar_state_can_end(st));
        CHECK_EQ_INT(lq_grammar_mask(st, v, 0, allowed, NULL), 1);
        CHECK(allowed[5]);
        lq_grammar_state_free(st);
        /* a language this vocabulary cannot spell: no token can start it (the server
         * refuses such a grammar with a 400 before generating) */
        lq_grammar *z = parse("root ::= \"z\"\n");
        CHECK_EQ_INT(lq_grammar_state_create(z, &st, NULL), LQ_OK);
        CHECK_EQ_INT(lq_grammar_mask(st, v, 0, allowed, NULL), 0);
        CHECK(!lq_grammar_state_can_end(st));
        lq_grammar_state_free(st);
        lq_grammar_free(z);
    } else {
        CHECK(0);
    }
    lq_grammar_vocab_free(v);
    lq_grammar_free(g);
    lq_tokenizer_free(t);
    lq_gguf_close(gg);
    free(buf);
}

int main(void)
{
    RUN(test_json_gbnf);
    RUN(test_arithmetic_gbnf);
    RUN(test_list_gbnf);
    RUN(test_chess_gbnf);
    RUN(test_repetitions);
    RUN(test_errors);
    RUN(test_mask);
    RUN(test_spm_start);
    return harness_done();
}
