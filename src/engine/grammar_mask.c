/* Token masks: which tokens keep the output inside the grammar.
 *
 * The vocabulary's byte strings sit in a trie (tokens sorted by bytes, so a subtree is a
 * contiguous range of the sorted order). A mask walks the trie depth first from the
 * current DFA state, one memoised byte transition per trie edge, and drops a whole
 * subtree as soon as its prefix leaves the grammar. Two shortcuts keep free text cheap:
 * when every byte below a large trie node loops the state onto itself (a JSON string's
 * characters, digits), the whole subtree is allowed without walking it; and each DFA
 * state's mask is cached, so a state seen again costs a lookup. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_internal.h"
#include "core/hash.h"

#define GR_BIG_SUBTREE 64             /* subtrees with this many tokens get a byte set */
#define GR_MASK_CACHE_BYTES (16u << 20) /* per state object (one request): 1,000 masks of a
                                         * 128k vocabulary; past it the cache starts over */

struct lq_grammar_vocab {
    int32_t n_vocab;
    char *bytes;           /* every token's bytes, concatenated */
    uint32_t *boff, *blen; /* [n_vocab] as generation emits them mid-text */
    uint32_t *slen;        /* [n_vocab] at the start of the text (SentencePiece drops a
                            * leading space there): the bytes are bytes + boff + blen - slen */
    /* trie */
    uint32_t n_nodes;
    uint32_t *child_off;   /* [n_nodes + 1] into edge_* */
    uint8_t *edge_byte;
    uint32_t *edge_child;
    uint32_t *tok_lo, *tok_mid, *tok_hi; /* sorted[lo, mid): the node's own tokens;
                                          * [mid, hi): its descendants' */
    int32_t *sorted;
    uint32_t *bset_of;     /* [n_nodes] index into bset, UINT32_MAX for small subtrees */
    uint32_t (*bset)[8];   /* bytes occurring below the node */
    uint64_t fingerprint;
    int refs;              /* process cache references */
};

void lq_grammar_vocab_free(lq_grammar_vocab *v)
{
    if (!v)
        return;
    free(v->bytes);
    free(v->boff);
    free(v->blen);
    free(v->slen);
    free(v->child_off);
    free(v->edge_byte);
    free(v->edge_child);
    free(v->tok_lo);
    free(v->tok_mid);
    free(v->tok_hi);
    free(v->sorted);
    free(v->bset_of);
    free(v->bset);
    free(v);
}

int32_t lq_grammar_vocab_size(const lq_grammar_vocab *v) { return v ? v->n_vocab : 0; }

static const lq_grammar_vocab *sort_vocab; /* qsort context (built under the cache lock
                                            * or by one caller; see cmp_tok) */

static int cmp_tok(const void *a, const void *b)
{
    const lq_grammar_vocab *v = sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->blen[x], ly = v->blen[y], l = lx < ly ? lx : ly;
    int c = memcmp(v->bytes + v->boff[x], v->bytes + v->boff[y], l);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

/* The token bytes: decode([id]) is the text at the start of an output (SentencePiece drops
 * the leading space); decode([id, id]) minus that is the text mid-output. */
static int render_tokens(lq_grammar_vocab *v, const lq_tokenizer *t, lq_err *err)
{
    size_t cap = 1 << 16, n = 0;
    v->bytes = malloc(cap);
    if (!v->bytes)
        return lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
    for (int32_t id = 0; id < v->n_vocab; id++) {
        int32_t two[2] = {id, id};
        char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        int rc = lq_tokenizer_decode(t, two, 1, LQ_DETOK_SKIP_SPECIAL, &a, &la, err);
        if (!rc)
            rc = lq_tokenizer_decode(t, two, 2, LQ_DETOK_SKIP_SPECIAL, &b, &lb, err);
        if (rc || lb < la) {
            free(a);
            free(b);
            return rc ? rc : lq_err_set(err, LQ_EFORMAT, "grammar: token %d renders "
                                        "inconsistently", (int)id);
        }
        size_t mid = lb - la;
        if (n + mid > cap) {
            while (n + mid > cap)
                cap *= 2;
            char *nb = realloc(v->bytes, cap);
            if (!nb) {
                free(a);
                free(b);
                return lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
            }
            v->bytes = nb;
        }
        memcpy(v->bytes + n, b + la, mid);
        v->boff[id] = (uint32_t)n;
        v->blen[id] = (uint32_t)mid;
        /* the start form is a suffix of the mid form (only a leading space is dropped) */
        v->slen[id] = la <= mid && !memcmp(a, b + la + (mid - la), la) ? (uint32_t)la
                                                                       : (uint32_t)mid;
        n += mid;
        free(a);
        free(b);
    }
    return LQ_OK;
}

static int build_trie(lq_grammar_vocab *v, lq_err *err)
{
    int32_t nv = v->n_vocab;
    size_t total = 0;
    for (int32_t i = 0; i < nv; i++)
        total += v->blen[i];
    size_t maxn = total + 1;
    v->sorted = malloc((size_t)nv * sizeof *v->sorted);
    uint32_t *depth = malloc(maxn * sizeof *depth);
    uint32_t *parent = malloc(maxn * sizeof *parent);
    uint8_t *pbyte = malloc(maxn);
    v->tok_lo = malloc(maxn * sizeof *v->tok_lo);
    v->tok_mid = malloc(maxn * sizeof *v->tok_mid);
    v->tok_hi = malloc(maxn * sizeof *v->tok_hi);
    int rc = LQ_OK;
    if (!v->sorted || !depth || !parent || !pbyte || !v->tok_lo || !v->tok_mid || !v->tok_hi) {
        rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < nv; i++)
        v->sorted[i] = i;
    pthread_mutex_lock(&sort_lock);
    sort_vocab = v;
    qsort(v->sorted, (size_t)nv, sizeof *v->sorted, cmp_tok);
    pthread_mutex_unlock(&sort_lock);

    /* Walk the sorted tokens: the trie path of token k shares its longest common prefix
     * with token k-1, so nodes are created in pre-order (parents before children, children
     * in byte order). path[d] = node at depth d on the current path. */
    uint32_t *path = malloc((size_t)(total + 2) * sizeof *path);
    if (!path) {
        rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
        goto done;
    }
    uint32_t nn = 1, plen = 0; /* node 0 = root */
    depth[0] = 0;
    parent[0] = 0;
    pbyte[0] = 0;
    path[0] = 0;
    v->tok_lo[0] = 0;
    v->tok_mid[0] = 0;
    int32_t prev = -1;
    for (int32_t k = 0; k < nv; k++) {
        int32_t id = v->sorted[k];
        const uint8_t *b = (const uint8_t *)v->bytes + v->boff[id];
        uint32_t len = v->blen[id], common = 0;
        if (prev >= 0) {
            const uint8_t *pb = (const uint8_t *)v->bytes + v->boff[prev];
            uint32_t pl = v->blen[prev];
            while (common < len && common < pl && common < plen && pb[common] == b[common])
                common++;
        }
        if (common > plen)
            common = plen;
        /* close the nodes deeper than common */
        for (uint32_t d = plen; d > common; d--)
            v->tok_hi[path[d]] = (uint32_t)k;
        plen = common;
        for (uint32_t d = common; d < len; d++) {
            uint32_t nd = nn++;
            depth[nd] = d + 1;
            parent[nd] = path[d];
            pbyte[nd] = b[d];
            v->tok_lo[nd] = (uint32_t)k;
            v->tok_mid[nd] = (uint32_t)k;
            path[d + 1] = nd;
        }
        plen = len;
        /* the token ends at path[len]: a node's own tokens sort before its descendants */
        v->tok_mid[path[len]] = (uint32_t)k + 1;
        prev = id;
    }
    for (uint32_t d = plen; d > 0; d--)
        v->tok_hi[path[d]] = (uint32_t)nv;
    v->tok_hi[0] = (uint32_t)nv;
    free(path);
    v->n_nodes = nn;

    /* children: nodes were created in pre-order, so each node's children appear in byte
     * order; count then fill */
    v->child_off = calloc((size_t)nn + 1, sizeof *v->child_off);
    v->edge_byte = malloc(nn);
    v->edge_child = malloc((size_t)nn * sizeof *v->edge_child);
    v->bset_of = malloc((size_t)nn * sizeof *v->bset_of);
    if (!v->child_off || !v->edge_byte || !v->edge_child || !v->bset_of) {
        rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
        goto done;
    }
    for (uint32_t i = 1; i < nn; i++)
        v->child_off[parent[i] + 1]++;
    for (uint32_t i = 0; i < nn; i++)
        v->child_off[i + 1] += v->child_off[i];
    uint32_t *fill = malloc((size_t)nn * sizeof *fill);
    if (!fill) {
        rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
        goto done;
    }
    memcpy(fill, v->child_off, (size_t)nn * sizeof *fill);
    for (uint32_t i = 1; i < nn; i++) {
        uint32_t e = fill[parent[i]]++;
        v->edge_byte[e] = pbyte[i];
        v->edge_child[e] = i;
    }
    free(fill);
    /* byte sets of big subtrees: the bytes of their tokens below the node's depth */
    uint32_t nb = 0;
    for (uint32_t i = 0; i < nn; i++) {
        int big = v->tok_hi[i] - v->tok_mid[i] >= GR_BIG_SUBTREE;
        v->bset_of[i] = big ? nb++ : UINT32_MAX;
    }
    v->bset = calloc(nb ? nb : 1, sizeof *v->bset);
    if (!v->bset) {
        rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < nn; i++) {
        if (v->bset_of[i] == UINT32_MAX)
            continue;
        uint32_t *set = v->bset[v->bset_of[i]];
        for (uint32_t k = v->tok_mid[i]; k < v->tok_hi[i]; k++) {
            int32_t id = v->sorted[k];
            const uint8_t *b = (const uint8_t *)v->bytes + v->boff[id];
            for (uint32_t d = depth[i]; d < v->blen[id]; d++)
                set[b[d] >> 5] |= 1u << (b[d] & 31);
        }
    }
done:
    free(depth);
    free(parent);
    free(pbyte);
    return rc;
}

int lq_grammar_vocab_create(const lq_tokenizer *t, lq_grammar_vocab **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "grammar: NULL argument");
    *out = NULL;
    if (!t)
        return lq_err_set(err, LQ_EINVAL, "grammar: the model has no tokenizer");
    lq_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
    v->n_vocab = lq_tokenizer_n_vocab(t);
    size_t nv = v->n_vocab > 0 ? (size_t)v->n_vocab : 1;
    v->boff = malloc(nv * sizeof *v->boff);
    v->blen = malloc(nv * sizeof *v->blen);
    v->slen = malloc(nv * sizeof *v->slen);
    int rc = !v->boff || !v->blen || !v->slen
                 ? lq_err_set(err, LQ_ENOMEM, "grammar: out of memory")
                 : render_tokens(v, t, err);
    if (!rc)
        rc = build_trie(v, err);
    if (rc) {
        lq_grammar_vocab_free(v);
        return rc;
    }
    *out = v;
    return LQ_OK;
}

/* ---- the process cache ---- */

#define GR_VOCAB_CACHE 4
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static lq_grammar_vocab *cache[GR_VOCAB_CACHE];

static uint64_t fingerprint(const lq_tokenizer *t)
{
    uint64_t h = LQ_FNV64_OFFSET ^ (uint64_t)lq_tokenizer_kind(t);
    int32_t n = lq_tokenizer_n_vocab(t);
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *p = lq_tokenizer_piece(t, i, &len);
        unsigned char tail[2] = {0xFF, (unsigned char)lq_tokenizer_is_control(t, i)}; /* separator, kind */
        h = lq_fnv1a64_more(h, p ? p : "", p ? len : 0);
        h = lq_fnv1a64_more(h, tail, 2);
    }
    return h ^ (uint64_t)n << 40;
}

int lq_grammar_vocab_acquire(const lq_tokenizer *t, const lq_grammar_vocab **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "grammar: NULL argument");
    *out = NULL;
    if (!t)
        return lq_err_set(err, LQ_EINVAL, "grammar: the model has no tokenizer");
    uint64_t fp = fingerprint(t);
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < GR_VOCAB_CACHE; i++)
        if (cache[i] && cache[i]->fingerprint == fp &&
            cache[i]->n_vocab == lq_tokenizer_n_vocab(t)) {
            cache[i]->refs++;
            *out = cache[i];
            pthread_mutex_unlock(&cache_lock);
            return LQ_OK;
        }
    lq_grammar_vocab *v;
    int rc = lq_grammar_vocab_create(t, &v, err);
    if (rc) {
        pthread_mutex_unlock(&cache_lock);
        return rc;
    }
    v->fingerprint = fp;
    v->refs = 1;
    int slot = -1;
    for (int i = 0; i < GR_VOCAB_CACHE && slot < 0; i++)
        if (!cache[i] || cache[i]->refs == 0)
            slot = i;
    if (slot >= 0) {
        lq_grammar_vocab_free(cache[slot]);
        cache[slot] = v;
    } else {
        v->refs = -1; /* the cache is full of vocabularies in use: this one is private */
    }
    *out = v;
    pthread_mutex_unlock(&cache_lock);
    return LQ_OK;
}

void lq_grammar_vocab_release(const lq_grammar_vocab *cv)
{
    if (!cv)
        return;
    lq_grammar_vocab *v = (lq_grammar_vocab *)cv;
    pthread_mutex_lock(&cache_lock);
    if (v->refs < 0)
        lq_grammar_vocab_free(v);
    else if (v->refs > 0)
        v->refs--;
    pthread_mutex_unlock(&cache_lock);
}

/* ---- masks ---- */

static void set_range(const lq_grammar_vocab *v, uint32_t *bits, uint32_t lo, uint32_t hi)
{
    for (uint32_t k = lo; k < hi; k++) {
        int32_t id = v->sorted[k];
        bits[id >> 5] |= 1u << (id & 31);
    }
}

static int subset(const uint32_t *a, const uint32_t *b)
{
    for (int i = 0; i < 8; i++)
        if (a[i] & ~b[i])
            return 0;
    return 1;
}

/* Depth-first over the trie from dstate s0, filling bits. */
static int walk(lq_grammar_state *S, const lq_grammar_vocab *v, uint32_t s0, uint32_t *bits)
{
    uint32_t cap = 256, sp = 0;
    uint32_t *stk = malloc(2 * (size_t)cap * sizeof *stk);
    if (!stk)
        return lq_err_set(&S->fail, LQ_ENOMEM, "grammar: out of memory");
    stk[sp++] = 0;
    stk[sp++] = s0;
    int rc = 0;
    int root = 1;
    while (sp) {
        uint32_t s = stk[--sp], node = stk[--sp];
        if (!root) {
            set_range(v, bits, v->tok_lo[node], v->tok_mid[node]);
            uint32_t bi = v->bset_of[node];
            if (bi != UINT32_MAX) {
                if ((rc = gr_loop_bytes(S, s)) != 0)
                    break;
                if (subset(v->bset[bi], S->ds[s].loop)) {
                    set_range(v, bits, v->tok_mid[node], v->tok_hi[node]);
                    continue;
                }
            }
        }
        root = 0;
        for (uint32_t e = v->child_off[node]; e < v->child_off[node + 1]; e++) {
            uint32_t t = gr_step(S, s, v->edge_byte[e]);
            if (t == GR_FAIL) {
                rc = S->fail.code;
                break;
            }
            if (t == GR_DEAD)
                continue;
            if (sp + 2 > 2 * cap) {
                uint32_t *ns = realloc(stk, 4 * (size_t)cap * sizeof *ns);
                if (!ns) {
                    rc = lq_err_set(&S->fail, LQ_ENOMEM, "grammar: out of memory");
                    break;
                }
                stk = ns;
                cap *= 2;
            }
            stk[sp++] = v->edge_child[e];
            stk[sp++] = t;
        }
        if (rc)
            break;
    }
    free(stk);
    return rc;
}

/* Tokens at the start of a SentencePiece text (their leading space dropped): one walk
 * each, not cached (it happens once per output). */
static int walk_start(lq_grammar_state *S, const lq_grammar_vocab *v, uint32_t *bits)
{
    for (int32_t id = 0; id < v->n_vocab; id++) {
        uint32_t n = v->slen[id];
        const uint8_t *b = (const uint8_t *)v->bytes + v->boff[id] + (v->blen[id] - n);
        uint32_t s = S->cur;
        for (uint32_t i = 0; i < n && s != GR_DEAD; i++) {
            s = gr_step(S, s, b[i]);
            if (s == GR_FAIL)
                return S->fail.code;
        }
        if (n && s != GR_DEAD)
            bits[id >> 5] |= 1u << (id & 31);
    }
    return 0;
}

/* The mask of the current state as a bitset (owned by S; valid until the next call). */
int gr_mask_bits(lq_grammar_state *S, const lq_grammar_vocab *v, int strip_space,
                 const uint32_t **out, lq_err *err)
{
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    if (S->mask_nvocab != v->n_vocab) {
        gr_drop_masks(S);
        S->mask_nvocab = v->n_vocab;
    }
    if (strip_space) {
        uint32_t *bits = calloc(words ? words : 1, sizeof *bits);
        if (!bits)
            return lq_err_set(err, LQ_ENOMEM, "grammar: out of memory for a token mask");
        int rc = walk_start(S, v, bits);
        if (rc) {
            free(bits);
            return lq_err_set(err, rc, "%s", S->fail.msg);
        }
        free(S->start_bits);
        S->start_bits = bits;
        *out = bits;
        return LQ_OK;
    }
    if (S->ds[S->cur].mask) {
        *out = S->ds[S->cur].mask;
        return LQ_OK;
    }
    if (S->mask_bytes + words * 4 > GR_MASK_CACHE_BYTES)
        gr_drop_masks(S);
    uint32_t *bits = calloc(words ? words : 1, sizeof *bits);
    if (!bits)
        return lq_err_set(err, LQ_ENOMEM, "grammar: out of memory for a token mask");
    int rc = walk(S, v, S->cur, bits);
    if (rc) {
        free(bits);
        return lq_err_set(err, rc, "%s", S->fail.msg);
    }
    S->ds[S->cur].mask = bits; /* the walk may have moved S->ds: index it afresh */
    S->mask_bytes += words * 4;
    *out = bits;
    return LQ_OK;
}

int lq_grammar_mask(lq_grammar_state *S, const lq_grammar_vocab *v, int strip_space,
                    uint8_t *allowed, lq_err *err)
{
    if (!S || !v || !allowed)
        return lq_err_set(err, LQ_EINVAL, "grammar: NULL argument");
    const uint32_t *bits;
    int rc = gr_mask_bits(S, v, strip_space, &bits, err);
    if (rc)
        return rc;
    int count = 0;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        allowed[i] = (bits[i >> 5] >> (i & 31)) & 1u;
        count += allowed[i];
    }
    return count;
}

int lq_grammar_accept_token(lq_grammar_state *S, const lq_grammar_vocab *v, int32_t id,
                            int strip_space, lq_err *err)
{
    if (!S || !v)
        return lq_err_set(err, LQ_EINVAL, "grammar: NULL argument");
    if (id < 0 || id >= v->n_vocab)
        return lq_err_set(err, LQ_ERANGE, "grammar: token %d outside the vocabulary",
                          (int)id);
    uint32_t n = strip_space ? v->slen[id] : v->blen[id];
    if (n == 0)
        return lq_err_set(err, LQ_EINVAL, "grammar: token %d has no text", (int)id);
    return lq_grammar_state_accept(S, v->bytes + v->boff[id] + (v->blen[id] - n), n, err);
}
