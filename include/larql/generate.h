/* Streaming generation over a session: prefill the prompt, then sample/decode until a stop
 * condition. Text is delivered in UTF-8-complete pieces. A stop string may span tokens: text
 * that could be the start of a stop string is held back until it is known not to be one,
 * and the stop string itself is never emitted. */
#ifndef LARQL_GENERATE_H
#define LARQL_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "larql/grammar.h"
#include "larql/model.h"
#include "larql/sampler.h"
#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lq_finish {
    LQ_FINISH_NONE = 0,
    LQ_FINISH_LENGTH = 1,   /* max_tokens reached (or context full) */
    LQ_FINISH_EOS = 2,      /* an end-of-sequence id was sampled (not emitted) */
    LQ_FINISH_STOP = 3,     /* a stop string matched (not emitted) */
    LQ_FINISH_CANCELED = 4, /* the callback asked to stop */
} lq_finish;

/* Called for each generated token. text/len: the newly emittable text (may be empty while
 * text is held back). logprob: log-probability of id under the sampling distribution
 * before truncation (temperature-scaled softmax of the penalised logits; temperature <= 0
 * counts as 1); logits: the penalised logits the token was drawn from (n_vocab floats,
 * valid only during the call). With the bounded lm_head (the default when the model has it,
 * unless lq_generate_params.full_logits), logits are -inf for the rows that were not
 * computed exactly and logprob is over the computed rows only (>= the true value). Return non-zero to stop (finish = LQ_FINISH_CANCELED).
 * An EOS id is never passed (nor its text). When the stream ends by LENGTH or EOS with text
 * still held back (a stop-string prefix, an incomplete UTF-8 sequence), one last call
 * delivers it with id = -1, logprob 0 and logits NULL (its return value is ignored). */
typedef int (*lq_token_cb)(void *user, int32_t id, const char *text, size_t len,
                           float logprob, const float *logits);

/* OpenAI's logit_bias: added to a token's logit before sampling (-100 bans it in practice). */
typedef struct lq_logit_bias {
    int32_t id;
    float bias;
} lq_logit_bias;

/* Speculative decoding (lq_generate_params.draft). Prompt lookup: the longest recent n-gram
 * (1-3 tokens) ending the text so far is looked up in the prompt and the output, and the
 * tokens that followed it there are verified in one batched forward pass (every weight read
 * once for all of them); the longest prefix the sampler itself picks is kept and the KV of
 * the rest is dropped. Every token is still drawn by the sampler from its own position's
 * logits with the same random draws, so the output is the one plain decoding gives — the same
 * tokens for the same seed (a draft token is kept with probability p(t), the standard rule for
 * a deterministic draft) — and only the speed changes. The draft length adapts to the
 * acceptance measured in this request and to the measured cost of a longer pass, down to no
 * draft at all. Requests with a grammar or forward-pass edits (hook) never draft. */
typedef enum lq_draft_mode {
    LQ_DRAFT_AUTO = 0,  /* = LQ_DRAFT_NGRAM (LQ_DRAFT=none|ngram in the environment overrides) */
    LQ_DRAFT_NONE = 1,
    LQ_DRAFT_NGRAM = 2,
} lq_draft_mode;

#define LQ_DRAFT_MAX 16 /* longest draft verified in one pass */
#define LQ_PREDICTION_MAX 65536

typedef struct lq_generate_params {
    int max_tokens;            /* >= 0 (default 256); clamped to the context left after the
                                * prompt, so prompt + completion <= n_ctx */
    lq_sampler_params sampling;/* penalties count the generated tokens only (as OpenAI's
                                * frequency/presence penalties do), never the prompt */
    const char *const *stop;   /* stop strings (may be NULL; empty strings -> LQ_EINVAL) */
    size_t n_stop;
    const int32_t *eos_ids;    /* NULL: the model's EOS and EOT ids; non-NULL with n_eos = 0:
                                * no EOS ids at all. Ids outside the vocabulary -> LQ_EINVAL */
    size_t n_eos;              /* <= 64 */
    int ignore_eos;
    const lq_resid_hook *hook; /* NULL, or edits the forward pass runs for this request
                                * (lq_session_set_hook). lq_generate borrows it for the call;
                                * lq_scheduler_submit copies the struct and, when it accepts
                                * the request, owns ctx: hook->release runs when the request
                                * is freed (on a refused submit the caller keeps it). */
    const lq_grammar *grammar; /* NULL, or the output must stay in this grammar: at each step
                                * the tokens that would leave it get -inf logits, EOS is
                                * allowed only where the grammar can end, and the stream ends
                                * (LQ_FINISH_STOP) once nothing but the end can follow. Copied
                                * by lq_gen_begin: the caller may free it after the call /
                                * submit. A model without a tokenizer -> LQ_EINVAL. */
    const lq_logit_bias *logit_bias; /* copied; ids outside the vocabulary or non-finite
                                      * biases -> LQ_EINVAL */
    size_t n_logit_bias;       /* <= 1024 */
    int full_logits;           /* 1: every step's logits are the exact head's over the whole
                                * vocabulary (logprobs, top_logprobs). 0: with the model's
                                * bounded lm_head (lq_model_opts.lm_head_mode), only the rows
                                * that can be chosen are computed exactly; the tokens are the
                                * same, and the callback's logits hold -inf for the others */
    int no_prompt_cache;       /* lq_scheduler_submit: neither reuse a cached prompt prefix nor
                                * leave this request's KV to the cache (lq_scheduler_opts) */
    uint64_t cache_key;        /* with a hook: what its edits are (lq_edit_set_serial of the
                                * set it runs); requests share cached KV only under equal keys,
                                * and a hooked request with key 0 never does */
    int draft;                 /* lq_draft_mode; other values -> LQ_EINVAL */
    int draft_max;             /* longest draft: 0 = 8, else 1..LQ_DRAFT_MAX */
    const int32_t *prediction; /* NULL, or the output expected, mostly (OpenAI's "prediction":
                                * an edit of a known text): drafts are also looked up there.
                                * Copied; changes the speed only. Ids outside the vocabulary
                                * or more than LQ_PREDICTION_MAX -> LQ_EINVAL */
    size_t n_prediction;
} lq_generate_params;

typedef struct lq_generate_result {
    int n_prompt, n_generated; /* n_generated: tokens passed to the callback (EOS excluded) */
    int finish;                /* lq_finish */
    double prefill_ms;         /* the prompt's lq_session_eval (CLOCK_MONOTONIC) */
    double decode_ms;          /* sampling + decode steps after the prefill, callbacks excluded */
    double mask_ms;            /* of decode_ms: computing and applying grammar masks */
    int lm_steps;              /* steps sampled from bounded lm_head logits */
    int lm_full;               /* of them: computed over the whole vocabulary (fallback) */
    int64_t lm_rows_exact;     /* lm_head rows computed exactly in those steps */
    int draft_steps;           /* passes that verified a draft */
    int drafted;               /* draft tokens verified */
    int draft_accepted;        /* of them: kept (each one a forward pass saved) */
} lq_generate_result;

void lq_generate_defaults(lq_generate_params *p);

/* Appends prompt (n_prompt >= 1 ids) to the session at its current position and generates.
 * Empty prompt -> LQ_EINVAL; prompt that does not fit the context -> LQ_ECONTEXT (the session
 * is unchanged). The last sampled token is never decoded into the session (no wasted
 * forward pass): after LENGTH, STOP or CANCELED the session holds the prompt and every
 * generated token but the last; after EOS it holds all of them (not the EOS). A caller that
 * continues the conversation feeds the missing token first. Same seed,
 * parameters and session state -> the same tokens. */
int lq_generate(lq_session *s, const int32_t *prompt, size_t n_prompt,
                const lq_generate_params *p, lq_token_cb cb, void *user,
                lq_generate_result *res, lq_err *err);

/* Stop-string matcher used by lq_generate (exposed for the server and tests). Feed text
 * pieces; it returns how many bytes are now safe to emit and whether a stop string matched
 * (in which case the text before the match is emitted and nothing after). */
typedef struct lq_stopper lq_stopper;
int lq_stopper_create(const char *const *stop, size_t n_stop, lq_stopper **out, lq_err *err);
void lq_stopper_free(lq_stopper *st);
/* Appends piece; writes emittable bytes to *out (pointer into the stopper's buffer, valid
 * until the next call) and *out_len. Returns 1 if a stop string matched, else 0. */
int lq_stopper_push(lq_stopper *st, const char *piece, size_t len, const char **out, size_t *out_len);
/* End of stream: everything held back is emittable. */
void lq_stopper_flush(lq_stopper *st, const char **out, size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
