/* Prompt-lookup speculative decoding (larql/generate.h "Speculative decoding"), shared by
 * lq_generate and the scheduler. Not a public header.
 *
 * With a draft, after lq_gen_step returned LQ_GEN_NEXT the caller
 *   lq_draft_plan     gets the rows to feed: g->next_id, then up to K drafted tokens
 *   (evaluates them in one pass: lq_session_eval_rows with lq_draft_outs / lq_draft_heads)
 *   lq_draft_verify   runs lq_gen_step on each row's logits in order while the sampled token
 *                     is the drafted one; returns how many rows' KV to keep
 *   (cuts the session back to its position before the pass + keep)
 * Each lq_gen_step sees exactly the logits, sampler state and history it sees in plain
 * decoding, so tokens, callbacks and finish are the plain ones. */
#ifndef LQ_ENGINE_DRAFT_H
#define LQ_ENGINE_DRAFT_H

#include "engine/gen_step.h"

/* Called by lq_gen_begin: sets g->draft (NULL when the request does not draft). p->draft and
 * p->draft_max are checked here (LQ_EINVAL). */
int lq_draft_begin(lq_gen_state *g, const lq_generate_params *p, const int32_t *prompt,
                   size_t n_prompt, int n_ctx, lq_err *err);
void lq_draft_free(lq_gen_state *g);

/* The rows to feed after LQ_GEN_NEXT: returns T >= 1 (g->next_id alone when T = 1). room:
 * context positions left in the session; allow = 0 forbids drafting in this step (the token
 * is still recorded). */
int lq_draft_plan(lq_gen_state *g, int room, int allow);
const int32_t *lq_draft_ids(const lq_gen_state *g);
float *const *lq_draft_outs(const lq_gen_state *g);
lq_head_req *const *lq_draft_heads(const lq_gen_state *g);

/* After the T rows were evaluated (eval_ms: the pass's time, < 0 when it also ran other
 * requests' rows and tells nothing of the draft's cost): samples row after row. Returns
 * LQ_GEN_NEXT (feed g->next_id), LQ_GEN_END or an LQ_E* code; *keep = rows of the pass whose
 * KV stays (the rest are positions of rejected drafts, or after the end). */
int lq_draft_verify(lq_gen_state *g, int T, double eval_ms, lq_token_cb cb, void *user,
                    int *keep, lq_err *err);

#endif
