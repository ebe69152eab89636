/* OpenAI function calling (see oai_tools.h). The call format is the one llama.cpp's generic
 * tool-call handler and many small models use: one JSON object {"name": ..., "arguments":
 * {...}}. The grammar is the JSON Schema of that object (an anyOf over the functions, each
 * with its parameters schema; the functions' $defs hoisted to the top so their $refs still
 * resolve) converted by the library; "auto" lets the output be either that object or text
 * that does not start with '{'. With parallel_tool_calls (the default) a reply may hold up
 * to 8 calls, one object per line. */
#include "core/json_obj.h"
#include "server/oai_tools.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sb.h"
#include "larql/grammar.h"

#define MAX_TOOLS 128
#define MAX_CALLS 8 /* calls in one reply with parallel_tool_calls */

void oai_tools_free(oai_tools *t)
{
    if (!t)
        return;
    free(t->gbnf);
    free(t->system);
    memset(t, 0, sizeof *t);
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Moves params' $defs / definitions into defs / defs2 (the combined schema's). */
static int hoist(json_t *params, json_t *defs, json_t *defs2, size_t i, reply *r)
{
    static const char *const keys[2] = {"$defs", "definitions"};
    json_t *into[2] = {defs, defs2};
    for (int k = 0; k < 2; k++) {
        json_t *d = json_object_get(params, keys[k]);
        if (!d)
            continue;
        if (!json_is_object(d)) {
            reply_oai_err(r, 400, "tools", "tools[%zu].function.parameters.%s must be an object", i,
                          keys[k]);
            return -1;
        }
        const char *name;
        json_t *v;
        json_object_foreach(d, name, v) {
            json_t *have = json_object_get(into[k], name);
            if (have && !json_equal(have, v)) {
                reply_oai_err(r, 400, "tools", "tools[%zu]: %s/%s differs from another function's "
                              "definition of the same name", i, keys[k], name);
                return -1;
            }
            json_object_set(into[k], name, v);
        }
        json_object_del(params, keys[k]);
    }
    return 0;
}

/* {"type":"object","properties":{"name":{"const":N},"arguments":P},...} for one function */
static json_t *call_schema(const char *name, json_t *params)
{
    return json_pack("{s:s,s:{s:{s:s},s:O},s:[s,s],s:b}", "type", "object", "properties", "name",
                     "const", name, "arguments", params, "required", "name", "arguments",
                     "additionalProperties", 0);
}

/* GBNF of schema (with the hoisted definitions); NULL with r filled. */
static char *to_gbnf(json_t *schema, json_t *defs, json_t *defs2, const char *what, reply *r)
{
    json_t *s = json_deep_copy(schema);
    if (!s) {
        reply_oai_err(r, 500, NULL, "out of memory");
        return NULL;
    }
    if (json_object_size(defs))
        json_object_set(s, "$defs", defs);
    if (json_object_size(defs2))
        json_object_set(s, "definitions", defs2);
    char *txt = json_dumps(s, JSON_COMPACT);
    json_decref(s);
    char *g = NULL;
    lq_err err = {0};
    int rc = txt ? lq_json_schema_to_gbnf(txt, strlen(txt), &g, &err)
                 : lq_err_set(&err, LQ_ENOMEM, "out of memory");
    free(txt);
    if (rc) {
        reply_oai_err(r, rc == LQ_ENOMEM ? 500 : 400, "tools", "%s: %s", what, err.msg);
        return NULL;
    }
    return g;
}

int oai_tools_parse(json_t *j, oai_tools *t, reply *r)
{
    memset(t, 0, sizeof *t);
    json_t *tools = json_object_get(j, "tools"), *tc = json_object_get(j, "tool_choice");
    json_t *ptc = json_object_get(j, "parallel_tool_calls");
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc)) {
        reply_oai_err(r, 400, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        return -1;
    }
    const char *named = NULL;
    int mode = TOOLS_AUTO, parallel = !json_is_false(ptc);
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *c = json_string_value(tc);
            mode = !strcmp(c, "none") ? TOOLS_NONE
                   : !strcmp(c, "auto") ? TOOLS_AUTO
                   : !strcmp(c, "required") ? TOOLS_REQUIRED : -1;
        } else if (json_is_object(tc)) {
            json_t *f = json_object_get(tc, "function");
            named = json_string_value(json_object_get(f, "name"));
            mode = named ? TOOLS_REQUIRED : -1;
        } else {
            mode = -1;
        }
        if (mode < 0) {
            reply_oai_err(r, 400, "tool_choice", "'tool_choice' must be \"none\", \"auto\", "
                          "\"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
            return -1;
        }
    }
    if (!tools || json_is_null(tools) || (json_is_array(tools) && json_array_size(tools) == 0)) {
        if (mode == TOOLS_REQUIRED) {
            reply_oai_err(r, 400, "tool_choice", "'tool_choice' asks for a function call but the "
                          "request has no tools");
            return -1;
        }
        return 0;
    }
    if (!json_is_array(tools) || json_array_size(tools) > MAX_TOOLS) {
        reply_oai_err(r, 400, "tools", "'tools' must be an array of at most %d functions", MAX_TOOLS);
        return -1;
    }
    if (mode == TOOLS_NONE)
        return 0;
    size_t n = json_array_size(tools);
    json_t *defs = lq_json_object(), *defs2 = lq_json_object(), *alts = json_array();
    json_t **params = calloc(n, sizeof *params);
    const char **names = calloc(n, sizeof *names);
    lq_sb sys = {0};
    int rc = -1, found = 0;
    if (!defs || !defs2 || !alts || !params || !names) {
        reply_oai_err(r, 500, NULL, "out of memory");
        goto out;
    }
    lq_sb_puts(&sys, "You can call functions. To call one, reply with only a JSON object "
                     "{\"name\": <the function's name>, \"arguments\": <its arguments>}.");
    if (parallel)
        lq_sb_puts(&sys, " To call several, write one such object per line.");
    lq_sb_puts(&sys, mode == TOOLS_REQUIRED ? " Call one now." : " Otherwise answer normally.");
    lq_sb_puts(&sys, "\nFunctions:");
    for (size_t i = 0; i < n; i++) {
        json_t *tl = json_array_get(tools, i), *f = json_object_get(tl, "function");
        json_t *ty = json_object_get(tl, "type");
        if (!json_is_object(tl) || (ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "function"))) ||
            !json_is_object(f)) {
            reply_oai_err(r, 400, "tools", "tools[%zu] must be {\"type\": \"function\", \"function\": "
                          "{\"name\", \"description\", \"parameters\"}}", i);
            goto out;
        }
        names[i] = json_string_value(json_object_get(f, "name"));
        if (!names[i] || !valid_name(names[i])) {
            reply_oai_err(r, 400, "tools", "tools[%zu].function.name must be 1-64 characters of "
                          "a-z, A-Z, 0-9, _ and -", i);
            goto out;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(names[k], names[i])) {
                reply_oai_err(r, 400, "tools", "tools[%zu]: the function name '%s' is used twice", i,
                              names[i]);
                goto out;
            }
        json_t *d = json_object_get(f, "description"), *p = json_object_get(f, "parameters");
        if (d && !json_is_null(d) && !json_is_string(d)) {
            reply_oai_err(r, 400, "tools", "tools[%zu].function.description must be a string", i);
            goto out;
        }
        if (p && !json_is_null(p) && !json_is_object(p)) {
            reply_oai_err(r, 400, "tools", "tools[%zu].function.parameters must be a JSON Schema "
                          "object", i);
            goto out;
        }
        params[i] = p && !json_is_null(p) ? json_deep_copy(p) : json_pack("{s:s}", "type", "object");
        if (!params[i] || hoist(params[i], defs, defs2, i, r))
            goto out;
        json_t *desc = json_pack("{s:s,s:O}", "name", names[i], "parameters", params[i]);
        if (json_is_string(d))
            json_object_set(desc, "description", d);
        char *dt = json_dumps(desc, JSON_COMPACT);
        json_decref(desc);
        lq_sb_printf(&sys, "\n%s", dt ? dt : "");
        free(dt);
    }
    /* each function's schema on its own first, so that an error names the function */
    for (size_t i = 0; i < n; i++) {
        json_t *cs = call_schema(names[i], params[i]);
        char what[96];
        snprintf(what, sizeof what, "tools[%zu].function.parameters", i);
        char *g = cs ? to_gbnf(cs, defs, defs2, what, r) : NULL;
        if (!g) {
            json_decref(cs);
            if (!r->body)
                reply_oai_err(r, 500, NULL, "out of memory");
            goto out;
        }
        free(g);
        if (!named || !strcmp(named, names[i])) {
            json_array_append_new(alts, cs);
            found = 1;
        } else {
            json_decref(cs);
        }
    }
    if (named && !found) {
        reply_oai_err(r, 400, "tool_choice", "tool_choice names the function '%.64s', which is not "
                      "among the tools", named);
        goto out;
    }
    json_t *all = json_pack("{s:O}", "anyOf", alts);
    char *g = all ? to_gbnf(all, defs, defs2, "tools", r) : NULL;
    json_decref(all);
    if (!g)
        goto out;
    {
        /* the call's root becomes `call`; a reply is one call, or (parallel_tool_calls, the
         * default) up to MAX_CALLS one per line; "auto" also allows text that does not start
         * with '{' */
        lq_sb a = {0};
        char *root = !strncmp(g, "root ::= ", 9) ? g : strstr(g, "\nroot ::= ");
        if (root != g)
            lq_sb_put(&a, g, root ? (size_t)(root - g) + 1 : strlen(g));
        lq_sb_puts(&a, "call ::= ");
        lq_sb_puts(&a, root ? root + (root == g ? 9 : 10) : "");
        if (parallel)
            lq_sb_printf(&a, "calls ::= call ( \"\\n\" call ){0,%d}\n", MAX_CALLS - 1);
        else
            lq_sb_puts(&a, "calls ::= call\n");
        lq_sb_puts(&a, mode == TOOLS_AUTO ? "root ::= calls | [^{] .*\n" : "root ::= calls\n");
        free(g);
        g = NULL;
        lq_err err = {0};
        if (lq_sb_finish(&a, &g, &err)) {
            reply_oai_err(r, 500, NULL, "out of memory");
            goto out;
        }
    }
    lq_err err = {0};
    t->gbnf = g;
    t->mode = mode;
    if (lq_sb_finish(&sys, &t->system, &err)) {
        oai_tools_free(t);
        reply_oai_err(r, 500, NULL, "out of memory");
        goto out;
    }
    rc = 0;
out:
    if (rc)
        lq_sb_free(&sys);
    for (size_t i = 0; params && i < n; i++)
        json_decref(params[i]);
    free(params);
    free(names);
    json_decref(defs);
    json_decref(defs2);
    json_decref(alts);
    return rc;
}

/* A content field as text: a string, or the text parts of an array; "" for null. */
static int content_text(json_t *c, lq_sb *b)
{
    if (!c || json_is_null(c))
        return 0;
    if (json_is_string(c)) {
        lq_sb_put(b, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c))
        return -1;
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *tx = json_object_get(part, "text");
        if (!json_is_string(tx))
            return -1;
        lq_sb_put(b, json_string_value(tx), json_string_length(tx));
    }
    return 0;
}

char *oai_tool_history(json_t *msg, size_t i, const char **role, reply *r)
{
    const char *ro = json_string_value(json_object_get(msg, "role"));
    lq_sb b = {0};
    lq_err err = {0};
    char *out = NULL;
    if (ro && (!strcmp(ro, "tool") || !strcmp(ro, "function"))) {
        /* the chat templates have no tool role: the result goes back as a user turn */
        const char *who = json_string_value(json_object_get(msg, "name"));
        if (!who)
            who = json_string_value(json_object_get(msg, "tool_call_id"));
        lq_sb_printf(&b, "Result of the function call%s%s: ", who ? " " : "", who ? who : "");
        if (content_text(json_object_get(msg, "content"), &b)) {
            lq_sb_free(&b);
            reply_oai_err(r, 400, "messages", "messages[%zu].content must be a string or text parts", i);
            return NULL;
        }
        /* OpenAI's schema: a tool result names the call it answers (the legacy "function"
         * role names the function instead) */
        if (!strcmp(ro, "tool") ? !json_is_string(json_object_get(msg, "tool_call_id"))
                                : !json_is_string(json_object_get(msg, "name"))) {
            lq_sb_free(&b);
            reply_oai_err(r, 400, "messages", "messages[%zu]: a %s message needs %s (a string)", i, ro,
                          !strcmp(ro, "tool") ? "tool_call_id" : "name");
            return NULL;
        }
        *role = "user";
    } else {
        json_t *calls = json_object_get(msg, "tool_calls");
        if (content_text(json_object_get(msg, "content"), &b) || !json_is_array(calls)) {
            lq_sb_free(&b);
            reply_oai_err(r, 400, "messages", "messages[%zu]: an assistant message needs string "
                          "content or a tool_calls array", i);
            return NULL;
        }
        size_t k;
        json_t *c;
        json_array_foreach(calls, k, c) {
            json_t *f = json_object_get(c, "function");
            const char *name = json_string_value(json_object_get(f, "name"));
            json_t *args = json_object_get(f, "arguments");
            if (!name || !json_is_string(args)) {
                lq_sb_free(&b);
                reply_oai_err(r, 400, "messages", "messages[%zu].tool_calls[%zu] needs function.name "
                              "and function.arguments (a string)", i, k);
                return NULL;
            }
            /* the call as the model writes it: the arguments as JSON when they parse */
            json_t *a = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
            json_t *call = json_pack("{s:s,s:o}", "name", name, "arguments", a ? a : json_incref(args));
            char *ct = call ? json_dumps(call, JSON_COMPACT) : NULL;
            json_decref(call);
            lq_sb_printf(&b, "%s%s", b.n ? "\n" : "", ct ? ct : "");
            free(ct);
        }
        *role = "assistant";
    }
    if (lq_sb_finish(&b, &out, &err)) {
        reply_oai_err(r, 500, NULL, "out of memory");
        return NULL;
    }
    return out;
}

json_t *oai_tool_calls(const char *text, size_t len)
{
    static uint32_t counter;
    json_t *out = json_array();
    size_t at = 0;
    while (out) {
        while (at < len && (text[at] == ' ' || text[at] == '\n' || text[at] == '\t' || text[at] == '\r'))
            at++;
        if (at == len)
            break;
        /* one object; error.position tells where it ended */
        json_error_t je;
        json_t *v = json_loadb(text + at, len - at, JSON_DISABLE_EOF_CHECK, &je);
        const char *name = json_string_value(json_object_get(v, "name"));
        json_t *args = json_object_get(v, "arguments");
        if (!name || !args) {
            json_decref(v);
            json_decref(out);
            return NULL;
        }
        at += (size_t)je.position;
        char *as = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint32_t c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        char id[48];
        snprintf(id, sizeof id, "call_%08" PRIx32 "%08" PRIx32 "%08" PRIx32, (uint32_t)ts.tv_sec,
                 (uint32_t)ts.tv_nsec, c);
        json_array_append_new(out, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                             "function", "name", name, "arguments", as ? as : "{}"));
        free(as);
        json_decref(v);
    }
    if (out && json_array_size(out) == 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}
