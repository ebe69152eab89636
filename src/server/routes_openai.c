/* OpenAI routes: /v1/completions and /v1/chat/completions (streaming over SSE and not),
 * /v1/embeddings. Request validation follows OpenAI's API (types, ranges); n > 1 choices,
 * streamed or not, tools (oai_tools.c), structured output (response_format json_object /
 * json_schema, llama-server's grammar / json_schema) and logit_bias constrain lq_generate;
 * sampling, stop strings, UTF-8-complete text and logprobs come from lq_generate.
 *
 * Generation goes through the server's lq_scheduler: every request in flight is decoded in
 * the same batched step, so concurrent streams share each weight read. The scheduler's
 * thread calls on_token/on_done; for a stream they append SSE events to the job's buffer
 * and libmicrohttpd's content reader (the connection's own thread) drains it. While
 * waiting, the reader polls the socket for a hang-up, so a client that goes away cancels its
 * request before the next token and its session goes back to the scheduler. A non-streaming
 * request waits in its connection thread, polling the socket the same way. Each stream ends
 * with exactly one "data: [DONE]". */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/json_obj.h"
#include "core/sb.h"
#include "core/utf8.h"
#include "larql/chat.h"
#include "larql/generate.h"
#include "larql/gguf.h"
#include "larql/grammar.h"
#include "larql/sampler.h"
#include "larql/tokenizer.h"
#include "server/internal.h"
#include "server/oai_tools.h"
#include "core/sha1.h"
#include "core/clock.h"

#define MAX_STOPS 16
#define MAX_LOGIT_BIAS 1024
#define MAX_TOP_LOGPROBS 20

typedef struct job {
    lq_server *s;
    struct MHD_Connection *conn;
    const route *rt;
    int chat, stream, include_usage, echo;
    int n, has_seed;         /* choices asked for (n); a seed was given (choice i uses seed + i) */
    int logprobs;            /* chat: bool; completions: number of alternatives, -1 = off */
    int top_logprobs;        /* alternatives per token (0..20) */
    int want_lp;             /* record logprobs for each token */
    lq_generate_params gp;
    char *stops[MAX_STOPS];
    size_t n_stop;
    lq_grammar *grammar;     /* response_format / grammar / json_schema (the scheduler
                              * takes a copy) */
    lq_logit_bias *bias;
    oai_tools tools;         /* tools / tool_choice (chat) */
    int tool_decided;        /* stream, tools "auto": the first text chose call or text */
    int tool_buf;            /* stream: the output is a call, held until the end */
    json_t *calls;           /* the reply's tool_calls, once the output parsed as a call */
    int32_t *ids;            /* prompt token ids */
    size_t n_ids;
    double last_out;         /* stream: when the reader last returned bytes (lq_now; 0 = not yet) */
    int32_t *pred;           /* OpenAI's "prediction" tokenised (gp.prediction), or NULL */
    int has_pred;
    char *prompt_text;       /* for echo */
    size_t prompt_len;
    char *rendered;          /* chat: the template's text, for the next turn's warm-up */
    unsigned tok_flags;      /* how the prompt text was tokenized */
    int text_prompt;         /* the prompt came as text (not token ids) */
    lq_scheduler *sched;     /* warm: the next turn's tokens are prefilled into the prompt
                              * cache when this one ends (oai_warm.c) */
    char *sent;              /* stream: the text as sent, for it */
    size_t sent_len, sent_cap;

    lq_sched_req *h;         /* the scheduler's handle (released in job_free) */
    const lq_tokenizer *tok;
    int32_t n_vocab;
    char id[48];
    long created;

    /* generated text and logprobs */
    char *text;
    size_t text_len, text_cap;
    json_t *lp_all;          /* non-stream: every token's entry (chat) */
    json_t *lp_pending;      /* stream: entries since the last chunk */
    json_t *c_tokens, *c_lps, *c_tops, *c_offs; /* completions logprobs arrays */
    lq_generate_result res;
    int gen_rc;
    lq_err err;

    /* stream plumbing */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *out;
    size_t out_len, out_off, out_cap;
    int finished;            /* stream: on_done appended the end (under mu) */
    int cancel;              /* client gone (set by the reader) */
    int oom;
    int overflow;            /* owner: more than --max-stream-buffer bytes were waiting (under mu) */

    /* a stream of n > 1 choices: every choice's events go through one buffer, its owner's
     * (choice 0), tagged with the choice's index; the owner ends the stream when the last
     * choice is done */
    int index;
    struct job *owner;       /* NULL: this job is its own stream */
    struct job **sibs;       /* owner: the n choices (sibs[0] == owner) */
    int n_sibs, n_open;      /* owner: choices, and those not done yet (under mu) */
    /* completions with a batch of prompts (not streamed): this job's prompt of the n_prompts */
    int prompt_index, n_prompts;
} job;

/* ---- ids ---- */

static void make_id(job *jb)
{
    static uint32_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint32_t c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(jb->id, sizeof jb->id, "%s%016" PRIx64 "%08" PRIx32, jb->chat ? "chatcmpl-" : "cmpl-", ns, c);
    jb->created = (long)ts.tv_sec;
}

static void job_free(job *jb)
{
    if (!jb)
        return;
    if (jb->h) {
        /* cancel (a no-op when finished) and wait: on_done runs, so the metrics see
         * every request, and nothing of this job is touched after the release */
        lq_sched_cancel(jb->h);
        lq_sched_wait(jb->h, -1);
        lq_sched_release(jb->h);
    }
    for (size_t i = 0; i < jb->n_stop; i++)
        free(jb->stops[i]);
    lq_grammar_free(jb->grammar);
    free(jb->bias);
    oai_tools_free(&jb->tools);
    json_decref(jb->calls);
    free(jb->ids);
    free(jb->pred);
    free(jb->prompt_text);
    free(jb->rendered);
    free(jb->sent);
    free(jb->text);
    free(jb->out);
    json_decref(jb->lp_all);
    json_decref(jb->lp_pending);
    json_decref(jb->c_tokens);
    json_decref(jb->c_lps);
    json_decref(jb->c_tops);
    json_decref(jb->c_offs);
    pthread_mutex_destroy(&jb->mu);
    pthread_cond_destroy(&jb->cv);
    free(jb);
}

/* ---- request parsing ---- */

/* Fields both routes share. Returns 0, or -1 with r filled. */
static int parse_common(lq_server *s, job *jb, json_t *j, reply *r)
{
    const route *rt = jb->rt;
    const char *model = NULL;
    long n = 1, mt = -1, seed = 0, lpn = 0;
    double temp = 1.0, top_p = 1.0, fp = 0, pp = 0;
    int has_seed, b;
    if (jget_str(rt, j, "model", &model, NULL, r) < 0)
        return -1;
    if (model && *model && strcmp(model, s->model_id)) {
        reply_oai_err(r, 404, "model", "model '%s' not found: this server serves '%s'", model, s->model_id);
        return -1;
    }
    if (jget_int(rt, j, "n", 1, 128, &n, r) < 0)
        return -1;
    jb->n = (int)n;
    if (jget_int(rt, j, "best_of", 1, 1, &lpn, r) < 0)
        return -1;
    if (jget_bool(rt, j, "stream", &jb->stream, r) < 0)
        return -1;
    /* llama-server's cache_prompt (default true): false keeps this request out of the prompt
     * cache both ways */
    int cache_prompt = 1;
    if (jget_bool(rt, j, "cache_prompt", &cache_prompt, r) < 0)
        return -1;
    jb->gp.no_prompt_cache = !cache_prompt;
    json_t *so = json_object_get(j, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            reply_oai_err(r, 400, "stream_options", "'stream_options' must be an object");
            return -1;
        }
        if (jget_bool(rt, so, "include_usage", &jb->include_usage, r) < 0)
            return -1;
    }
    /* max_completion_tokens (chat's newer name) wins over max_tokens; huge values are clamped
     * to the context left by lq_generate */
    if (jget_int(rt, j, "max_tokens", 0, 0x7fffffffL, &mt, r) < 0 ||
        (jb->chat && jget_int(rt, j, "max_completion_tokens", 0, 0x7fffffffL, &mt, r) < 0))
        return -1;
    jb->gp.max_tokens = mt >= 0 ? (int)mt : jb->chat ? 0x7fffffff : 16;
    if (jget_num(rt, j, "temperature", 0, 2, &temp, r) < 0 || jget_num(rt, j, "top_p", 0, 1, &top_p, r) < 0 ||
        jget_num(rt, j, "frequency_penalty", -2, 2, &fp, r) < 0 ||
        jget_num(rt, j, "presence_penalty", -2, 2, &pp, r) < 0)
        return -1;
    if ((has_seed = jget_int(rt, j, "seed", -0x7fffffffffffffffL - 1, 0x7fffffffffffffffL, &seed, r)) < 0)
        return -1;
    lq_sampler_params *sp = &jb->gp.sampling;
    sp->temperature = top_p == 0 ? 0.0f : (float)temp; /* top_p 0 keeps only the best token */
    sp->top_p = top_p > 0 ? (float)top_p : 1.0f;
    sp->top_k = 0;
    sp->min_p = 0;
    sp->repeat_penalty = 1.0f;
    sp->frequency_penalty = (float)fp;
    sp->presence_penalty = (float)pp;
    jb->has_seed = has_seed;
    if (has_seed) {
        sp->seed = (uint64_t)seed;
        sp->has_seed = 1;
    }
    lq_err err = {0};
    if (lq_sampler_params_check(sp, &err)) {
        reply_oai_err(r, 400, NULL, "%s", err.msg);
        return -1;
    }
    /* stop: a string or a list of strings; empty strings are ignored */
    json_t *st = json_object_get(j, "stop");
    if (st && !json_is_null(st)) {
        json_t *one[1] = {st};
        json_t **items = one;
        size_t k = 1;
        if (json_is_array(st)) {
            k = json_array_size(st);
            if (k > MAX_STOPS) {
                reply_oai_err(r, 400, "stop", "'stop' has %zu strings; at most %d", k, MAX_STOPS);
                return -1;
            }
            items = NULL;
        } else if (!json_is_string(st)) {
            reply_oai_err(r, 400, "stop", "'stop' must be a string or an array of strings");
            return -1;
        }
        for (size_t i = 0; i < k; i++) {
            json_t *v = items ? items[i] : json_array_get(st, i);
            if (!json_is_string(v)) {
                reply_oai_err(r, 400, "stop", "'stop'[%zu] must be a string", i);
                return -1;
            }
            if (json_string_length(v) == 0)
                continue;
            if (json_string_length(v) > 256) {
                reply_oai_err(r, 400, "stop", "'stop'[%zu] is longer than 256 bytes", i);
                return -1;
            }
            jb->stops[jb->n_stop++] = strdup(json_string_value(v));
        }
    }
    jb->gp.stop = (const char *const *)jb->stops;
    jb->gp.n_stop = jb->n_stop;
    (void)b;
    return 0;
}

/* A JSON schema given as an object (or a string holding one) -> grammar. */
static int schema_grammar(job *jb, json_t *schema, const char *field, reply *r)
{
    lq_err err = {0};
    char *txt = json_is_string(schema) ? strdup(json_string_value(schema))
                                       : json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!txt) {
        reply_oai_err(r, 500, NULL, "out of memory");
        return -1;
    }
    int rc = lq_grammar_from_json_schema(txt, strlen(txt), &jb->grammar, &err);
    free(txt);
    if (rc) {
        reply_oai_err(r, rc == LQ_ENOMEM ? 500 : 400, field, "%s", err.msg);
        return -1;
    }
    return 0;
}

/* Structured output: OpenAI's response_format (json_object, json_schema with strict) and
 * llama-server's 'grammar' (GBNF text) and 'json_schema'; at most one of them. A grammar
 * that no token of the vocabulary can start is refused here, not discovered mid-stream.
 * Also logit_bias ({"token id": bias in [-100, 100]}). Returns 0, or -1 with r filled. */
static int parse_constraints(job *jb, json_t *j, reply *r)
{
    json_t *rf = json_object_get(j, "response_format");
    json_t *gr = json_object_get(j, "grammar");
    json_t *js = json_object_get(j, "json_schema");
    json_t *schema = NULL;
    const char *gbnf = NULL, *field = NULL;
    int n_set = 0;
    if (rf && !json_is_null(rf)) {
        json_t *ty = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(ty)) {
            reply_oai_err(r, 400, "response_format", "'response_format' must be an object with a 'type'");
            return -1;
        }
        const char *t = json_string_value(ty);
        if (!strcmp(t, "json_object")) {
            json_t *sc = json_object_get(rf, "schema"); /* llama-server's extension */
            if (sc && !json_is_null(sc))
                schema = sc;
            else
                gbnf = lq_grammar_json_object_gbnf();
            field = "response_format";
            n_set++;
        } else if (!strcmp(t, "json_schema")) {
            json_t *o = json_object_get(rf, "json_schema");
            if (!json_is_object(o)) {
                reply_oai_err(r, 400, "response_format", "response_format 'json_schema' needs a "
                              "'json_schema' object ({\"name\", \"schema\", \"strict\"})");
                return -1;
            }
            json_t *strict = json_object_get(o, "strict"), *name = json_object_get(o, "name");
            if (strict && !json_is_null(strict) && !json_is_boolean(strict)) {
                reply_oai_err(r, 400, "response_format", "'json_schema.strict' must be a boolean");
                return -1;
            }
            if (name && !json_is_string(name)) {
                reply_oai_err(r, 400, "response_format", "'json_schema.name' must be a string");
                return -1;
            }
            /* strict or not, the output follows the schema exactly: the grammar has no
             * "best effort" mode; strict only matters for what a schema may use, and an
             * unsupported keyword is a 400 either way */
            schema = json_object_get(o, "schema");
            if (!schema || json_is_null(schema)) {
                reply_oai_err(r, 400, "response_format", "'json_schema.schema' is missing");
                return -1;
            }
            field = "response_format";
            n_set++;
        } else if (strcmp(t, "text")) {
            reply_oai_err(r, 400, "response_format", "response_format type '%.64s' is not one of "
                          "text, json_object, json_schema", t);
            return -1;
        }
    }
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr)) {
            reply_oai_err(r, 400, "grammar", "'grammar' must be a string of GBNF rules");
            return -1;
        }
        gbnf = json_string_value(gr);
        field = "grammar";
        n_set++;
    }
    if (js && !json_is_null(js)) {
        schema = js;
        field = "json_schema";
        n_set++;
    }
    if (n_set > 1) {
        reply_oai_err(r, 400, field, "give at most one of a JSON response_format, 'grammar' and "
                      "'json_schema'");
        return -1;
    }
    json_t *tl = json_object_get(j, "tools");
    if (!jb->chat && tl && !json_is_null(tl)) {
        reply_oai_err(r, 400, "tools", "'tools' belong to /v1/chat/completions");
        return -1;
    }
    if (jb->chat && oai_tools_parse(j, &jb->tools, r))
        return -1;
    if (jb->tools.mode != TOOLS_NONE) {
        if (n_set) {
            reply_oai_err(r, 400, "tools", "'tools' together with %s is not supported", field);
            return -1;
        }
        gbnf = jb->tools.gbnf;
        field = "tools";
    }
    lq_err err = {0};
    if (schema && schema_grammar(jb, schema, field, r))
        return -1;
    if (!schema && gbnf) {
        int rc = lq_grammar_parse(gbnf, strlen(gbnf), &jb->grammar, &err);
        if (rc) {
            reply_oai_err(r, rc == LQ_ENOMEM ? 500 : 400, field, "%s", err.msg);
            return -1;
        }
    }
    if (jb->grammar) {
        /* can any token start the output? (the vocabulary trie is cached per tokenizer) */
        const lq_grammar_vocab *v = NULL;
        lq_grammar_state *gs = NULL;
        uint8_t *allowed = NULL;
        int rc = lq_grammar_vocab_acquire(jb->tok, &v, &err);
        if (!rc)
            rc = lq_grammar_state_create(jb->grammar, &gs, &err);
        if (!rc && !(allowed = malloc((size_t)lq_grammar_vocab_size(v) + 1)))
            rc = lq_err_set(&err, LQ_ENOMEM, "out of memory");
        if (!rc) {
            rc = lq_grammar_mask(gs, v, 0, allowed, &err);
            if (rc == 0 && !lq_grammar_state_can_end(gs))
                rc = lq_err_set(&err, LQ_EINVAL, "grammar: no token of the model's vocabulary "
                                "can start an output of this grammar");
            else if (rc > 0)
                rc = 0;
        }
        free(allowed);
        lq_grammar_state_free(gs);
        lq_grammar_vocab_release(v);
        if (rc) {
            reply_oai_err(r, rc == LQ_ENOMEM ? 500 : 400, field, "%s", err.msg);
            return -1;
        }
        jb->gp.grammar = jb->grammar;
    }
    json_t *lb = json_object_get(j, "logit_bias");
    if (lb && !json_is_null(lb)) {
        if (!json_is_object(lb) || json_object_size(lb) > MAX_LOGIT_BIAS) {
            reply_oai_err(r, 400, "logit_bias", "'logit_bias' must be an object of at most %d "
                          "\"token id\": bias entries", MAX_LOGIT_BIAS);
            return -1;
        }
        jb->bias = calloc(json_object_size(lb) + 1, sizeof *jb->bias);
        if (!jb->bias) {
            reply_oai_err(r, 500, NULL, "out of memory");
            return -1;
        }
        const char *key;
        json_t *val;
        size_t n = 0;
        json_object_foreach(lb, key, val) {
            char *end = NULL;
            long id = strtol(key, &end, 10);
            if (!*key || *end || id < 0 || id >= jb->n_vocab) {
                reply_oai_err(r, 400, "logit_bias", "logit_bias key '%.32s' is not a token id in "
                              "0..%d", key, (int)jb->n_vocab - 1);
                return -1;
            }
            if (!json_is_number(val) || !(json_number_value(val) >= -100) ||
                !(json_number_value(val) <= 100)) {
                reply_oai_err(r, 400, "logit_bias", "logit_bias['%.32s'] must be a number in "
                              "[-100, 100]", key);
                return -1;
            }
            jb->bias[n].id = (int32_t)id;
            jb->bias[n].bias = (float)json_number_value(val);
            n++;
        }
        jb->gp.logit_bias = jb->bias;
        jb->gp.n_logit_bias = n;
    }
    return 0;
}

/* Message content: a string or an array of {type:"text", text} parts. NULL with r filled. */
static char *message_content(json_t *c, size_t i, reply *r)
{
    if (json_is_string(c))
        return strdup(json_string_value(c));
    if (!json_is_array(c)) {
        reply_oai_err(r, 400, "messages", "messages[%zu].content must be a string or an array of text parts", i);
        return NULL;
    }
    size_t total = 1;
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *p = json_array_get(c, k), *ty = json_object_get(p, "type"), *tx = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
            !json_is_string(tx)) {
            reply_oai_err(r, 400, "messages",
                          "messages[%zu].content[%zu]: only {\"type\":\"text\",\"text\":...} parts are supported", i, k);
            return NULL;
        }
        total += json_string_length(tx);
    }
    char *out = malloc(total), *o = out;
    if (!out)
        return NULL;
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *tx = json_object_get(json_array_get(c, k), "text");
        memcpy(o, json_string_value(tx), json_string_length(tx));
        o += json_string_length(tx);
    }
    *o = 0;
    return out;
}

/* Renders messages with the model's chat template and encodes them. */
static int parse_messages(const char *chat_template, lq_model *m, job *jb, json_t *j, reply *r)
{
    json_t *msgs = json_object_get(j, "messages");
    if (!msgs || json_is_null(msgs)) {
        reply_oai_err(r, 400, "messages", "missing field 'messages'");
        return -1;
    }
    if (!json_is_array(msgs)) {
        reply_oai_err(r, 400, "messages", "'messages' must be an array");
        return -1;
    }
    size_t n = json_array_size(msgs);
    if (n == 0) {
        reply_oai_err(r, 400, "messages", "'messages' is empty");
        return -1;
    }
    if (n > 4096) {
        reply_oai_err(r, 400, "messages", "'messages' has %zu entries; at most 4096", n);
        return -1;
    }
    lq_chat_msg *cm = calloc(n, sizeof *cm);
    char **contents = calloc(n, sizeof *contents);
    int rc = -1;
    char *text = NULL;
    if (!cm || !contents) {
        reply_oai_err(r, 500, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *mj = json_array_get(msgs, i);
        if (!json_is_object(mj)) {
            reply_oai_err(r, 400, "messages", "messages[%zu] must be an object", i);
            goto out;
        }
        json_t *role = json_object_get(mj, "role"), *c = json_object_get(mj, "content");
        if (!json_is_string(role)) {
            reply_oai_err(r, 400, "messages", "messages[%zu].role must be a string", i);
            goto out;
        }
        const char *ro = json_string_value(role);
        if (!strcmp(ro, "developer"))
            ro = "system"; /* OpenAI's newer name for the system role */
        json_t *tcs = json_object_get(mj, "tool_calls");
        if (!strcmp(ro, "tool") || !strcmp(ro, "function") ||
            (!strcmp(ro, "assistant") && tcs && !json_is_null(tcs))) {
            /* function calling history: plain text the chat template can hold */
            if (!(contents[i] = oai_tool_history(mj, i, &ro, r)))
                goto out;
            cm[i].role = ro;
            cm[i].content = contents[i];
            continue;
        }
        if (strcmp(ro, "system") && strcmp(ro, "user") && strcmp(ro, "assistant")) {
            reply_oai_err(r, 400, "messages", "messages[%zu].role '%.64s' is not one of system, user, assistant",
                          i, ro);
            goto out;
        }
        if (!c || json_is_null(c)) {
            reply_oai_err(r, 400, "messages", "messages[%zu].content is missing", i);
            goto out;
        }
        if (!(contents[i] = message_content(c, i, r))) {
            if (!r->body)
                reply_oai_err(r, 500, NULL, "out of memory");
            goto out;
        }
        cm[i].role = ro;
        cm[i].content = contents[i];
    }
    lq_err err = {0};
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    lq_chat_msg *use = cm;
    size_t n_use = n;
    char *sys = NULL;
    if (jb->tools.system) {
        /* the functions are described in the system message (the first one, or a new one) */
        use = calloc(n + 1, sizeof *use);
        int merge = !strcmp(cm[0].role, "system");
        size_t sl = strlen(jb->tools.system) + (merge ? strlen(cm[0].content) + 2 : 0) + 1;
        sys = malloc(sl);
        if (!use || !sys) {
            free(use);
            free(sys);
            reply_oai_err(r, 500, NULL, "out of memory");
            goto out;
        }
        if (merge)
            snprintf(sys, sl, "%s\n\n%s", cm[0].content, jb->tools.system);
        else
            snprintf(sys, sl, "%s", jb->tools.system);
        use[0] = (lq_chat_msg){"system", sys};
        memcpy(use + 1, cm + merge, (n - (size_t)merge) * sizeof *cm);
        n_use = n + 1 - (size_t)merge;
    }
    /* the model file's own template (or serve --chat-template), parsed per request: a few
     * microseconds, and nothing to share between threads */
    lq_chat_format *fmt = NULL;
    int fe = lq_chat_format_open(m, chat_template, &fmt, &err);
    if (!fe)
        fe = lq_chat_format_render(fmt, use, n_use, 1, NULL, &text, &err);
    lq_chat_format_free(fmt);
    if (use != cm)
        free(use);
    free(sys);
    if (fe) {
        reply_oai_err(r, fe == LQ_ENOMEM ? 500 : 400, "messages", "%s", err.msg);
        goto out;
    }
    unsigned fl = (lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0) | LQ_TOK_PARSE_SPECIAL;
    int e = lq_tokenizer_encode(tok, text, strlen(text), fl, &jb->ids, &jb->n_ids, &err);
    if (e) {
        reply_oai_err(r, status_from_lq(e), "messages", "%s", err.msg);
        goto out;
    }
    jb->rendered = text;
    jb->tok_flags = fl;
    jb->text_prompt = 1;
    text = NULL;
    rc = 0;
out:
    if (contents)
        for (size_t i = 0; i < n; i++)
            free(contents[i]);
    free(contents);
    free(cm);
    free(text);
    return rc;
}

/* OpenAI's Predicted Outputs: "prediction": {"type": "content", "content": string or [{"type":
 * "text", "text": string}, ...]}, the output expected (an edit of a known text). Its tokens
 * become drafts the speculative decoder verifies (lq_generate_params.prediction): the output
 * is the same as without it, only faster where it matches. 0, or -1 with r filled. */
static int parse_prediction(job *jb, json_t *j, reply *r)
{
    json_t *p = json_object_get(j, "prediction");
    if (!p || json_is_null(p))
        return 0;
    json_t *c = json_is_object(p) ? json_object_get(p, "content") : NULL;
    const char *ty = json_is_object(p) ? json_string_value(json_object_get(p, "type")) : NULL;
    if (!ty || strcmp(ty, "content") || !(json_is_string(c) || json_is_array(c))) {
        reply_oai_err(r, 400, "prediction",
                      "'prediction' must be {\"type\": \"content\", \"content\": a string or an array of "
                      "text parts}");
        return -1;
    }
    lq_sb text = {0};
    if (json_is_string(c))
        lq_sb_put(&text, json_string_value(c), json_string_length(c));
    for (size_t i = 0; json_is_array(c) && i < json_array_size(c); i++) {
        json_t *part = json_array_get(c, i);
        const char *pt = json_string_value(json_object_get(part, "type"));
        json_t *tx = json_object_get(part, "text");
        if (!pt || strcmp(pt, "text") || !json_is_string(tx)) {
            lq_sb_free(&text);
            reply_oai_err(r, 400, "prediction", "prediction.content[%zu] must be {\"type\": \"text\", \"text\": "
                          "a string}", i);
            return -1;
        }
        lq_sb_put(&text, json_string_value(tx), json_string_length(tx));
    }
    if (text.oom) {
        lq_sb_free(&text);
        reply_oai_err(r, 500, NULL, "out of memory");
        return -1;
    }
    jb->has_pred = 1;
    size_t n = 0;
    lq_err err = {0};
    int e = text.n ? lq_tokenizer_encode(jb->tok, text.s, text.n, 0, &jb->pred, &n, &err) : 0;
    lq_sb_free(&text);
    if (e) {
        reply_oai_err(r, status_from_lq(e), "prediction", "%s", err.msg);
        return -1;
    }
    if (n > LQ_PREDICTION_MAX) {
        reply_oai_err(r, 400, "prediction", "prediction is %zu tokens; at most %d", n, LQ_PREDICTION_MAX);
        return -1;
    }
    jb->gp.prediction = jb->pred;
    jb->gp.n_prediction = n;
    return 0;
}

/* prompt: a string, [string] (one), [int...] (token ids) or [[int...]] (one). */
static int parse_prompt(lq_model *m, job *jb, json_t *j, reply *r)
{
    json_t *p = json_object_get(j, "prompt");
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    if (!p || json_is_null(p)) {
        reply_oai_err(r, 400, "prompt", "missing field 'prompt'");
        return -1;
    }
    if (json_is_array(p) && json_array_size(p) >= 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))) {
        /* a batch of prompts: each its own choices (OpenAI's index = prompt * n + choice) */
        size_t k = json_array_size(p);
        if (k > 1 && jb->stream) {
            reply_oai_err(r, 400, "prompt", "batched prompts (%zu) cannot be streamed: send one prompt per "
                          "streamed request", k);
            return -1;
        }
        if (k > 128 || k * (size_t)jb->n > 128) {
            reply_oai_err(r, 400, "prompt", "batched prompts (%zu) x n (%d) is over 128 choices", k, jb->n);
            return -1;
        }
        jb->n_prompts = (int)k;
        p = json_array_get(p, (size_t)jb->prompt_index < k ? (size_t)jb->prompt_index : 0);
        if (!json_is_string(p) && !json_is_array(p)) {
            reply_oai_err(r, 400, "prompt", "prompt[%d] must be a string or an array of token ids", jb->prompt_index);
            return -1;
        }
    }
    if (json_is_string(p)) {
        if (json_string_length(p) == 0) {
            reply_oai_err(r, 400, "prompt", "prompt is empty");
            return -1;
        }
        jb->prompt_text = strdup(json_string_value(p));
        jb->prompt_len = json_string_length(p);
        jb->tok_flags = lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0;
        jb->text_prompt = 1;
        lq_err err = {0};
        int e = lq_tokenizer_encode(tok, jb->prompt_text, jb->prompt_len,
                                    lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0, &jb->ids, &jb->n_ids, &err);
        if (e) {
            reply_oai_err(r, status_from_lq(e), "prompt", "%s", err.msg);
            return -1;
        }
        if (jb->n_ids == 0) {
            reply_oai_err(r, 400, "prompt", "prompt tokenises to nothing");
            return -1;
        }
        return 0;
    }
    if (json_is_array(p)) {
        size_t k = json_array_size(p);
        if (k == 0) {
            reply_oai_err(r, 400, "prompt", "prompt is empty");
            return -1;
        }
        if (!json_is_integer(json_array_get(p, 0))) {
            reply_oai_err(r, 400, "prompt", "'prompt' must be a string, an array of strings or an array of token ids");
            return -1;
        }
        jb->ids = malloc(k * sizeof *jb->ids);
        if (!jb->ids) {
            reply_oai_err(r, 500, NULL, "out of memory");
            return -1;
        }
        int32_t nv = lq_tokenizer_n_vocab(tok);
        for (size_t i = 0; i < k; i++) {
            json_t *v = json_array_get(p, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv) {
                reply_oai_err(r, 400, "prompt", "prompt[%zu] must be a token id in 0..%d", i, (int)nv - 1);
                return -1;
            }
            jb->ids[i] = (int32_t)json_integer_value(v);
        }
        jb->n_ids = k;
        char *t = NULL;
        size_t tl = 0;
        if (!lq_tokenizer_decode(tok, jb->ids, k, 0, &t, &tl, NULL)) {
            jb->prompt_text = t;
            jb->prompt_len = tl;
        }
        return 0;
    }
    reply_oai_err(r, 400, "prompt", "'prompt' must be a string, an array of strings or an array of token ids");
    return -1;
}

/* ---- token callback ---- */

/* Appends t[0..len) to a growing NUL-terminated buffer. */
static int buf_append(char **b, size_t *blen, size_t *cap, const char *t, size_t len)
{
    if (*blen + len + 1 > *cap) {
        size_t nc = (*blen + len + 1) * 2;
        char *nt = realloc(*b, nc);
        if (!nt)
            return -1;
        *b = nt;
        *cap = nc;
    }
    memcpy(*b + *blen, t, len);
    *blen += len;
    (*b)[*blen] = 0;
    return 0;
}

static int append_text(job *jb, const char *t, size_t len)
{
    return buf_append(&jb->text, &jb->text_len, &jb->text_cap, t, len);
}

static json_t *bytes_json(const char *t, size_t len)
{
    json_t *a = json_array();
    for (size_t i = 0; i < len; i++)
        json_array_append_new(a, json_integer((unsigned char)t[i]));
    return a;
}

/* logprobs of id and the top alternatives under the model's distribution at this step
 * (softmax of the logits the token was drawn from, before temperature) */
static void record_logprobs(job *jb, int32_t id, const float *logits)
{
    double lse = lq_logsumexp(logits, jb->n_vocab);
    size_t len;
    char *t = token_text(jb->tok, id, &len);
    double lp = (double)logits[id] - lse;
    int k = jb->top_logprobs;
    int32_t ids[MAX_TOP_LOGPROBS];
    float vals[MAX_TOP_LOGPROBS];
    k = k > 0 ? lq_top_k(logits, jb->n_vocab, k, ids, vals) : 0;
    if (jb->chat) {
        json_t *tops = json_array();
        for (int i = 0; i < k; i++) {
            size_t l2;
            char *t2 = token_text(jb->tok, ids[i], &l2);
            json_array_append_new(tops, json_pack("{s:o,s:f,s:o}", "token", lq_jstr(t2, l2), "logprob",
                                                  (double)vals[i] - lse, "bytes", bytes_json(t2, l2)));
            free(t2);
        }
        json_t *e = json_pack("{s:o,s:f,s:o,s:o}", "token", lq_jstr(t, len), "logprob", lp, "bytes",
                              bytes_json(t, len), "top_logprobs", tops);
        json_array_append_new(jb->stream ? jb->lp_pending : jb->lp_all, e);
    } else {
        json_t *tops = lq_json_object();
        for (int i = 0; i < k; i++) {
            size_t l2;
            char *t2 = token_text(jb->tok, ids[i], &l2);
            json_t *key = lq_jstr(t2, l2);
            json_object_set_new(tops, json_string_value(key), json_real((double)vals[i] - lse));
            json_decref(key);
            free(t2);
        }
        json_array_append_new(jb->c_tokens, lq_jstr(t, len));
        json_array_append_new(jb->c_lps, json_real(lp));
        json_array_append_new(jb->c_tops, tops);
        json_array_append_new(jb->c_offs, json_integer((json_int_t)(jb->text_len + (jb->echo ? jb->prompt_len : 0))));
    }
    free(t);
}

static json_t *take_completion_logprobs(job *jb)
{
    json_t *o = json_pack("{s:O,s:O,s:O,s:O}", "tokens", jb->c_tokens, "token_logprobs", jb->c_lps,
                          "top_logprobs", jb->c_tops, "text_offset", jb->c_offs);
    if (jb->stream) {
        json_array_clear(jb->c_tokens);
        json_array_clear(jb->c_lps);
        json_array_clear(jb->c_tops);
        json_array_clear(jb->c_offs);
    }
    return o;
}

/* ---- SSE ---- */

static void sse_raw(job *jb, const char *data, size_t len)
{
    job *self = jb;
    if (jb->owner)
        jb = jb->owner;
    pthread_mutex_lock(&jb->mu);
    /* a client that reads slower than the stream is written: past --max-stream-buffer bytes
     * waiting in this buffer the generation is stopped (the events already buffered, and its
     * end, still go out), so one slow reader cannot grow the server without bound */
    if (!jb->overflow && jb->out_len - jb->out_off + len > jb->s->o.max_stream_buffer && !self->finished) {
        jb->overflow = 1;
        __atomic_add_fetch(&jb->s->m.streams_overflow, 1, __ATOMIC_RELAXED);
    }
    if (jb->out_len + len > jb->out_cap) {
        size_t nc = (jb->out_len + len) * 2;
        char *no = realloc(jb->out, nc);
        if (!no) {
            jb->oom = 1;
            pthread_mutex_unlock(&jb->mu);
            return;
        }
        jb->out = no;
        jb->out_cap = nc;
    }
    memcpy(jb->out + jb->out_len, data, len);
    jb->out_len += len;
    pthread_cond_signal(&jb->cv);
    pthread_mutex_unlock(&jb->mu);
}

static void sse_event(job *jb, json_t *j)
{
    size_t len;
    char *t = lq_dump(j, &len);
    json_decref(j);
    if (!t)
        return;
    /* "data: " + JSON + blank line; compact JSON never contains a newline */
    char *ev = malloc(len + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, t, len);
        memcpy(ev + 6 + len, "\n\n", 2);
        sse_raw(jb, ev, len + 8);
    }
    free(ev);
    free(t);
}

static json_t *chunk_base(job *jb, lq_server *s)
{
    json_t *c = json_pack("{s:s,s:s,s:I,s:s}", "id", jb->id, "object",
                          jb->chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)jb->created, "model", s->model_id);
    return c;
}

/* One chunk: chat delta (content/role) or completion text; finish: NULL or the reason. */
static void sse_chunk(job *jb, const char *text, size_t len, int role, const char *finish)
{
    lq_server *s = jb->s;
    json_t *c = chunk_base(jb, s), *ch;
    json_t *lp = json_null();
    if (jb->want_lp && jb->chat && json_array_size(jb->lp_pending)) {
        /* the chunk takes the entries; the next ones start a fresh array (clearing a shared
         * array would empty the chunk before it is sent) */
        lp = json_pack("{s:o}", "content", jb->lp_pending);
        jb->lp_pending = json_array();
    } else if (jb->want_lp && !jb->chat && json_array_size(jb->c_tokens)) {
        json_decref(lp);
        lp = take_completion_logprobs(jb);
    }
    if (jb->chat) {
        json_t *delta = lq_json_object();
        if (role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (text)
            json_object_set_new(delta, "content", lq_jstr(text, len));
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", jb->index, "delta", delta, "logprobs", lp, "finish_reason",
                       finish ? json_string(finish) : json_null());
    } else {
        ch = json_pack("{s:o,s:i,s:o,s:o}", "text", lq_jstr(text ? text : "", text ? len : 0), "index", jb->index,
                       "logprobs", lp, "finish_reason", finish ? json_string(finish) : json_null());
    }
    json_object_set_new(c, "choices", json_pack("[o]", ch));
    if (jb->include_usage)
        json_object_set_new(c, "usage", json_null());
    sse_event(jb, c);
}

/* A stream's text as the client got it (each chunk's invalid UTF-8 replaced as lq_jstr
 * does), for the next turn's warm-up: in sent, not text (whose length is the streamed
 * logprobs' text_offset base, which must not depend on the cache). */
static void keep_sent(job *jb, const char *t, size_t len)
{
    if (!jb->sched)
        return;
    if (lq_utf8_valid(t, len)) {
        buf_append(&jb->sent, &jb->sent_len, &jb->sent_cap, t, len);
        return;
    }
    size_t n = 0;
    char *l = lq_utf8_lossy(t, len, &n);
    if (l)
        buf_append(&jb->sent, &jb->sent_len, &jb->sent_cap, l, n);
    free(l);
}

static int stream_overflowed(job *jb)
{
    job *o = jb->owner ? jb->owner : jb;
    pthread_mutex_lock(&o->mu);
    int v = o->overflow;
    pthread_mutex_unlock(&o->mu);
    return v;
}

static int on_token(void *user, int32_t id, const char *text, size_t len, float logprob, const float *logits)
{
    (void)logprob;
    job *jb = user;
    lq_server *s = jb->s;
    if (id < 0) {
        /* end of stream: text that was held back (stop-string prefix, partial UTF-8) */
        if (jb->stream && len && !jb->tool_buf) {
            sse_chunk(jb, text, len, 0, NULL);
            keep_sent(jb, text, len);
        } else if (len) {
            append_text(jb, text, len);
        }
        return 0;
    }
    if (__atomic_load_n(&jb->cancel, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->cancel_all, __ATOMIC_ACQUIRE))
        return 1;
    if (jb->stream && stream_overflowed(jb))
        return 1;
    if (jb->want_lp)
        record_logprobs(jb, id, logits);
    if (jb->stream && jb->tools.mode != TOOLS_NONE && !jb->tool_decided && len) {
        /* a call is held back whole (its name and arguments go out as tool_calls at the
         * end); under "auto" the first character tells a call from text */
        jb->tool_decided = 1;
        jb->tool_buf = jb->tools.mode == TOOLS_REQUIRED || text[0] == '{';
    }
    if (jb->stream && !jb->tool_buf) {
        if (len) {
            sse_chunk(jb, text, len, 0, NULL);
            keep_sent(jb, text, len);
        }
        return 0;
    }
    if (len && append_text(jb, text, len))
        return 1;
    return 0;
}

static const char *finish_reason(const job *jb)
{
    if (jb->calls)
        return "tool_calls";
    return jb->res.finish == LQ_FINISH_LENGTH ? "length" : "stop";
}

/* A tool-call delta chunk: calls (its reference is taken) under delta.tool_calls. */
static void sse_tool_chunk(job *jb, json_t *calls)
{
    json_t *c = chunk_base(jb, jb->s);
    json_t *ch = json_pack("{s:i,s:{s:o},s:n,s:n}", "index", jb->index, "delta", "tool_calls", calls,
                           "logprobs", "finish_reason");
    json_object_set_new(c, "choices", json_pack("[o]", ch));
    if (jb->include_usage)
        json_object_set_new(c, "usage", json_null());
    sse_event(jb, c);
}

/* The end of a stream whose output was held back as calls: each call (index i) as two
 * deltas (the SDK's accumulator takes id, type and name from the first, appends arguments),
 * or the text after all when it is not a complete call (cut by max_tokens). */
static void sse_tool_end(job *jb)
{
    jb->calls = oai_tool_calls(jb->text ? jb->text : "", jb->text_len);
    if (!jb->calls) {
        if (jb->text_len)
            sse_chunk(jb, jb->text, jb->text_len, 0, NULL);
        return;
    }
    for (size_t i = 0; i < json_array_size(jb->calls); i++) {
        json_t *c0 = json_array_get(jb->calls, i), *f = json_object_get(c0, "function");
        sse_tool_chunk(jb, json_pack("[{s:i,s:O,s:s,s:{s:O,s:s}}]", "index", (int)i, "id",
                                     json_object_get(c0, "id"), "type", "function", "function",
                                     "name", json_object_get(f, "name"), "arguments", ""));
        sse_tool_chunk(jb, json_pack("[{s:i,s:{s:O}}]", "index", (int)i, "function", "arguments",
                                     json_object_get(f, "arguments")));
    }
}

/* OpenAI's completion_tokens_details for a request with a prediction: draft tokens verified
 * and kept (accepted) or discarded (rejected), over every choice */
static json_t *prediction_details(job *const *jobs, int n)
{
    int acc = 0, drafted = 0;
    for (int i = 0; i < n; i++) {
        acc += jobs[i]->res.draft_accepted;
        drafted += jobs[i]->res.drafted;
    }
    return json_pack("{s:i,s:i,s:i,s:i}", "reasoning_tokens", 0, "audio_tokens", 0, "accepted_prediction_tokens",
                     acc, "rejected_prediction_tokens", drafted - acc);
}

/* usage of a stream: the prompt once, the completion tokens of every choice */
static json_t *usage_json(const job *jb)
{
    int gen = 0;
    for (int i = 0; i < (jb->sibs ? jb->n_sibs : 1); i++)
        gen += (jb->sibs ? jb->sibs[i] : jb)->res.n_generated;
    json_t *u = json_pack("{s:i,s:i,s:i}", "prompt_tokens", (int)jb->n_ids, "completion_tokens", gen,
                          "total_tokens", (int)jb->n_ids + gen);
    if (u && jb->has_pred) { /* Predicted Outputs: drafted tokens kept and discarded */
        job *self = (job *)jb;
        json_object_set_new(u, "completion_tokens_details",
                            jb->sibs ? prediction_details(jb->sibs, jb->n_sibs) : prediction_details(&self, 1));
    }
    return u;
}

/* The scheduler's end-of-request callback (scheduler thread). */
static void on_done(void *user, int rc, const lq_generate_result *res, const lq_err *err)
{
    job *jb = user;
    jb->gen_rc = rc;
    jb->res = *res;
    if (rc && err)
        jb->err = *err;
    metrics_gen(jb->s, res->n_prompt, res->n_generated, res->prefill_ms, res->decode_ms);
    /* before the reply's end goes out: the next turn, sent at once, finds the warm-up running */
    if (jb->sched && !rc && res->finish != LQ_FINISH_CANCELED) {
        const char *pt = jb->chat ? jb->rendered : jb->prompt_text;
        srv_warm_next_turn(jb->sched, jb->tok, jb->tok_flags, pt, pt ? strlen(pt) : 0,
                           jb->stream ? jb->sent : jb->text, jb->stream ? jb->sent_len : jb->text_len);
    }
    if (!jb->stream)
        return; /* the connection thread waits with lq_sched_wait */
    if (res->finish == LQ_FINISH_CANCELED && __atomic_load_n(&jb->cancel, __ATOMIC_ACQUIRE))
        __atomic_add_fetch(&jb->s->m.streams_canceled, 1, __ATOMIC_RELAXED);
    if (rc) {
        json_t *e = json_pack("{s:{s:s,s:s}}", "error", "message", jb->err.msg, "type", "server_error");
        sse_event(jb, e);
    } else if (res->finish == LQ_FINISH_CANCELED && stream_overflowed(jb)) {
        sse_event(jb, json_pack("{s:{s:s,s:s}}", "error", "message",
                                "the stream was stopped: the client read too slowly (more than --max-stream-buffer "
                                "bytes were waiting)",
                                "type", "server_error"));
    } else {
        if (jb->tool_buf)
            sse_tool_end(jb);
        sse_chunk(jb, NULL, 0, 0, finish_reason(jb));
    }
    /* the stream ends with its last choice: usage over all of them, then [DONE] */
    job *o = jb->owner ? jb->owner : jb;
    pthread_mutex_lock(&o->mu);
    int last = --o->n_open <= 0;
    pthread_mutex_unlock(&o->mu);
    if (!last)
        return;
    if (o->include_usage) {
        json_t *u = chunk_base(o, o->s);
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", usage_json(o));
        sse_event(o, u);
    }
    sse_raw(o, "data: [DONE]\n\n", 14);
    pthread_mutex_lock(&o->mu);
    o->finished = 1;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

/* Cancels every choice of a stream (a client that went away). */
static void cancel_stream(job *jb)
{
    for (int i = 0; i < (jb->sibs ? jb->n_sibs : 1); i++) {
        job *c = jb->sibs ? jb->sibs[i] : jb;
        __atomic_store_n(&c->cancel, 1, __ATOMIC_RELEASE);
        if (c->h)
            lq_sched_cancel(c->h); /* also while it waits or prefills */
    }
}

/* An SSE comment line, which every client ignores (the event stream format: a line that starts
 * with ':'), sent when a stream has had nothing to send for half the idle timeout: a long
 * prompt's prefill, or a step behind a long queue. Without it libmicrohttpd sees no socket
 * activity for --request-timeout and closes the connection before the first token, and the
 * client reads an empty answer. */
static const char KEEPALIVE[] = ": keep-alive\n\n";

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    job *jb = cls;
    double quiet = jb->s->o.request_timeout_s / 2.0;
    pthread_mutex_lock(&jb->mu);
    if (jb->last_out == 0)
        jb->last_out = lq_now();
    for (;;) {
        if (jb->out_len == jb->out_off && !jb->finished && lq_now() - jb->last_out >= quiet &&
            max >= sizeof KEEPALIVE - 1) {
            jb->last_out = lq_now();
            pthread_mutex_unlock(&jb->mu);
            memcpy(buf, KEEPALIVE, sizeof KEEPALIVE - 1);
            __atomic_add_fetch(&jb->s->m.stream_keepalives, 1, __ATOMIC_RELAXED);
            return (ssize_t)(sizeof KEEPALIVE - 1);
        }
        if (jb->out_len > jb->out_off) {
            jb->last_out = lq_now();
            size_t n = jb->out_len - jb->out_off;
            if (n > max)
                n = max;
            memcpy(buf, jb->out + jb->out_off, n);
            jb->out_off += n;
            if (jb->out_off == jb->out_len)
                jb->out_off = jb->out_len = 0;
            pthread_mutex_unlock(&jb->mu);
            return (ssize_t)n;
        }
        if (jb->finished) {
            pthread_mutex_unlock(&jb->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        /* between tokens: wake every 20 ms to notice a client that hung up */
        struct timespec ts = lq_time_in(CLOCK_REALTIME, 20);
        pthread_cond_timedwait(&jb->cv, &jb->mu, &ts);
        if (jb->out_len == jb->out_off && !jb->finished && srv_conn_gone(jb->conn)) {
            pthread_mutex_unlock(&jb->mu);
            cancel_stream(jb);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls)
{
    job *jb = cls;
    lq_server *s = jb->s;
    cancel_stream(jb);
    /* the other choices first: job_free waits for each one's end, after which nothing
     * writes to the owner's buffer any more */
    for (int i = 1; jb->sibs && i < jb->n_sibs; i++)
        job_free(jb->sibs[i]);
    free(jb->sibs);
    jb->sibs = NULL;
    job_free(jb); /* cancels the request if it still runs, waits for its end */
    __atomic_sub_fetch(&s->m.active_streams, 1, __ATOMIC_RELAXED);
}

/* ---- the two generation routes ---- */

/* One choice of a finished job (index i); NULL with r filled on an error. */
static json_t *choice_json(job *jb, int i, reply *r)
{
    if (jb->gen_rc) {
        reply_oai_err(r, status_from_lq(jb->gen_rc), NULL, "%s", jb->err.msg);
        return NULL;
    }
    json_t *choice;
    if (jb->chat && jb->tools.mode != TOOLS_NONE)
        jb->calls = oai_tool_calls(jb->text ? jb->text : "", jb->text_len);
    if (jb->chat && jb->calls) {
        json_t *lp = jb->want_lp ? json_pack("{s:O}", "content", jb->lp_all) : json_null();
        choice = json_pack("{s:i,s:{s:s,s:n,s:O},s:o,s:s}", "index", i, "message", "role", "assistant",
                           "content", "tool_calls", jb->calls, "logprobs", lp, "finish_reason",
                           finish_reason(jb));
    } else if (jb->chat) {
        json_t *lp = jb->want_lp ? json_pack("{s:O}", "content", jb->lp_all) : json_null();
        choice = json_pack("{s:i,s:{s:s,s:o},s:o,s:s}", "index", i, "message", "role", "assistant", "content",
                           lq_jstr(jb->text ? jb->text : "", jb->text_len), "logprobs", lp, "finish_reason",
                           finish_reason(jb));
    } else {
        json_t *txt;
        if (jb->echo && jb->prompt_text) {
            char *all = malloc(jb->prompt_len + jb->text_len + 1);
            if (!all) {
                reply_oai_err(r, 500, NULL, "out of memory");
                return NULL;
            }
            memcpy(all, jb->prompt_text, jb->prompt_len);
            if (jb->text_len)
                memcpy(all + jb->prompt_len, jb->text, jb->text_len);
            txt = lq_jstr(all, jb->prompt_len + jb->text_len);
            free(all);
        } else {
            txt = lq_jstr(jb->text ? jb->text : "", jb->text_len);
        }
        choice = json_pack("{s:o,s:i,s:o,s:s}", "text", txt, "index", i, "logprobs",
                           jb->want_lp ? take_completion_logprobs(jb) : json_null(), "finish_reason",
                           finish_reason(jb));
    }
    if (!choice)
        reply_oai_err(r, 500, NULL, "out of memory");
    return choice;
}

/* The reply of n finished jobs (the choices in order; usage: the prompt once, every choice's
 * completion tokens). */
static void non_stream_reply(job *const *jbs, int n, reply *r)
{
    lq_server *s = jbs[0]->s;
    json_t *choices = json_array();
    long completion = 0;
    for (int i = 0; i < n; i++) {
        json_t *c = choice_json(jbs[i], i, r);
        if (!c) {
            json_decref(choices);
            return;
        }
        json_array_append_new(choices, c);
        completion += jbs[i]->res.n_generated;
    }
    json_t *usage = usage_json(jbs[0]);
    if (jbs[0]->has_pred)
        json_object_set_new(usage, "completion_tokens_details", prediction_details(jbs, n));
    long prompt = 0;
    for (int i = 0; i < n; i += jbs[0]->n) /* each prompt of a batch once */
        prompt += (long)jbs[i]->n_ids;
    json_object_set_new(usage, "prompt_tokens", json_integer(prompt));
    json_object_set_new(usage, "completion_tokens", json_integer(completion));
    json_object_set_new(usage, "total_tokens", json_integer((json_int_t)prompt + completion));
    reply_json(r, 200, json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", jbs[0]->id, "object",
                                 jbs[0]->chat ? "chat.completion" : "text_completion", "created",
                                 (json_int_t)jbs[0]->created, "model", s->model_id, "choices", choices, "usage",
                                 usage));
}

/* A job from the request body j: every field parsed and checked, the prompt encoded. NULL
 * with r filled on an error. */
static job *job_prepare(lq_server *s, req *q, reply *r, int chat, json_t *j, int prompt_index)
{
    lq_model *m;
    job *jb = calloc(1, sizeof *jb);
    if (!jb) {
        reply_oai_err(r, 500, NULL, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&jb->mu, NULL);
    pthread_cond_init(&jb->cv, NULL);
    jb->s = s;
    jb->conn = q->conn;
    jb->rt = q->rt;
    jb->chat = chat;
    jb->prompt_index = prompt_index;
    jb->n_prompts = 1;
    jb->logprobs = chat ? 0 : -1;
    lq_generate_defaults(&jb->gp);
    make_id(jb);
    if (parse_common(s, jb, j, r))
        goto fail;
    if (chat) {
        long tl = 0;
        if (jget_bool(q->rt, j, "logprobs", &jb->logprobs, r) < 0 ||
            jget_int(q->rt, j, "top_logprobs", 0, MAX_TOP_LOGPROBS, &tl, r) < 0)
            goto fail;
        if (tl && !jb->logprobs) {
            reply_oai_err(r, 400, "top_logprobs", "'top_logprobs' requires 'logprobs': true");
            goto fail;
        }
        jb->top_logprobs = (int)tl;
    } else {
        long lp = -1;
        if (jget_int(q->rt, j, "logprobs", 0, 5, &lp, r) < 0 || jget_bool(q->rt, j, "echo", &jb->echo, r) < 0)
            goto fail;
        jb->logprobs = (int)lp;
        jb->top_logprobs = lp > 0 ? (int)lp : 0;
        if (jb->echo && jb->stream) {
            reply_oai_err(r, 400, "echo", "'echo' is not supported with 'stream': true");
            goto fail;
        }
    }
    if (need_model(s, q->rt, r, &m, 1))
        goto fail;
    jb->tok = lq_model_tokenizer(m);
    jb->n_vocab = lq_model_get_info(m)->n_vocab;
    if (parse_constraints(jb, j, r))
        goto fail;
    if (chat ? parse_messages(s->o.chat_template, m, jb, j, r) : parse_prompt(m, jb, j, r))
        goto fail;
    if (parse_prediction(jb, j, r))
        goto fail;
    jb->want_lp = chat ? jb->logprobs > 0 : jb->logprobs >= 0;
    /* logprobs are over the whole vocabulary: the exact head every step, not the bounded one */
    jb->gp.full_logits = jb->want_lp;
    if (jb->want_lp) {
        jb->lp_all = json_array();
        jb->lp_pending = json_array();
        jb->c_tokens = json_array();
        jb->c_lps = json_array();
        jb->c_tops = json_array();
        jb->c_offs = json_array();
    }
    int n_ctx = lq_scheduler_n_ctx(srv_sched(s));
    if (jb->n_ids >= (size_t)n_ctx) {
        reply_oai_err(r, 400, chat ? "messages" : "prompt",
                      "prompt is %zu tokens; the context holds %d (prompt + completion)", jb->n_ids, n_ctx);
        goto fail;
    }
    return jb;
fail:
    job_free(jb);
    return NULL;
}

/* Hands the job to the scheduler with the request's knowledge state (its X-Session-Id's, or
 * the global one) editing the forward pass. 0, or r filled. */
static int job_submit(lq_server *s, req *q, reply *r, job *jb)
{
    lq_err err = {0};
    lq_resid_hook *hook = NULL;
    int rc0 = srv_edit_hook(s, MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Session-Id"),
                            &hook, &jb->gp.cache_key, &err);
    if (rc0) {
        reply_oai_err(r, status_from_lq(rc0), NULL, "%s", err.msg);
        return -1;
    }
    jb->gp.hook = hook;
    /* the next turn's warm-up: one answer, plain text, the KV of no edits */
    if (!hook && s->prompt_cache_cap > 0 && !jb->gp.no_prompt_cache && jb->n == 1 && jb->tools.mode == TOOLS_NONE && jb->text_prompt &&
        (jb->chat ? jb->rendered : jb->prompt_text))
        jb->sched = srv_sched(s);
    int rc = lq_scheduler_submit(srv_sched(s), jb->ids, jb->n_ids, &jb->gp, on_token, on_done, jb, &jb->h, &err);
    jb->gp.hook = NULL; /* the scheduler owns it now, or it is freed here */
    if (rc) {
        lq_edit_hook_free(hook);
        reply_oai_err(r, status_from_lq(rc), NULL, "%s", err.msg);
        if (rc == LQ_EBUSY)
            r->retry_after = 1;
        return -1;
    }
    return 0;
}

/* n > 1 (not streamed): n jobs of the same request, choice i sampling with seed + i when a seed
 * was given (else each its own), submitted together so the scheduler decodes them in one
 * batch; the reply waits for all of them. */
static void many_choices(lq_server *s, req *q, reply *r, int chat, json_t *j, job *first)
{
    int n = first->n * first->n_prompts; /* job i: prompt i / first->n, choice i % first->n */
    job **jbs = calloc((size_t)n, sizeof *jbs);
    if (!jbs) {
        reply_oai_err(r, 500, NULL, "out of memory");
        job_free(first);
        return;
    }
    jbs[0] = first;
    int ok = 1;
    for (int i = 1; ok && i < n; i++) {
        if (!(jbs[i] = job_prepare(s, q, r, chat, j, i / first->n)))
            ok = 0;
        else if (jbs[i]->has_seed)
            jbs[i]->gp.sampling.seed += (uint64_t)(i % first->n);
    }
    for (int i = 0; ok && i < n; i++)
        ok = job_submit(s, q, r, jbs[i]) == 0;
    for (int i = 0; i < n; i++) {
        if (!jbs[i] || !jbs[i]->h)
            continue;
        if (!ok)
            lq_sched_cancel(jbs[i]->h);
        while (!lq_sched_wait(jbs[i]->h, 20)) {
            if (srv_conn_gone(q->conn) || __atomic_load_n(&s->cancel_all, __ATOMIC_ACQUIRE))
                for (int k = 0; k < n; k++)
                    if (jbs[k] && jbs[k]->h)
                        lq_sched_cancel(jbs[k]->h);
        }
    }
    if (ok)
        non_stream_reply(jbs, n, r);
    for (int i = 0; i < n; i++)
        if (jbs[i])
            job_free(jbs[i]);
    free(jbs);
}

/* n > 1 streamed: the choices' jobs share the first one's buffer (its owner), each chunk
 * tagged with its index; submitted together, decoded in the same batches. 0, or r filled and
 * every job freed. */
static int stream_choices(lq_server *s, req *q, reply *r, int chat, json_t *j, job *first)
{
    int n = first->n;
    first->sibs = calloc((size_t)n, sizeof *first->sibs);
    if (!first->sibs) {
        reply_oai_err(r, 500, NULL, "out of memory");
        return -1;
    }
    first->sibs[0] = first;
    first->n_sibs = 1;
    int ok = 1;
    for (int i = 1; ok && i < n; i++) {
        job *c = job_prepare(s, q, r, chat, j, 0);
        if (!c) {
            ok = 0;
            break;
        }
        if (c->has_seed)
            c->gp.sampling.seed += (uint64_t)i;
        c->index = i;
        c->owner = first;
        memcpy(c->id, first->id, sizeof c->id); /* one completion, n choices */
        c->created = first->created;
        first->sibs[first->n_sibs++] = c;
    }
    first->n_open = n;
    for (int i = 0; ok && chat && i < n; i++)
        sse_chunk(first->sibs[i], "", 0, 1, NULL); /* each choice opens with the assistant role */
    for (int i = 0; ok && i < n; i++)
        ok = job_submit(s, q, r, first->sibs[i]) == 0;
    return ok ? 0 : -1;
}

/* job_free of a stream of choices that never started (every sibling, then the owner) */
static void free_choices(job *first)
{
    cancel_stream(first);
    for (int i = 1; first->sibs && i < first->n_sibs; i++)
        job_free(first->sibs[i]);
    free(first->sibs);
    first->sibs = NULL;
    job_free(first);
}

static void generate_route(lq_server *s, req *q, reply *r, int chat)
{
    json_t *j = req_json_body(q, r);
    if (!j)
        return;
    job *jb = job_prepare(s, q, r, chat, j, 0);
    if (jb && (jb->n > 1 || jb->n_prompts > 1) && !jb->stream) {
        many_choices(s, q, r, chat, j, jb);
        json_decref(j);
        return;
    }
    if (jb && jb->n > 1 && stream_choices(s, q, r, chat, j, jb)) {
        json_decref(j);
        free_choices(jb);
        return;
    }
    json_decref(j);
    if (!jb)
        return;
    if (jb->n > 1) {
        /* submitted: the stream below reads the owner's buffer */
    } else {
        if (jb->stream && chat)
            sse_chunk(jb, "", 0, 1, NULL); /* OpenAI opens with the assistant role */
        if (job_submit(s, q, r, jb))
            goto fail;
    }
    if (!jb->stream) {
        /* wait in the connection's thread, watching for a client that hangs up and for
         * the server's shutdown */
        while (!lq_sched_wait(jb->h, 20)) {
            if (srv_conn_gone(q->conn) || __atomic_load_n(&s->cancel_all, __ATOMIC_ACQUIRE))
                lq_sched_cancel(jb->h);
        }
        non_stream_reply(&jb, 1, r);
        job_free(jb);
        return;
    }
    /* tokens may already be in the buffer: the reader sends them from the start */
    r->stream = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, jb, stream_free);
    if (!r->stream) {
        reply_oai_err(r, 500, NULL, "cannot create the stream response");
        free_choices(jb); /* cancels the requests */
        return;
    }
    __atomic_add_fetch(&s->m.active_streams, 1, __ATOMIC_RELAXED);
    r->status = 200;
    r->ctype = "text/event-stream";
    MHD_add_response_header(r->stream, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r->stream, "X-Accel-Buffering", "no");
    return;
fail:
    job_free(jb);
}

void route_completions(lq_server *s, req *q, reply *r)
{
    generate_route(s, q, r, 0);
}

void route_chat(lq_server *s, req *q, reply *r)
{
    generate_route(s, q, r, 1);
}

/* ---- embeddings: mean of the static token embeddings (LARQL's definition) ---- */

/* acc [h] = mean of the model's embedding rows of ids (row: [h] scratch) */
static int embed_mean(const lq_model *m, const int32_t *ids, size_t n, size_t h, float *acc, float *row,
                      lq_err *err)
{
    memset(acc, 0, h * sizeof *acc);
    for (size_t i = 0; i < n; i++) {
        int rc = lq_model_embed(m, &ids[i], 1, row, err);
        if (rc)
            return rc;
        for (size_t k = 0; k < h; k++)
            acc[k] += row[k];
    }
    for (size_t k = 0; k < h; k++)
        acc[k] /= (float)n;
    return 0;
}

static json_t *b64(const float *v, size_t n)
{
    size_t len = n * 4; /* little-endian f32 bytes */
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return json_string("");
    size_t o = lq_base64_encode(v, len, out);
    json_t *j = json_stringn(out, o);
    free(out);
    return j;
}

void route_embeddings(lq_server *s, req *q, reply *r)
{
    json_t *j = req_json_body(q, r);
    if (!j)
        return;
    lq_model *m;
    float *acc = NULL, *row = NULL;
    json_t *data = NULL;
    const char *model = NULL, *fmt = "float";
    if (jget_str(q->rt, j, "model", &model, NULL, r) < 0 || jget_str(q->rt, j, "encoding_format", &fmt, NULL, r) < 0)
        goto out;
    if (model && *model && strcmp(model, s->model_id)) {
        reply_oai_err(r, 404, "model", "model '%s' not found: this server serves '%s'", model, s->model_id);
        goto out;
    }
    if (strcmp(fmt, "float") && strcmp(fmt, "base64")) {
        reply_oai_err(r, 400, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        goto out;
    }
    json_t *in = json_object_get(j, "input");
    if (!in || json_is_null(in)) {
        reply_oai_err(r, 400, "input", "missing field 'input'");
        goto out;
    }
    if (need_model(s, q->rt, r, &m, 0))
        goto out;
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    const lq_model_info *mi = lq_model_get_info(m);
    int32_t nv = mi->n_vocab;
    size_t h = (size_t)mi->n_embd;
    acc = malloc(h * sizeof *acc); /* [n_embd] running mean */
    row = malloc(h * sizeof *row); /* [n_embd] one embedding row */
    if (!acc || !row) {
        reply_oai_err(r, 500, NULL, "out of memory");
        goto out;
    }
    /* normalise the four input shapes to a list of items (string or [int]) */
    json_t *items;
    if (json_is_string(in) || (json_is_array(in) && json_array_size(in) && json_is_integer(json_array_get(in, 0))))
        items = json_pack("[O]", in);
    else if (json_is_array(in))
        items = json_incref(in);
    else {
        reply_oai_err(r, 400, "input", "'input' must be a string, an array of strings or token ids");
        goto out;
    }
    if (json_array_size(items) == 0 || json_array_size(items) > 2048) {
        json_decref(items);
        reply_oai_err(r, 400, "input", "'input' must hold 1..2048 items");
        goto out;
    }
    data = json_array();
    long total = 0;
    for (size_t i = 0; i < json_array_size(items); i++) {
        json_t *it = json_array_get(items, i);
        int32_t *ids = NULL;
        size_t n = 0;
        lq_err err = {0};
        if (json_is_string(it)) {
            int rc = lq_tokenizer_encode(tok, json_string_value(it), json_string_length(it), 0, &ids, &n, &err);
            if (rc) {
                reply_oai_err(r, status_from_lq(rc), "input", "input[%zu]: %s", i, err.msg);
                json_decref(items);
                goto out;
            }
        } else if (json_is_array(it) && json_array_size(it) <= 65536) {
            n = json_array_size(it);
            ids = malloc((n ? n : 1) * sizeof *ids);
            for (size_t k = 0; ids && k < n; k++) {
                json_t *v = json_array_get(it, k);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv) {
                    reply_oai_err(r, 400, "input", "input[%zu][%zu] must be a token id in 0..%d", i, k, (int)nv - 1);
                    free(ids);
                    json_decref(items);
                    goto out;
                }
                ids[k] = (int32_t)json_integer_value(v);
            }
        } else {
            reply_oai_err(r, 400, "input", "input[%zu] must be a string or an array of token ids", i);
            json_decref(items);
            goto out;
        }
        if (n == 0) {
            free(ids);
            reply_oai_err(r, 400, "input", "input[%zu] is empty", i);
            json_decref(items);
            goto out;
        }
        int rc = ids ? embed_mean(m, ids, n, h, acc, row, &err) : LQ_ENOMEM;
        free(ids);
        if (rc) {
            reply_oai_err(r, 500, NULL, "%s", err.msg);
            json_decref(items);
            goto out;
        }
        total += (long)n;
        json_t *e;
        if (!strcmp(fmt, "base64")) {
            e = b64(acc, h);
        } else {
            e = json_array();
            for (size_t k = 0; k < h; k++)
                json_array_append_new(e, json_real(acc[k]));
        }
        json_array_append_new(data, json_pack("{s:s,s:o,s:i}", "object", "embedding", "embedding", e, "index", (int)i));
    }
    json_decref(items);
    reply_json(r, 200, json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", s->model_id,
                                 "usage", "prompt_tokens", (json_int_t)total, "total_tokens", (json_int_t)total));
    data = NULL;
out:
    json_decref(data);
    free(acc);
    free(row);
    json_decref(j);
}
