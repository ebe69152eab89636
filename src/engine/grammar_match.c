/* The recogniser: stacks of grammar positions advanced one code point at a time, wrapped
 * in a lazily built DFA over bytes (see grammar_internal.h). Everything it allocates
 * belongs to one lq_grammar_state and grows with the distinct states an output visits. */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "engine/grammar_internal.h"

#define GR_MAX_NODES (1u << 20) /* ~25 MB: far beyond real outputs, small enough for a server */
#define GR_MAX_DSTATES (1u << 20)

static uint32_t hash2(uint32_t a, uint32_t b)
{
    uint64_t x = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

static int fail(lq_grammar_state *S, int code, const char *what)
{
    return lq_err_set(&S->fail, code, "grammar: %s", what);
}

static int node_rehash(lq_grammar_state *S, uint32_t ncap)
{
    uint32_t *h = malloc((size_t)ncap * sizeof *h);
    if (!h)
        return -1;
    memset(h, 0xFF, (size_t)ncap * sizeof *h);
    for (uint32_t i = 1; i < S->n_nodes; i++) {
        uint32_t k = hash2(S->npos[i], S->npar[i]) & (ncap - 1);
        while (h[k] != UINT32_MAX)
            k = (k + 1) & (ncap - 1);
        h[k] = i;
    }
    free(S->nhash);
    S->nhash = h;
    S->nhcap = ncap;
    return 0;
}

/* The node (pos, parent), created on first use; UINT32_MAX on failure. */
static uint32_t intern_node(lq_grammar_state *S, uint32_t pos, uint32_t parent)
{
    uint32_t k = hash2(pos, parent) & (S->nhcap - 1);
    for (;; k = (k + 1) & (S->nhcap - 1)) {
        uint32_t i = S->nhash[k];
        if (i == UINT32_MAX)
            break;
        if (S->npos[i] == pos && S->npar[i] == parent)
            return i;
    }
    if (S->n_nodes >= GR_MAX_NODES) {
        fail(S, LQ_EINVAL, "the recogniser's stacks exceed 1M nodes (a grammar this "
                           "ambiguous is not supported)");
        return UINT32_MAX;
    }
    if (S->n_nodes == S->cap_nodes) {
        uint32_t nc = S->cap_nodes * 2;
        uint32_t *a = realloc(S->npos, (size_t)nc * sizeof *a);
        if (a)
            S->npos = a;
        uint32_t *b = a ? realloc(S->npar, (size_t)nc * sizeof *b) : NULL;
        if (b)
            S->npar = b;
        uint32_t *c = b ? realloc(S->nstamp, (size_t)nc * sizeof *c) : NULL;
        if (!c) {
            fail(S, LQ_ENOMEM, "out of memory");
            return UINT32_MAX;
        }
        S->nstamp = c;
        memset(S->nstamp + S->cap_nodes, 0, (size_t)(nc - S->cap_nodes) * sizeof *c);
        S->cap_nodes = nc;
    }
    uint32_t id = S->n_nodes++;
    S->npos[id] = pos;
    S->npar[id] = parent;
    S->nstamp[id] = 0;
    S->nhash[k] = id;
    if (2 * (uint64_t)S->n_nodes > S->nhcap && node_rehash(S, S->nhcap * 2)) {
        fail(S, LQ_ENOMEM, "out of memory");
        return UINT32_MAX;
    }
    return id;
}

/* "Match from element p, then continue with parent": a sequence that is already over is
 * its parent (so right recursion does not grow the stack). */
static uint32_t after(lq_grammar_state *S, uint32_t p, uint32_t parent)
{
    return gr_is_end(S->g->el[p].type) ? parent : intern_node(S, p, parent);
}

static int push_work(lq_grammar_state *S, uint32_t n)
{
    if (lq_grow((void **)&S->work, &S->cap_work, S->n_work + 1, sizeof *S->work))
        return fail(S, LQ_ENOMEM, "out of memory");
    S->work[S->n_work++] = n;
    return 0;
}

/* Expands node n (and everything on the work list) until each stack's top is a character
 * group, appending the results to S->out. Nodes seen in this round (S->stamp) are skipped. */
static int expand(lq_grammar_state *S, uint32_t n)
{
    const lq_grammar *g = S->g;
    if (n == UINT32_MAX || push_work(S, n))
        return -1;
    while (S->n_work) {
        n = S->work[--S->n_work];
        if (S->nstamp[n] == S->stamp)
            continue;
        S->nstamp[n] = S->stamp;
        uint32_t pos = S->npos[n];
        if (n == 0 || g->cls_of[pos] != UINT32_MAX) {
            if (lq_grow((void **)&S->out, &S->cap_out, S->n_out + 1, sizeof *S->out))
                return fail(S, LQ_ENOMEM, "out of memory");
            S->out[S->n_out++] = n;
        } else if (g->el[pos].type == GE_REF) {
            uint32_t cont = after(S, pos + 1, S->npar[n]);
            if (cont == UINT32_MAX)
                return -1;
            uint32_t a = g->rule_off[g->el[pos].val];
            for (;;) {
                uint32_t child = after(S, a, cont);
                if (child == UINT32_MAX || push_work(S, child))
                    return -1;
                while (!gr_is_end(g->el[a].type))
                    a++;
                if (g->el[a].type == GE_END)
                    break;
                a++;
            }
        } else if (push_work(S, S->npar[n])) { /* at the end of a sequence: return */
            return -1;
        }
    }
    return 0;
}

static void new_round(lq_grammar_state *S)
{
    if (++S->stamp == 0) {
        memset(S->nstamp, 0, (size_t)S->cap_nodes * sizeof *S->nstamp);
        S->stamp = 1;
    }
    S->n_out = 0;
    S->n_work = 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t ds_hash(const uint32_t *m, uint32_t n, uint32_t pval, uint8_t pneed)
{
    uint32_t h = hash2(pval, pneed);
    for (uint32_t i = 0; i < n; i++)
        h = hash2(h, m[i]);
    return h;
}

static int ds_rehash(lq_grammar_state *S, uint32_t ncap)
{
    uint32_t *h = malloc((size_t)ncap * sizeof *h);
    if (!h)
        return -1;
    memset(h, 0xFF, (size_t)ncap * sizeof *h);
    for (uint32_t i = 0; i < S->n_ds; i++) {
        uint32_t k = S->ds[i].hash & (ncap - 1);
        while (h[k] != UINT32_MAX)
            k = (k + 1) & (ncap - 1);
        h[k] = i;
    }
    free(S->dhash);
    S->dhash = h;
    S->dhcap = ncap;
    return 0;
}

/* The dstate of set S->out (sorted here) with partial character (pval, pneed). */
static uint32_t intern_ds(lq_grammar_state *S, uint32_t pval, uint8_t pneed)
{
    uint32_t *m = S->out, n = (uint32_t)S->n_out;
    if (n == 0)
        return GR_DEAD;
    qsort(m, n, sizeof *m, cmp_u32);
    uint32_t h = ds_hash(m, n, pval, pneed);
    uint32_t k = h & (S->dhcap - 1);
    for (;; k = (k + 1) & (S->dhcap - 1)) {
        uint32_t i = S->dhash[k];
        if (i == UINT32_MAX)
            break;
        gr_dstate *d = &S->ds[i];
        if (d->hash == h && d->n == n && d->pval == pval && d->pneed == pneed &&
            !memcmp(S->mem + d->off, m, n * sizeof *m))
            return i;
    }
    if (S->n_ds >= GR_MAX_DSTATES) {
        fail(S, LQ_EINVAL, "the recogniser exceeds 1M states");
        return GR_FAIL;
    }
    size_t cds = S->cap_ds;
    if (lq_grow((void **)&S->ds, &cds, (size_t)S->n_ds + 1, sizeof *S->ds) ||
        lq_grow((void **)&S->mem, &S->cap_mem, S->n_mem + n, sizeof *S->mem)) {
        fail(S, LQ_ENOMEM, "out of memory");
        return GR_FAIL;
    }
    S->cap_ds = (uint32_t)cds;
    uint32_t id = S->n_ds++;
    gr_dstate *d = &S->ds[id];
    memset(d, 0, sizeof *d);
    d->off = (uint32_t)S->n_mem;
    d->n = n;
    d->pval = pval;
    d->pneed = pneed;
    d->hash = h;
    d->can_end = pneed == 0 && m[0] == 0; /* sorted: node 0 first */
    memcpy(S->mem + S->n_mem, m, n * sizeof *m);
    S->n_mem += n;
    S->dhash[k] = id;
    if (2 * (uint64_t)S->n_ds > S->dhcap && ds_rehash(S, S->dhcap * 2)) {
        fail(S, LQ_ENOMEM, "out of memory");
        return GR_FAIL;
    }
    return id;
}

/* Members of s whose group matches cp, advanced past it. */
static uint32_t advance(lq_grammar_state *S, uint32_t s, uint32_t cp)
{
    const lq_grammar *g = S->g;
    new_round(S);
    const gr_dstate d = S->ds[s]; /* copy: interning may move S->ds */
    for (uint32_t i = 0; i < d.n; i++) {
        uint32_t n = S->mem[d.off + i];
        if (n == 0)
            continue;
        const gr_cls *c = &g->cls[g->cls_of[S->npos[n]]];
        if (gr_cls_match(g, c, cp) && expand(S, after(S, c->next, S->npar[n])))
            return GR_FAIL;
    }
    return intern_ds(S, 0, 0);
}

/* A partial character is stored as pval = len << 24 | bits so far: the sequence length
 * gives the smallest code point it may encode (overlong encodings are not UTF-8, and a
 * grammar must not accept "{" spelt E0 81 BB). */
static const uint32_t utf8_min[5] = {0, 0, 0x80, 0x800, 0x10000};

/* Members of s that can match some code point the partial character can still become. */
/* A partial character every member accepts whatever its remaining bytes are: only the count
 * of bytes still to come matters, so the states of all such characters are one (pval =
 * len << 24 | GR_ANYCHAR). Without it a cold mask inside a string interns a state for each
 * distinct 2- and 3-byte prefix of the vocabulary's CJK and emoji tokens. */
#define GR_ANYCHAR (1u << 23)

static int cls_covers(const lq_grammar *g, const gr_cls *c, uint32_t lo, uint32_t hi)
{
    const uint32_t *iv = g->iv + 2 * (size_t)c->iv_off;
    if (c->neg) /* no excluded interval meets [lo, hi] */
        return !gr_cls_meets(g, &(gr_cls){c->iv_off, c->n_iv, 0, {0}, 0}, lo, hi);
    for (uint32_t i = 0; i < c->n_iv; i++)
        if (iv[2 * i] <= lo && hi <= iv[2 * i + 1])
            return 1;
    return 0;
}

/* Members of s that can match some code point the partial character can still become. */
static uint32_t partial(lq_grammar_state *S, uint32_t s, uint32_t len, uint32_t val,
                        uint8_t need)
{
    const lq_grammar *g = S->g;
    uint32_t raw_lo = val << (6 * need), raw_hi = raw_lo | ((1u << (6 * need)) - 1);
    uint32_t lo = raw_lo, hi = raw_hi;
    if (lo < utf8_min[len])
        lo = utf8_min[len];
    if (hi > 0x10FFFF)
        hi = 0x10FFFF;
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) /* nothing, or only surrogates, left */
        return GR_DEAD;
    /* every completion valid UTF-8 (no overlong, surrogate or too large code point)? */
    int any = lo == raw_lo && hi == raw_hi && (hi < 0xD800 || lo > 0xDFFF);
    new_round(S);
    const gr_dstate d = S->ds[s];
    for (uint32_t i = 0; i < d.n; i++) {
        uint32_t n = S->mem[d.off + i];
        if (n == 0)
            continue;
        const gr_cls *c = &g->cls[g->cls_of[S->npos[n]]];
        if (!gr_cls_meets(g, c, lo, hi))
            continue;
        any = any && cls_covers(g, c, lo, hi);
        if (lq_grow((void **)&S->out, &S->cap_out, S->n_out + 1, sizeof *S->out)) {
            fail(S, LQ_ENOMEM, "out of memory");
            return GR_FAIL;
        }
        S->out[S->n_out++] = n;
    }
    return intern_ds(S, len << 24 | (any ? GR_ANYCHAR : val), need);
}

/* The last byte of a GR_ANYCHAR character: every member matches it. */
static uint32_t advance_all(lq_grammar_state *S, uint32_t s)
{
    const lq_grammar *g = S->g;
    new_round(S);
    const gr_dstate d = S->ds[s];
    for (uint32_t i = 0; i < d.n; i++) {
        uint32_t n = S->mem[d.off + i];
        const gr_cls *c = &g->cls[g->cls_of[S->npos[n]]];
        if (expand(S, after(S, c->next, S->npar[n])))
            return GR_FAIL;
    }
    return intern_ds(S, 0, 0);
}

static uint32_t compute_step(lq_grammar_state *S, uint32_t s, uint8_t b)
{
    const gr_dstate *d = &S->ds[s];
    if (d->pneed) {
        if ((b & 0xC0) != 0x80)
            return GR_DEAD;
        uint32_t len = d->pval >> 24;
        uint8_t need = (uint8_t)(d->pneed - 1);
        if (d->pval & GR_ANYCHAR) {
            if (!need)
                return advance_all(S, s);
            /* the same members, one byte fewer to come */
            const gr_dstate dd = *d;
            new_round(S);
            if (lq_grow((void **)&S->out, &S->cap_out, dd.n, sizeof *S->out)) {
                fail(S, LQ_ENOMEM, "out of memory");
                return GR_FAIL;
            }
            memcpy(S->out, S->mem + dd.off, dd.n * sizeof *S->out);
            S->n_out = dd.n;
            return intern_ds(S, dd.pval, need);
        }
        uint32_t val = ((d->pval & 0x7FFFFFu) << 6) | (b & 0x3Fu);
        if (need)
            return partial(S, s, len, val, need);
        if (val < utf8_min[len] || val > 0x10FFFF || (val >= 0xD800 && val <= 0xDFFF))
            return GR_DEAD;
        return advance(S, s, val);
    }
    if (b < 0x80)
        return advance(S, s, b);
    if (b >= 0xC2 && b <= 0xDF)
        return partial(S, s, 2, b & 0x1Fu, 1);
    if (b >= 0xE0 && b <= 0xEF)
        return partial(S, s, 3, b & 0x0Fu, 2);
    if (b >= 0xF0 && b <= 0xF4)
        return partial(S, s, 4, b & 0x07u, 3);
    return GR_DEAD; /* a continuation byte or a byte that never appears in UTF-8 */
}

static int trans_grow(lq_grammar_state *S)
{
    uint32_t ncap = S->tcap * 2;
    uint64_t *k = malloc((size_t)ncap * sizeof *k);
    uint32_t *v = malloc((size_t)ncap * sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    memset(k, 0xFF, (size_t)ncap * sizeof *k);
    for (uint32_t i = 0; i < S->tcap; i++) {
        if (S->tkey[i] == UINT64_MAX)
            continue;
        uint32_t j = hash2((uint32_t)(S->tkey[i] >> 8), (uint32_t)S->tkey[i]) & (ncap - 1);
        while (k[j] != UINT64_MAX)
            j = (j + 1) & (ncap - 1);
        k[j] = S->tkey[i];
        v[j] = S->tval[i];
    }
    free(S->tkey);
    free(S->tval);
    S->tkey = k;
    S->tval = v;
    S->tcap = ncap;
    return 0;
}

uint32_t gr_step(lq_grammar_state *S, uint32_t s, uint8_t b)
{
    uint64_t key = (uint64_t)s << 8 | b;
    uint32_t j = hash2(s, (uint32_t)key) & (S->tcap - 1);
    for (; S->tkey[j] != UINT64_MAX; j = (j + 1) & (S->tcap - 1))
        if (S->tkey[j] == key)
            return S->tval[j];
    uint32_t r = compute_step(S, s, b);
    if (r == GR_FAIL)
        return r;
    j = hash2(s, (uint32_t)key) & (S->tcap - 1);
    while (S->tkey[j] != UINT64_MAX)
        j = (j + 1) & (S->tcap - 1);
    S->tkey[j] = key;
    S->tval[j] = r;
    if (2 * (uint64_t)++S->tn > S->tcap && trans_grow(S)) {
        fail(S, LQ_ENOMEM, "out of memory");
        return GR_FAIL;
    }
    return r;
}

int gr_loop_bytes(lq_grammar_state *S, uint32_t s)
{
    if (S->ds[s].loop_ok)
        return 0;
    uint32_t loop[8] = {0};
    for (unsigned b = 0; b < 256; b++) {
        uint32_t t = gr_step(S, s, (uint8_t)b);
        if (t == GR_FAIL)
            return S->fail.code;
        if (t == s)
            loop[b >> 5] |= 1u << (b & 31);
    }
    memcpy(S->ds[s].loop, loop, sizeof loop);
    S->ds[s].loop_ok = 1;
    return 0;
}

void gr_drop_masks(lq_grammar_state *S)
{
    for (uint32_t i = 0; i < S->n_ds; i++) {
        free(S->ds[i].mask);
        S->ds[i].mask = NULL;
    }
    S->mask_bytes = 0;
}

void lq_grammar_state_free(lq_grammar_state *S)
{
    if (!S)
        return;
    gr_drop_masks(S);
    free(S->start_bits);
    free(S->npos);
    free(S->npar);
    free(S->nstamp);
    free(S->nhash);
    free(S->ds);
    free(S->mem);
    free(S->dhash);
    free(S->tkey);
    free(S->tval);
    free(S->work);
    free(S->out);
    free(S);
}

int lq_grammar_state_create(const lq_grammar *g, lq_grammar_state **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "grammar: NULL argument");
    *out = NULL;
    if (!g)
        return lq_err_set(err, LQ_EINVAL, "grammar: NULL grammar");
    lq_grammar_state *S = calloc(1, sizeof *S);
    if (!S)
        return lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
    S->g = g;
    S->cap_nodes = 256;
    S->nhcap = 1024;
    S->dhcap = 256;
    S->tcap = 1024;
    S->npos = malloc(S->cap_nodes * sizeof *S->npos);
    S->npar = malloc(S->cap_nodes * sizeof *S->npar);
    S->nstamp = calloc(S->cap_nodes, sizeof *S->nstamp);
    S->nhash = malloc(S->nhcap * sizeof *S->nhash);
    S->dhash = malloc(S->dhcap * sizeof *S->dhash);
    S->tkey = malloc(S->tcap * sizeof *S->tkey);
    S->tval = malloc(S->tcap * sizeof *S->tval);
    if (!S->npos || !S->npar || !S->nstamp || !S->nhash || !S->dhash || !S->tkey || !S->tval) {
        lq_grammar_state_free(S);
        return lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
    }
    memset(S->nhash, 0xFF, S->nhcap * sizeof *S->nhash);
    memset(S->dhash, 0xFF, S->dhcap * sizeof *S->dhash);
    memset(S->tkey, 0xFF, S->tcap * sizeof *S->tkey);
    S->n_nodes = 1; /* node 0: the empty stack */
    S->npos[0] = UINT32_MAX;
    S->npar[0] = 0;
    /* the start: every alternative of root, then nothing */
    new_round(S);
    uint32_t a = g->rule_off[g->root];
    for (;;) {
        if (expand(S, after(S, a, 0)))
            goto failed;
        while (!gr_is_end(g->el[a].type))
            a++;
        if (g->el[a].type == GE_END)
            break;
        a++;
    }
    S->cur = intern_ds(S, 0, 0);
    if (S->cur == GR_FAIL)
        goto failed;
    if (S->cur == GR_DEAD) { /* cannot happen for a checked grammar */
        lq_grammar_state_free(S);
        return lq_err_set(err, LQ_EINVAL, "grammar: the language is empty");
    }
    *out = S;
    return LQ_OK;
failed:;
    int rc = lq_err_set(err, S->fail.code ? S->fail.code : LQ_ENOMEM, "%s", S->fail.msg);
    lq_grammar_state_free(S);
    return rc;
}

int lq_grammar_state_accept(lq_grammar_state *S, const char *bytes, size_t n, lq_err *err)
{
    if (!S || (!bytes && n))
        return lq_err_set(err, LQ_EINVAL, "grammar: NULL argument");
    uint32_t s = S->cur;
    for (size_t i = 0; i < n; i++) {
        s = gr_step(S, s, (uint8_t)bytes[i]);
        if (s == GR_FAIL)
            return lq_err_set(err, S->fail.code, "%s", S->fail.msg);
        if (s == GR_DEAD)
            return lq_err_set(err, LQ_EINVAL, "grammar: byte %zu (0x%02x) leaves the grammar",
                              i, (unsigned char)bytes[i]);
    }
    S->cur = s;
    return LQ_OK;
}

int lq_grammar_state_can_end(const lq_grammar_state *S)
{
    return S && S->ds[S->cur].can_end;
}

int lq_grammar_state_done(const lq_grammar_state *S)
{
    return S && S->ds[S->cur].can_end && S->ds[S->cur].n == 1;
}

int lq_grammar_match(const lq_grammar *g, const char *text, size_t len, lq_err *err)
{
    lq_grammar_state *S;
    int rc = lq_grammar_state_create(g, &S, err);
    if (rc)
        return rc;
    lq_err e2;
    rc = lq_grammar_state_accept(S, text, len, &e2);
    int ok = rc == LQ_OK ? lq_grammar_state_can_end(S) : 0;
    if (rc && rc != LQ_EINVAL) { /* an internal failure, not a mismatch */
        lq_grammar_state_free(S);
        return lq_err_set(err, rc, "%s", e2.msg);
    }
    lq_grammar_state_free(S);
    return ok;
}
