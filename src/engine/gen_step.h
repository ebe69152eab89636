/* The per-token logic of generation, shared by lq_generate (one session, its own loop) and
 * lq_scheduler (many sessions, one batched decode step per token). Not a public header.
 *
 *   lq_gen_begin     validate the request, allocate everything the token loop needs
 *   (prefill the prompt into g->logits; lq_gen_set_limit)
 *   lq_gen_step      sample from g->logits -> EOS? -> detok -> stop strings -> callback;
 *                    LQ_GEN_NEXT: the caller decodes g->next_id into g->logits and steps again
 *   lq_gen_end       release held-back text (LENGTH/EOS)
 *   lq_gen_free
 *
 * Both callers run exactly these steps in this order, so the same request with the same
 * seed gives the same tokens and callbacks whichever of them drives it (as long as the
 * logits they feed are the same). */
#ifndef LQ_ENGINE_GEN_STEP_H
#define LQ_ENGINE_GEN_STEP_H

#include "engine/engine_internal.h"
#include "larql/generate.h"
#include "larql/tokenizer.h"

#define LQ_GEN_MAX_EOS 64
#define LQ_GEN_PIECE_CAP 512 /* detokenizer output per token; 64 suffices per the tokenizer API */

/* lq_gen_step's results; errors are the negative LQ_E* codes */
enum {
    LQ_GEN_NEXT = 1, /* a token was emitted and another follows: decode g->next_id */
    LQ_GEN_END = 2,  /* the stream is over (g->res->finish says why) */
};

typedef struct lq_gen_state {
    int32_t n_vocab;
    float temperature;       /* for the callback's logprob */
    int32_t eos[LQ_GEN_MAX_EOS];
    size_t n_eos;
    float *logits;           /* [n_vocab] next-token logits: the caller fills them */
    lq_sampler *smp;
    lq_stopper *stp;
    lq_detok *dt;            /* NULL when the model has no tokenizer */
    int max_tokens;          /* the request's max_tokens */
    int max_new;             /* after lq_gen_set_limit: max_tokens clamped to the context */
    int i;                   /* tokens emitted so far */
    int32_t next_id;         /* after LQ_GEN_NEXT: the token to decode */
    lq_generate_result *res; /* the caller's result (n_generated, finish, decode_ms) */
    lq_grammar *grammar;     /* the request's grammar (a copy) or NULL */
    lq_grammar_state *gs;
    const lq_grammar_vocab *gv; /* from the process cache */
    int strip_first;
    int grammar_end;         /* the stream ended because the grammar was complete */         /* the first token starts an SPM text (leading space dropped) */
    lq_logit_bias *bias;
    size_t n_bias;
    /* the bounded lm_head (generate.c "bounded head"): bounded = 0 when the model has no
     * copy, the request wants full logits, or an on_logits edit runs */
    int bounded;
    const lq_model *m;
    lq_sampler_params sp;    /* the request's sampling (what the certificate must cover) */
    lq_head_req head;        /* head.logits = logits */
    float *raw;              /* [n_vocab] the head's output before bias/mask/penalties */
    float *tv;               /* [n_vocab] scratch values */
    int32_t *ti;             /* [n_vocab] scratch ids (also the rows to rescore) */
    int32_t kb_ids[LQ_HEAD_MAX_K];
    float kb_vals[LQ_HEAD_MAX_K];
    struct lq_draft *draft;  /* speculative decoding (draft.h), NULL: plain */
    char piece[LQ_GEN_PIECE_CAP];
} lq_gen_state;

/* Validates (prompt non-empty and fitting n_ctx - pos0, max_tokens >= 0, sampler params, eos
 * ids) and allocates. m: the model; pos0: the session position the prompt starts at. On
 * error nothing stays allocated. res is zeroed, res->n_prompt set. */
int lq_gen_begin(lq_gen_state *g, lq_model *m, int pos0, int n_ctx, const int32_t *prompt,
                 size_t n_prompt, const lq_generate_params *p, lq_generate_result *res,
                 lq_err *err);
/* After the prefill: limit = context positions left (n_ctx - session position). */
void lq_gen_set_limit(lq_gen_state *g, int limit);
/* One token from g->logits (modified in place by penalties). Sampling time is added to
 * res->decode_ms. Returns LQ_GEN_NEXT, LQ_GEN_END, or an LQ_E* code (< 0, finish NONE). */
int lq_gen_step(lq_gen_state *g, lq_token_cb cb, void *user, lq_err *err);
/* End of a stream that finished by LENGTH or EOS: held-back text in one last callback (or
 * two, when the stopper's buffer is not contiguous). Nothing for other finishes. */
void lq_gen_end(lq_gen_state *g, lq_token_cb cb, void *user);
void lq_gen_free(lq_gen_state *g);
/* The bounded-logits request to put on the session that decodes for g (NULL: exact). */
lq_head_req *lq_gen_head(lq_gen_state *g);


#endif
