/* Constrained decoding: GBNF grammars (llama.cpp's format and semantics), JSON Schema
 * converted to GBNF, a byte-level recogniser, and per-step token masks.
 *
 *   lq_grammar         a compiled grammar; immutable, shareable across threads
 *   lq_grammar_state   where one output stands in the grammar (one per request, not shared)
 *   lq_grammar_vocab   a tokenizer's per-token byte strings in a trie (built once per
 *                      tokenizer; immutable, shareable)
 *
 * GBNF: `name ::= alternatives` rules (names [A-Za-z0-9_-]), `|`, sequences, ( groups ),
 * "literals", [classes] with ranges and ^ negation, `.` (any character), postfix `*` `+`
 * `?` `{m}` `{m,}` `{m,n}`, escapes \x.. \u.... \U........ \t \n \r \\ \" \[ \] \-, `#`
 * comments; a rule ends at a newline unless inside parentheses or after `|`. The start
 * symbol is `root`. Matching is over Unicode code points of UTF-8 text, so a character may
 * be split across tokens. Errors (syntax with line:column, undefined rule, missing root,
 * left recursion, a language with no string at all) are LQ_EINVAL with a message. */
#ifndef LARQL_GRAMMAR_H
#define LARQL_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "larql/status.h"
#include "larql/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_grammar lq_grammar;
typedef struct lq_grammar_state lq_grammar_state;
typedef struct lq_grammar_vocab lq_grammar_vocab;

int lq_grammar_parse(const char *gbnf, size_t len, lq_grammar **out, lq_err *err);
void lq_grammar_free(lq_grammar *g);

/* JSON Schema (the subset llama.cpp's json-schema-to-grammar handles: type and type
 * arrays, properties, required, additionalProperties, enum, const, items, minItems,
 * maxItems, anyOf, oneOf, $ref to #/$defs and #/definitions, string formats date, time,
 * date-time, uuid, minLength, maxLength, simple patterns, minimum / maximum / exclusive
 * bounds on integers) -> GBNF text (malloc'd, NUL-
 * terminated). Whitespace between JSON tokens is bounded (a space, or a newline and at
 * most 20 spaces/tabs), so a model cannot pad forever. Unsupported keywords that would
 * change the language (allOf, not, if/then, prefixItems, a pattern beyond the subset,
 * bounds on non-integers)
 * are LQ_EUNSUPPORTED; a bad schema (not JSON, unknown type, $ref loop or dangling $ref)
 * is LQ_EINVAL. */
int lq_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, lq_err *err);
int lq_grammar_from_json_schema(const char *schema, size_t len, lq_grammar **out, lq_err *err);
/* The grammar of any JSON object (OpenAI's response_format json_object). */
const char *lq_grammar_json_object_gbnf(void);

/* ---- recogniser ---- */
int lq_grammar_state_create(const lq_grammar *g, lq_grammar_state **out, lq_err *err);
void lq_grammar_state_free(lq_grammar_state *s);
/* Feeds bytes. LQ_OK if the output so far is still a prefix of some string of the language;
 * LQ_EINVAL if not (the state is then unchanged). */
int lq_grammar_state_accept(lq_grammar_state *s, const char *bytes, size_t n, lq_err *err);
/* 1 when the output so far is a complete string of the language. */
int lq_grammar_state_can_end(const lq_grammar_state *s);
/* 1 when the output is complete and nothing can follow it (only the end is possible). */
int lq_grammar_state_done(const lq_grammar_state *s);
/* Whole-string test: 1 if text is in the language, 0 if not, < 0 on error. */
int lq_grammar_match(const lq_grammar *g, const char *text, size_t len, lq_err *err);

/* ---- token masks ---- */
/* Renders every token's bytes as generation emits them (control tokens render empty and
 * are never allowed by a mask; end-of-sequence is the caller's business). */
int lq_grammar_vocab_create(const lq_tokenizer *t, lq_grammar_vocab **out, lq_err *err);
void lq_grammar_vocab_free(lq_grammar_vocab *v);
int32_t lq_grammar_vocab_size(const lq_grammar_vocab *v);
/* The vocabulary of a tokenizer from a process-wide cache (built on first use; shared;
 * kept until lq_grammar_vocab_release drops the last reference and the cache needs room). */
int lq_grammar_vocab_acquire(const lq_tokenizer *t, const lq_grammar_vocab **out, lq_err *err);
void lq_grammar_vocab_release(const lq_grammar_vocab *v);

/* Which tokens may come next: allowed[i] = 1 when token i keeps the output inside the
 * grammar, else 0 (n_vocab bytes). strip_space: the next token starts the text and a
 * SentencePiece tokenizer drops its leading space. Masks are cached per state, so a
 * state seen again (a string's characters, a number's digits) costs a lookup. Returns the
 * number of allowed tokens (>= 0) or an LQ_E* code. */
int lq_grammar_mask(lq_grammar_state *s, const lq_grammar_vocab *v, int strip_space,
                    uint8_t *allowed, lq_err *err);
/* Advances over token id's bytes (LQ_EINVAL if that leaves the grammar; state unchanged). */
int lq_grammar_accept_token(lq_grammar_state *s, const lq_grammar_vocab *v, int32_t id,
                            int strip_space, lq_err *err);

#ifdef __cplusplus
}
#endif
#endif
