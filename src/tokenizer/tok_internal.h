/* Private to src/tokenizer: the lq_tokenizer layout, its hash tables, and the builder the
 * GGUF and tokenizer.json loaders share. A loader fills the vocabulary (pieces, scores,
 * types) and the merges, sets the options below, then calls tok_finalize, which builds the
 * lookup tables, the byte tables, the special-token list and the pre-tokenizer regexes. */
#ifndef LQ_TOKENIZER_INTERNAL_H
#define LQ_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "larql/tokenizer.h"

/* Token types, numbered as GGUF's tokenizer.ggml.token_type (llama.cpp's enum). */
enum {
    TOK_T_UNDEFINED = 0,
    TOK_T_NORMAL = 1,
    TOK_T_UNKNOWN = 2,
    TOK_T_CONTROL = 3,
    TOK_T_USER_DEFINED = 4,
    TOK_T_UNUSED = 5,
    TOK_T_BYTE = 6,
};

/* Caps on untrusted sizes. */
#define TOK_MAX_VOCAB (1 << 22)       /* 4M tokens; real vocabularies are <= 256k */
#define TOK_MAX_PIECE (1 << 16)       /* bytes in one vocabulary piece */
#define TOK_MAX_MERGES (1 << 23)
#define TOK_MAX_REGEX 4               /* pre-tokenizer split patterns applied in sequence */

/* Pre-tokenizer patterns (byte-level BPE). */
#define TOK_RE_GPT2 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define TOK_RE_LLAMA3                                                                    \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "             \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Open-addressing map from a vocabulary piece to its id. slots[i].id = -1 when empty;
 * capacity is a power of two >= 2 * n_vocab, so probes stay short. */
typedef struct tok_piece_slot {
    uint32_t hash; /* low bits of the piece hash: most mismatches never touch the piece */
    int32_t id;
} tok_piece_slot;
typedef struct tok_piece_map {
    tok_piece_slot *slots; /* [mask + 1] */
    uint32_t mask;
} tok_piece_map;

/* Map from a merge pair (left id, right id) to (rank, merged id); one 16-byte slot per
 * entry so a lookup costs one cache miss. key = left << 32 | right, UINT64_MAX = empty. */
typedef struct tok_merge_slot {
    uint64_t key;
    int32_t rank;
    int32_t result;
} tok_merge_slot;
typedef struct tok_merge_map {
    tok_merge_slot *slots; /* [mask + 1] */
    uint32_t mask;
    uint32_t count;
} tok_merge_map;

struct lq_tokenizer {
    int kind;        /* LQ_TOK_BPE / LQ_TOK_SPM */
    int32_t n_vocab;

    /* pieces: piece i is blob[off[i] .. off[i] + len[i]) followed by a NUL */
    char *blob;
    size_t blob_len, blob_cap;
    uint64_t *off;   /* [n_vocab] */
    uint32_t *len;   /* [n_vocab] */
    float *scores;   /* [n_vocab], SPM merge priorities (BPE: NULL) */
    uint8_t *type;   /* [n_vocab], TOK_T_* */

    tok_piece_map pieces;
    tok_merge_map merges;

    /* BPE: id of the single-character piece each byte maps to (GPT-2 byte->unicode);
     * SPM: id of the <0xXX> byte token. -1 when absent. */
    int32_t byte_id[256];

    /* BPE pre-tokenizer: split patterns applied one after the other */
    pcre2_code *re[TOK_MAX_REGEX];
    int n_re;
    int ignore_merges; /* a word that is itself a token is emitted whole (Llama 3) */

    int32_t bos, eos, eot, unk;
    int add_bos;
    int add_space_prefix; /* SPM dummy prefix */

    /* tokens matched in the text with LQ_TOK_PARSE_SPECIAL, longest first */
    int32_t *special;
    size_t n_special;
};

/* ---- builder (tokenizer.c) ---- */
lq_tokenizer *tok_new(int kind);
/* Allocates per-token arrays for n tokens (pieces empty, type NORMAL, score 0). */
int tok_alloc_vocab(lq_tokenizer *t, int32_t n, int with_scores, lq_err *err);
/* Sets piece id (copied). Must be called at most once per id. */
int tok_set_piece(lq_tokenizer *t, int32_t id, const char *s, size_t n, lq_err *err);
/* Builds the piece map; fails on duplicate pieces only if strict (later duplicates are
 * ignored otherwise: the first id wins, as llama.cpp does). */
int tok_build_piece_map(lq_tokenizer *t, lq_err *err);
int tok_merges_reserve(lq_tokenizer *t, size_t n, lq_err *err);
/* Adds merge rank `rank` of pieces a + b (the first occurrence of a pair wins). Pairs
 * whose parts or whose concatenation are not in the vocabulary are ignored. */
int tok_add_merge(lq_tokenizer *t, const char *a, size_t na, const char *b, size_t nb,
                  int32_t rank, lq_err *err);
/* Adds a split pattern (BPE pre-tokenizer). */
int tok_add_regex(lq_tokenizer *t, const char *pattern, size_t len, lq_err *err);
/* Byte tables and the special-token list; call once everything else is set. */
int tok_finalize(lq_tokenizer *t, lq_err *err);

int32_t tok_find(const lq_tokenizer *t, const char *s, size_t n);
int tok_merge_lookup(const lq_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *res);

/* ---- growable id vector ---- */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *o, int32_t id);

/* ---- BPE (tok_bpe.c) ---- */
void tok_bpe_byte_tables(void); /* idempotent, thread-safe */
/* UTF-8 (1..2 bytes) of the unicode character byte b maps to; returns its length. */
int tok_bpe_byte_to_utf8(uint8_t b, char out[2]);
/* Byte that the code point cp stands for, or -1. */
int tok_bpe_cp_to_byte(uint32_t cp);
int tok_bpe_encode(const lq_tokenizer *t, const char *text, size_t len, tok_ids *out,
                   lq_err *err);

/* ---- SPM (tok_spm.c) ---- */
int tok_spm_encode(const lq_tokenizer *t, const char *text, size_t len, int add_prefix,
                   tok_ids *out, lq_err *err);

/* ---- UTF-8 ---- */
/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid/incomplete within n. */
int tok_utf8_seq(const unsigned char *s, size_t n, uint32_t *cp);
/* Offset of the first invalid byte, or n when the whole buffer is valid. */
size_t tok_utf8_check(const char *s, size_t n);

/* Binary min-heap of bigrams ordered by (key, left). */
typedef struct tok_bigram {
    float key;     /* BPE: merge rank; SPM: -score */
    int32_t left, right;
    int32_t a, b;  /* BPE: ids of left/right when queued; SPM: a = byte size */
    int32_t res;   /* BPE: merged id */
} tok_bigram;
typedef struct tok_heap {
    tok_bigram *v;
    size_t n, cap;
} tok_heap;
int tok_heap_push(tok_heap *h, const tok_bigram *e);
int tok_heap_pop(tok_heap *h, tok_bigram *out); /* 0 when empty */

#endif
