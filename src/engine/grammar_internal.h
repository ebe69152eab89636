/* Grammar internals shared by the parser (grammar_parse.c), the recogniser
 * (grammar_match.c) and the token masks (grammar_mask.c). Not a public header.
 *
 * A compiled grammar is a flat element array. Rule r's alternatives start at rule_off[r];
 * each is a sequence of elements ended by GE_ALT (another alternative follows) or GE_END
 * (the rule's last). A terminal is a character group: GE_CHAR / GE_CHAR_NOT followed by
 * GE_RNG_UPPER (closes a range) and GE_CHAR_ALT (another member) elements; the parser
 * also records each group as sorted, merged code point intervals (cls) for matching. */
#ifndef LQ_ENGINE_GRAMMAR_INTERNAL_H
#define LQ_ENGINE_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "larql/grammar.h"

enum {
    GE_END = 0,
    GE_ALT,
    GE_REF,       /* val: rule id */
    GE_CHAR,      /* val: code point */
    GE_CHAR_NOT,  /* negated group's first member */
    GE_RNG_UPPER, /* val: upper bound of the range begun by the previous element */
    GE_CHAR_ALT,  /* another member of the group */
    GE_ANY,       /* `.`: any code point */
};

typedef struct gr_el {
    uint32_t type, val;
} gr_el;

typedef struct gr_cls {
    uint32_t iv_off, n_iv; /* intervals [lo, hi] at iv[2 * iv_off ...] */
    uint32_t next;         /* element position after the group */
    uint32_t ascii[4];     /* bitmap of the ASCII code points the group matches */
    int neg;
} gr_cls;

struct lq_grammar {
    gr_el *el;
    uint32_t n_el;
    uint32_t *rule_off; /* [n_rules] */
    uint32_t n_rules, root;
    uint32_t *cls_of;   /* [n_el] class index of a group's first element, else UINT32_MAX */
    gr_cls *cls;
    uint32_t n_cls;
    uint32_t *iv;
};

static inline int gr_is_end(uint32_t type) { return type == GE_END || type == GE_ALT; }

/* Does class c match code point cp? */
static inline int gr_cls_match(const lq_grammar *g, const gr_cls *c, uint32_t cp)
{
    if (cp < 128)
        return (c->ascii[cp >> 5] >> (cp & 31)) & 1u;
    const uint32_t *iv = g->iv + 2 * (size_t)c->iv_off;
    int in = 0;
    for (uint32_t i = 0; i < c->n_iv && iv[2 * i] <= cp; i++)
        if (cp <= iv[2 * i + 1]) {
            in = 1;
            break;
        }
    return in != c->neg;
}

/* A deep copy of g (NULL when out of memory). */
lq_grammar *gr_clone(const lq_grammar *g);

/* Does class c match some code point in [lo, hi]? */
int gr_cls_meets(const lq_grammar *g, const gr_cls *c, uint32_t lo, uint32_t hi);

#endif

/* ---- recogniser state (grammar_match.c), used by the masks (grammar_mask.c) ----
 *
 * A stack is a hash-consed linked list of nodes (pos, parent): "match the sequence at
 * element pos, then continue with parent". Node 0 is the empty stack: the grammar is
 * complete. Stacks are expanded until their top is a character group, so a node in a set
 * always sits on a group (or is node 0). A DFA state ("dstate") is an interned sorted set
 * of stacks plus an incomplete UTF-8 character (pval, pneed bytes still to come); the
 * byte transitions between dstates are memoised, so walking the same text twice, or many
 * tokens through the same states, costs hash lookups. */
#define GR_DEAD UINT32_MAX        /* transition result: the byte leaves the grammar */
#define GR_FAIL (UINT32_MAX - 1)  /* transition result: out of memory / limits (err set) */

typedef struct gr_dstate {
    uint32_t off, n;     /* members at mem[off .. off + n) */
    uint32_t pval, hash;
    uint8_t pneed, can_end, loop_ok;
    uint32_t loop[8];    /* bytes b with step(state, b) == state (valid when loop_ok) */
    uint32_t *mask;      /* cached token mask (bitset over the vocabulary) or NULL */
} gr_dstate;

struct lq_grammar_state {
    const lq_grammar *g;
    uint32_t *npos, *npar, *nstamp;
    uint32_t n_nodes, cap_nodes, stamp;
    uint32_t *nhash, nhcap;
    gr_dstate *ds;
    uint32_t n_ds, cap_ds;
    uint32_t *mem;
    size_t n_mem, cap_mem;
    uint32_t *dhash, dhcap;
    uint64_t *tkey;
    uint32_t *tval, tcap, tn;
    uint32_t *work, *out;
    size_t n_work, cap_work, n_out, cap_out;
    uint32_t cur;        /* the current dstate */
    size_t mask_bytes;   /* memory held by cached masks */
    int32_t mask_nvocab; /* vocabulary size the cached masks are for */
    uint32_t *start_bits; /* the last start-of-text mask (not cached per state) */
    lq_err fail;         /* why a transition returned GR_FAIL */
};

/* The dstate after byte b from dstate s: GR_DEAD, GR_FAIL, or a dstate id. */
uint32_t gr_step(lq_grammar_state *S, uint32_t s, uint8_t b);
/* Fills S->ds[s].loop (256 steps, memoised). Returns 0 or GR_FAIL's code. */
int gr_loop_bytes(lq_grammar_state *S, uint32_t s);
void gr_drop_masks(lq_grammar_state *S);
/* The mask of the current state as a bitset over the vocabulary (owned by S, valid until
 * the next call); see lq_grammar_mask. */
int gr_mask_bits(lq_grammar_state *S, const lq_grammar_vocab *v, int strip_space,
                 const uint32_t **out, lq_err *err);
