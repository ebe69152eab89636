/* Tokenizer API: accessors, special-token partitioning, encode dispatch (tok_bpe.c,
 * tok_spm.c), decode and the streaming detokenizer. The tables and the builder are in
 * tok_tables.c, bytes and code points in tok_bytes.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

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
            int prefix = t->add_space_prefix && prev_special && (!t->prefix_first_only || f.off == 0);
            rc = tok_spm_encode(t, text + f.off, f.len, prefix, &out, err);
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
