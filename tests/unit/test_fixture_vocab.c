/* The 2B-shaped fixture's vocabulary (128,256 tokens, ~520 from the corpus, the rest made-up
 * words, src/fixture/words.c): its words' text encodes back to the same tokens, one at a time
 * and in a sequence, through the merges alone (pre "gpt2": no ignore_merges) and with Llama
 * 3's pre-tokenizer (ignore_merges), as a real vocabulary's whole words do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "larql/fixture.h"
#include "larql/gguf.h"
#include "larql/tokenizer.h"

static uint64_t rng_state = 42;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

/* The 2B preset's vocabulary on a small body (1 layer of 128): a 33 MB file. */
static lq_tokenizer *vocab_2b(const char *pre, uint64_t seed, const char *name)
{
    lq_fixture_opts o;
    lq_err err = {0};
    CHECK_EQ_INT(lq_fixture_preset(&o, "2b", &err), 0);
    o.dim = 128, o.ffn = 128, o.layers = 1, o.heads = 2, o.kv_heads = 1, o.ctx = 64;
    o.pre = pre;
    o.seed = seed;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.gguf", harness_tmpdir(), name);
    CHECK_MSG(lq_fixture_write(&o, path, &err) == 0, "%s", err.msg);
    lq_gguf *g = NULL;
    lq_tokenizer *t = NULL;
    CHECK_MSG(lq_gguf_open(path, &g, &err) == 0, "%s", err.msg);
    if (g)
        CHECK_MSG(lq_tokenizer_from_gguf(g, &t, &err) == 0, "%s", err.msg);
    lq_gguf_close(g);
    remove(path);
    return t;
}

/* " " + ASCII letters: the shape of the padding's words (and of the corpus's words) */
static int is_word(const char *s, size_t n)
{
    if (n < 2 || s[0] != ' ')
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

/* decode ids, encode the text; 1 when the same ids come back (*n_back: how many came back) */
static int round_trip(const lq_tokenizer *t, const int32_t *ids, size_t n, size_t *n_back)
{
    lq_err err = {0};
    char *text = NULL;
    size_t len = 0, m = 0;
    int32_t *back = NULL;
    int same = 0;
    if (lq_tokenizer_decode(t, ids, n, 0, &text, &len, &err) == 0 &&
        lq_tokenizer_encode(t, text, len, 0, &back, &m, &err) == 0)
        same = m == n && !memcmp(back, ids, n * sizeof *ids);
    if (n_back)
        *n_back = m;
    free(text);
    free(back);
    return same;
}

static void check_vocab(const lq_tokenizer *t)
{
    int32_t V = lq_tokenizer_n_vocab(t), bos = lq_tokenizer_bos(t);
    CHECK_EQ_INT(V, 128256);
    CHECK_EQ_INT(bos, 128253);
    /* every id of the vocabulary: no placeholder left, and each word round-trips alone */
    int words = 0, word_fail = 0, other = 0, placeholders = 0;
    int32_t first_fail = -1;
    for (int32_t id = 0; id < bos; id++) {
        size_t len;
        const char *p = lq_tokenizer_piece(t, id, &len);
        char *text = NULL;
        size_t tl = 0;
        lq_err err = {0};
        if (!p || lq_tokenizer_decode(t, &id, 1, 0, &text, &tl, &err)) {
            word_fail++;
            continue;
        }
        placeholders += len >= 4 && !memcmp(p, "[PAD", 4); /* the old unreachable padding */
        if (is_word(text, tl)) {
            words++;
            if (!round_trip(t, &id, 1, NULL) && word_fail++ == 0)
                first_fail = id;
        } else {
            other++;
        }
        free(text);
    }
    CHECK_MSG(word_fail == 0, "%d of %d word tokens do not round-trip (first: id %d)", word_fail, words,
              (int)first_fail);
    CHECK_MSG(placeholders == 0, "%d [PAD] placeholders left", placeholders);
    CHECK_MSG(other < 600, "%d tokens are not words (the bytes and the corpus's pieces are ~500)", other);
    /* 2,000 random ids of the whole vocabulary, one at a time: the words (all but the bytes and
     * a few corpus pieces) come back */
    int sampled_words = 0, sampled_ok = 0;
    for (int i = 0; i < 2000; i++) {
        int32_t id = (int32_t)rnd((uint32_t)bos);
        size_t len;
        const char *p = lq_tokenizer_piece(t, id, &len);
        if (p && len > 2 && (unsigned char)p[0] == 0xC4 && (unsigned char)p[1] == 0xA0) {
            sampled_words++;
            sampled_ok += round_trip(t, &id, 1, NULL);
        }
    }
    CHECK(sampled_words > 1980);
    CHECK_EQ_INT(sampled_ok, sampled_words);
    /* a sequence of 1,000 random words (ids past the corpus's) as one text */
    int32_t seq[1000];
    for (int i = 0; i < 1000; i++)
        seq[i] = 1000 + (int32_t)rnd((uint32_t)(bos - 1000));
    size_t back = 0;
    CHECK_MSG(round_trip(t, seq, 1000, &back), "1,000 words came back as %zu tokens", back);
    /* a figure, not an assertion: what a random model's 16-token answers become as text */
    size_t total = 0;
    for (int a = 0; a < 200; a++) {
        int32_t ans[16];
        for (int i = 0; i < 16; i++)
            ans[i] = (int32_t)rnd((uint32_t)bos);
        round_trip(t, ans, 16, &back);
        total += back;
    }
    printf("#   200 answers of 16 random ids re-tokenize to %.2f tokens on average\n", total / 200.0);
}

static void test_words_round_trip_by_merges(void)
{
    lq_tokenizer *t = vocab_2b("gpt2", 1234, "gpt2");
    if (t)
        check_vocab(t);
    lq_tokenizer_free(t);
}

static void test_words_round_trip_llama3(void)
{
    lq_tokenizer *t = vocab_2b(NULL, 1234, "llama3");
    if (t)
        check_vocab(t);
    lq_tokenizer_free(t);
}

/* the padding depends on the vocabulary size and the corpus, not on the weights' seed */
static void test_vocab_independent_of_seed(void)
{
    lq_tokenizer *a = vocab_2b(NULL, 1, "seed1"), *b = vocab_2b(NULL, 2, "seed2");
    if (a && b) {
        int differ = 0;
        for (int32_t id = 0; id < lq_tokenizer_n_vocab(a); id++) {
            size_t la, lb;
            const char *pa = lq_tokenizer_piece(a, id, &la), *pb = lq_tokenizer_piece(b, id, &lb);
            differ += la != lb || memcmp(pa, pb, la);
        }
        CHECK_EQ_INT(differ, 0);
    }
    lq_tokenizer_free(a);
    lq_tokenizer_free(b);
}

int main(void)
{
    RUN(test_words_round_trip_by_merges);
    RUN(test_words_round_trip_llama3);
    RUN(test_vocab_independent_of_seed);
    return harness_done();
}
