/* Tokenizer unit tests on small hand-made vocabularies (no conformance data needed):
 * byte-level BPE from an in-memory tokenizer.json, SentencePiece and error cases from
 * GGUF fixtures written with the GGUF writer. */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "larql/gguf.h"
#include "larql/tokenizer.h"

/* ------------------------------------------------------------ a tiny byte-level BPE */

/* GPT-2's byte -> unicode map, written out independently of the library's table. */
static void byte_char(int b, char *out)
{
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int x = 0; x < b; x++) {
            int px = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
            n += !px;
        }
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

enum {
    ID_HE = 256, ID_LL, ID_HELL, ID_HELLO, ID_GW, ID_OR, ID_GWOR, ID_LD, ID_GWORLD,
    ID_BOS, ID_EOT, ID_USER, ID_EL, ID_XYZ, ID_EOTBANG,
};

/* vocab: the 256 byte characters (id = byte) + merged pieces + added tokens */
static char *tiny_bpe_json(int ignore_merges, const char *model_type, const char *split_behavior,
                           const char *regex)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char c[3];
        byte_char(b, c);
        json_object_set_new(vocab, c, json_integer(b));
    }
    static const char *const merged[] = {"he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld"};
    for (int i = 0; i < 9; i++)
        json_object_set_new(vocab, merged[i], json_integer(ID_HE + i));
    json_object_set_new(vocab, "el", json_integer(ID_EL));
    json_object_set_new(vocab, "xyz", json_integer(ID_XYZ));
    /* rank order: "l l" before "e l", so "ell" -> e + ll */
    json_t *merges = json_pack("[s,s,s,s,s,s,s,s,s]", "h e", "l l", "he ll", "hell o", "Ġ w", "o r",
                               "Ġw or", "l d", "Ġwor ld");
    json_array_append_new(merges, json_pack("[s,s]", "e", "l")); /* pair form */
    json_t *model = json_pack("{s:s,s:o,s:o,s:b}", "type", model_type, "vocab", vocab, "merges",
                              merges, "ignore_merges", ignore_merges);
    json_t *added = json_pack("[{s:i,s:s,s:b},{s:i,s:s,s:b},{s:i,s:s,s:b},{s:i,s:s,s:b}]", "id",
                              ID_BOS, "content", "<|bos|>", "special", 1, "id", ID_EOT, "content",
                              "<|eot|>", "special", 1, "id", ID_USER, "content", "<user>", "special",
                              0, "id", ID_EOTBANG, "content", "<|eot|>!", "special", 1);
    json_t *pre = json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,s:b}]}", "type", "Sequence",
                            "pretokenizers", "type", "Split", "pattern", "Regex", regex, "behavior",
                            split_behavior, "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
                            "use_regex", 0);
    json_t *post = json_pack("{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}}],s:{s:{s:s,s:[i],s:[s]}}}",
                             "type", "TemplateProcessing", "single", "SpecialToken", "id", "<|bos|>",
                             "type_id", 0, "Sequence", "id", "A", "type_id", 0, "special_tokens",
                             "<|bos|>", "id", "<|bos|>", "ids", ID_BOS, "tokens", "<|bos|>");
    json_t *root = json_pack("{s:o,s:o,s:n,s:o,s:o}", "model", model, "added_tokens", added,
                             "normalizer", "pre_tokenizer", pre, "post_processor", post);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

#define LLAMA3_RE                                                                            \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                 \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static lq_tokenizer *tiny_bpe(int ignore_merges)
{
    char *js = tiny_bpe_json(ignore_merges, "BPE", "Isolated", LLAMA3_RE);
    lq_tokenizer *t = NULL;
    lq_err e = {0};
    int rc = lq_tokenizer_from_json(js, strlen(js), &t, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    free(js);
    return t;
}

static int encode_eq(const lq_tokenizer *t, const char *s, unsigned flags, const int32_t *want, size_t n)
{
    int32_t *ids = NULL;
    size_t k = 0;
    lq_err e = {0};
    int rc = lq_tokenizer_encode(t, s, strlen(s), flags, &ids, &k, &e);
    int ok = rc == 0 && k == n && (n == 0 || !memcmp(ids, want, n * sizeof *ids));
    if (!ok) {
        printf("#   encode(\"%s\") rc %d %s ->", s, rc, e.msg);
        for (size_t i = 0; i < k; i++)
            printf(" %d", (int)ids[i]);
        printf("\n");
    }
    free(ids);
    return ok;
}

static char *decode_str(const lq_tokenizer *t, const int32_t *ids, size_t n, unsigned flags)
{
    char *s = NULL;
    size_t len = 0;
    lq_err e = {0};
    int rc = lq_tokenizer_decode(t, ids, n, flags, &s, &len, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (s)
        CHECK_EQ_INT(strlen(s), len);
    return s;
}

static void test_bpe_merges(void)
{
    lq_tokenizer *t = tiny_bpe(0);
    if (!t)
        return;
    CHECK_EQ_INT(lq_tokenizer_kind(t), LQ_TOK_BPE);
    CHECK_EQ_INT(lq_tokenizer_n_vocab(t), ID_EOTBANG + 1);
    CHECK(encode_eq(t, "hello world", 0, (int32_t[]){ID_HELLO, ID_GWORLD}, 2));
    /* rank order: "l l" (rank 1) beats "e l" (rank 9) */
    CHECK(encode_eq(t, "ell", 0, (int32_t[]){'e', ID_LL}, 2));
    CHECK(encode_eq(t, "hhe", 0, (int32_t[]){'h', ID_HE}, 2));
    CHECK(encode_eq(t, "", 0, NULL, 0));
    /* the pre-tokenizer keeps words apart: "o w" never merges across the space */
    CHECK(encode_eq(t, "hello,world", 0, (int32_t[]){ID_HELLO, ',', 'w', ID_OR, ID_LD}, 5));
    /* bytes outside ASCII use their mapped characters: é = C3 A9 */
    CHECK(encode_eq(t, "\xC3\xA9", 0, (int32_t[]){0xC3, 0xA9}, 2));
    /* no merges reach "xyz", so without ignore_merges it stays three bytes */
    CHECK(encode_eq(t, "xyz", 0, (int32_t[]){'x', 'y', 'z'}, 3));
    lq_tokenizer_free(t);
}

static void test_bpe_ignore_merges(void)
{
    lq_tokenizer *t = tiny_bpe(1);
    if (!t)
        return;
    CHECK(encode_eq(t, "xyz", 0, (int32_t[]){ID_XYZ}, 1));
    CHECK(encode_eq(t, "hello world", 0, (int32_t[]){ID_HELLO, ID_GWORLD}, 2));
    lq_tokenizer_free(t);
}

static void test_bpe_specials_and_bos(void)
{
    lq_tokenizer *t = tiny_bpe(0);
    if (!t)
        return;
    CHECK_EQ_INT(lq_tokenizer_bos(t), ID_BOS);
    CHECK_EQ_INT(lq_tokenizer_add_bos(t), 1); /* from the TemplateProcessing */
    CHECK_EQ_INT(lq_tokenizer_eos(t), -1);
    CHECK_EQ_INT(lq_tokenizer_eot(t), -1);
    CHECK(lq_tokenizer_is_control(t, ID_EOT));
    CHECK(!lq_tokenizer_is_control(t, ID_USER));
    CHECK(!lq_tokenizer_is_control(t, 'a'));
    CHECK(!lq_tokenizer_is_control(t, -1));
    CHECK(encode_eq(t, "hello", LQ_TOK_ADD_BOS, (int32_t[]){ID_BOS, ID_HELLO}, 2));
    CHECK(encode_eq(t, "", LQ_TOK_ADD_BOS, (int32_t[]){ID_BOS}, 1));
    CHECK(encode_eq(t, "<|eot|>hello", LQ_TOK_PARSE_SPECIAL, (int32_t[]){ID_EOT, ID_HELLO}, 2));
    /* longest special first: "<|eot|>!" wins over "<|eot|>" */
    CHECK(encode_eq(t, "<|eot|>!<|eot|>", LQ_TOK_PARSE_SPECIAL, (int32_t[]){ID_EOTBANG, ID_EOT}, 2));
    CHECK(encode_eq(t, "hello<user>", LQ_TOK_PARSE_SPECIAL, (int32_t[]){ID_HELLO, ID_USER}, 2));
    /* without PARSE_SPECIAL the text is ordinary text: no special ids, and it round-trips */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(lq_tokenizer_encode(t, "<|eot|>hello", 12, 0, &ids, &n, NULL), 0);
    CHECK(n > 2);
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] < ID_BOS);
    char *s = decode_str(t, ids, n, 0);
    CHECK(s && !strcmp(s, "<|eot|>hello"));
    free(s);
    free(ids);
    /* lookups */
    CHECK_EQ_INT(lq_tokenizer_find(t, "Ġworld", strlen("Ġworld")), ID_GWORLD);
    CHECK_EQ_INT(lq_tokenizer_find(t, "nope", 4), -1);
    size_t pl = 0;
    const char *p = lq_tokenizer_piece(t, ID_GW, &pl);
    CHECK(p && pl == 3 && !memcmp(p, "Ġw", 3));
    CHECK(lq_tokenizer_piece(t, -1, &pl) == NULL);
    CHECK(lq_tokenizer_piece(t, ID_EOTBANG + 1, &pl) == NULL);
    lq_tokenizer_free(t);
}

static void test_bpe_decode(void)
{
    lq_tokenizer *t = tiny_bpe(0);
    if (!t)
        return;
    int32_t ids[] = {ID_BOS, ID_HELLO, ID_GWORLD, 0xC3, 0xA9, '\n', ID_EOT};
    char *s = decode_str(t, ids, 7, 0);
    CHECK(s && !strcmp(s, "<|bos|>hello world\xC3\xA9\n<|eot|>"));
    free(s);
    s = decode_str(t, ids, 7, LQ_DETOK_SKIP_SPECIAL);
    CHECK(s && !strcmp(s, "hello world\xC3\xA9\n"));
    free(s);
    s = decode_str(t, NULL, 0, 0);
    CHECK(s && s[0] == 0);
    free(s);
    lq_err e = {0};
    char *out = NULL;
    size_t len = 0;
    int32_t bad[] = {ID_HELLO, ID_EOTBANG + 1};
    CHECK_EQ_INT(lq_tokenizer_decode(t, bad, 2, 0, &out, &len, &e), LQ_ERANGE);
    CHECK_STR_CONTAINS(e.msg, "position 1");
    CHECK(out == NULL);
    int32_t neg[] = {-5};
    CHECK_EQ_INT(lq_tokenizer_decode(t, neg, 1, 0, &out, &len, &e), LQ_ERANGE);
    /* round trip of assorted text */
    const char *samples[] = {"hello world", "  two  spaces ", "tab\tand\nnewlines\r\n", "日本語 текст 🦙!",
                             "it's 12345 o'clock", ""};
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) {
        int32_t *v = NULL;
        size_t n = 0;
        CHECK_EQ_INT(lq_tokenizer_encode(t, samples[i], strlen(samples[i]), 0, &v, &n, NULL), 0);
        char *back = decode_str(t, v, n, 0);
        CHECK_MSG(back && !strcmp(back, samples[i]), "round trip of \"%s\" gave \"%s\"", samples[i],
                  back ? back : "(null)");
        free(back);
        free(v);
    }
    lq_tokenizer_free(t);
}

static void test_invalid_utf8(void)
{
    lq_tokenizer *t = tiny_bpe(0);
    if (!t)
        return;
    static const struct {
        const char *s;
        size_t n;
        const char *where;
    } cases[] = {
        {"ab\xC3(", 4, "offset 2"},         /* lead byte without continuation */
        {"\xC0\x80", 2, "offset 0"},        /* overlong NUL */
        {"x\xED\xA0\x80", 4, "offset 1"},   /* UTF-16 surrogate */
        {"abc\xE2\x82", 5, "offset 3"},     /* truncated at the end */
        {"\xF4\x90\x80\x80", 4, "offset 0"}, /* above U+10FFFF */
        {"ok\xFF", 3, "offset 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int32_t *ids = (int32_t *)1;
        size_t n = 7;
        lq_err e = {0};
        CHECK_EQ_INT(lq_tokenizer_encode(t, cases[i].s, cases[i].n, 0, &ids, &n, &e), LQ_EINVAL);
        CHECK_STR_CONTAINS(e.msg, cases[i].where);
        CHECK(ids == NULL && n == 0);
    }
    /* embedded NUL is valid UTF-8 */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(lq_tokenizer_encode(t, "a\0b", 3, 0, &ids, &n, NULL), 0);
    CHECK_EQ_INT(n, 3);
    free(ids);
    CHECK_EQ_INT(lq_tokenizer_encode(t, NULL, 3, 0, &ids, &n, NULL), LQ_EINVAL);
    lq_tokenizer_free(t);
}

static void test_stream_detok(void)
{
    lq_tokenizer *t = tiny_bpe(0);
    if (!t)
        return;
    lq_detok *d = NULL;
    CHECK_EQ_INT(lq_detok_create(t, LQ_DETOK_SKIP_SPECIAL, &d, NULL), 0);
    if (!d) {
        lq_tokenizer_free(t);
        return;
    }
    char out[64];
    size_t n = 99;
    /* "é" split across two byte tokens: nothing, then the whole character */
    CHECK_EQ_INT(lq_detok_push(d, 0xC3, out, sizeof out, &n, NULL), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(lq_detok_push(d, 0xA9, out, sizeof out, &n, NULL), 0);
    CHECK(n == 2 && !strcmp(out, "\xC3\xA9"));
    /* a 4-byte emoji (F0 9F A6 99) across four tokens */
    int32_t emoji[] = {0xF0, 0x9F, 0xA6, 0x99};
    size_t total = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(lq_detok_push(d, emoji[i], out, sizeof out, &n, NULL), 0);
        total += n;
        if (i < 3)
            CHECK_EQ_INT(n, 0);
    }
    CHECK(total == 4 && !strcmp(out, "\xF0\x9F\xA6\x99"));
    /* special tokens are skipped with the flag */
    CHECK_EQ_INT(lq_detok_push(d, ID_EOT, out, sizeof out, &n, NULL), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(lq_detok_push(d, ID_HELLO, out, sizeof out, &n, NULL), 0);
    CHECK(n == 5 && !strcmp(out, "hello"));
    /* an invalid byte cannot start a character: replaced at once */
    CHECK_EQ_INT(lq_detok_push(d, 0xFF, out, sizeof out, &n, NULL), 0);
    CHECK(n == 3 && !strcmp(out, "\xEF\xBF\xBD"));
    /* a lead byte followed by text: the lead becomes U+FFFD, the text comes through */
    CHECK_EQ_INT(lq_detok_push(d, 0xE2, out, sizeof out, &n, NULL), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(lq_detok_push(d, 'a', out, sizeof out, &n, NULL), 0);
    CHECK(n == 4 && !strcmp(out, "\xEF\xBF\xBD" "a"));
    /* incomplete tail at the end of the stream -> U+FFFD at flush */
    CHECK_EQ_INT(lq_detok_push(d, 0xE2, out, sizeof out, &n, NULL), 0);
    CHECK_EQ_INT(lq_detok_push(d, 0x82, out, sizeof out, &n, NULL), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(lq_detok_flush(d, out, sizeof out, &n), 0);
    CHECK(n == 3 && !strcmp(out, "\xEF\xBF\xBD"));
    CHECK_EQ_INT(lq_detok_flush(d, out, sizeof out, &n), 0);
    CHECK_EQ_INT(n, 0);
    /* errors: id out of range, buffer too small (state unchanged) */
    lq_err e = {0};
    CHECK_EQ_INT(lq_detok_push(d, 100000, out, sizeof out, &n, &e), LQ_ERANGE);
    CHECK_EQ_INT(lq_detok_push(d, ID_HELLO, out, 4, &n, &e), LQ_ERANGE);
    CHECK_STR_CONTAINS(e.msg, "buffer");
    CHECK_EQ_INT(lq_detok_push(d, ID_HELLO, out, 6, &n, &e), 0);
    CHECK(n == 5 && !strcmp(out, "hello"));
    lq_detok_free(d);
    lq_detok_free(NULL);
    lq_tokenizer_free(t);
}

static void test_bad_json(void)
{
    lq_tokenizer *t = (lq_tokenizer *)1;
    lq_err e = {0};
    CHECK_EQ_INT(lq_tokenizer_from_json("{", 1, &t, &e), LQ_EFORMAT);
    CHECK_STR_CONTAINS(e.msg, "line");
    CHECK(t == NULL);
    CHECK_EQ_INT(lq_tokenizer_from_json("[]", 2, &t, &e), LQ_EFORMAT);
    CHECK_EQ_INT(lq_tokenizer_from_json("{}", 2, &t, &e), LQ_EFORMAT);
    CHECK_STR_CONTAINS(e.msg, "model");

    char *js = tiny_bpe_json(0, "WordPiece", "Isolated", LLAMA3_RE);
    CHECK_EQ_INT(lq_tokenizer_from_json(js, strlen(js), &t, &e), LQ_EUNSUPPORTED);
    CHECK_STR_CONTAINS(e.msg, "unsupported tokenizer model 'WordPiece'");
    free(js);
    js = tiny_bpe_json(0, "BPE", "Removed", LLAMA3_RE);
    CHECK_EQ_INT(lq_tokenizer_from_json(js, strlen(js), &t, &e), LQ_EUNSUPPORTED);
    CHECK_STR_CONTAINS(e.msg, "Removed");
    free(js);
    js = tiny_bpe_json(0, "BPE", "Isolated", "(unclosed");
    CHECK_EQ_INT(lq_tokenizer_from_json(js, strlen(js), &t, &e), LQ_EUNSUPPORTED);
    CHECK_STR_CONTAINS(e.msg, "regex");
    free(js);

    static const char *const bad[] = {
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[5]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"ab\"]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999},\"merges\":[]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"added_tokens\":[{\"id\":0,\"content\":\"b\"}]}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"added_tokens\":[{\"content\":\"b\"}]}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":[]}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = lq_tokenizer_from_json(bad[i], strlen(bad[i]), &t, &e);
        CHECK_MSG(rc == LQ_EFORMAT, "case %zu: rc %d (%s)", i, rc, e.msg);
        CHECK(t == NULL);
    }
    static const char fb[] =
        "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},\"merges\":[]}}";
    CHECK_EQ_INT(lq_tokenizer_from_json(fb, strlen(fb), &t, &e), LQ_EUNSUPPORTED);
    /* a minimal valid one: no pre-tokenizer, no merges */
    static const char ok[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1}}}";
    CHECK_EQ_INT(lq_tokenizer_from_json(ok, strlen(ok), &t, &e), 0);
    CHECK(encode_eq(t, "ab", 0, (int32_t[]){0, 1}, 2));
    CHECK_EQ_INT(lq_tokenizer_add_bos(t), 0);
    lq_tokenizer_free(t);
    t = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/missing.json", harness_tmpdir());
    CHECK(lq_tokenizer_from_json_file(path, &t, &e) != 0);
    CHECK_STR_CONTAINS(e.msg, "missing.json");
    CHECK(t == NULL);
    lq_tokenizer_free(NULL);
}


/* ------------------------------------------------------------ GGUF fixtures */

/* A tiny SentencePiece vocabulary. Scores make "bc" the best pair, then "▁a", so "▁abc"
 * becomes ▁a + bc (merging left to right would give ▁ab + c instead). */
enum { S_UNK = 0, S_BOS = 1, S_EOS = 2, S_BYTE0 = 3, S_SP = 259, S_A, S_B, S_SPA, S_AB, S_SPAB, S_C, S_BC };
#define S_N (S_BC + 1)

typedef struct spm_opts {
    const char *model;    /* tokenizer.ggml.model */
    int bad_bos;          /* bos id past the vocabulary */
    int bad_type;         /* a token_type value outside 0..6 */
    int short_scores;     /* scores shorter than tokens */
    int add_bos;          /* -1: key absent */
    int bos_u64;          /* bos stored as u64 instead of u32 */
} spm_opts;

static lq_gguf *spm_gguf(spm_opts o, uint8_t **buf)
{
    static char bytes[256][8];
    const char *tok[S_N];
    float sc[S_N];
    int32_t ty[S_N];
    tok[S_UNK] = "<unk>";
    tok[S_BOS] = "<s>";
    tok[S_EOS] = "</s>";
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tok[S_BYTE0 + b] = bytes[b];
        ty[S_BYTE0 + b] = 6;
        sc[S_BYTE0 + b] = 0;
    }
    const char *pieces[] = {"▁", "a", "b", "▁a", "ab", "▁ab", "c", "bc"};
    float scores[] = {-5, -6, -6, -1, -2, -3, -6, -0.5f};
    for (int i = 0; i < 8; i++) {
        tok[S_SP + i] = pieces[i];
        sc[S_SP + i] = scores[i];
        ty[S_SP + i] = 1;
    }
    ty[S_UNK] = 2;
    ty[S_BOS] = ty[S_EOS] = 3;
    sc[S_UNK] = sc[S_BOS] = sc[S_EOS] = 0;
    if (o.bad_type)
        ty[S_A] = 9;
    lq_gguf_writer *w = lq_gguf_writer_create();
    lq_gguf_writer_add_str(w, "general.architecture", "llama");
    if (o.model)
        lq_gguf_writer_add_str(w, "tokenizer.ggml.model", o.model);
    lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok, S_N);
    lq_gguf_writer_add_arr(w, "tokenizer.ggml.scores", LQ_GGUF_F32, sc, o.short_scores ? S_N - 1 : S_N);
    lq_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LQ_GGUF_I32, ty, S_N);
    if (o.bos_u64) {
        uint64_t v = S_BOS;
        lq_gguf_writer_add_scalar(w, "tokenizer.ggml.bos_token_id", LQ_GGUF_U64, &v);
    } else {
        lq_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", o.bad_bos ? 100000 : S_BOS);
    }
    lq_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", S_EOS);
    if (o.add_bos >= 0)
        lq_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", o.add_bos);
    size_t len = 0;
    lq_err e = {0};
    lq_gguf *g = NULL;
    *buf = NULL;
    int rc = lq_gguf_writer_write_buffer(w, buf, &len, &e);
    lq_gguf_writer_free(w);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc == 0) {
        rc = lq_gguf_open_buffer(*buf, len, &g, &e);
        CHECK_MSG(rc == 0, "%s", e.msg);
    }
    return g;
}

static lq_tokenizer *spm_tok(spm_opts o, int want_rc, const char *want_msg)
{
    uint8_t *buf = NULL;
    lq_gguf *g = spm_gguf(o, &buf);
    lq_tokenizer *t = NULL;
    if (g) {
        lq_err e = {0};
        int rc = lq_tokenizer_from_gguf(g, &t, &e);
        CHECK_MSG(rc == want_rc, "rc %d, want %d (%s)", rc, want_rc, e.msg);
        if (want_msg)
            CHECK_STR_CONTAINS(e.msg, want_msg);
        if (rc)
            CHECK(t == NULL);
    }
    lq_gguf_close(g);
    free(buf); /* the tokenizer keeps its own copies */
    return t;
}

static const spm_opts SPM_OK = {"llama", 0, 0, 0, -1, 0};

static void test_spm_encode(void)
{
    lq_tokenizer *t = spm_tok(SPM_OK, 0, NULL);
    if (!t)
        return;
    CHECK_EQ_INT(lq_tokenizer_kind(t), LQ_TOK_SPM);
    CHECK_EQ_INT(lq_tokenizer_bos(t), S_BOS);
    CHECK_EQ_INT(lq_tokenizer_eos(t), S_EOS);
    CHECK_EQ_INT(lq_tokenizer_add_bos(t), 1); /* default for llama SPM */
    CHECK(encode_eq(t, "abc", 0, (int32_t[]){S_SPA, S_BC}, 2));
    CHECK(encode_eq(t, "abc", LQ_TOK_ADD_BOS, (int32_t[]){S_BOS, S_SPA, S_BC}, 3));
    CHECK(encode_eq(t, "ab", 0, (int32_t[]){S_SPAB}, 1));
    CHECK(encode_eq(t, "", 0, NULL, 0));
    CHECK(encode_eq(t, " ", 0, (int32_t[]){S_SP, S_SP}, 2));
    /* byte fallback: é = C3 A9 is not a piece */
    CHECK(encode_eq(t, "a\xC3\xA9", 0, (int32_t[]){S_SPA, S_BYTE0 + 0xC3, S_BYTE0 + 0xA9}, 3));
    /* special text: parsed with the flag (and the dummy prefix follows it), plain otherwise */
    CHECK(encode_eq(t, "<s>a", LQ_TOK_PARSE_SPECIAL, (int32_t[]){S_BOS, S_SPA}, 2));
    CHECK(encode_eq(t, "<s>", 0, (int32_t[]){S_SP, S_BYTE0 + '<', S_BYTE0 + 's', S_BYTE0 + '>'}, 4));
    lq_tokenizer_free(t);
}

static void test_spm_decode(void)
{
    lq_tokenizer *t = spm_tok(SPM_OK, 0, NULL);
    if (!t)
        return;
    char *s = decode_str(t, (int32_t[]){S_BOS, S_SPA, S_BC}, 3, LQ_DETOK_SKIP_SPECIAL);
    CHECK(s && !strcmp(s, "abc")); /* dummy-prefix space stripped */
    free(s);
    s = decode_str(t, (int32_t[]){S_BOS, S_SPA, S_BC}, 3, 0);
    CHECK(s && !strcmp(s, "<s>abc"));
    free(s);
    s = decode_str(t, (int32_t[]){S_SPA, S_BYTE0 + 0xC3, S_BYTE0 + 0xA9, S_SPAB}, 4, 0);
    CHECK(s && !strcmp(s, "a\xC3\xA9 ab"));
    free(s);
    const char *samples[] = {"abc", " abc", "  a b  c ", "a\xC3\xA9\n\tz", "", " "};
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) {
        int32_t *v = NULL;
        size_t n = 0;
        CHECK_EQ_INT(lq_tokenizer_encode(t, samples[i], strlen(samples[i]), LQ_TOK_ADD_BOS, &v, &n, NULL), 0);
        char *back = decode_str(t, v, n, LQ_DETOK_SKIP_SPECIAL);
        CHECK_MSG(back && !strcmp(back, samples[i]), "round trip of \"%s\" gave \"%s\"", samples[i],
                  back ? back : "(null)");
        free(back);
        free(v);
    }
    /* streaming: the first text token loses its dummy space; after reset(0) it keeps it */
    lq_detok *d = NULL;
    CHECK_EQ_INT(lq_detok_create(t, LQ_DETOK_SKIP_SPECIAL, &d, NULL), 0);
    char out[64];
    size_t n = 0;
    CHECK_EQ_INT(lq_detok_push(d, S_BOS, out, sizeof out, &n, NULL), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(lq_detok_push(d, S_SPA, out, sizeof out, &n, NULL), 0);
    CHECK(n == 1 && !strcmp(out, "a"));
    CHECK_EQ_INT(lq_detok_push(d, S_SPAB, out, sizeof out, &n, NULL), 0);
    CHECK(n == 3 && !strcmp(out, " ab"));
    lq_detok_reset(d, 0);
    CHECK_EQ_INT(lq_detok_push(d, S_SPA, out, sizeof out, &n, NULL), 0);
    CHECK(n == 2 && !strcmp(out, " a"));
    lq_detok_reset(d, 1);
    CHECK_EQ_INT(lq_detok_push(d, S_SPA, out, sizeof out, &n, NULL), 0);
    CHECK(n == 1 && !strcmp(out, "a"));
    /* byte tokens of one character across pushes */
    CHECK_EQ_INT(lq_detok_push(d, S_BYTE0 + 0xC3, out, sizeof out, &n, NULL), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(lq_detok_push(d, S_BYTE0 + 0xA9, out, sizeof out, &n, NULL), 0);
    CHECK(n == 2 && !strcmp(out, "\xC3\xA9"));
    lq_detok_free(d);
    lq_tokenizer_free(t);
}

static void test_gguf_options_and_errors(void)
{
    spm_opts o = SPM_OK;
    o.add_bos = 0;
    lq_tokenizer *t = spm_tok(o, 0, NULL);
    CHECK(t && lq_tokenizer_add_bos(t) == 0);
    lq_tokenizer_free(t);
    o = SPM_OK;
    o.bos_u64 = 1; /* ids in any integer type */
    t = spm_tok(o, 0, NULL);
    CHECK(t && lq_tokenizer_bos(t) == S_BOS);
    lq_tokenizer_free(t);

    o = SPM_OK;
    o.model = "bert";
    CHECK(spm_tok(o, LQ_EUNSUPPORTED, "unsupported tokenizer model 'bert'") == NULL);
    o.model = NULL;
    CHECK(spm_tok(o, LQ_ENOTFOUND, "tokenizer.ggml.model") == NULL);
    o = SPM_OK;
    o.bad_bos = 1;
    CHECK(spm_tok(o, LQ_EFORMAT, "bos_token_id = 100000") == NULL);
    o = SPM_OK;
    o.bad_type = 1;
    CHECK(spm_tok(o, LQ_EFORMAT, "token_type[") == NULL);
    o = SPM_OK;
    o.short_scores = 1;
    CHECK(spm_tok(o, LQ_EFORMAT, "scores") == NULL);
    lq_err e = {0};
    CHECK_EQ_INT(lq_tokenizer_from_gguf(NULL, &t, &e), LQ_EINVAL);
}

/* Byte-level BPE from GGUF: 256 byte characters + "he" + "<|eot_id|>", one merge. */
static lq_tokenizer *bpe_gguf(const char *pre, int with_merges, int want_rc, const char *want_msg)
{
    static char chars[256][3];
    const char *tok[258];
    int32_t ty[258];
    for (int b = 0; b < 256; b++) {
        byte_char(b, chars[b]);
        tok[b] = chars[b];
        ty[b] = 1;
    }
    tok[256] = "he";
    ty[256] = 1;
    tok[257] = "<|eot_id|>";
    ty[257] = 3;
    const char *merges[] = {"h e"};
    lq_gguf_writer *w = lq_gguf_writer_create();
    lq_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre)
        lq_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre);
    lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok, 258);
    lq_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LQ_GGUF_I32, ty, 258);
    if (with_merges)
        lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    uint8_t *buf = NULL;
    size_t len = 0;
    lq_err e = {0};
    lq_gguf *g = NULL;
    lq_tokenizer *t = NULL;
    CHECK_EQ_INT(lq_gguf_writer_write_buffer(w, &buf, &len, &e), 0);
    lq_gguf_writer_free(w);
    if (buf && lq_gguf_open_buffer(buf, len, &g, &e) == 0) {
        int rc = lq_tokenizer_from_gguf(g, &t, &e);
        CHECK_MSG(rc == want_rc, "rc %d, want %d (%s)", rc, want_rc, e.msg);
        if (want_msg)
            CHECK_STR_CONTAINS(e.msg, want_msg);
    }
    lq_gguf_close(g);
    free(buf);
    return t;
}

static void test_bpe_gguf(void)
{
    lq_tokenizer *t = bpe_gguf("llama-bpe", 1, 0, NULL);
    if (t) {
        CHECK(encode_eq(t, "the", 0, (int32_t[]){'t', 256}, 2));
        CHECK_EQ_INT(lq_tokenizer_eot(t), 257); /* found by its text */
        CHECK_EQ_INT(lq_tokenizer_add_bos(t), 1); /* llama-bpe default */
        CHECK_EQ_INT(lq_tokenizer_bos(t), -1);    /* ... but there is no BOS id here */
        CHECK(encode_eq(t, "he", LQ_TOK_ADD_BOS, (int32_t[]){256}, 1));
        CHECK(encode_eq(t, "he<|eot_id|>", LQ_TOK_PARSE_SPECIAL, (int32_t[]){256, 257}, 2));
        lq_tokenizer_free(t);
    }
    t = bpe_gguf(NULL, 1, 0, NULL); /* no pre: GPT-2 rules, no BOS by default */
    if (t) {
        CHECK_EQ_INT(lq_tokenizer_add_bos(t), 0);
        CHECK(encode_eq(t, "he he", 0, (int32_t[]){256, ' ', 256}, 3)); /* Ġ is byte 32's id */
        lq_tokenizer_free(t);
    }
    CHECK(bpe_gguf("qwen2", 1, LQ_EUNSUPPORTED, "qwen2") == NULL);
    CHECK(bpe_gguf("gpt2", 0, LQ_ENOTFOUND, "merges") == NULL);
}

/* ------------------------------------------------------------ threads */

#define TH_TEXT "hello world hello,world ell \xF0\x9F\xA6\x99 xyz"

typedef struct th_arg {
    const lq_tokenizer *t;
    const int32_t *want;
    size_t n_want;
    int ok;
} th_arg;

static void *th_main(void *p)
{
    th_arg *a = p;
    a->ok = 1;
    for (int r = 0; r < 200; r++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (lq_tokenizer_encode(a->t, TH_TEXT, strlen(TH_TEXT), 0, &ids, &n, NULL) ||
            n != a->n_want || memcmp(ids, a->want, n * sizeof *ids))
            a->ok = 0;
        free(ids);
    }
    return NULL;
}

static void test_threads_share_tokenizer(void)
{
    lq_tokenizer *t = tiny_bpe(0);
    if (!t)
        return;
    int32_t *want = NULL;
    size_t nw = 0;
    CHECK_EQ_INT(lq_tokenizer_encode(t, TH_TEXT, strlen(TH_TEXT), 0, &want, &nw, NULL), 0);
    CHECK(nw > 10 && want[0] == ID_HELLO && want[1] == ID_GWORLD);
    pthread_t th[4];
    th_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (th_arg){t, want, nw, 0};
        pthread_create(&th[i], NULL, th_main, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].ok);
    }
    free(want);
    lq_tokenizer_free(t);
}

int main(void)
{
    RUN(test_bpe_merges);
    RUN(test_bpe_ignore_merges);
    RUN(test_bpe_specials_and_bos);
    RUN(test_bpe_decode);
    RUN(test_invalid_utf8);
    RUN(test_stream_detok);
    RUN(test_bad_json);
    RUN(test_spm_encode);
    RUN(test_spm_decode);
    RUN(test_gguf_options_and_errors);
    RUN(test_bpe_gguf);
    RUN(test_threads_share_tokenizer);
    return harness_done();
}
