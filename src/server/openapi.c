/* GET /v1/openapi.json: an OpenAPI 3.0 description of every route this server answers, as
 * LARQL's openapi.rs publishes one. The paths and methods come from the route table itself
 * (srv_routes, routes.c), whose every row carries its summary, parameters and request and
 * response schemas, so a route cannot be served without being described (a row without a
 * summary is listed as undocumented, and tests/http/parity.py fails on that). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_obj.h"
#include "server/internal.h"

static json_t *schema(const char *text)
{
    json_error_t e;
    json_t *j = text ? json_loads(text, 0, &e) : NULL;
    return j ? j : lq_json_object(); /* a malformed literal shows up as an empty schema in the test */
}

/* The first "{name}" segment of path at or after from, NULL when there is none; *len is its
 * length (a row may have two: /v1/shard/{model_id}/{range}). */
static const char *path_param(const char *from, size_t *len)
{
    const char *b = strchr(from, '{'), *e = b ? strchr(b, '}') : NULL;
    if (!b || !e)
        return NULL;
    *len = (size_t)(e - b - 1);
    return b + 1;
}

static json_t *params_of(const route *rt, int model_scoped)
{
    json_t *a = json_array();
    if (model_scoped)
        json_array_append_new(a, json_pack("{s:s,s:s,s:b,s:{s:s},s:s}", "name", "model_id", "in", "path", "required", 1,
                                           "schema", "type", "string", "description",
                                           "a model id from /v1/models (larql serve --dir)"));
    size_t pl = 0;
    for (const char *pp = path_param(rt->path, &pl); pp; pp = path_param(pp + pl, &pl)) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)pl, pp);
        json_array_append_new(a, json_pack("{s:s,s:s,s:b,s:{s:s}}", "name", name, "in", "path", "required", 1,
                                           "schema", "type", strcmp(name, "token_id") ? "string" : "integer"));
    }
    for (const char *p = rt->doc.params; p && *p;) {
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

static json_t *operation(const route *rt, int model_scoped)
{
    const route_doc *d = &rt->doc;
    int upgrade = (rt->flags & RT_UPGRADE) != 0;
    json_t *op = lq_json_object();
    json_object_set_new(op, "summary", json_string(d->summary ? d->summary : "undocumented route"));
    json_object_set_new(op, "tags", json_pack("[s]", rt->flags & RT_OPENAI ? "openai" : "larql"));
    json_t *ps = params_of(rt, model_scoped);
    if (json_array_size(ps))
        json_object_set_new(op, "parameters", ps);
    else
        json_decref(ps);
    if (d->request || d->binary_in) {
        json_t *content = lq_json_object();
        if (d->request)
            json_object_set_new(content, "application/json", json_pack("{s:o}", "schema", schema(d->request)));
        if (d->binary_in) {
            json_object_set_new(content, d->binary_in, json_pack("{s:{s:s,s:s}}", "schema", "type", "string", "format", "binary"));
            json_object_set_new(content, "application/octet-stream",
                                json_pack("{s:{s:s,s:s}}", "schema", "type", "string", "format", "binary"));
        }
        json_object_set_new(op, "requestBody", json_pack("{s:b,s:o}", "required", 1, "content", content));
    }
    json_t *ok = lq_json_object(), *content = lq_json_object();
    if (d->response)
        json_object_set_new(content, "application/json", json_pack("{s:o}", "schema", schema(d->response)));
    if (d->binary_out)
        json_object_set_new(content, d->binary_out, json_pack("{s:{s:s}}", "schema", "type", "string"));
    json_object_set_new(ok, "description", json_string(upgrade ? "switching protocols" : "ok"));
    if (json_object_size(content))
        json_object_set_new(ok, "content", content);
    else
        json_decref(content);
    json_t *err = json_pack("{s:s,s:{s:{s:{s:s,s:{s:{s:s}}}}}}", "description", "error", "content", "application/json",
                            "schema", "type", "object", "properties", "error", "type", "string");
    json_object_set_new(op, "responses", json_pack("{s:o,s:o}", upgrade ? "101" : "200", ok, "default", err));
    if (rt->flags & RT_CONDITIONAL)
        json_object_set_new(json_object_get(op, "responses"), "304", json_pack("{s:s}", "description", "not modified"));
    return op;
}

static const char *method_name(int m)
{
    return m == M_GET ? "get" : m == M_POST ? "post" : "delete";
}

char *srv_openapi_json(const lq_server *s, size_t *len)
{
    json_t *paths = lq_json_object();
    size_t n = s->n_routes;
    const route *rs = s->routes;
    for (int scoped = 0; scoped < 2; scoped++)
        for (size_t i = 0; i < n; i++) {
            const route *rt = &rs[i];
            if (scoped && !(rt->flags & RT_MODEL_SCOPED))
                continue;
            char path[256];
            if (scoped && !strncmp(rt->path, "/v1/", 4))
                snprintf(path, sizeof path, "/v1/{model_id}%s", rt->path + 3);
            else
                snprintf(path, sizeof path, "%s", rt->path);
            json_t *item = json_object_get(paths, path);
            if (!item) {
                item = lq_json_object();
                json_object_set_new(paths, path, item);
            }
            json_object_set_new(item, method_name(rt->method), operation(rt, scoped));
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
