/* Tokenizer core: vocabulary tables, the builder shared by the loaders, special-token
 * partitioning, encode dispatch, decode and the streaming detokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* ---------------------------------------------------------------- UTF-8 */

int tok_utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        if (cp)
            *cp = c;
        return 1;
    }
    int need;
    uint32_t v;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        v = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        v = c & 0x07;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* <= U+10FFFF */
    } else {
        return 0;
    }
    if (n < (size_t)need)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    v = (v << 6) | (s[1] & 0x3F);
    for (int i = 2; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (cp)
        *cp = v;
    return need;
}

size_t tok_utf8_check(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int k = tok_utf8_seq(u + i, n - i, NULL);
        if (k == 0)
            return i;
        i += (size_t)k;
    }
    return n;
}

/* 1 when s[0..n) (n >= 1) is a proper prefix of some valid UTF-8 sequence, i.e. more
 * bytes could complete it. */
static int utf8_incomplete_prefix(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n >= need)
        return 0;
    if (n >= 2 && (s[1] < lo || s[1] > hi))
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return 1;
}

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

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

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

/* ---------------------------------------------------------------- accessors */

int lq_tokenizer_kind(const lq_tokenizer *t) { return t ? t->kind : 0; }
int32_t lq_tokenizer_n_vocab(const lq_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t lq_tokenizer_bos(const lq_tokenizer *t) { return t ? t->bos : -1; }
int32_t lq_tokenizer_eos(const lq_tokenizer *t) { return t ? t->eos : -1; }
int32_t lq_tokenizer_eot(const lq_tokenizer *t) { return t ? t->eot : -1; }
int lq_tokenizer_add_bos(const lq_tokenizer *t) { return t ? t->add_bos : 0; }

int lq_tokenizer_is_control(const lq_tokenizer *t, int32_t id)
{
    return t && id >= 0 && id < t->n_vocab && t->type[id] == TOK_T_CONTROL;
}

int32_t lq_tokenizer_find(const lq_tokenizer *t, const char *piece, size_t len)
{
    if (!t || (!piece && len) || len == 0)
        return -1;
    return tok_find(t, piece, len);
}

const char *lq_tokenizer_piece(const lq_tokenizer *t, int32_t id, size_t *len)
{
    if (!t || id < 0 || id >= t->n_vocab)
        return NULL;
    if (len)
        *len = t->len[id];
    return t->blob + t->off[id];
}

/* ---------------------------------------------------------------- encode */

typedef struct frag {
    int32_t id; /* special token, or -1 for raw text [off, off + len) */
    size_t off, len;
} frag;

typedef struct frag_vec {
    frag *v;
    size_t n, cap;
} frag_vec;

static int frag_push(frag_vec *f, int32_t id, size_t off, size_t len)
{
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        frag *nv = realloc(f->v, nc * sizeof *nv);
        if (!nv)
            return LQ_ENOMEM;
        f->v = nv;
        f->cap = nc;
    }
    f->v[f->n++] = (frag){id, off, len};
    return LQ_OK;
}

/* Splits the raw fragments around every occurrence of each special token, longest tokens
 * first (llama.cpp's tokenizer_st_partition order). */
static int partition_special(const lq_tokenizer *t, const char *text, size_t len, frag_vec *out)
{
    frag_vec cur = {0}, next = {0};
    if (frag_push(&cur, -1, 0, len))
        return LQ_ENOMEM;
    for (size_t si = 0; si < t->n_special; si++) {
        int32_t sid = t->special[si];
        const char *sp = t->blob + t->off[sid];
        size_t sl = t->len[sid];
        int found = 0;
        for (size_t k = 0; k < cur.n && !found; k++)
            if (cur.v[k].id < 0 && cur.v[k].len >= sl &&
                memmem(text + cur.v[k].off, cur.v[k].len, sp, sl))
                found = 1;
        if (!found)
            continue;
        next.n = 0;
        for (size_t k = 0; k < cur.n; k++) {
            frag f = cur.v[k];
            if (f.id >= 0) {
                if (frag_push(&next, f.id, f.off, f.len))
                    goto oom;
                continue;
            }
            size_t pos = f.off, end = f.off + f.len;
            while (pos < end) {
                const char *hit = end - pos >= sl ? memmem(text + pos, end - pos, sp, sl) : NULL;
                if (!hit) {
                    if (frag_push(&next, -1, pos, end - pos))
                        goto oom;
                    break;
                }
                size_t h = (size_t)(hit - text);
                if (h > pos && frag_push(&next, -1, pos, h - pos))
                    goto oom;
                if (frag_push(&next, sid, h, sl))
                    goto oom;
                pos = h + sl;
            }
        }
        frag_vec tmp = cur;
        cur = next;
        next = tmp;
    }
    free(next.v);
    *out = cur;
    return LQ_OK;
oom:
    free(cur.v);
    free(next.v);
    return LQ_ENOMEM;
}

int lq_tokenizer_encode(const lq_tokenizer *t, const char *text, size_t len, unsigned flags,
                        int32_t **ids, size_t *n_ids, lq_err *err)
{
    if (ids)
        *ids = NULL;
    if (n_ids)
        *n_ids = 0;
    if (!t || !ids || !n_ids || (!text && len))
        return lq_err_set(err, LQ_EINVAL, "tokenize: NULL argument");
    size_t bad = tok_utf8_check(text, len);
    if (bad < len)
        return lq_err_set(err, LQ_EINVAL, "tokenize: invalid UTF-8 at byte offset %zu (byte 0x%02X)",
                          bad, (unsigned)(unsigned char)text[bad]);
    tok_ids out = {0};
    frag_vec frags = {0};
    int rc = LQ_OK;
    if ((flags & LQ_TOK_ADD_BOS) && t->bos >= 0 && (rc = tok_ids_push(&out, t->bos)))
        goto fail;
    if (len) {
        if ((flags & LQ_TOK_PARSE_SPECIAL) && t->n_special)
            rc = partition_special(t, text, len, &frags);
        else
            rc = frag_push(&frags, -1, 0, len);
        if (rc)
            goto fail;
    }
    int prev_special = 1; /* SPM: the dummy prefix goes before text that starts a segment */
    for (size_t k = 0; k < frags.n; k++) {
        frag f = frags.v[k];
        if (f.id >= 0) {
            rc = tok_ids_push(&out, f.id);
            prev_special = 1;
        } else if (t->kind == LQ_TOK_BPE) {
            rc = tok_bpe_encode(t, text + f.off, f.len, &out, err);
        } else {
            rc = tok_spm_encode(t, text + f.off, f.len, t->add_space_prefix && prev_special,
                                &out, err);
            prev_special = 0;
        }
        if (rc)
            goto fail;
    }
    free(frags.v);
    if (!out.v) { /* empty result: still hand back a valid pointer */
        out.v = malloc(sizeof *out.v);
        if (!out.v)
            return lq_err_set(err, LQ_ENOMEM, "tokenize: out of memory");
    }
    *ids = out.v;
    *n_ids = out.n;
    return LQ_OK;
fail:
    free(frags.v);
    free(out.v);
    if (rc == LQ_ENOMEM)
        return lq_err_set(err, rc, "tokenize: out of memory (%zu bytes of text)", len);
    return rc;
}

/* ---------------------------------------------------------------- decode */

/* Writes the text of token id to dst (room for at least len[id] bytes; the text is never
 * longer than the piece) and returns its length. *at_start tracks SPM's leading space. */
static size_t render(const lq_tokenizer *t, int32_t id, unsigned flags, int *at_start, char *dst)
{
    const char *p = t->blob + t->off[id];
    size_t n = t->len[id], o = 0;
    int ty = t->type[id];
    if (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN) {
        if (flags & LQ_DETOK_SKIP_SPECIAL)
            return 0;
        memcpy(dst, p, n);
        return n;
    }
    if (ty == TOK_T_USER_DEFINED || ty == TOK_T_UNUSED) {
        memcpy(dst, p, n);
        o = n;
    } else if (t->kind == LQ_TOK_BPE) {
        const unsigned char *u = (const unsigned char *)p;
        size_t i = 0;
        while (i < n) {
            uint32_t cp;
            int k = tok_utf8_seq(u + i, n - i, &cp);
            int b = k ? tok_bpe_cp_to_byte(cp) : -1;
            if (b >= 0) {
                dst[o++] = (char)b;
                i += (size_t)k;
            } else {
                size_t c = k ? (size_t)k : 1; /* not a mapped char: copy as is */
                memcpy(dst + o, p + i, c);
                o += c;
                i += c;
            }
        }
    } else {
        unsigned hx;
        if (ty == TOK_T_BYTE && n == 6 && sscanf(p, "<0x%2X>", &hx) == 1) {
            dst[o++] = (char)hx;
        } else {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && !memcmp(p + i, "\xE2\x96\x81", 3)) { /* U+2581 -> space */
                    dst[o++] = ' ';
                    i += 3;
                } else
                    dst[o++] = p[i++];
            }
        }
        if (*at_start && t->add_space_prefix && o > 0 && dst[0] == ' ') {
            memmove(dst, dst + 1, o - 1);
            o--;
        }
    }
    *at_start = 0;
    return o;
}

int lq_tokenizer_decode(const lq_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        char **text, size_t *len, lq_err *err)
{
    if (text)
        *text = NULL;
    if (len)
        *len = 0;
    if (!t || !text || (!ids && n))
        return lq_err_set(err, LQ_EINVAL, "detokenize: NULL argument");
    size_t total = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return lq_err_set(err, LQ_ERANGE, "detokenize: id %d at position %zu outside 0..%d",
                              (int)ids[i], i, (int)t->n_vocab - 1);
        total += t->len[ids[i]];
    }
    char *buf = malloc(total);
    if (!buf)
        return lq_err_set(err, LQ_ENOMEM, "detokenize: %zu bytes", total);
    size_t o = 0;
    int at_start = 1;
    for (size_t i = 0; i < n; i++)
        o += render(t, ids[i], flags, &at_start, buf + o);
    buf[o] = 0;
    *text = buf;
    if (len)
        *len = o;
    return LQ_OK;
}

/* ---------------------------------------------------------------- streaming */

struct lq_detok {
    const lq_tokenizer *t;
    unsigned flags;
    int at_start;
    unsigned char pend[4]; /* an incomplete UTF-8 sequence held back */
    size_t npend;
};

int lq_detok_create(const lq_tokenizer *t, unsigned flags, lq_detok **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "detok: NULL argument");
    *out = NULL;
    if (!t)
        return lq_err_set(err, LQ_EINVAL, "detok: NULL tokenizer");
    lq_detok *d = calloc(1, sizeof *d);
    if (!d)
        return lq_err_set(err, LQ_ENOMEM, "detok: out of memory");
    d->t = t;
    d->flags = flags;
    d->at_start = 1;
    *out = d;
    return LQ_OK;
}

void lq_detok_free(lq_detok *d) { free(d); }

void lq_detok_reset(lq_detok *d, int at_start)
{
    if (d) {
        d->at_start = at_start != 0;
        d->npend = 0;
    }
}

static const char REPL[3] = {'\xEF', '\xBF', '\xBD'}; /* U+FFFD */

/* Scans s[0..n): complete sequences are copied, invalid bytes become U+FFFD, and an
 * incomplete tail is left for later. Returns the output size; writes only if dst. *keep
 * receives the length of the held-back tail. */
static size_t stream_scan(const unsigned char *s, size_t n, char *dst, size_t *keep)
{
    size_t i = 0, o = 0;
    *keep = 0;
    while (i < n) {
        int k = tok_utf8_seq(s + i, n - i, NULL);
        if (k) {
            if (dst)
                memcpy(dst + o, s + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else if (utf8_incomplete_prefix(s + i, n - i)) {
            *keep = n - i;
            break;
        } else {
            if (dst)
                memcpy(dst + o, REPL, 3);
            o += 3;
            i++;
        }
    }
    return o;
}

int lq_detok_push(lq_detok *d, int32_t id, char *out, size_t cap, size_t *out_len, lq_err *err)
{
    if (out_len)
        *out_len = 0;
    if (!d || !out || cap == 0)
        return lq_err_set(err, LQ_EINVAL, "detok: NULL argument or zero capacity");
    out[0] = 0;
    const lq_tokenizer *t = d->t;
    if (id < 0 || id >= t->n_vocab)
        return lq_err_set(err, LQ_ERANGE, "detok: id %d outside 0..%d", (int)id,
                          (int)t->n_vocab - 1);
    size_t need = d->npend + t->len[id];
    unsigned char stackbuf[1024];
    unsigned char *buf = need <= sizeof stackbuf ? stackbuf : malloc(need);
    if (!buf)
        return lq_err_set(err, LQ_ENOMEM, "detok: %zu bytes", need);
    memcpy(buf, d->pend, d->npend);
    int at_start = d->at_start;
    size_t n = d->npend + render(t, id, d->flags, &at_start, (char *)buf + d->npend);
    size_t keep;
    size_t o = stream_scan(buf, n, NULL, &keep);
    if (o + 1 > cap) {
        if (buf != stackbuf)
            free(buf);
        return lq_err_set(err, LQ_ERANGE, "detok: token %d needs %zu bytes, buffer holds %zu",
                          (int)id, o + 1, cap);
    }
    stream_scan(buf, n, out, &keep);
    out[o] = 0;
    if (keep > sizeof d->pend) { /* cannot happen: a prefix is at most 3 bytes */
        keep = 0;
    }
    memcpy(d->pend, buf + n - keep, keep);
    d->npend = keep;
    d->at_start = at_start;
    if (buf != stackbuf)
        free(buf);
    if (out_len)
        *out_len = o;
    return LQ_OK;
}

int lq_detok_flush(lq_detok *d, char *out, size_t cap, size_t *out_len)
{
    if (out_len)
        *out_len = 0;
    if (!d || !out || cap == 0)
        return LQ_EINVAL;
    out[0] = 0;
    if (d->npend == 0)
        return LQ_OK;
    if (cap < 4)
        return LQ_ERANGE;
    memcpy(out, REPL, 3); /* one replacement for the incomplete tail */
    out[3] = 0;
    d->npend = 0;
    if (out_len)
        *out_len = 3;
    return LQ_OK;
}
