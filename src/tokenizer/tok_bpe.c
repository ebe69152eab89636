/* Byte-level BPE (GPT-2, Llama 3): the GPT-2 byte <-> unicode mapping, the regex
 * pre-tokenizer (PCRE2 with Unicode properties) and the rank-ordered merge loop.
 *
 * Merging works on token ids: each byte of a word starts as the id of its mapped character,
 * and a heap holds the adjacent pairs that have a merge, lowest rank first (ties: leftmost),
 * as llama.cpp's llm_tokenizer_bpe_session does. A popped pair is stale when either side
 * has since changed; it is then skipped. O(n log n) per word. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* ---------------------------------------------------------------- merge loop */

typedef struct bpe_ctx {
    const lq_tokenizer *t;
    tok_ids *out;
    pcre2_match_data *md;
    lq_err *err;
    /* per-word scratch, grown as needed: */
    int32_t *id, *prev, *next; /* [cap] symbols */
    char *mapped;              /* [2 * cap] the word in mapped characters */
    size_t cap;
    tok_heap heap;
} bpe_ctx;

static int add_pair(bpe_ctx *c, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return LQ_OK;
    int32_t rank, res;
    if (!tok_merge_lookup(c->t, c->id[l], c->id[r], &rank, &res))
        return LQ_OK;
    tok_bigram e = {(float)rank, l, r, c->id[l], c->id[r], res};
    return tok_heap_push(&c->heap, &e);
}

static int bpe_word(bpe_ctx *c, const unsigned char *s, size_t n)
{
    const lq_tokenizer *t = c->t;
    if (n == 0)
        return LQ_OK;
    if (n == 1)
        return t->byte_id[s[0]] >= 0 ? tok_ids_push(c->out, t->byte_id[s[0]]) : LQ_OK;
    if (n > c->cap) {
        size_t nc = n < 256 ? 256 : n;
        free(c->id);
        free(c->prev);
        free(c->next);
        free(c->mapped);
        c->id = malloc(nc * sizeof *c->id);
        c->prev = malloc(nc * sizeof *c->prev);
        c->next = malloc(nc * sizeof *c->next);
        c->mapped = malloc(nc * 2);
        c->cap = nc;
        if (!c->id || !c->prev || !c->next || !c->mapped) {
            c->cap = 0;
            return LQ_ENOMEM;
        }
    }
    if (t->ignore_merges) {
        /* A word that is a token as a whole is emitted as that token (HF ignore_merges). */
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += (size_t)tok_bpe_byte_to_utf8(s[i], c->mapped + m);
        int32_t whole = tok_find(t, c->mapped, m);
        if (whole >= 0)
            return tok_ids_push(c->out, whole);
    }
    for (size_t i = 0; i < n; i++) {
        c->id[i] = t->byte_id[s[i]];
        c->prev[i] = (int32_t)i - 1;
        c->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    c->heap.n = 0;
    int rc;
    for (size_t i = 1; i < n; i++)
        if ((rc = add_pair(c, (int32_t)i - 1, (int32_t)i)))
            return rc;
    tok_bigram e;
    while (tok_heap_pop(&c->heap, &e)) {
        int32_t l = e.left, r = e.right;
        /* stale: one side merged away (id -2) or changed since this pair was queued */
        if (c->id[l] != e.a || c->id[r] != e.b || c->next[l] != r)
            continue;
        c->id[l] = e.res;
        c->id[r] = -2;
        c->next[l] = c->next[r];
        if (c->next[r] >= 0)
            c->prev[c->next[r]] = l;
        if ((rc = add_pair(c, c->prev[l], l)) || (rc = add_pair(c, l, c->next[l])))
            return rc;
    }
    for (int32_t i = 0; i >= 0; i = c->next[i])
        if (c->id[i] >= 0 && (rc = tok_ids_push(c->out, c->id[i])))
            return rc; /* a byte whose character is not in the vocabulary is dropped */
    return LQ_OK;
}

/* ---------------------------------------------------------------- pre-tokenizer */

static int split(bpe_ctx *c, int stage, const char *s, size_t n)
{
    if (stage >= c->t->n_re)
        return bpe_word(c, (const unsigned char *)s, n);
    pcre2_code *re = c->t->re[stage];
    size_t pos = 0, gap = 0; /* text between matches is kept as its own piece */
    int rc;
    while (pos < n) {
        /* the text was validated up front, so skip PCRE2's per-call UTF check (which would
         * rescan the rest of the subject at every match) */
        int m = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
        if (m == PCRE2_ERROR_JIT_STACKLIMIT)
            m = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, c->md,
                            NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[200];
            pcre2_get_error_message(m, msg, sizeof msg);
            return lq_err_set(c->err, LQ_EINVAL, "tokenize: pre-tokenizer regex failed at byte %zu: %s",
                              pos, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: step one character */
            pos = ms + 1;
            while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80)
                pos++;
            continue;
        }
        if (ms > gap && (rc = split(c, stage + 1, s + gap, ms - gap)))
            return rc;
        if ((rc = split(c, stage + 1, s + ms, me - ms)))
            return rc;
        pos = gap = me;
    }
    if (gap < n && (rc = split(c, stage + 1, s + gap, n - gap)))
        return rc;
    return LQ_OK;
}

int tok_bpe_encode(const lq_tokenizer *t, const char *text, size_t len, tok_ids *out, lq_err *err)
{
    bpe_ctx c = {.t = t, .out = out, .err = err};
    if (t->n_re) {
        c.md = pcre2_match_data_create(4, NULL);
        if (!c.md)
            return lq_err_set(err, LQ_ENOMEM, "tokenize: regex match data");
    }
    int rc = split(&c, 0, text, len);
    pcre2_match_data_free(c.md);
    free(c.id);
    free(c.prev);
    free(c.next);
    free(c.mapped);
    free(c.heap.v);
    return rc;
}
