/* Tokenizer conformance: llama.cpp's tokenizer test vectors (Llama 3 BPE, Llama 2 SPM,
 * GPT-2) and the Llama 3 oracle strings from two independent JavaScript tokenizers, against
 * both the GGUF and the tokenizer.json loaders. Every case must match; decode(encode(x))
 * must give x back. Skipped when ../shared/conformance is absent. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "larql/gguf.h"
#include "larql/tokenizer.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

/* Prints s with C escapes (for failure reports). */
static void print_escaped(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void print_ids(const char *label, const int32_t *v, size_t n)
{
    printf("#     %s:", label);
    for (size_t i = 0; i < n; i++)
        printf(" %d", (int)v[i]);
    putchar('\n');
}

static int parse_ids(const char *line, size_t n, int32_t *out, size_t cap, size_t *count)
{
    size_t k = 0;
    const char *p = line, *end = line + n;
    while (p < end) {
        while (p < end && *p == ' ')
            p++;
        if (p >= end)
            break;
        char *q;
        long v = strtol(p, &q, 10);
        if (q == p || k >= cap)
            return -1;
        out[k++] = (int32_t)v;
        p = q;
    }
    *count = k;
    return 0;
}

/* Checks one case; returns 1 on success. Prints input, expected and got on failure. */
static int check_case(const lq_tokenizer *t, const char *what, const char *s, size_t n,
                      unsigned flags, const int32_t *want, size_t nwant)
{
    int32_t *ids = NULL;
    size_t nids = 0;
    lq_err e = {0};
    int rc = lq_tokenizer_encode(t, s, n, flags, &ids, &nids, &e);
    int ok = rc == 0 && nids == nwant && (nwant == 0 || !memcmp(ids, want, nwant * sizeof *ids));
    if (!ok) {
        printf("#   %s mismatch for ", what);
        print_escaped(s, n);
        printf(" (rc %d %s)\n", rc, rc ? e.msg : "");
        print_ids("expected", want, nwant);
        print_ids("got     ", ids, nids);
    } else if (!(flags & LQ_TOK_PARSE_SPECIAL)) {
        char *back = NULL;
        size_t nb = 0;
        rc = lq_tokenizer_decode(t, ids, nids, 0, &back, &nb, &e);
        if (rc || nb != n || memcmp(back, s, n)) {
            printf("#   %s: decode(encode(x)) != x for ", what);
            print_escaped(s, n);
            printf(" -> ");
            if (back)
                print_escaped(back, nb);
            putchar('\n');
            ok = 0;
        }
        free(back);
    }
    free(ids);
    return ok;
}

/* Runs a .inp/.out pair: strings separated by "\n__ggml_vocab_test__\n", one line of ids
 * per string (without BOS). */
static void run_vectors(const lq_tokenizer *t, const char *dir, const char *name, const char *what)
{
    char p[4096];
    size_t ni, no;
    snprintf(p, sizeof p, "%s/tokenizer/%s.inp", dir, name);
    char *inp = slurp(p, &ni);
    snprintf(p, sizeof p, "%s/tokenizer/%s.out", dir, name);
    char *outp = slurp(p, &no);
    CHECK(inp && outp);
    if (!inp || !outp) {
        free(inp);
        free(outp);
        return;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t seplen = sizeof sep - 1;
    size_t pos = 0, opos = 0;
    int cases = 0, passed = 0;
    int32_t want[4096];
    for (;;) {
        char *hit = memmem(inp + pos, ni - pos, sep, seplen);
        if (!hit)
            break;
        size_t slen = (size_t)(hit - (inp + pos));
        char *nl = memchr(outp + opos, '\n', no - opos);
        size_t llen = nl ? (size_t)(nl - (outp + opos)) : no - opos;
        size_t nw = 0;
        CHECK(parse_ids(outp + opos, llen, want, 4096, &nw) == 0);
        cases++;
        passed += check_case(t, what, inp + pos, slen, 0, want, nw);
        pos = (size_t)(hit - inp) + seplen;
        opos += llen + (nl ? 1 : 0);
    }
    printf("#   %s: %d/%d cases\n", what, passed, cases);
    CHECK(cases == 46);
    CHECK_EQ_INT(passed, cases);
    free(inp);
    free(outp);
}

/* llama3_oracle_output.txt: lines  "text" -> ids (both agree). */
static void run_oracle(const lq_tokenizer *t, const char *dir, const char *what)
{
    char p[4096];
    size_t n;
    snprintf(p, sizeof p, "%s/tokenizer/llama3_oracle_output.txt", dir);
    char *f = slurp(p, &n);
    CHECK(f != NULL);
    if (!f)
        return;
    int cases = 0, passed = 0;
    for (char *line = strtok(f, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] != '"')
            continue;
        char *arrow = strstr(line, "\" -> ");
        if (!arrow)
            continue;
        char text[1024];
        size_t k = 0;
        for (char *q = line + 1; q < arrow && k < sizeof text - 1; q++) {
            if (*q == '\\' && q + 1 < arrow) {
                q++;
                text[k++] = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q == 'r' ? '\r' : *q;
            } else
                text[k++] = *q;
        }
        char *idstart = arrow + 5, *paren = strchr(idstart, '(');
        int32_t want[256];
        size_t nw = 0;
        CHECK(parse_ids(idstart, paren ? (size_t)(paren - idstart) : strlen(idstart), want, 256, &nw) == 0);
        unsigned flags = memmem(text, k, "<|", 2) ? LQ_TOK_PARSE_SPECIAL : 0;
        cases++;
        passed += check_case(t, what, text, k, flags, want, nw);
    }
    printf("#   %s oracle: %d/%d cases\n", what, passed, cases);
    CHECK_EQ_INT(cases, 7);
    CHECK_EQ_INT(passed, cases);
    free(f);

    /* decode check: "<|begin_of_text|>Hello world!" -> "Hello world!" with specials skipped */
    const char *s = "<|begin_of_text|>Hello world!";
    int32_t *ids = NULL;
    size_t nids = 0;
    CHECK_EQ_INT(lq_tokenizer_encode(t, s, strlen(s), LQ_TOK_PARSE_SPECIAL, &ids, &nids, NULL), 0);
    char *txt = NULL;
    size_t tl = 0;
    CHECK_EQ_INT(lq_tokenizer_decode(t, ids, nids, LQ_DETOK_SKIP_SPECIAL, &txt, &tl, NULL), 0);
    CHECK(txt && !strcmp(txt, "Hello world!"));
    free(txt);
    CHECK_EQ_INT(lq_tokenizer_decode(t, ids, nids, 0, &txt, &tl, NULL), 0);
    CHECK(txt && !strcmp(txt, s));
    free(txt);
    free(ids);
}

static lq_tokenizer *load_json(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer/%s", dir, name);
    lq_tokenizer *t = NULL;
    lq_err e = {0};
    int rc = lq_tokenizer_from_json_file(p, &t, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    return t;
}

static lq_tokenizer *load_gguf(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer/%s", dir, name);
    lq_gguf *g = NULL;
    lq_tokenizer *t = NULL;
    lq_err e = {0};
    int rc = lq_gguf_open(p, &g, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc)
        return NULL;
    rc = lq_tokenizer_from_gguf(g, &t, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    lq_gguf_close(g); /* the tokenizer copies what it needs */
    return t;
}

static void test_llama3_json(void)
{
    const char *dir = harness_conformance_dir();
    if (!dir)
        SKIP("../shared/conformance absent");
    lq_tokenizer *t = load_json(dir, "llama3-tokenizer.json");
    if (!t)
        return;
    CHECK_EQ_INT(lq_tokenizer_kind(t), LQ_TOK_BPE);
    CHECK_EQ_INT(lq_tokenizer_n_vocab(t), 128256);
    CHECK_EQ_INT(lq_tokenizer_bos(t), 128000);
    CHECK_EQ_INT(lq_tokenizer_eos(t), 128001);
    CHECK_EQ_INT(lq_tokenizer_eot(t), 128009);
    CHECK_EQ_INT(lq_tokenizer_add_bos(t), 1);
    run_vectors(t, dir, "ggml-vocab-llama-bpe.gguf", "llama3 tokenizer.json");
    run_oracle(t, dir, "llama3 tokenizer.json");
    lq_tokenizer_free(t);
}

static void test_llama3_gguf(void)
{
    const char *dir = harness_conformance_dir();
    if (!dir)
        SKIP("../shared/conformance absent");
    lq_tokenizer *t = load_gguf(dir, "llama3-vocab.gguf");
    if (!t)
        return;
    CHECK_EQ_INT(lq_tokenizer_kind(t), LQ_TOK_BPE);
    CHECK_EQ_INT(lq_tokenizer_n_vocab(t), 128256);
    CHECK_EQ_INT(lq_tokenizer_bos(t), 128000);
    CHECK_EQ_INT(lq_tokenizer_eos(t), 128001);
    CHECK_EQ_INT(lq_tokenizer_eot(t), 128009);
    CHECK_EQ_INT(lq_tokenizer_add_bos(t), 1);
    run_vectors(t, dir, "ggml-vocab-llama-bpe.gguf", "llama3 gguf");
    run_oracle(t, dir, "llama3 gguf");
    lq_tokenizer_free(t);
}

static void test_spm_gguf(void)
{
    const char *dir = harness_conformance_dir();
    if (!dir)
        SKIP("../shared/conformance absent");
    lq_tokenizer *t = load_gguf(dir, "ggml-vocab-llama-spm.gguf");
    if (!t)
        return;
    CHECK_EQ_INT(lq_tokenizer_kind(t), LQ_TOK_SPM);
    CHECK_EQ_INT(lq_tokenizer_n_vocab(t), 32000);
    CHECK_EQ_INT(lq_tokenizer_bos(t), 1);
    CHECK_EQ_INT(lq_tokenizer_eos(t), 2);
    CHECK_EQ_INT(lq_tokenizer_add_bos(t), 1);
    run_vectors(t, dir, "ggml-vocab-llama-spm.gguf", "llama spm gguf");
    lq_tokenizer_free(t);
}

static void test_gpt2_gguf(void)
{
    const char *dir = harness_conformance_dir();
    if (!dir)
        SKIP("../shared/conformance absent");
    lq_tokenizer *t = load_gguf(dir, "ggml-vocab-gpt-2.gguf");
    if (!t)
        return;
    CHECK_EQ_INT(lq_tokenizer_kind(t), LQ_TOK_BPE);
    CHECK_EQ_INT(lq_tokenizer_n_vocab(t), 50257);
    CHECK_EQ_INT(lq_tokenizer_bos(t), 50256);
    CHECK_EQ_INT(lq_tokenizer_add_bos(t), 0);
    run_vectors(t, dir, "ggml-vocab-gpt-2.gguf", "gpt-2 gguf");
    lq_tokenizer_free(t);
}

/* Deterministic random strings from an alphabet of awkward pieces (contractions, digit runs,
 * CR/LF, tabs, non-breaking and ideographic spaces, combining marks, CJK, emoji). */
static size_t random_text(uint32_t *seed, char *out, size_t cap)
{
    static const char *const alpha[] = {
        "a", "Z", "hello", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "'", "0", "123", "4567",
        ".", "...", "!?", "--", "(", "\"", "\xC2\xA0", "\xE3\x80\x80", "e\xCC\x81", "\xC3\xA9",
        "\xE4\xBD\xA0\xE5\xA5\xBD", "\xF0\x9F\xA6\x99", "\xF0\x9F\x98\xB6\xE2\x80\x8D",
        "\xD0\x9F\xD1\x80\xD0\xB8", "\xE1\x9E\x80", "<", "|", ">", "_", "\x01", "\x7F",
    };
    size_t n = 0, parts = (*seed >> 8) % 24;
    for (size_t k = 0; k < parts; k++) {
        *seed = *seed * 1103515245u + 12345u;
        const char *p = alpha[(*seed >> 16) % (sizeof alpha / sizeof *alpha)];
        size_t l = strlen(p);
        if (n + l >= cap)
            break;
        memcpy(out + n, p, l);
        n += l;
    }
    *seed = *seed * 1103515245u + 12345u;
    return n;
}

static int roundtrip(const lq_tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *nids)
{
    if (lq_tokenizer_encode(t, s, n, 0, ids, nids, NULL))
        return 0;
    char *back = NULL;
    size_t nb = 0;
    int ok = !lq_tokenizer_decode(t, *ids, *nids, 0, &back, &nb, NULL) && nb == n && !memcmp(back, s, n);
    free(back);
    return ok;
}

/* The GGUF and tokenizer.json Llama 3 tokenizers agree on random text, and every tokenizer
 * gives the text back. */
static void test_random_agreement(void)
{
    const char *dir = harness_conformance_dir();
    if (!dir)
        SKIP("../shared/conformance absent");
    lq_tokenizer *tj = load_json(dir, "llama3-tokenizer.json");
    lq_tokenizer *tg = load_gguf(dir, "llama3-vocab.gguf");
    lq_tokenizer *ts = load_gguf(dir, "ggml-vocab-llama-spm.gguf");
    lq_tokenizer *t2 = load_gguf(dir, "ggml-vocab-gpt-2.gguf");
    if (tj && tg && ts && t2) {
        uint32_t seed = 12345;
        int bad = 0;
        for (int i = 0; i < 2000 && bad < 5; i++) {
            char s[512];
            size_t n = random_text(&seed, s, sizeof s);
            int32_t *a = NULL, *b = NULL, *c = NULL, *d = NULL;
            size_t na = 0, nb = 0, nc = 0, nd = 0;
            int ok = roundtrip(tj, s, n, &a, &na) && roundtrip(tg, s, n, &b, &nb) &&
                     roundtrip(ts, s, n, &c, &nc) && roundtrip(t2, s, n, &d, &nd) && na == nb &&
                     !memcmp(a, b, na * sizeof *a);
            if (!ok) {
                bad++;
                printf("#   random case %d failed: ", i);
                print_escaped(s, n);
                putchar('\n');
                print_ids("json", a, na);
                print_ids("gguf", b, nb);
            }
            free(a);
            free(b);
            free(c);
            free(d);
        }
        CHECK_EQ_INT(bad, 0);
    }
    lq_tokenizer_free(tj);
    lq_tokenizer_free(tg);
    lq_tokenizer_free(ts);
    lq_tokenizer_free(t2);
}

int main(void)
{
    RUN(test_llama3_json);
    RUN(test_llama3_gguf);
    RUN(test_spm_gguf);
    RUN(test_gpt2_gguf);
    RUN(test_random_agreement);
    return harness_done();
}
