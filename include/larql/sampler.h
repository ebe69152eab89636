/* Token sampling: greedy, temperature, top-k, top-p, min-p, seeded RNG, and repetition /
 * frequency / presence penalties. Order: penalties -> (temperature <= 0: argmax) |
 * temperature -> top-k -> softmax -> top-p -> min-p -> renormalise -> draw.
 *
 * Defaults (lq_sampler_defaults): temperature 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * repeat_penalty 1.0 (off), repeat_last_n 64, frequency_penalty 0, presence_penalty 0,
 * no seed.
 *
 * Greedy is the argmax with ties to the lower id (NaN logits never win). top-p keeps the
 * smallest best-first prefix whose probability reaches top_p (the best token always stays);
 * min-p keeps tokens with p >= min_p * p_max. Nothing sorts the whole vocabulary: top-k uses
 * a bounded heap, top-p a mass histogram plus a sort of the one bucket holding the cut,
 * min-p is a threshold.
 *
 * RNG: xoshiro256** seeded through splitmix64 from the 64-bit seed; one uniform double in
 * [0, 1) (53 bits) per draw, inverse-CDF over the kept tokens (best first with top-k, else
 * in id order). The same seed,
 * parameters, logits and accepted history give the same tokens on every machine that
 * computes the same floats.
 *
 * Penalties: repeat_penalty over the last repeat_last_n accepted tokens (each distinct id
 * once); frequency / presence over every accepted token since create/reset. */
#ifndef LARQL_SAMPLER_H
#define LARQL_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_sampler_params {
    float temperature;       /* <= 0: greedy (argmax); default 0.8 via lq_sampler_defaults */
    int top_k;               /* 0 = off */
    float top_p;             /* 1 = off; (0, 1] */
    float min_p;             /* 0 = off; [0, 1] */
    uint64_t seed;           /* used when has_seed; otherwise seeded from time and address */
    int has_seed;
    float repeat_penalty;    /* 1 = off; > 0. llama.cpp style: logit/p if > 0 else logit*p */
    int repeat_last_n;       /* window for repeat_penalty (tokens); 0 = all seen */
    float frequency_penalty; /* OpenAI: logit -= freq * count;  [-2, 2] */
    float presence_penalty;  /* OpenAI: logit -= presence if count > 0;  [-2, 2] */
} lq_sampler_params;

void lq_sampler_defaults(lq_sampler_params *p);
/* Checks ranges; LQ_EINVAL with a message naming the field and the allowed range. NaN
 * values are rejected. */
int lq_sampler_params_check(const lq_sampler_params *p, lq_err *err);

typedef struct lq_sampler lq_sampler;

int lq_sampler_create(const lq_sampler_params *p, int32_t n_vocab, lq_sampler **out, lq_err *err);
void lq_sampler_free(lq_sampler *s);
/* Picks the next token from logits (n_vocab floats; modified in place by penalties).
 * Does not record it: call lq_sampler_accept with the token actually used. */
int32_t lq_sampler_sample(lq_sampler *s, float *logits);
/* Records a token in the penalty history (generated tokens; callers decide about prompts). */
void lq_sampler_accept(lq_sampler *s, int32_t id);
void lq_sampler_reset(lq_sampler *s);

/* log-softmax helpers for logprobs: log-sum-exp of n logits, in double precision. */
double lq_logsumexp(const float *logits, int32_t n);
/* The k best (id, logit) pairs, best first, ties to the lower id. Returns the count written. */
int lq_top_k(const float *logits, int32_t n, int k, int32_t *ids, float *vals);

#ifdef __cplusplus
}
#endif
#endif
