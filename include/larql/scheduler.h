/* Continuous batching: many generation requests over one model, decoded together.
 *
 * A scheduler owns one thread that runs the model's decode loop. Callers submit requests
 * (prompt ids, lq_generate_params, a token callback, a done callback, a user pointer) from
 * any thread and get a handle. The loop:
 *
 *   admit     queued requests while fewer than max_active are running (each gets a pooled
 *             session; a full queue refuses new submissions with LQ_EBUSY)
 *   cancel    requests whose handle was cancelled finish with LQ_FINISH_CANCELED and their
 *             session goes back to the pool
 *   step      ONE lq_session_eval_batch for every request that has a token to feed plus
 *             prompt chunks of the requests still prefilling (oldest first, up to
 *             prefill_chunk positions per step in all): one forward pass reads the weights
 *             once for both, so a new prompt delays running streams by little more than the
 *             chunk's compute, and short prompts prefill together. A request whose prompt
 *             completes gets its first token sampled at once. Then per decoding request:
 *             sample (its own sampler and seed), EOS, detokenize, stop strings, callback:
 *             the same code lq_generate runs, in the same order. A request running alone
 *             (no other one decoding or prefilling) feeds its speculative draft in the same
 *             pass (lq_generate_params.draft): streams in a batch already share the weights'
 *             read, and drafted rows would lengthen every stream's step
 *
 * Same request, same seed -> the same tokens, text and finish as lq_generate on a fresh
 * session, provided the batched decode gives each session the logits a lone decode gives it
 * (lq_session_eval_batch's contract: a session's results do not depend on the other rows).
 *
 * Callbacks run on the scheduler thread, one request at a time; they must not block for
 * long (every stream waits for them). A token callback returning non-zero cancels its
 * request (LQ_FINISH_CANCELED), like lq_generate. The done callback runs exactly once per
 * accepted request, after the last token callback, unless the handle was released first.
 *
 * Handles: every successful lq_scheduler_submit gives a handle the caller must release
 * exactly once with lq_sched_release. Releasing a running request cancels it; after
 * lq_sched_release returns, no callback of that request runs any more (so the user pointer
 * may be freed at once). Release every handle before lq_scheduler_free. */
#ifndef LARQL_SCHEDULER_H
#define LARQL_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "larql/generate.h"
#include "larql/model.h"
#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_scheduler lq_scheduler;
typedef struct lq_sched_req lq_sched_req;

typedef struct lq_scheduler_opts {
    int max_active;    /* requests decoding together (sessions held); 1..4096, default 8 */
    int max_queued;    /* requests waiting for a slot; beyond -> LQ_EBUSY; 0..65536, default 64 */
    int n_ctx;         /* context of each session; 0 = model default (as lq_session_create) */
    int prefill_chunk; /* prompt positions per step, shared by the requests prefilling;
                        * 1..65536, default 64 (the engine's own prefill batch; chunked
                        * prefill computes exactly what one lq_session_eval of the whole
                        * prompt computes) */
    int prompt_cache;  /* sessions of finished requests kept, with the tokens their KV holds,
                        * for later requests whose prompts start with those tokens (they
                        * prefill only the rest: a chat's next turn, a shared system prompt);
                        * least recently used first out; 0..4096, default 0 (none). Each is
                        * one session's KV (lq_model_kv_bytes) on top of max_active's. Answers
                        * are identical with and without it. A request opts out with
                        * lq_generate_params.no_prompt_cache; one with a hook shares only with
                        * requests of the same cache_key (never when its key is 0). With a
                        * cache, a request whose prompt starts with the prompt of one running
                        * (the choices of an n > 1 request, concurrent requests behind one
                        * system prompt) copies that prefix's KV once it is computed instead
                        * of prefilling it again (stats shared_*) */
    int draft;         /* lq_draft_mode for requests that leave theirs LQ_DRAFT_AUTO (a server's
                        * --draft): LQ_DRAFT_AUTO (0) keeps the library's default */
    int draft_max;     /* for requests whose draft_max is 0; 0 = the library's (8) */
} lq_scheduler_opts;

void lq_scheduler_opts_init(lq_scheduler_opts *o);

/* Called once when a request ends (finished, cancelled or failed), on the scheduler thread.
 * rc: LQ_OK or the error (err->msg says why); res: counts, finish, timings. */
typedef void (*lq_sched_done_cb)(void *user, int rc, const lq_generate_result *res,
                                 const lq_err *err);

/* Starts the scheduler thread. The model must outlive the scheduler. Sessions are created
 * on demand (up to max_active) and reused. Bad options -> LQ_EINVAL naming the field. */
int lq_scheduler_create(lq_model *m, const lq_scheduler_opts *o, lq_scheduler **out,
                        lq_err *err);
/* Cancels every request still queued or running (their done callbacks run with
 * LQ_FINISH_CANCELED), joins the thread, frees the sessions. NULL-safe. */
void lq_scheduler_free(lq_scheduler *s);
/* The context length of the scheduler's sessions. */
int lq_scheduler_n_ctx(const lq_scheduler *s);

/* Queues a request. The prompt, the parameters and the strings they point to are copied:
 * the caller may free them on return. Validation happens here, as lq_generate does it
 * (empty prompt, bad sampler params, bad eos ids, empty stop strings -> LQ_EINVAL; a prompt
 * that does not fit the context -> LQ_ECONTEXT); queue full -> LQ_EBUSY; scheduler shutting
 * down -> LQ_ECANCELED. cb and done may be NULL. */
int lq_scheduler_submit(lq_scheduler *s, const int32_t *prompt, size_t n_prompt,
                        const lq_generate_params *p, lq_token_cb cb, lq_sched_done_cb done,
                        void *user, lq_sched_req **out, lq_err *err);
/* Warms the prompt cache: queues a prefill of toks (no generation, no handle) whose KV goes
 * into the cache, for a request expected to start with them - a chat's next turn, whose prompt
 * is the text the client was sent, tokenized again, which may not be the tokens the model
 * generated. It builds on the cached entry sharing the longest prefix with toks and does
 * nothing when the cache already holds all of toks, when no entry shares 8 tokens with them,
 * or without a prompt cache. It runs only in steps where nothing else runs, unless a request
 * admitted meanwhile starts with its tokens (that request then waits for the KV and copies
 * it, as from any running request). Requests see no difference in their answers. Only for
 * prompts without edits (cache key 0). Bad tokens (ids outside the vocabulary, fewer than 2,
 * more than the context) -> LQ_EINVAL; no free slot (every one of max_active running or
 * promised to a queued request) or shutting down -> LQ_EBUSY: a warm-up never delays a
 * request, and one that has not started gives its slot up when a request waits for it. */
int lq_scheduler_warm(lq_scheduler *s, const int32_t *toks, size_t n, lq_err *err);
/* Saving a cached prompt (llama-server's slot save/restore). Save writes the prompt cache's
 * entry `slot` (0 = the most recently used, 1 = the one before...; prompts without edits) to
 * path: its tokens and their KV, the model's shape and a checksum (src/engine/kv_file.c).
 * Restore reads such a file back into the cache as its newest entry, after computing the first
 * positions again and finding the file's bytes: requests starting with those tokens then
 * prefill only the rest, with the answers they have without it. Both run on the scheduler's
 * thread between steps (the KV is copied there; the file is written and read on the
 * caller's). n_tokens, n_bytes (may be NULL): the tokens and the file's size. Errors: no such
 * slot or file -> LQ_ENOTFOUND; a file that is not one, is short or corrupt, holds more
 * tokens than the context, or comes from another model (shape or numbers) -> LQ_EFORMAT;
 * no prompt cache (restore) -> LQ_EINVAL; write failure -> LQ_EIO. */
int lq_scheduler_cache_save(lq_scheduler *s, int slot, const char *path, size_t *n_tokens, size_t *n_bytes,
                            lq_err *err);
int lq_scheduler_cache_restore(lq_scheduler *s, const char *path, size_t *n_tokens, size_t *n_bytes, lq_err *err);
/* Erase (llama-server's action=erase): the cache's entry `slot` (numbered as for save) is
 * dropped, its memory freed; later requests prefill its tokens again. n_tokens (may be NULL):
 * the tokens it held. No such slot -> LQ_ENOTFOUND. */
int lq_scheduler_cache_erase(lq_scheduler *s, int slot, size_t *n_tokens, lq_err *err);
/* Asks the request to stop: it finishes with LQ_FINISH_CANCELED before its next token is
 * delivered (also while queued or prefilling), and its session is freed. Any thread. */
void lq_sched_cancel(lq_sched_req *r);
/* Waits until the request has finished. timeout_ms < 0: no limit. Returns 1 when finished,
 * 0 on timeout. */
int lq_sched_wait(lq_sched_req *r, int timeout_ms);
/* After the request finished: its status, result and error (any pointer may be NULL). */
int lq_sched_result(lq_sched_req *r, lq_generate_result *res, lq_err *err);
/* Gives up the handle (cancelling the request if it still runs); see the top comment. */
void lq_sched_release(lq_sched_req *r);

/* Counters since create (for /metrics and tests). */
#define LQ_SCHED_HIST 17 /* batch sizes 1..16, the last bucket counts 17 and more */
typedef struct lq_scheduler_stats {
    int max_active;
    int active;                /* requests holding a session now */
    int queued;                /* waiting for a slot */
    int sessions;              /* sessions created (pooled) */
    uint64_t submitted, finished, canceled, failed;
    uint64_t steps;            /* batched decode steps run */
    uint64_t decode_tokens;    /* sum of batch sizes over those steps */
    double decode_ms;          /* wall time inside the decode steps (batch + sampling) */
    uint64_t prefill_tokens;   /* prompt positions run */
    double prefill_ms;         /* wall time inside prefill chunks */
    int max_batch;             /* largest batch one step has run */
    uint64_t batch_hist[LQ_SCHED_HIST]; /* [b-1]: steps that ran b streams */
    int cache_entries;         /* prompt cache: sessions held now */
    uint64_t cache_hits;       /* requests that took a cached prefix */
    uint64_t cache_misses;     /* requests that looked and found none */
    uint64_t cache_reused_tokens; /* prompt positions not prefilled thanks to it */
    uint64_t shared_hits;      /* requests that copied a running request's prompt prefix */
    uint64_t shared_tokens;    /* prompt positions copied so instead of prefilled */
    uint64_t warm_prefills;    /* lq_scheduler_warm requests that prefilled (the rest had
                                * nothing to do) */
    uint64_t warm_tokens;      /* positions they prefilled */
    uint64_t draft_steps;      /* passes that verified a speculative draft (a request running
                                * alone: lq_generate_params.draft) */
    uint64_t draft_tokens;     /* draft tokens verified */
    uint64_t draft_accepted;   /* of them: kept (tokens decoded on top of decode_tokens) */
} lq_scheduler_stats;

void lq_scheduler_get_stats(lq_scheduler *s, lq_scheduler_stats *out);

#ifdef __cplusplus
}
#endif
#endif
