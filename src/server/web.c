/* GET / and GET /assets/NAME: the built-in page (web/), served from the arrays
 * tools/embed_web.c generated at build time. NAME is compared with the embedded names and
 * never used as a path, so nothing a request says reaches the filesystem. Every response
 * carries a Content-Security-Policy that allows this origin only (no inline script, no
 * other host), an ETag of the bytes, and Cache-Control: no-cache (the names are stable
 * across versions, so the browser revalidates and gets a 304 while the bytes are the same).
 * The page itself is public even with --api-key: it holds no data, and the user types the
 * key into it; every API route it calls still needs the key. */
#include <string.h>

#include "server/internal.h"
#include "server/web.h"

const srv_web_asset *srv_web_find(const char *name)
{
    for (int i = 0; i < srv_web_n_assets; i++)
        if (!strcmp(srv_web_assets[i].name, name))
            return &srv_web_assets[i];
    return NULL;
}

/* If-None-Match: a list of quoted tags, or "*". Weak tags (W/"...") match too, as RFC 9110
 * asks of a GET's conditional. */
int srv_etag_matches(const char *inm, const char *etag)
{
    if (!inm)
        return 0;
    size_t el = strlen(etag);
    for (const char *p = inm; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '*')
            return 1;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (!strncmp(p, etag, el) && (p[el] == 0 || p[el] == ',' || p[el] == ' ' || p[el] == '\t'))
            return 1;
        while (*p && *p != ',')
            p++;
    }
    return 0;
}

static void web_asset(req *q, reply *r, const char *name)
{
    const srv_web_asset *a = q->path_arg_long ? NULL : srv_web_find(name);
    r->web = 1;
    if (!a) {
        reply_larql_err(r, 404, "no asset named '%s'", q->path_arg_long ? "(too long)" : name);
        return;
    }
    r->etag = a->etag;
    r->cache_control = "no-cache";
    if (srv_etag_matches(MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH), a->etag)) {
        r->status = 304;
        r->static_body = "";
        r->len = 0;
        return;
    }
    r->status = 200;
    r->ctype = a->ctype;
    r->static_body = a->data;
    r->len = a->len;
}

void route_web_index(lq_server *s, req *q, reply *r)
{
    (void)s;
    web_asset(q, r, "index.html");
}

void route_web_asset(lq_server *s, req *q, reply *r)
{
    (void)s;
    web_asset(q, r, q->path_arg);
}
