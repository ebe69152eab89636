/* Counters (atomics, no lock on the request path) and their three views: GET /metrics
 * (Prometheus text), GET /v1/stats (LARQL's fields plus the counters), GET /v1/runtime
 * (what the engine is doing now). Token rates are measured over real traffic: every
 * generation and forward pass adds its token count and wall time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_obj.h"
#include "core/sb.h"
#include "server/internal.h"
#include "core/round.h"

/* Requests are counted by row of the route table (s->routes), labelled by its path; the last
 * slot is every request that matched no row ("other"). */
static size_t n_route_slots(const lq_server *s) { return s->n_routes + 1; }

static const char *route_label(const lq_server *s, size_t i)
{
    return i < s->n_routes ? s->routes[i].path : "other";
}

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

void metrics_count(lq_server *s, const route *rt, int status)
{
    size_t route_id = rt && rt >= s->routes && rt < s->routes + s->n_routes ? (size_t)(rt - s->routes) : s->n_routes;
    if (status < 0 || status >= MAX_STATUS)
        status = 0;
    __atomic_add_fetch(&s->m.requests[route_id][status], 1, __ATOMIC_RELAXED);
    if (status >= 400)
        __atomic_add_fetch(&s->m.errors, 1, __ATOMIC_RELAXED);
}

void metrics_gen(lq_server *s, int n_prompt, int n_generated, double prefill_ms, double decode_ms)
{
    metrics *m = &s->m;
    if (n_prompt > 0) {
        __atomic_add_fetch(&m->prompt_tokens, (uint64_t)n_prompt, __ATOMIC_RELAXED);
        __atomic_add_fetch(&m->prefill_tokens, (uint64_t)n_prompt, __ATOMIC_RELAXED);
        __atomic_add_fetch(&m->prefill_us, (uint64_t)(prefill_ms * 1000.0), __ATOMIC_RELAXED);
    }
    if (n_generated > 0) {
        __atomic_add_fetch(&m->generated_tokens, (uint64_t)n_generated, __ATOMIC_RELAXED);
        /* the first generated token comes from the prefill logits; decode_ms timed the rest */
        if (n_generated > 1) {
            __atomic_add_fetch(&m->decode_tokens, (uint64_t)(n_generated - 1), __ATOMIC_RELAXED);
            __atomic_add_fetch(&m->decode_us, (uint64_t)(decode_ms * 1000.0), __ATOMIC_RELAXED);
        }
    }
}

static double rate(uint64_t tokens, uint64_t us)
{
    return us ? (double)tokens * 1e6 / (double)us : 0.0;
}

/* The scheduler's counters (zeros before the model is loaded). */
static void sched_stats(lq_server *s, lq_scheduler_stats *st)
{
    lq_scheduler_get_stats(srv_sched(s), st);
}

/* Sessions holding a KV cache now: generation requests in the scheduler plus the
 * single-pass routes' pool. */
static int64_t sessions_in_use(lq_server *s, const lq_scheduler_stats *st)
{
    return LD(s->m.active_sessions) + st->active;
}

void route_metrics(lq_server *s, req *q, reply *r)
{
    (void)q;
    metrics *m = &s->m;
    lq_sb b = {0};
    lq_sb_printf(&b, "# HELP larql_requests_total HTTP requests by route and status.\n"
                  "# TYPE larql_requests_total counter\n");
    /* one series per path: rows that share a path (one per method) are summed */
    for (size_t i = 0; i < n_route_slots(s); i++) {
        size_t first = 0;
        while (strcmp(route_label(s, first), route_label(s, i)))
            first++;
        if (first != i)
            continue;
        for (int st = 0; st < MAX_STATUS; st++) {
            uint64_t v = 0;
            for (size_t j = i; j < n_route_slots(s); j++)
                if (!strcmp(route_label(s, j), route_label(s, i)))
                    v += LD(m->requests[j][st]);
            if (v)
                lq_sb_printf(&b, "larql_requests_total{route=\"%s\",status=\"%d\"} %llu\n", route_label(s, i), st,
                             (unsigned long long)v);
        }
    }
    lq_scheduler_stats st;
    sched_stats(s, &st);
    uint64_t dc_hits, dc_misses;
    srv_dcache_stats(s, &dc_hits, &dc_misses);
    lq_head_stats hs = {0};
    lq_model *hm = __atomic_load_n(&s->model, __ATOMIC_ACQUIRE);
    if (hm)
        lq_model_head_stats(hm, &hs);
    struct { const char *name, *type, *help; double v; } rows[] = {
        {"larql_lm_head_bounded_tokens_total", "counter",
         "Logit rows produced with the bounded lm_head (the int8 copy plus exact rescoring).", (double)hs.tokens},
        {"larql_lm_head_rows_exact_total", "counter",
         "lm_head rows computed exactly in f16 for those tokens (divide by the tokens: rows per token).",
         (double)hs.rows_exact},
        {"larql_lm_head_full_total", "counter", "Tokens that fell back to the whole vocabulary.",
         (double)(hs.full + hs.gen_full)},
        {"larql_describe_cache_hits_total", "counter", "describe answers served from the --cache-ttl cache.",
         (double)dc_hits},
        {"larql_describe_cache_misses_total", "counter", "describe lookups the --cache-ttl cache could not answer.",
         (double)dc_misses},
        {"larql_prompt_tokens_total", "counter", "Prompt tokens processed.", (double)LD(m->prompt_tokens)},
        {"larql_generated_tokens_total", "counter", "Tokens generated.", (double)LD(m->generated_tokens)},
        {"larql_prefill_seconds_total", "counter", "Wall time spent in prefill.", LD(m->prefill_us) / 1e6},
        {"larql_decode_seconds_total", "counter", "Wall time spent in decode steps.", LD(m->decode_us) / 1e6},
        {"larql_prefill_tokens_per_second", "gauge", "Prefill tokens/s over all traffic so far.",
         rate(LD(m->prefill_tokens), LD(m->prefill_us))},
        {"larql_decode_tokens_per_second", "gauge", "Decode tokens/s per stream over all traffic so far.",
         rate(LD(m->decode_tokens), LD(m->decode_us))},
        {"larql_decode_aggregate_tokens_per_second", "gauge",
         "Decode tokens/s of all streams together: tokens over the wall time of the batched steps.",
         st.decode_ms > 0 ? (double)(st.decode_tokens + st.draft_accepted) * 1e3 / st.decode_ms : 0.0},
        {"larql_decode_steps_total", "counter", "Batched decode steps (one weight pass for every running stream).",
         (double)st.steps},
        {"larql_decode_batch_max", "gauge", "Largest number of streams one decode step has run.", (double)st.max_batch},
        {"larql_prompt_cache_hits_total", "counter",
         "Generations that reused a cached prompt prefix (--cache-ram).", (double)st.cache_hits},
        {"larql_prompt_cache_misses_total", "counter", "Generations that found no cached prefix to reuse.",
         (double)st.cache_misses},
        {"larql_prompt_cache_reused_tokens_total", "counter",
         "Prompt positions not prefilled because their KV was cached.", (double)st.cache_reused_tokens},
        {"larql_prompt_cache_warm_tokens_total", "counter",
         "Positions prefilled into the cache in idle time: a finished answer as its next turn will tokenize it.",
         (double)st.warm_tokens},
        {"larql_prompt_cache_entries", "gauge", "Finished generations' KV caches held for reuse.",
         (double)st.cache_entries},
        {"larql_draft_steps_total", "counter",
         "Decode passes that verified a speculative (prompt-lookup) draft.", (double)st.draft_steps},
        {"larql_draft_tokens_total", "counter", "Draft tokens verified.", (double)st.draft_tokens},
        {"larql_draft_accepted_total", "counter",
         "Draft tokens kept (the sampler picked them): each one a decode pass saved.", (double)st.draft_accepted},
        {"larql_prompt_shared_tokens_total", "counter",
         "Prompt positions copied from a running request's KV (n > 1 choices, a shared system prompt).",
         (double)st.shared_tokens},
        {"larql_active_requests", "gauge", "Requests in flight (counted against --max-concurrent).",
         (double)LD(m->active_requests)},
        {"larql_active_streams", "gauge", "Streaming generations in flight.", (double)LD(m->active_streams)},
        {"larql_active_sessions", "gauge", "Sessions (KV caches) in use.", (double)sessions_in_use(s, &st)},
        {"larql_queue_depth", "gauge",
         "Generation requests waiting for a decode slot (over --max-concurrent is 503, not a queue).",
         (double)st.queued},
        {"larql_rejected_busy_total", "counter", "Requests refused with 503 at --max-concurrent.",
         (double)LD(m->rejected_busy)},
        {"larql_rejected_rate_total", "counter", "Requests refused with 429 at --rate-limit.",
         (double)LD(m->rejected_rate)},
        {"larql_errors_total", "counter", "Responses with status >= 400.", (double)LD(m->errors)},
        {"larql_header_timeouts_total", "counter",
         "Connections cut because a request's headers were not complete within --header-timeout.",
         (double)srv_deadline_cut(s->front ? s->front->deadline : s->deadline)},
        {"larql_streams_canceled_total", "counter", "Streams stopped because the client went away.",
         (double)LD(m->streams_canceled)},
        {"larql_streams_overflow_total", "counter",
         "SSE streams stopped because the client read too slowly (--max-stream-buffer).",
         (double)LD(m->streams_overflow)},
        {"larql_stream_keepalives_total", "counter",
         "SSE comment lines sent to keep a stream's connection alive while it had nothing to send.",
         (double)LD(m->stream_keepalives)},
        {"larql_uptime_seconds", "gauge", "Seconds since start.", lq_now() - s->t_boot},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        lq_sb_printf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %.6g\n", rows[i].name, rows[i].help, rows[i].name,
                  rows[i].type, rows[i].name, rows[i].v);
    /* batch sizes as a Prometheus histogram (cumulative buckets) */
    lq_sb_printf(&b, "# HELP larql_decode_batch_size Streams per batched decode step.\n"
                  "# TYPE larql_decode_batch_size histogram\n");
    static const int les[] = {1, 2, 4, 8, 16};
    uint64_t cum = 0, sum = 0;
    int bi = 0;
    for (size_t k = 0; k < sizeof les / sizeof les[0]; k++) {
        for (; bi < les[k] && bi < LQ_SCHED_HIST - 1; bi++)
            cum += st.batch_hist[bi];
        lq_sb_printf(&b, "larql_decode_batch_size_bucket{le=\"%d\"} %llu\n", les[k], (unsigned long long)cum);
    }
    for (int k = 0; k < LQ_SCHED_HIST - 1; k++)
        sum += st.batch_hist[k] * (uint64_t)(k + 1);
    /* the last bucket holds 17 and more: the exact sum comes from decode_tokens */
    sum = st.decode_tokens > sum ? st.decode_tokens : sum;
    lq_sb_printf(&b, "larql_decode_batch_size_bucket{le=\"+Inf\"} %llu\nlarql_decode_batch_size_sum %llu\n"
                  "larql_decode_batch_size_count %llu\n",
              (unsigned long long)st.steps, (unsigned long long)sum, (unsigned long long)st.steps);
    size_t len = b.n;
    if (lq_sb_finish(&b, &r->body, NULL)) {
        reply_larql_err(r, 500, "out of memory");
        return;
    }
    r->status = 200;
    r->len = len;
    r->ctype = "text/plain; version=0.0.4; charset=utf-8";
}

static json_t *counters_json(lq_server *s)
{
    metrics *m = &s->m;
    lq_scheduler_stats sst;
    sched_stats(s, &sst);
    json_t *by = lq_json_object();
    for (size_t i = 0; i < n_route_slots(s); i++) {
        /* rows that share a path (one per method) share its entry */
        json_t *st = json_object_get(by, route_label(s, i));
        for (int c = 0; c < MAX_STATUS; c++) {
            uint64_t v = LD(m->requests[i][c]);
            if (!v)
                continue;
            if (!st) {
                st = lq_json_object();
                json_object_set_new(by, route_label(s, i), st);
            }
            char k[16];
            snprintf(k, sizeof k, "%d", c);
            json_object_set_new(st, k, json_integer((json_int_t)v + json_integer_value(json_object_get(st, k))));
        }
    }
    return json_pack("{s:I,s:o,s:I,s:I,s:f,s:f,s:I,s:I,s:I,s:i,s:I,s:I,s:I}",
                     "requests_served", (json_int_t)LD(m->requests_total), "requests_by_route", by,
                     "prompt_tokens", (json_int_t)LD(m->prompt_tokens),
                     "generated_tokens", (json_int_t)LD(m->generated_tokens),
                     "prefill_tokens_per_second", lq_round_dp(rate(LD(m->prefill_tokens), LD(m->prefill_us)), 1),
                     "decode_tokens_per_second", lq_round_dp(rate(LD(m->decode_tokens), LD(m->decode_us)), 1),
                     "active_requests", (json_int_t)LD(m->active_requests),
                     "active_streams", (json_int_t)LD(m->active_streams),
                     "active_sessions", (json_int_t)sessions_in_use(s, &sst), "queue_depth", sst.queued,
                     "rejected_busy", (json_int_t)LD(m->rejected_busy), "errors", (json_int_t)LD(m->errors),
                     "streams_canceled", (json_int_t)LD(m->streams_canceled));
}

void route_stats(lq_server *s, req *q, reply *r)
{
    (void)q;
    lq_model *m = __atomic_load_n(&s->model, __ATOMIC_ACQUIRE);
    json_t *j = NULL;
    if (s->vx) {
        /* the vindex's own stats body (LARQL's fields), then the live counters */
        char *vs = NULL;
        if (!lq_vindex_stats_json(s->vx, &vs, NULL))
            j = json_loads(vs, 0, NULL);
        free(vs);
        if (j) {
            json_t *ld = json_object_get(j, "loaded");
            if (json_is_object(ld))
                json_object_set_new(ld, "inference", json_boolean(m != NULL && !s->o.no_infer));
            if (s->o.ffn_only)
                json_object_set_new(j, "mode", json_string("ffn-service"));
            json_object_update_new(j, counters_json(s));
            reply_json(r, 200, j);
            return;
        }
    }
    j = lq_json_object();
    json_object_set_new(j, "model", json_string(s->model_id));
    if (m) {
        const lq_model_info *mi = lq_model_get_info(m);
        json_object_set_new(j, "family", json_string(mi->arch_name));
        json_object_set_new(j, "mode", json_string(s->o.ffn_only ? "ffn-service" : "full"));
        json_object_set_new(j, "layers", json_integer(mi->n_layer));
        /* a GGUF has no gate index: zero browse features until served from a vindex */
        json_object_set_new(j, "features", json_integer(0));
        json_object_set_new(j, "features_per_layer", json_integer(0));
        json_object_set_new(j, "hidden_size", json_integer(mi->n_embd));
        json_object_set_new(j, "vocab_size", json_integer(mi->n_vocab));
        json_object_set_new(j, "extract_level", json_string("inference"));
        json_object_set_new(j, "dtype", json_string(lq_ggml_type_name(mi->proj_type)));
    } else {
        json_object_set_new(j, "mode", json_string(s->o.ffn_only ? "ffn-service" : "full"));
    }
    json_object_set_new(j, "layer_bands", json_null());
    json_object_set_new(j, "loaded", json_pack("{s:b,s:b,s:b,s:b}", "browse", 0, "inference",
                                               m != NULL && !s->o.no_infer, "ffn_service", m != NULL,
                                               "embed_service", 1));
    json_object_update_new(j, counters_json(s));
    reply_json(r, 200, j);
}

void route_runtime(lq_server *s, req *q, reply *r)
{
    (void)q;
    lq_model *m = __atomic_load_n(&s->model, __ATOMIC_ACQUIRE);
    const lq_model_info *mi = m ? lq_model_get_info(m) : NULL;
    metrics *mt = &s->m;
    lq_scheduler_stats st;
    sched_stats(s, &st);
    int64_t sessions = sessions_in_use(s, &st);
    json_t *j = json_pack(
        "{s:s,s:b,s:s,s:i,s:f,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:b,s:f}", "model", s->model_id, "loaded",
        m != NULL, "kernels", mi && mi->kernels ? mi->kernels : "", "threads", mi ? mi->n_threads : 0,
        "model_load_ms", lq_round_dp(s->load_ms, 1),
        "decode_tokens_per_second", lq_round_dp(rate(LD(mt->decode_tokens), LD(mt->decode_us)), 1),
        "prefill_tokens_per_second", lq_round_dp(rate(LD(mt->prefill_tokens), LD(mt->prefill_us)), 1),
        "active_sessions", (json_int_t)sessions, "active_streams", (json_int_t)LD(mt->active_streams),
        "active_requests", (json_int_t)LD(mt->active_requests),
        "pooled_sessions", (json_int_t)(s->n_sessions + st.sessions),
        "kv_bytes_per_session", (json_int_t)s->kv_bytes_per_session,
        "kv_bytes_in_use", (json_int_t)(sessions * (int64_t)s->kv_bytes_per_session),
        "batched_decode", m != NULL, "uptime_seconds", lq_round_dp(lq_now() - s->t_boot, 1));
    /* the model options in force (as loaded; before the load, as asked) */
    const lq_model_opts *mo = &s->o.model;
    json_object_set_new(j, "kv_type", json_string(lq_kv_type_name(mi ? mi->kv_type : mo->kv_type)));
    json_object_set_new(j, "lm_head", json_string((mi ? mi->lm_head_q8 : mo->lm_head_q8) ? "q8"
                                                  : mi && mi->lm_head_bounded ? "bounded" : "as_stored"));
    /* the bounded lm_head: how many of its rows generation computed exactly per token (the
     * rest were scored on the int8 copy and provably could not be chosen) */
    lq_head_stats hs;
    lq_model_head_stats(m, &hs);
    /* exact bytes per token: the rows computed exactly, each a row of the stored lm_head */
    double per_tok = hs.tokens ? (double)hs.rows_exact / (double)hs.tokens : 0.0;
    double row_bytes = mi && mi->n_vocab ? (double)hs.exact_bytes / mi->n_vocab : 0.0;
    json_object_set_new(j, "lm_head_bounded",
                        json_pack("{s:b,s:I,s:I,s:f,s:I,s:I,s:I,s:f,s:I,s:f,s:I}", "enabled", hs.enabled,
                                  "tokens", (json_int_t)hs.tokens, "rows_exact", (json_int_t)hs.rows_exact,
                                  "rows_exact_per_token", lq_round_dp(per_tok, 2), "full_head_tokens",
                                  (json_int_t)hs.full, "rescored_after_sampling_transforms",
                                  (json_int_t)hs.gen_rescored, "full_head_after_sampling_transforms",
                                  (json_int_t)hs.gen_full, "max_uncovered_mass", hs.max_uncovered,
                                  "copy_bytes_per_token", (json_int_t)hs.copy_bytes,
                                  "bytes_per_token", lq_round_dp(hs.enabled ? (double)hs.copy_bytes + per_tok * row_bytes : 0.0, 0),
                                  "exact_bytes_per_token", (json_int_t)hs.exact_bytes));
    json_object_set_new(j, "act", json_string(mo->act_mode == LQ_ACT_F32 ? "float" : "ms"));
    /* copying: a GGUF's 2 MB-page copy is still being made (answers come from the mapping) */
    json_object_set_new(j, "weights", json_string(mi ? (mi->weights_copied ? (lq_model_weights_copied(m, 0) ? "copy" : "copying") : "mmap")
                                                     : mo->hugepages > 0 ? "copy" : mo->hugepages < 0 ? "mmap" : "auto"));
    json_object_set_new(j, "n_ctx", json_integer(s->n_ctx));
    /* continuous batching: how many streams each decode step carried */
    json_t *hist = lq_json_object();
    for (int k = 0; k < LQ_SCHED_HIST; k++) {
        if (!st.batch_hist[k])
            continue;
        char key[16];
        snprintf(key, sizeof key, k == LQ_SCHED_HIST - 1 ? "%d+" : "%d", k + 1);
        json_object_set_new(hist, key, json_integer((json_int_t)st.batch_hist[k]));
    }
    json_object_set_new(j, "prompt_cache",
                        json_pack("{s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "capacity", s->prompt_cache_cap, "entries",
                                  st.cache_entries, "hits", (json_int_t)st.cache_hits, "misses",
                                  (json_int_t)st.cache_misses, "reused_tokens", (json_int_t)st.cache_reused_tokens,
                                  "shared_hits", (json_int_t)st.shared_hits, "shared_tokens",
                                  (json_int_t)st.shared_tokens, "warm_prefills", (json_int_t)st.warm_prefills,
                                  "warm_tokens", (json_int_t)st.warm_tokens));
    /* speculative decoding: draft tokens verified and kept (requests running alone) */
    json_object_set_new(j, "draft",
                        json_pack("{s:s,s:I,s:I,s:I,s:f}", "mode",
                                  s->o.draft == LQ_DRAFT_NONE ? "none" : "ngram", "steps",
                                  (json_int_t)st.draft_steps, "drafted", (json_int_t)st.draft_tokens, "accepted",
                                  (json_int_t)st.draft_accepted, "acceptance",
                                  lq_round_dp(st.draft_tokens ? (double)st.draft_accepted / (double)st.draft_tokens : 0.0, 3)));
    json_object_set_new(j, "scheduler",
                        json_pack("{s:i,s:i,s:i,s:I,s:I,s:f,s:i,s:o,s:f}", "max_active", st.max_active, "active",
                                  st.active, "queued", st.queued, "decode_steps", (json_int_t)st.steps,
                                  "decode_tokens", (json_int_t)st.decode_tokens, "decode_step_seconds",
                                  lq_round_dp(st.decode_ms / 1e3, 4), "max_batch_seen", st.max_batch,
                                  "batch_size_histogram", hist, "aggregate_decode_tokens_per_second",
                                  lq_round_dp(st.decode_ms > 0 ? (double)(st.decode_tokens + st.draft_accepted) * 1e3 / st.decode_ms : 0.0, 1)));
    reply_json(r, 200, j);
}
