/* The tokenizer's tables: small containers (id vectors, the merge heap), the piece and
 * merge hash maps, and the builder the GGUF and tokenizer.json loaders share (tok_new ..
 * tok_finalize, lq_tokenizer_free). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "core/hash.h"

/* ---------------------------------------------------------------- small containers */

int tok_ids_push(tok_ids *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 64;
        int32_t *nv = realloc(o->v, nc * sizeof *nv);
        if (!nv)
            return LQ_ENOMEM;
        o->v = nv;
        o->cap = nc;
    }
    o->v[o->n++] = id;
    return LQ_OK;
}

static int heap_less(const tok_bigram *x, const tok_bigram *y)
{
    return x->key < y->key || (x->key == y->key && x->left < y->left);
}

int tok_heap_push(tok_heap *h, const tok_bigram *e)
{
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        tok_bigram *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv)
            return LQ_ENOMEM;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(e, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = *e;
    return LQ_OK;
}

int tok_heap_pop(tok_heap *h, tok_bigram *out)
{
    if (h->n == 0)
        return 0;
    *out = h->v[0];
    tok_bigram last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_less(&h->v[c + 1], &h->v[c]))
            c++;
        if (!heap_less(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n)
        h->v[i] = last;
    return 1;
}

/* ---------------------------------------------------------------- hashing */

static uint64_t hash_bytes(const char *s, size_t n) { return lq_hash_mix64(lq_fnv1a64(s, n)); }

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static uint32_t pow2_at_least(size_t n)
{
    uint32_t c = 16;
    while (c < n && c < (1u << 31))
        c <<= 1;
    return c;
}

int32_t tok_find(const lq_tokenizer *t, const char *s, size_t n)
{
    if (!t->pieces.slots)
        return -1;
    uint64_t h = hash_bytes(s, n);
    uint32_t i = (uint32_t)h & t->pieces.mask, h32 = (uint32_t)(h >> 32);
    for (;;) {
        tok_piece_slot sl = t->pieces.slots[i];
        if (sl.id < 0)
            return -1;
        if (sl.hash == h32 && t->len[sl.id] == n && memcmp(t->blob + t->off[sl.id], s, n) == 0)
            return sl.id;
        i = (i + 1) & t->pieces.mask;
    }
}

int tok_build_piece_map(lq_tokenizer *t, lq_err *err)
{
    uint32_t cap = pow2_at_least((size_t)t->n_vocab * 2);
    free(t->pieces.slots);
    t->pieces.slots = malloc((size_t)cap * sizeof *t->pieces.slots);
    if (!t->pieces.slots)
        return lq_err_set(err, LQ_ENOMEM, "tokenizer: piece map of %u slots", cap);
    memset(t->pieces.slots, 0xff, (size_t)cap * sizeof *t->pieces.slots);
    t->pieces.mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n = t->len[id];
        if (n == 0)
            continue; /* holes in the id space (tokenizer.json) */
        const char *s = t->blob + t->off[id];
        uint64_t h = hash_bytes(s, n);
        uint32_t i = (uint32_t)h & t->pieces.mask, h32 = (uint32_t)(h >> 32);
        int dup = 0;
        for (;;) {
            tok_piece_slot o = t->pieces.slots[i];
            if (o.id < 0)
                break;
            if (o.hash == h32 && t->len[o.id] == n && memcmp(t->blob + t->off[o.id], s, n) == 0) {
                dup = 1; /* first id wins */
                break;
            }
            i = (i + 1) & t->pieces.mask;
        }
        if (!dup)
            t->pieces.slots[i] = (tok_piece_slot){h32, id};
    }
    return LQ_OK;
}

static int merge_map_alloc(tok_merge_map *m, uint32_t cap)
{
    m->slots = malloc((size_t)cap * sizeof *m->slots);
    if (!m->slots)
        return LQ_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    m->count = 0;
    return LQ_OK;
}

static void merge_map_insert(tok_merge_map *m, uint64_t key, int32_t rank, int32_t res)
{
    uint32_t i = (uint32_t)hash_u64(key) & m->mask;
    while (m->slots[i].key != UINT64_MAX) {
        if (m->slots[i].key == key)
            return; /* first (lowest) rank wins */
        i = (i + 1) & m->mask;
    }
    m->slots[i] = (tok_merge_slot){key, rank, res};
    m->count++;
}

static int merge_map_grow(tok_merge_map *m, size_t want)
{
    uint32_t cap = pow2_at_least(want + want / 3); /* load factor <= 0.75 */
    if (m->slots && cap <= m->mask + 1)
        return LQ_OK;
    tok_merge_map nm;
    if (merge_map_alloc(&nm, cap))
        return LQ_ENOMEM;
    if (m->slots) {
        for (uint32_t i = 0; i <= m->mask; i++)
            if (m->slots[i].key != UINT64_MAX)
                merge_map_insert(&nm, m->slots[i].key, m->slots[i].rank, m->slots[i].result);
        free(m->slots);
    }
    *m = nm;
    return LQ_OK;
}

int tok_merges_reserve(lq_tokenizer *t, size_t n, lq_err *err)
{
    if (n > TOK_MAX_MERGES)
        return lq_err_set(err, LQ_EFORMAT, "tokenizer: %zu merges exceed the limit %d", n,
                          TOK_MAX_MERGES);
    if (merge_map_grow(&t->merges, n < 16 ? 16 : n))
        return lq_err_set(err, LQ_ENOMEM, "tokenizer: merge table for %zu merges", n);
    return LQ_OK;
}

int tok_merge_lookup(const lq_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *res)
{
    const tok_merge_map *m = &t->merges;
    if (!m->slots || a < 0 || b < 0)
        return 0;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t i = (uint32_t)hash_u64(key) & m->mask;
    while (m->slots[i].key != UINT64_MAX) {
        if (m->slots[i].key == key) {
            *rank = m->slots[i].rank;
            *res = m->slots[i].result;
            return 1;
        }
        i = (i + 1) & m->mask;
    }
    return 0;
}

int tok_add_merge(lq_tokenizer *t, const char *a, size_t na, const char *b, size_t nb,
                  int32_t rank, lq_err *err)
{
    int32_t ia = tok_find(t, a, na), ib = tok_find(t, b, nb);
    if (ia < 0 || ib < 0)
        return LQ_OK;
    char stackbuf[512];
    char *cat = na + nb <= sizeof stackbuf ? stackbuf : malloc(na + nb);
    if (!cat)
        return lq_err_set(err, LQ_ENOMEM, "tokenizer: merge of %zu bytes", na + nb);
    memcpy(cat, a, na);
    memcpy(cat + na, b, nb);
    int32_t r = tok_find(t, cat, na + nb);
    if (cat != stackbuf)
        free(cat);
    if (r < 0)
        return LQ_OK;
    if ((size_t)t->merges.count + 1 > (size_t)(t->merges.mask + 1) / 4 * 3 || !t->merges.slots)
        if (merge_map_grow(&t->merges, (size_t)t->merges.count + 1))
            return lq_err_set(err, LQ_ENOMEM, "tokenizer: growing the merge table");
    merge_map_insert(&t->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, rank, r);
    return LQ_OK;
}

/* ---------------------------------------------------------------- builder */

lq_tokenizer *tok_new(int kind)
{
    lq_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->kind = kind;
    t->bos = t->eos = t->eot = t->unk = -1;
    t->add_space_prefix = kind == LQ_TOK_SPM;
    for (int i = 0; i < 256; i++)
        t->byte_id[i] = -1;
    return t;
}

int tok_alloc_vocab(lq_tokenizer *t, int32_t n, int with_scores, lq_err *err)
{
    if (n <= 0 || n > TOK_MAX_VOCAB)
        return lq_err_set(err, LQ_EFORMAT, "tokenizer: vocabulary size %d outside 1..%d",
                          (int)n, TOK_MAX_VOCAB);
    t->n_vocab = n;
    t->off = calloc((size_t)n, sizeof *t->off);
    t->len = calloc((size_t)n, sizeof *t->len);
    t->type = malloc((size_t)n);
    t->scores = with_scores ? calloc((size_t)n, sizeof *t->scores) : NULL;
    t->blob_cap = (size_t)n * 8 + 64;
    t->blob = malloc(t->blob_cap);
    if (!t->off || !t->len || !t->type || (with_scores && !t->scores) || !t->blob)
        return lq_err_set(err, LQ_ENOMEM, "tokenizer: vocabulary of %d tokens", (int)n);
    memset(t->type, TOK_T_NORMAL, (size_t)n);
    t->blob[0] = 0; /* empty pieces point at offset 0 */
    t->blob_len = 1;
    return LQ_OK;
}

int tok_set_piece(lq_tokenizer *t, int32_t id, const char *s, size_t n, lq_err *err)
{
    if (id < 0 || id >= t->n_vocab)
        return lq_err_set(err, LQ_EFORMAT, "tokenizer: token id %d outside 0..%d", (int)id,
                          (int)t->n_vocab - 1);
    if (n > TOK_MAX_PIECE)
        return lq_err_set(err, LQ_EFORMAT, "tokenizer: token %d is %zu bytes (limit %d)",
                          (int)id, n, TOK_MAX_PIECE);
    if (t->blob_len + n + 1 > t->blob_cap) {
        size_t nc = t->blob_cap * 2;
        while (nc < t->blob_len + n + 1)
            nc *= 2;
        char *nb = realloc(t->blob, nc);
        if (!nb)
            return lq_err_set(err, LQ_ENOMEM, "tokenizer: piece storage of %zu bytes", nc);
        t->blob = nb;
        t->blob_cap = nc;
    }
    if (n)
        memcpy(t->blob + t->blob_len, s, n);
    t->blob[t->blob_len + n] = 0;
    t->off[id] = t->blob_len;
    t->len[id] = (uint32_t)n;
    t->blob_len += n + 1;
    return LQ_OK;
}

int tok_add_regex(lq_tokenizer *t, const char *pattern, size_t len, lq_err *err)
{
    if (t->n_re >= TOK_MAX_REGEX)
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "tokenizer: more than %d pre-tokenizer split patterns", TOK_MAX_REGEX);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "tokenizer: pre-tokenizer regex does not compile at offset %zu: %s",
                          (size_t)eo, (const char *)msg);
    }
    /* JIT is an optimisation: when it is unavailable the interpreter runs the same pattern */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    t->re[t->n_re++] = re;
    return LQ_OK;
}

static int special_cmp(const void *x, const void *y, void *ctx)
{
    const lq_tokenizer *t = ctx;
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    if (t->len[a] != t->len[b])
        return t->len[a] > t->len[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

int tok_finalize(lq_tokenizer *t, lq_err *err)
{
    int rc;
    if (!t->pieces.slots && (rc = tok_build_piece_map(t, err)))
        return rc;
    if (t->kind == LQ_TOK_BPE) {
        tok_bpe_byte_tables();
        for (int b = 0; b < 256; b++) {
            char u[2];
            int n = tok_bpe_byte_to_utf8((uint8_t)b, u);
            t->byte_id[b] = tok_find(t, u, (size_t)n);
        }
    } else {
        for (int b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            t->byte_id[b] = tok_find(t, s, 6);
        }
        if (t->unk < 0)
            t->unk = tok_find(t, "<unk>", 5);
    }
    if (t->scores)
        for (int32_t i = 0; i < t->n_vocab; i++)
            if (t->scores[i] != t->scores[i])
                t->scores[i] = -1e30f; /* NaN would break the merge order */
    size_t ns = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->type[i];
        if ((ty == TOK_T_CONTROL || ty == TOK_T_USER_DEFINED || ty == TOK_T_UNKNOWN) && t->len[i])
            ns++;
    }
    free(t->special);
    t->special = NULL;
    t->n_special = 0;
    if (ns) {
        t->special = malloc(ns * sizeof *t->special);
        if (!t->special)
            return lq_err_set(err, LQ_ENOMEM, "tokenizer: special token list");
        for (int32_t i = 0; i < t->n_vocab; i++) {
            int ty = t->type[i];
            if ((ty == TOK_T_CONTROL || ty == TOK_T_USER_DEFINED || ty == TOK_T_UNKNOWN) &&
                t->len[i])
                t->special[t->n_special++] = i;
        }
        qsort_r(t->special, t->n_special, sizeof *t->special, special_cmp, t);
    }
    return LQ_OK;
}

void lq_tokenizer_free(lq_tokenizer *t)
{
    if (!t)
        return;
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->scores);
    free(t->type);
    free(t->pieces.slots);
    free(t->merges.slots);
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    free(t->special);
    free(t);
}
