/* SentencePiece-style llama tokenizer (tokenizer.ggml.model = "llama"), following
 * llama.cpp's llm_tokenizer_spm: spaces become U+2581, an optional dummy prefix "▁" goes in
 * front, the text starts as one symbol per UTF-8 character, and adjacent pairs whose
 * concatenation is a vocabulary piece are merged best score first (ties: leftmost) until no
 * pair is left. A final symbol that is not a piece falls back to its bytes (<0xXX>). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* Pieces that text may merge into. Control, unknown, byte and unused entries are only ever
 * produced explicitly (special parsing, byte fallback), never by merging their spelling. */
static int mergeable(const lq_tokenizer *t, int32_t id)
{
    int ty = t->type[id];
    return ty == TOK_T_NORMAL || ty == TOK_T_USER_DEFINED || ty == TOK_T_UNDEFINED;
}

typedef struct spm_sym {
    size_t start, n; /* bytes of the escaped text; n = 0 once merged away */
    int32_t prev, next;
} spm_sym;

static int add_pair(const lq_tokenizer *t, const char *s, spm_sym *sy, tok_heap *h, int32_t l,
                    int32_t r)
{
    if (l < 0 || r < 0)
        return LQ_OK;
    size_t size = sy[l].n + sy[r].n;
    int32_t id = tok_find(t, s + sy[l].start, size);
    if (id < 0 || !mergeable(t, id))
        return LQ_OK;
    tok_bigram e = {-(t->scores ? t->scores[id] : 0.0f), l, r, (int32_t)size, 0, id};
    return tok_heap_push(h, &e);
}

int tok_spm_encode(const lq_tokenizer *t, const char *text, size_t len, int add_prefix,
                   tok_ids *out, lq_err *err)
{
    /* escaped text: every ' ' becomes the 3-byte U+2581 */
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++)
        spaces += text[i] == ' ';
    size_t n = len + spaces * 2 + (add_prefix ? 3 : 0);
    if (n == 0)
        return LQ_OK;
    char *s = malloc(n);
    spm_sym *sy = malloc(n * sizeof *sy);
    tok_heap h = {0};
    int rc = LQ_OK;
    if (!s || !sy) {
        rc = lq_err_set(err, LQ_ENOMEM, "tokenize: %zu bytes of text", len);
        goto done;
    }
    size_t o = 0;
    if (add_prefix) {
        memcpy(s, "\xE2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + o, "\xE2\x96\x81", 3);
            o += 3;
        } else
            s[o++] = text[i];
    }
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        int k = tok_utf8_seq((const unsigned char *)s + i, n - i, NULL);
        if (k == 0)
            k = 1; /* cannot happen: the text was validated */
        sy[ns] = (spm_sym){i, (size_t)k, ns - 1, -1};
        if (ns > 0)
            sy[ns - 1].next = ns;
        ns++;
        i += (size_t)k;
    }
    for (int32_t i = 1; i < ns; i++)
        if ((rc = add_pair(t, s, sy, &h, i - 1, i)))
            goto oom;
    tok_bigram e;
    while (tok_heap_pop(&h, &e)) {
        spm_sym *l = &sy[e.left], *r = &sy[e.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != (size_t)e.a)
            continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sy[r->next].prev = e.left;
        if ((rc = add_pair(t, s, sy, &h, l->prev, e.left)) ||
            (rc = add_pair(t, s, sy, &h, e.left, l->next)))
            goto oom;
    }
    for (int32_t i = 0; i >= 0; i = sy[i].next) {
        int32_t id = tok_find(t, s + sy[i].start, sy[i].n);
        if (id >= 0 && mergeable(t, id)) {
            if ((rc = tok_ids_push(out, id)))
                goto oom;
            continue;
        }
        for (size_t j = 0; j < sy[i].n; j++) {
            int32_t b = t->byte_id[(unsigned char)s[sy[i].start + j]];
            if (b < 0)
                b = t->unk;
            if (b < 0) {
                rc = lq_err_set(err, LQ_EUNSUPPORTED,
                                "tokenize: byte 0x%02X has no <0x..> token and there is no <unk>",
                                (unsigned)(unsigned char)s[sy[i].start + j]);
                goto done;
            }
            if ((rc = tok_ids_push(out, b)))
                goto oom;
        }
    }
    goto done;
oom:
    rc = lq_err_set(err, LQ_ENOMEM, "tokenize: out of memory");
done:
    free(s);
    free(sy);
    free(h.v);
    return rc;
}
