/* The route table: every route LARQL and OpenAI clients use, one row each — its path and
 * method, the handler, what it needs (RT_* flags) and what GET /v1/openapi.json says of it.
 * http.c matches requests against the rows, metrics.c counts by row, openapi.c describes the
 * rows; adding a route is adding a row here. Anything else is 404. */
#include <string.h>

#include "server/internal.h"

#define OBJ(props) "{\"type\":\"object\",\"properties\":{" props "}}"
#define STR "{\"type\":\"string\"}"
#define INT "{\"type\":\"integer\"}"
#define NUM "{\"type\":\"number\"}"
#define BOOL "{\"type\":\"boolean\"}"
#define ARR(x) "{\"type\":\"array\",\"items\":" x "}"
#define ANY_OBJ "{\"type\":\"object\"}"
#define FFN "application/x-larql-ffn"

/* structured output, logit_bias, cache_prompt and Predicted Outputs' prediction on the OpenAI
 * routes (routes_openai.c) */
#define CONSTRAIN                                                                              \
    ",\"response_format\":" OBJ("\"type\":" STR ",\"json_schema\":" OBJ(                        \
        "\"name\":" STR ",\"schema\":{\"type\":\"object\"},\"strict\":" BOOL))                     \
    ",\"grammar\":" STR ",\"json_schema\":{\"type\":\"object\"},\"logit_bias\":{\"type\":\"object\"}"        \
    ",\"cache_prompt\":" BOOL                                                                  \
    ",\"prediction\":" OBJ("\"type\":" STR ",\"content\":{}")

/* the flags most LARQL routes share: bounded by --max-concurrent, also under /v1/{model_id}/ */
#define LARQL (RT_GATED | RT_MODEL_SCOPED)
#define OPENAI (RT_OPENAI | RT_GATED)

static const route ROUTES[] = {
    {"/v1/health", M_GET, route_health, RT_PUBLIC | RT_UNMETERED,
     {"Liveness: status, uptime and requests served", NULL, NULL, NULL,
      OBJ("\"status\":" STR ",\"uptime_seconds\":" INT ",\"requests_served\":" INT), NULL}},
    {"/v1/models", M_GET, route_models, RT_OPENAI,
     {"The models this server serves (OpenAI list shape, LARQL's path and features)", NULL, NULL, NULL,
      OBJ("\"object\":" STR ",\"data\":" ARR(OBJ("\"id\":" STR ",\"object\":" STR ",\"created\":" INT
                                               ",\"owned_by\":" STR ",\"path\":" STR ",\"features\":" INT
                                               ",\"loaded\":" BOOL))),
      NULL}},
    {"/v1/openapi.json", M_GET, route_openapi, RT_UNMETERED,
     {"This document", NULL, NULL, NULL, ANY_OBJ, NULL}},
    {"/v1/stats", M_GET, route_stats, RT_MODEL_SCOPED | RT_FROM_MEMORY,
     {"Model and vindex statistics (layers, features, bands, what is loaded)", NULL, NULL, NULL,
      OBJ("\"model\":" STR ",\"family\":" STR ",\"layers\":" INT ",\"features\":" INT), NULL}},
    {"/v1/runtime", M_GET, route_runtime, RT_MODEL_SCOPED,
     {"How the model runs: kernels, threads, activation mode, KV and lm_head formats", NULL, NULL, NULL, ANY_OBJ,
      NULL}},
    {"/metrics", M_GET, route_metrics, RT_FROM_MEMORY | RT_UNMETERED,
     {"Prometheus text metrics", NULL, NULL, NULL, NULL, "text/plain"}},
    {"/v1/describe", M_GET, route_describe, LARQL | RT_CONDITIONAL,
     {"What the model knows about an entity: edges from gate KNN over the band's layers (ETag, Cache-Control; "
      "304 on If-None-Match)",
      "entity:string!,band:string,limit:integer,min_score:number,verbose:boolean", NULL, NULL,
      OBJ("\"entity\":" STR ",\"model\":" STR ",\"edges\":" ARR(OBJ(
          "\"target\":" STR ",\"gate_score\":" NUM ",\"layer\":" INT ",\"relation\":" STR ",\"source\":" STR
          ",\"also\":" ARR(STR) ",\"layer_min\":" INT ",\"layer_max\":" INT ",\"count\":" INT)) ",\"latency_ms\":" NUM),
      NULL}},
    {"/v1/walk", M_GET, route_walk, LARQL,
     {"The features a prompt's last token fires, per layer (positions=true: every token's, ours)",
      "prompt:string!,top:integer,layers:string,positions:boolean", NULL, NULL,
      OBJ("\"prompt\":" STR ",\"hits\":" ARR(ANY_OBJ) ",\"positions\":" ARR(ANY_OBJ) ",\"latency_ms\":" NUM),
      NULL}},
    {"/v1/select", M_POST, route_select, LARQL,
     {"Features filtered by entity, relation, layer and confidence", NULL,
      OBJ("\"entity\":" STR ",\"relation\":" STR ",\"layer\":" INT ",\"limit\":" INT ",\"min_confidence\":" NUM
          ",\"order_by\":" STR ",\"order\":" STR),
      NULL, OBJ("\"edges\":" ARR(ANY_OBJ) ",\"latency_ms\":" NUM), NULL}},
    {"/v1/relations", M_GET, route_relations, LARQL,
     {"The relation types the vindex names (probe labels, clusters, top tokens)", NULL, NULL, NULL,
      OBJ("\"relations\":" ARR(ANY_OBJ)), NULL}},
    {"/v1/infer", M_POST, route_infer, LARQL,
     {"Next-token predictions (mode walk, dense or compare)", NULL,
      OBJ("\"prompt\":" STR ",\"top\":" INT ",\"mode\":" STR), NULL,
      OBJ("\"prompt\":" STR ",\"predictions\":" ARR(OBJ("\"token\":" STR ",\"probability\":" NUM)) ",\"mode\":" STR
          ",\"latency_ms\":" NUM),
      NULL}},
    {"/v1/token/encode", M_GET, route_tok_encode, LARQL,
     {"Tokenise text", "text:string!", NULL, NULL, OBJ("\"token_ids\":" ARR(INT) ",\"text\":" STR), NULL}},
    {"/v1/token/decode", M_GET, route_tok_decode, LARQL,
     {"Detokenise comma-separated ids", "ids:string!", NULL, NULL,
      OBJ("\"text\":" STR ",\"token_ids\":" ARR(INT)), NULL}},
    {"/v1/embed", M_POST, route_embed, LARQL,
     {"Static embeddings of token ids (binary: [u32 n][u32 ids] in, [u32 seq][u32 hidden][f32] out)", NULL,
      OBJ("\"token_ids\":" ARR(INT)), FFN,
      OBJ("\"residual\":" ARR(ARR(NUM)) ",\"seq_len\":" INT ",\"hidden_size\":" INT ",\"latency_ms\":" NUM), FFN}},
    {"/v1/embed/{token_id}", M_GET, route_embed_row, LARQL,
     {"One token's embedding row (f32 LE by default; JSON with Accept: application/json)", NULL, NULL, NULL,
      OBJ("\"token_id\":" INT ",\"embedding\":" ARR(NUM) ",\"hidden_size\":" INT), FFN}},
    {"/v1/logits", M_POST, route_logits, LARQL,
     {"Final norm + lm_head of a residual: top-k tokens (binary: f32[hidden] LE)", NULL,
      OBJ("\"residual\":" ARR(NUM) ",\"top_k\":" INT ",\"temperature\":" NUM), FFN,
      OBJ("\"top_k\":" ARR(OBJ("\"token_id\":" INT ",\"token\":" STR ",\"prob\":" NUM)) ",\"latency_ms\":" NUM),
      NULL}},
    /* LARQL's remote-FFN service (routes_ffn.c): single-model only, as LARQL has it */
    {"/v1/walk-ffn", M_POST, route_walk_ffn, RT_GATED,
     {"One or more layers' FFN of a normed residual (full_output; binary " FFN " both ways), or the gate KNN "
      "features of a residual (the default); serve --ffn-only, --layers A-B",
      NULL,
      OBJ("\"layer\":" INT ",\"layers\":" ARR(INT) ",\"residual\":" ARR(NUM) ",\"seq_len\":" INT ",\"top_k\":" INT
          ",\"full_output\":" BOOL ",\"moe_layer\":" BOOL),
      FFN,
      OBJ("\"layer\":" INT ",\"output\":" ARR(NUM) ",\"features\":" ARR(INT) ",\"scores\":" ARR(NUM)
          ",\"seq_len\":" INT ",\"results\":" ARR(ANY_OBJ) ",\"latency_ms\":" NUM),
      FFN}},
    {"/v1/completions", M_POST, route_completions, OPENAI,
     {"OpenAI completions (stream with \"stream\": true)", NULL,
      OBJ("\"model\":" STR ",\"prompt\":" STR ",\"max_tokens\":" INT ",\"temperature\":" NUM ",\"top_p\":" NUM
          ",\"stream\":" BOOL ",\"stop\":" ARR(STR) ",\"seed\":" INT ",\"logprobs\":" INT ",\"echo\":" BOOL
          CONSTRAIN),
      NULL,
      OBJ("\"id\":" STR ",\"object\":" STR ",\"choices\":" ARR(ANY_OBJ) ",\"usage\":" ANY_OBJ),
      "text/event-stream"}},
    {"/v1/chat/completions", M_POST, route_chat, OPENAI,
     {"OpenAI chat completions (stream with \"stream\": true)", NULL,
      OBJ("\"model\":" STR ",\"messages\":" ARR(OBJ("\"role\":" STR ",\"content\":" STR)) ",\"max_tokens\":" INT
          ",\"temperature\":" NUM ",\"top_p\":" NUM ",\"stream\":" BOOL ",\"stop\":" ARR(STR) ",\"seed\":" INT
          ",\"logprobs\":" BOOL ",\"top_logprobs\":" INT CONSTRAIN
          ",\"tools\":" ARR(OBJ("\"type\":" STR ",\"function\":" OBJ("\"name\":" STR ",\"description\":" STR
                                                                 ",\"parameters\":{\"type\":\"object\"}")))
          ",\"tool_choice\":{}" ",\"parallel_tool_calls\":" BOOL),
      NULL,
      OBJ("\"id\":" STR ",\"object\":" STR ",\"choices\":" ARR(ANY_OBJ) ",\"usage\":" ANY_OBJ),
      "text/event-stream"}},
    {"/v1/embeddings", M_POST, route_embeddings, OPENAI,
     {"OpenAI embeddings (mean of the static token embeddings)", NULL,
      OBJ("\"model\":" STR ",\"input\":" "{}" ",\"encoding_format\":" STR), NULL,
      OBJ("\"object\":" STR ",\"data\":" ARR(OBJ("\"embedding\":" ARR(NUM) ",\"index\":" INT)) ",\"model\":" STR),
      NULL}},
    {"/slots/{id}", M_POST, route_slots, OPENAI | RT_WRITE,
     {"llama-server's slot save/restore/erase: action=save writes the prompt cache's entry {id} (0 = the most "
      "recently used) to DIR/filename; action=restore reads such a file back into the cache ({id} is only "
      "echoed), for requests starting with its tokens (both need --slot-save-path DIR); action=erase (no body) "
      "drops entry {id} from the cache",
      "action:string!", OBJ("\"filename\":" STR), NULL,
      OBJ("\"id_slot\":" INT ",\"filename\":" STR ",\"n_saved\":" INT ",\"n_written\":" INT
          ",\"n_restored\":" INT ",\"n_read\":" INT ",\"n_erased\":" INT ",\"timings\":" ANY_OBJ),
      NULL}},
    /* not gated: a tar of a large vindex streams for long */
    {"/v1/shard/{model_id}/{range}", M_GET, route_shard, 0,
     {"Stream this server's vindex directory as a tar (LARQL's grid hand-off: the receiver serves the layer range "
      "START-END of it with --layers)",
      NULL, NULL, NULL, NULL, "application/x-tar"}},
    {"/v1/warmup", M_POST, route_warmup, LARQL,
     {"Read the gate rows of the given layers (all by default) into memory and load the weights unless "
      "skip_weights (LARQL's warmup)",
      NULL, OBJ("\"skip_weights\":" BOOL ",\"layers\":" ARR(INT)), NULL,
      OBJ("\"model\":" STR ",\"weights_loaded\":" BOOL ",\"layers_prefetched\":" INT ",\"hnsw_built\":" BOOL
          ",\"total_ms\":" INT),
      NULL}},
    {"/v1/explain-infer", M_POST, route_explain, LARQL,
     {"Inference with the features each layer fired", NULL,
      OBJ("\"prompt\":" STR ",\"top\":" INT ",\"per_layer\":" INT ",\"band\":" STR ",\"relations_only\":" BOOL
          ",\"with_attention\":" BOOL),
      NULL,
      OBJ("\"prompt\":" STR ",\"predictions\":" ARR(ANY_OBJ) ",\"trace\":" ARR(ANY_OBJ) ",\"latency_ms\":" NUM),
      NULL}},
    {"/v1/insert", M_POST, route_insert, LARQL | RT_WRITE,
     {"Insert a fact (X-Session-Id: into that session only)", NULL,
      OBJ("\"entity\":" STR ",\"relation\":" STR ",\"target\":" STR ",\"layer\":" INT ",\"confidence\":" NUM
          ",\"alpha\":" NUM ",\"mode\":" STR),
      NULL,
      OBJ("\"entity\":" STR ",\"relation\":" STR ",\"target\":" STR ",\"inserted\":" INT ",\"mode\":" STR
          ",\"id\":" STR ",\"target_probability\":" NUM ",\"latency_ms\":" NUM),
      NULL}},
    {"/v1/patches", M_GET, route_patches, LARQL,
     {"The applied patches, and each edit as a row (id, entity, relation, target, mode, layer, patch)", NULL, NULL,
      NULL, OBJ("\"patches\":" ARR(ANY_OBJ) ",\"edits\":" ARR(ANY_OBJ)), NULL}},
    {"/v1/edits/{id}", M_DELETE, route_edit_delete, LARQL | RT_WRITE,
     {"Remove one edit by id (X-Session-Id: from that session)", NULL, NULL, NULL,
      OBJ("\"removed\":" STR), NULL}},
    {"/v1/patches/apply", M_POST, route_patches, LARQL | RT_WRITE,
     {"Apply a patch (inline, or a file name under --patch-dir)", NULL,
      OBJ("\"patch\":" ANY_OBJ ",\"url\":" STR), NULL,
      OBJ("\"applied\":" STR ",\"operations\":" INT ",\"active_patches\":" INT), NULL}},
    {"/v1/patches/{name}", M_DELETE, route_patch_delete, LARQL | RT_WRITE,
     {"Remove an applied patch by name", NULL, NULL, NULL, OBJ("\"removed\":" STR ",\"active_patches\":" INT),
      NULL}},
    /* not gated: a WebSocket may stay open and idle for long; its generations go through the
     * scheduler's bounded queue and its infers through the bounded session pool */
    {"/v1/stream", M_GET, route_stream, RT_MODEL_SCOPED | RT_UPGRADE | RT_WRITE,
     {"WebSocket (RFC 6455): describe, infer and generate frames; answers 101", NULL, NULL, NULL, NULL, NULL}},
    /* the built-in page (web.c): not gated, served from memory */
    {"/", M_GET, route_web_index, RT_PUBLIC | RT_FROM_MEMORY,
     {"The built-in web page (chat and explorer)", NULL, NULL, NULL, NULL, "text/html"}},
    {"/assets/{name}", M_GET, route_web_asset, RT_PUBLIC | RT_FROM_MEMORY,
     {"A static asset of the web page (ETag, 304 on If-None-Match)", NULL, NULL, NULL, NULL,
      "application/octet-stream"}},
};

_Static_assert(sizeof ROUTES / sizeof ROUTES[0] <= SRV_MAX_ROUTES, "raise SRV_MAX_ROUTES (metrics count by row)");

const route srv_unknown_route = {"other", 0, NULL, 0, {NULL, NULL, NULL, NULL, NULL, NULL}};

const route *srv_routes(size_t *n)
{
    *n = sizeof ROUTES / sizeof ROUTES[0];
    return ROUTES;
}


/* 2: the exact path; 1: a "{name}" row whose prefix the url extends by one non-empty
 * segment (returned in *arg); 0: no match. n is the url's length without a trailing slash. */
static int path_match(const char *pattern, const char *url, size_t n, const char **arg, size_t *arg_len)
{
    const char *brace = strchr(pattern, '{');
    if (!brace)
        return strlen(pattern) == n && !memcmp(pattern, url, n) ? 2 : 0;
    size_t pl = (size_t)(brace - pattern);
    if (strstr(brace, "}/{")) { /* two segments ("/v1/shard/{model_id}/{range}"): both non-empty */
        const char *sl = n > pl ? memchr(url + pl, '/', n - pl) : NULL;
        if (!sl || sl == url + pl || sl == url + n - 1 || memchr(sl + 1, '/', (size_t)(url + n - sl - 1)) ||
            memcmp(pattern, url, pl))
            return 0;
        *arg = url + pl;
        *arg_len = n - pl;
        return 1;
    }
    if (n > pl && !memcmp(pattern, url, pl) && !memchr(url + pl, '/', n - pl)) {
        *arg = url + pl;
        *arg_len = n - pl;
        return 1;
    }
    return 0;
}

const route *srv_route_find(const char *url, int method, const char **arg, size_t *arg_len, int *allowed)
{
    /* a trailing slash is the same route ("/v1/models/") */
    size_t n = strlen(url);
    if (n > 1 && url[n - 1] == '/')
        n--;
    *arg = NULL;
    *arg_len = 0;
    *allowed = 0;
    const route *best = NULL, *any = NULL;
    int best_kind = 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const char *a = NULL;
        size_t al = 0;
        int kind = path_match(ROUTES[i].path, url, n, &a, &al);
        if (!kind || kind < best_kind)
            continue;
        if (kind > best_kind) { /* an exact path hides the "{name}" rows that also match */
            best_kind = kind;
            best = any = NULL;
            *allowed = 0;
        }
        *allowed |= ROUTES[i].method;
        if (!any) {
            any = &ROUTES[i];
            *arg = a;
            *arg_len = al;
        }
        if (!best && (ROUTES[i].method & method)) {
            best = &ROUTES[i];
            *arg = a;
            *arg_len = al;
        }
    }
    return best ? best : any;
}
