/* Tokenizers: byte-level BPE (GPT-2 and Llama 3 pre-tokenizers, PCRE2 for the Unicode
 * classes) and SentencePiece-style llama (scores, byte fallback, dummy prefix), loaded from
 * GGUF metadata (tokenizer.ggml.*) or a HuggingFace tokenizer.json. Immutable after load and
 * safe to share across threads. */
#ifndef LARQL_TOKENIZER_H
#define LARQL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "larql/gguf.h"
#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_tokenizer lq_tokenizer;

typedef enum lq_tok_kind {
    LQ_TOK_BPE = 1, /* byte-level BPE (GPT-2, Llama 3) */
    LQ_TOK_SPM = 2, /* SentencePiece-style (llama / Llama 2) */
} lq_tok_kind;

/* encode flags */
#define LQ_TOK_ADD_BOS 1u       /* prepend BOS (when the tokenizer has one) */
#define LQ_TOK_PARSE_SPECIAL 2u /* recognise special/control token text ("<|eot_id|>") */
/* decode flags */
#define LQ_DETOK_SKIP_SPECIAL 1u /* drop control tokens (BOS/EOS/...) from the text */

int lq_tokenizer_from_gguf(const lq_gguf *g, lq_tokenizer **out, lq_err *err);
int lq_tokenizer_from_json_file(const char *path, lq_tokenizer **out, lq_err *err);
int lq_tokenizer_from_json(const char *json, size_t len, lq_tokenizer **out, lq_err *err);
void lq_tokenizer_free(lq_tokenizer *t);

int lq_tokenizer_kind(const lq_tokenizer *t);
int32_t lq_tokenizer_n_vocab(const lq_tokenizer *t);
int32_t lq_tokenizer_bos(const lq_tokenizer *t); /* -1 when none */
int32_t lq_tokenizer_eos(const lq_tokenizer *t); /* -1 when none */
int32_t lq_tokenizer_eot(const lq_tokenizer *t); /* -1 when none (Llama 3: <|eot_id|>) */
int lq_tokenizer_add_bos(const lq_tokenizer *t); /* the source's add_bos default */
int lq_tokenizer_is_control(const lq_tokenizer *t, int32_t id); /* special/control token */
/* Look a token up by its exact vocabulary piece; -1 if absent. */
int32_t lq_tokenizer_find(const lq_tokenizer *t, const char *piece, size_t len);
/* The raw vocabulary piece (e.g. "ĠParis", "▁Paris", "<0x0A>"); NULL if id out of range. */
const char *lq_tokenizer_piece(const lq_tokenizer *t, int32_t id, size_t *len);

/* Encode text (len bytes, need not be NUL-terminated; invalid UTF-8 is an LQ_EINVAL error).
 * *ids is malloc'd (caller frees), *n_ids its length. */
int lq_tokenizer_encode(const lq_tokenizer *t, const char *text, size_t len, unsigned flags,
                        int32_t **ids, size_t *n_ids, lq_err *err);

/* Decode ids to text. *text is malloc'd and NUL-terminated; *len excludes the NUL.
 * Ids out of range -> LQ_ERANGE. Byte sequences that are not valid UTF-8 come out as-is
 * (a stream decoder below holds them back until complete). */
int lq_tokenizer_decode(const lq_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        char **text, size_t *len, lq_err *err);

/* Incremental decoding for streaming: push one id at a time; each push appends to out the
 * bytes that became complete UTF-8 (a character split across tokens is emitted once whole).
 * SPM's leading-space rule (strip the dummy-prefix space of the first token) is handled. */
typedef struct lq_detok lq_detok;
int lq_detok_create(const lq_tokenizer *t, unsigned flags, lq_detok **out, lq_err *err);
void lq_detok_free(lq_detok *d);
/* Appends at most cap-1 bytes + NUL to out; *out_len = bytes written. A single token's text
 * plus up to 3 held-back bytes must fit, else LQ_ERANGE (state unchanged): cap >= 256
 * suffices for the supported vocabularies (Llama 3 has pieces that decode to 128 bytes, e.g.
 * runs of spaces; most tokens need < 64). Bytes that can never form UTF-8 are emitted as
 * U+FFFD, so the output is always valid UTF-8. */
int lq_detok_push(lq_detok *d, int32_t id, char *out, size_t cap, size_t *out_len, lq_err *err);
/* Emits whatever is held back (incomplete UTF-8 at end of stream, as U+FFFD). */
int lq_detok_flush(lq_detok *d, char *out, size_t cap, size_t *out_len);
/* Treat the next push as the start of text (SPM leading space handling), e.g. after a prompt. */
void lq_detok_reset(lq_detok *d, int at_start);

#ifdef __cplusplus
}
#endif
#endif
