/* Perplexity of a text under a model, measured as llama.cpp's perplexity tool does: the text
 * is tokenised (no BOS), cut into consecutive windows of n_ctx - 1 tokens, each window is
 * evaluated from a fresh context that starts with BOS (when the tokenizer has one), and only
 * the second half of each window is scored, so every scored token sees at least n_ctx/2
 * tokens of context. A trailing partial window is dropped.
 *
 * Bits per byte makes models with different tokenizers comparable: the mean negative log2-
 * likelihood per scored token times the text's tokens per UTF-8 byte (the scored tokens are
 * taken to cover the text's average number of bytes per token). */
#ifndef LARQL_PERPLEXITY_H
#define LARQL_PERPLEXITY_H

#include <stddef.h>
#include <stdint.h>

#include "larql/model.h"
#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_perplexity_result {
    double perplexity;    /* exp(mean NLL in nats per scored token) */
    double bits_per_byte; /* mean NLL in bits per scored token * text tokens / text bytes */
    double nll;           /* total NLL of the scored tokens, nats */
    uint64_t tokens;      /* scored tokens */
    uint64_t text_tokens; /* tokens of the whole text */
    uint64_t text_bytes;  /* UTF-8 bytes of the whole text */
    int n_ctx;            /* window length used */
    int windows;          /* windows evaluated */
} lq_perplexity_result;

/* n_ctx: window length in tokens (BOS included); 0 = the model's training context. Must be
 * in [4, the model's training context]; the text must hold at least one window of n_ctx - 1
 * tokens (LQ_EINVAL with the counts otherwise). Uses one session of the model; the model's
 * options (activation mode, KV type, lm_head, kernels) are the ones measured. */
int lq_perplexity(lq_model *m, const char *text, size_t len, int n_ctx, lq_perplexity_result *r,
                  lq_err *err);
/* The same, with hook (may be NULL) run in every window's forward pass: the perplexity of a
 * model with edits (lq_edit_set_hook). The hook is borrowed for the call. */
int lq_perplexity_hook(lq_model *m, const char *text, size_t len, int n_ctx, const lq_resid_hook *hook,
                       lq_perplexity_result *r, lq_err *err);

#ifdef __cplusplus
}
#endif
#endif
