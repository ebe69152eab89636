/* JSON and reply helpers shared by the routes: error envelopes (LARQL's {"error":"msg"} and
 * OpenAI's {"error":{message,type,param,code}}), typed field access that names the field in
 * its 400, UTF-8 sanitising (jansson refuses invalid UTF-8 strings). */
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/utf8.h"
#include "server/internal.h"

double lq_now(void) { return lq_now_ms() / 1e3; }


void srv_log(lq_server *s, const char *fmt, ...)
{
    if (!s->o.log)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->o.log(s->o.log_user, line);
}

json_t *lq_jstr(const char *s, size_t len)
{
    if (lq_utf8_valid(s, len))
        return json_stringn(s, len);
    size_t n;
    char *t = lq_utf8_lossy(s, len, &n);
    if (!t)
        return json_string("");
    json_t *j = json_stringn(t, n);
    free(t);
    return j;
}

char *lq_dump(json_t *j, size_t *len)
{
    /* 9 significant digits round-trip any f32 and keep 0.1-rounded figures short. */
    char *t = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (len)
        *len = t ? strlen(t) : 0;
    return t;
}

void reply_json(reply *r, int status, json_t *j)
{
    free(r->body);
    r->status = status;
    r->ctype = "application/json";
    r->body = j ? lq_dump(j, &r->len) : NULL;
    if (!r->body) {
        r->status = 500;
        r->body = strdup("{\"error\":\"out of memory\"}");
        r->len = r->body ? strlen(r->body) : 0;
    }
    json_decref(j);
}

void reply_larql_err(reply *r, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    reply_json(r, status, json_pack("{s:o}", "error", lq_jstr(msg, strlen(msg))));
}

static const char *oai_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    case 504: return "timeout_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static void oai_err_v(reply *r, int status, const char *param, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    json_t *e = json_pack("{s:o,s:s,s:o,s:n}", "message", lq_jstr(msg, strlen(msg)), "type",
                          oai_type(status), "param", param ? json_string(param) : json_null(), "code");
    reply_json(r, status, json_pack("{s:o}", "error", e));
}

void reply_oai_err(reply *r, int status, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    oai_err_v(r, status, param, fmt, ap);
    va_end(ap);
}

void reply_route_err(reply *r, const route *rt, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rt && (rt->flags & RT_OPENAI))
        reply_oai_err(r, status, NULL, "%s", msg);
    else
        reply_larql_err(r, status, "%s", msg);
}

int status_from_lq(int code)
{
    switch (code) {
    case LQ_EINVAL: case LQ_ERANGE: case LQ_ECONTEXT: case LQ_EUNSUPPORTED: return 400;
    case LQ_ENOTFOUND: return 404;
    case LQ_EBUSY: return 503;
    case LQ_EREFUSED: return 422;
    default: return 500;
    }
}

json_t *req_json_body(req *q, reply *r)
{
    if (!q->len) {
        reply_route_err(r, q->rt, 400, "request body is empty: expected a JSON object");
        return NULL;
    }
    json_error_t je;
    /* jansson validates UTF-8 and rejects NUL bytes inside strings by default. */
    json_t *j = json_loadb(q->body, q->len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        reply_route_err(r, q->rt, 400, "malformed JSON at line %d column %d: %s", je.line, je.column,
                        je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        reply_route_err(r, q->rt, srv_shape_status(q->rt), "request body must be a JSON object");
        return NULL;
    }
    return j;
}

/* A body that is JSON but not of the shape a route takes (a field missing or of another
 * type): 422 on LARQL's routes, as LARQL's JSON extractor answers; 400 on the OpenAI routes,
 * as OpenAI does. A value of the right type out of range is 400 on both. */
int srv_shape_status(const route *rt)
{
    return rt && (rt->flags & RT_OPENAI) ? 400 : 422;
}

static void field_err(const route *rt, reply *r, const char *k, int shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void field_err(const route *rt, reply *r, const char *k, int shape, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int status = shape ? srv_shape_status(rt) : 400;
    if (rt && (rt->flags & RT_OPENAI)) {
        oai_err_v(r, status, k, fmt, ap);
    } else {
        char msg[1024];
        vsnprintf(msg, sizeof msg, fmt, ap);
        reply_larql_err(r, status, "%s", msg);
    }
    va_end(ap);
}

int jget_int(const route *rt, json_t *o, const char *k, long lo, long hi, long *out, reply *r)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < lo || x > hi) {
            field_err(rt, r, k, 0, "'%s' is %lld: must be between %ld and %ld", k, (long long)x, lo, hi);
            return -1;
        }
        *out = (long)x;
        return 1;
    }
    /* 16.0 is an integer to most JSON producers */
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && d >= (double)lo && d <= (double)hi) {
            *out = (long)d;
            return 1;
        }
    }
    if (json_is_real(v)) {
        field_err(rt, r, k, 1, "'%s' must be an integer between %ld and %ld", k, lo, hi);
        return -1;
    }
    field_err(rt, r, k, 1, "'%s' must be an integer", k);
    return -1;
}

int jget_num(const route *rt, json_t *o, const char *k, double lo, double hi, double *out, reply *r)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v)) {
        field_err(rt, r, k, 1, "'%s' must be a number", k);
        return -1;
    }
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        field_err(rt, r, k, 0, "'%s' is %g: must be between %g and %g", k, x, lo, hi);
        return -1;
    }
    *out = x;
    return 1;
}

int jget_bool(const route *rt, json_t *o, const char *k, int *out, reply *r)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        field_err(rt, r, k, 1, "'%s' must be true or false", k);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

int jget_str(const route *rt, json_t *o, const char *k, const char **out, size_t *len, reply *r)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        field_err(rt, r, k, 1, "'%s' must be a string", k);
        return -1;
    }
    *out = json_string_value(v);
    if (len)
        *len = json_string_length(v);
    return 1;
}

int srv_conn_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 1;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}
