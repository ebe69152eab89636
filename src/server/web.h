/* The built-in web page (web/ in the source tree): its files are compiled into the binary
 * by tools/embed_web.c (build/gen/web_assets.c), so GET / and GET /assets/NAME are answered
 * from memory; a request path is only ever compared with these names. Not a public header. */
#ifndef LQ_SERVER_WEB_H
#define LQ_SERVER_WEB_H

#include <stddef.h>

typedef struct srv_web_asset {
    const char *name;         /* base name under web/, e.g. "app.js" */
    const char *ctype;        /* Content-Type */
    const char *etag;         /* quoted hash of the bytes, e.g. "\"0123456789abcdef\"" */
    const unsigned char *data;
    size_t len;
} srv_web_asset;

extern const srv_web_asset srv_web_assets[];
extern const int srv_web_n_assets;

/* The asset served under NAME, or NULL. */
const srv_web_asset *srv_web_find(const char *name);

#endif
