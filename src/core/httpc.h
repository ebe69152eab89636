/* A small HTTP/1.1 client for the library's own calls to another larql process (the remote
 * FFN, src/model/ffn_remote.c): http:// only, keep-alive connections reused from a pool,
 * every request bounded by one deadline (connect, send and receive together), response
 * bodies capped by the caller. The server's bytes are untrusted: every length is checked. */
#ifndef LQ_CORE_HTTPC_H
#define LQ_CORE_HTTPC_H

#include <stddef.h>

#include "larql/status.h"

typedef struct lq_httpc lq_httpc;

typedef struct lq_httpc_resp {
    int status;         /* HTTP status code */
    char ctype[128];    /* Content-Type (cut), "" when absent */
    char *body;         /* malloc'd, NUL-terminated (len bytes before the NUL) */
    size_t len;
} lq_httpc_resp;

/* url: "http://host[:port][/prefix]". timeout_ms > 0. */
int lq_httpc_new(const char *url, int timeout_ms, lq_httpc **out, lq_err *err);
/* One request: method path (appended to the URL's prefix), an optional body with its content
 * type, an optional Accept. A body over max_resp bytes is an error (LQ_EFORMAT); so is a
 * malformed response. Unreachable, timed out or cut connections: LQ_EIO. Thread-safe. */
int lq_httpc_request(lq_httpc *c, const char *method, const char *path, const char *ctype, const char *accept,
                     const void *body, size_t len, size_t max_resp, lq_httpc_resp *resp, lq_err *err);
void lq_httpc_resp_free(lq_httpc_resp *resp);
const char *lq_httpc_url(const lq_httpc *c);
void lq_httpc_free(lq_httpc *c);

#endif
