/* GET /v1/openapi.json: an OpenAPI 3.0 description of every route this server answers, as
 * LARQL's openapi.rs publishes one. The paths and methods come from the route table itself
 * (srv_routes), so a route cannot be served without being described: each (route, method)
 * looks its summary, parameters and request/response schemas up in DOCS below, and one
 * that has none is listed with a summary saying so (tests/http/parity.py fails on that). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

/* One described operation. Schemas are JSON Schema text (parsed when the document is
 * built; a typo is caught by the test that fetches the document). params: query
 * parameters as "name:type" separated by commas, a trailing '!' marks a required one. */
typedef struct op_doc {
    int id, method;
    const char *summary;
    const char *path_param;   /* prefix routes: the segment's name ("token_id") */
    const char *params;
    const char *request;      /* JSON body schema, NULL = no body */
    const char *binary_in;    /* also accepts this binary body type, NULL = none */
    const char *response;     /* 200 JSON schema */
    const char *binary_out;   /* 200 may be this binary type instead */
} op_doc;

#define OBJ(props) "{\"type\":\"object\",\"properties\":{" props "}}"
#define STR "{\"type\":\"string\"}"
#define INT "{\"type\":\"integer\"}"
#define NUM "{\"type\":\"number\"}"
#define BOOL "{\"type\":\"boolean\"}"
#define ARR(x) "{\"type\":\"array\",\"items\":" x "}"
#define FFN "application/x-larql-ffn"
/* structured output and logit_bias on the OpenAI routes (routes_openai.c parse_constraints) */
#define CONSTRAIN                                                                              \
    ",\"response_format\":" OBJ("\"type\":" STR ",\"json_schema\":" OBJ(                        \
        "\"name\":" STR ",\"schema\":{\"type\":\"object\"},\"strict\":" BOOL))                     \
    ",\"grammar\":" STR ",\"json_schema\":{\"type\":\"object\"},\"logit_bias\":{\"type\":\"object\"}"

static const op_doc DOCS[] = {
    {R_HEALTH, M_GET, "Liveness: status, uptime and requests served", NULL, NULL, NULL, NULL,
     OBJ("\"status\":" STR ",\"uptime_seconds\":" INT ",\"requests_served\":" INT), NULL},
    {R_MODELS, M_GET, "The models this server serves (OpenAI list shape, LARQL's path and features)", NULL, NULL,
     NULL, NULL,
     OBJ("\"object\":" STR ",\"data\":" ARR(OBJ("\"id\":" STR ",\"object\":" STR ",\"created\":" INT
                                              ",\"owned_by\":" STR ",\"path\":" STR ",\"features\":" INT
                                              ",\"loaded\":" BOOL))),
     NULL},
    {R_STATS, M_GET, "Model and vindex statistics (layers, features, bands, what is loaded)", NULL, NULL, NULL,
     NULL, OBJ("\"model\":" STR ",\"family\":" STR ",\"layers\":" INT ",\"features\":" INT), NULL},
    {R_RUNTIME, M_GET, "How the model runs: kernels, threads, activation mode, KV and lm_head formats", NULL, NULL,
     NULL, NULL, "{\"type\":\"object\"}", NULL},
    {R_METRICS, M_GET, "Prometheus text metrics", NULL, NULL, NULL, NULL, NULL, "text/plain"},
    {R_DESCRIBE, M_GET, "What the model knows about an entity: edges from gate KNN over the band's layers "
                        "(ETag, Cache-Control; 304 on If-None-Match)",
     NULL, "entity:string!,band:string,limit:integer,min_score:number,verbose:boolean", NULL, NULL,
     OBJ("\"entity\":" STR ",\"model\":" STR ",\"edges\":" ARR(OBJ(
         "\"target\":" STR ",\"gate_score\":" NUM ",\"layer\":" INT ",\"relation\":" STR ",\"source\":" STR
         ",\"also\":" ARR(STR) ",\"layer_min\":" INT ",\"layer_max\":" INT ",\"count\":" INT)) ",\"latency_ms\":" NUM),
     NULL},
    {R_WALK, M_GET, "The features a prompt's last token fires, per layer", NULL, "prompt:string!,top:integer,layers:string",
     NULL, NULL, OBJ("\"prompt\":" STR ",\"hits\":" ARR("{\"type\":\"object\"}") ",\"latency_ms\":" NUM), NULL},
    {R_SELECT, M_POST, "Features filtered by entity, relation, layer and confidence", NULL, NULL,
     OBJ("\"entity\":" STR ",\"relation\":" STR ",\"layer\":" INT ",\"limit\":" INT ",\"min_confidence\":" NUM
         ",\"order_by\":" STR ",\"order\":" STR),
     NULL, OBJ("\"edges\":" ARR("{\"type\":\"object\"}") ",\"latency_ms\":" NUM), NULL},
    {R_RELATIONS, M_GET, "The relation types the vindex names (probe labels, clusters, top tokens)", NULL, NULL,
     NULL, NULL, OBJ("\"relations\":" ARR("{\"type\":\"object\"}")), NULL},
    {R_INFER, M_POST, "Next-token predictions (mode walk, dense or compare)", NULL, NULL,
     OBJ("\"prompt\":" STR ",\"top\":" INT ",\"mode\":" STR), NULL,
     OBJ("\"prompt\":" STR ",\"predictions\":" ARR(OBJ("\"token\":" STR ",\"probability\":" NUM)) ",\"mode\":" STR
         ",\"latency_ms\":" NUM),
     NULL},
    {R_TOK_ENCODE, M_GET, "Tokenise text", NULL, "text:string!", NULL, NULL,
     OBJ("\"token_ids\":" ARR(INT) ",\"text\":" STR), NULL},
    {R_TOK_DECODE, M_GET, "Detokenise comma-separated ids", NULL, "ids:string!", NULL, NULL,
     OBJ("\"text\":" STR ",\"token_ids\":" ARR(INT)), NULL},
    {R_EMBED, M_POST, "Static embeddings of token ids (binary: [u32 n][u32 ids] in, [u32 seq][u32 hidden][f32] out)",
     NULL, NULL, OBJ("\"token_ids\":" ARR(INT)), FFN,
     OBJ("\"residual\":" ARR(ARR(NUM)) ",\"seq_len\":" INT ",\"hidden_size\":" INT ",\"latency_ms\":" NUM), FFN},
    {R_EMBED_ROW, M_GET, "One token's embedding row (f32 LE by default; JSON with Accept: application/json)",
     "token_id", NULL, NULL, NULL, OBJ("\"token_id\":" INT ",\"embedding\":" ARR(NUM) ",\"hidden_size\":" INT), FFN},
    {R_LOGITS, M_POST, "Final norm + lm_head of a residual: top-k tokens (binary: f32[hidden] LE)", NULL, NULL,
     OBJ("\"residual\":" ARR(NUM) ",\"top_k\":" INT ",\"temperature\":" NUM), FFN,
     OBJ("\"top_k\":" ARR(OBJ("\"token_id\":" INT ",\"token\":" STR ",\"prob\":" NUM)) ",\"latency_ms\":" NUM), NULL},
    {R_COMPLETIONS, M_POST, "OpenAI completions (stream with \"stream\": true)", NULL, NULL,
     OBJ("\"model\":" STR ",\"prompt\":" STR ",\"max_tokens\":" INT ",\"temperature\":" NUM ",\"top_p\":" NUM
         ",\"stream\":" BOOL ",\"stop\":" ARR(STR) ",\"seed\":" INT ",\"logprobs\":" INT ",\"echo\":" BOOL
         CONSTRAIN),
     NULL, OBJ("\"id\":" STR ",\"object\":" STR ",\"choices\":" ARR("{\"type\":\"object\"}") ",\"usage\":"
               "{\"type\":\"object\"}"),
     "text/event-stream"},
    {R_CHAT, M_POST, "OpenAI chat completions (stream with \"stream\": true)", NULL, NULL,
     OBJ("\"model\":" STR ",\"messages\":" ARR(OBJ("\"role\":" STR ",\"content\":" STR)) ",\"max_tokens\":" INT
         ",\"temperature\":" NUM ",\"top_p\":" NUM ",\"stream\":" BOOL ",\"stop\":" ARR(STR) ",\"seed\":" INT
         ",\"logprobs\":" BOOL ",\"top_logprobs\":" INT CONSTRAIN
         ",\"tools\":" ARR(OBJ("\"type\":" STR ",\"function\":" OBJ("\"name\":" STR ",\"description\":" STR
                                                                ",\"parameters\":{\"type\":\"object\"}")))
         ",\"tool_choice\":{}" ",\"parallel_tool_calls\":" BOOL),
     NULL, OBJ("\"id\":" STR ",\"object\":" STR ",\"choices\":" ARR("{\"type\":\"object\"}") ",\"usage\":"
               "{\"type\":\"object\"}"),
     "text/event-stream"},
    {R_EMBEDDINGS, M_POST, "OpenAI embeddings (mean of the static token embeddings)", NULL, NULL,
     OBJ("\"model\":" STR ",\"input\":" "{}" ",\"encoding_format\":" STR), NULL,
     OBJ("\"object\":" STR ",\"data\":" ARR(OBJ("\"embedding\":" ARR(NUM) ",\"index\":" INT)) ",\"model\":" STR),
     NULL},
    {R_EXPLAIN, M_POST, "Inference with the features each layer fired", NULL, NULL,
     OBJ("\"prompt\":" STR ",\"top\":" INT ",\"per_layer\":" INT ",\"band\":" STR ",\"relations_only\":" BOOL
         ",\"with_attention\":" BOOL),
     NULL, OBJ("\"prompt\":" STR ",\"predictions\":" ARR("{\"type\":\"object\"}") ",\"trace\":"
               ARR("{\"type\":\"object\"}") ",\"latency_ms\":" NUM),
     NULL},
    {R_INSERT, M_POST, "Insert a fact (X-Session-Id: into that session only)", NULL, NULL,
     OBJ("\"entity\":" STR ",\"relation\":" STR ",\"target\":" STR ",\"layer\":" INT ",\"confidence\":" NUM
         ",\"alpha\":" NUM ",\"mode\":" STR),
     NULL, OBJ("\"entity\":" STR ",\"relation\":" STR ",\"target\":" STR ",\"inserted\":" INT ",\"mode\":" STR
               ",\"latency_ms\":" NUM),
     NULL},
    {R_PATCHES, M_GET, "The applied patches", NULL, NULL, NULL, NULL,
     OBJ("\"patches\":" ARR("{\"type\":\"object\"}")), NULL},
    {R_PATCHES, M_POST, "Apply a patch (inline, or a file name under --patch-dir)", NULL, NULL,
     OBJ("\"patch\":{\"type\":\"object\"},\"url\":" STR), NULL,
     OBJ("\"applied\":" STR ",\"operations\":" INT ",\"active_patches\":" INT), NULL},
    {R_PATCH_DELETE, M_DELETE, "Remove an applied patch by name", "name", NULL, NULL, NULL,
     OBJ("\"removed\":" STR ",\"active_patches\":" INT), NULL},
    {R_STREAM, M_GET, "WebSocket (RFC 6455): describe, infer and generate frames; answers 101", NULL, NULL, NULL,
     NULL, NULL, NULL},
    {R_OPENAPI, M_GET, "This document", NULL, NULL, NULL, NULL, "{\"type\":\"object\"}", NULL},
    {R_WEB_INDEX, M_GET, "The built-in web page (chat and explorer)", NULL, NULL, NULL, NULL, NULL, "text/html"},
    {R_WEB_ASSET, M_GET, "A static asset of the web page (ETag, 304 on If-None-Match)", "name", NULL, NULL, NULL, NULL,
     "application/octet-stream"},
};

static const op_doc *find_doc(int id, int method)
{
    for (size_t i = 0; i < sizeof DOCS / sizeof DOCS[0]; i++)
        if (DOCS[i].id == id && DOCS[i].method == method)
            return &DOCS[i];
    return NULL;
}

static json_t *schema(const char *text)
{
    json_error_t e;
    json_t *j = text ? json_loads(text, 0, &e) : NULL;
    return j ? j : json_object(); /* a malformed literal shows up as an empty schema in the test */
}

static json_t *params_of(const op_doc *d, int model_scoped)
{
    json_t *a = json_array();
    if (model_scoped)
        json_array_append_new(a, json_pack("{s:s,s:s,s:b,s:{s:s},s:s}", "name", "model_id", "in", "path", "required", 1,
                                           "schema", "type", "string", "description",
                                           "a model id from /v1/models (larql serve --dir)"));
    if (d && d->path_param)
        json_array_append_new(a, json_pack("{s:s,s:s,s:b,s:{s:s}}", "name", d->path_param, "in", "path", "required", 1,
                                           "schema", "type", strcmp(d->path_param, "token_id") ? "string" : "integer"));
    for (const char *p = d ? d->params : NULL; p && *p;) {
        const char *c = strchr(p, ':'), *e = strchr(p, ',');
        if (!e)
            e = p + strlen(p);
        if (!c || c > e)
            break;
        int required = e[-1] == '!';
        char name[64], type[32];
        snprintf(name, sizeof name, "%.*s", (int)(c - p), p);
        snprintf(type, sizeof type, "%.*s", (int)(e - c - 1 - required), c + 1);
        json_array_append_new(a, json_pack("{s:s,s:s,s:b,s:{s:s}}", "name", name, "in", "query", "required", required,
                                           "schema", "type", type));
        p = *e ? e + 1 : e;
    }
    return a;
}

static json_t *operation(const route *rt, int method, int model_scoped)
{
    const op_doc *d = find_doc(rt->id, method);
    json_t *op = json_object();
    json_object_set_new(op, "summary", json_string(d ? d->summary : "undocumented route"));
    json_object_set_new(op, "tags", json_pack("[s]", rt->openai ? "openai" : "larql"));
    json_t *ps = params_of(d, model_scoped);
    if (json_array_size(ps))
        json_object_set_new(op, "parameters", ps);
    else
        json_decref(ps);
    if (d && (d->request || d->binary_in)) {
        json_t *content = json_object();
        if (d->request)
            json_object_set_new(content, "application/json", json_pack("{s:o}", "schema", schema(d->request)));
        if (d->binary_in) {
            json_object_set_new(content, d->binary_in, json_pack("{s:{s:s,s:s}}", "schema", "type", "string", "format", "binary"));
            json_object_set_new(content, "application/octet-stream",
                                json_pack("{s:{s:s,s:s}}", "schema", "type", "string", "format", "binary"));
        }
        json_object_set_new(op, "requestBody", json_pack("{s:b,s:o}", "required", 1, "content", content));
    }
    json_t *ok = json_object(), *content = json_object();
    if (d && d->response)
        json_object_set_new(content, "application/json", json_pack("{s:o}", "schema", schema(d->response)));
    if (d && d->binary_out)
        json_object_set_new(content, d->binary_out, json_pack("{s:{s:s}}", "schema", "type", "string"));
    json_object_set_new(ok, "description", json_string(rt->id == R_STREAM ? "switching protocols" : "ok"));
    if (json_object_size(content))
        json_object_set_new(ok, "content", content);
    else
        json_decref(content);
    json_t *err = json_pack("{s:s,s:{s:{s:{s:s,s:{s:{s:s}}}}}}", "description", "error", "content", "application/json",
                            "schema", "type", "object", "properties", "error", "type", "string");
    json_object_set_new(op, "responses", json_pack("{s:o,s:o}", rt->id == R_STREAM ? "101" : "200", ok, "default", err));
    if (rt->id == R_DESCRIBE)
        json_object_set_new(json_object_get(op, "responses"), "304", json_pack("{s:s}", "description", "not modified"));
    return op;
}

static const char *method_name(int m)
{
    return m == M_GET ? "get" : m == M_POST ? "post" : "delete";
}

char *srv_openapi_json(const lq_server *s, size_t *len)
{
    json_t *paths = json_object();
    size_t n = 0;
    const route *rs = srv_routes(&n);
    for (int scoped = 0; scoped < 2; scoped++)
        for (size_t i = 0; i < n; i++) {
            const route *rt = &rs[i];
            if (scoped && !rt->model_scoped)
                continue;
            const op_doc *any = NULL;
            for (int m = M_GET; m <= M_DELETE && !any; m <<= 1)
                if (rt->methods & m)
                    any = find_doc(rt->id, m);
            char path[256];
            const char *tail = rt->path + 3; /* after "/v1" */
            if (!strncmp(rt->path, "/v1/", 4) && scoped)
                snprintf(path, sizeof path, "/v1/{model_id}%s%s%s%s", tail, rt->prefix ? "{" : "",
                         rt->prefix && any && any->path_param ? any->path_param : "", rt->prefix ? "}" : "");
            else
                snprintf(path, sizeof path, "%s%s%s%s", rt->path, rt->prefix ? "{" : "",
                         rt->prefix && any && any->path_param ? any->path_param : "", rt->prefix ? "}" : "");
            json_t *item = json_object_get(paths, path);
            if (!item) {
                item = json_object();
                json_object_set_new(paths, path, item);
            }
            for (int m = M_GET; m <= M_DELETE; m <<= 1)
                if (rt->methods & m)
                    json_object_set_new(item, method_name(m), operation(rt, m, scoped));
        }
    json_t *doc = json_pack("{s:s,s:{s:s,s:s,s:s},s:[{s:s}],s:o}", "openapi", "3.0.3", "info", "title", "larql",
                            "version", "1", "description",
                            "LARQL's routes and the OpenAI surface over one or more models (generated from the "
                            "server's route table)",
                            "servers", "url", "/", "paths", paths);
    (void)s;
    char *out = lq_dump(doc, len);
    json_decref(doc);
    return out;
}

void route_openapi(lq_server *s, req *q, reply *r)
{
    (void)q;
    size_t len = 0;
    char *body = srv_openapi_json(s, &len);
    if (!body) {
        reply_larql_err(r, 500, "out of memory");
        return;
    }
    r->status = 200;
    r->body = body;
    r->len = len;
    r->ctype = "application/json";
}
