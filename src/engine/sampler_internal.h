/* The sampler's two halves, for the generator's bounded lm_head (generate.c): it applies the
 * penalties, checks that the penalised logits decide the token, and only then picks.
 * lq_sampler_sample(s, l) is lq_sampler_penalize(s, l) then lq_sampler_pick(s, l). Not a
 * public header. */
#ifndef LQ_ENGINE_SAMPLER_INTERNAL_H
#define LQ_ENGINE_SAMPLER_INTERNAL_H

#include "larql/sampler.h"

/* The repetition, frequency and presence penalties of the accepted history, in place. Each
 * is a non-decreasing function of one token's logit (l > 0 ? l / p : l * p, then minus a
 * constant), so an upper bound stays an upper bound. */
void lq_sampler_penalize(lq_sampler *s, float *logits);
/* The token from already penalised logits (greedy, top-k, top-p, min-p, temperature). */
int32_t lq_sampler_pick(lq_sampler *s, float *logits);

#endif
