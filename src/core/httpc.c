/* HTTP/1.1 client (httpc.h). One request per connection at a time; idle keep-alive
 * connections wait in a small pool so that a decode step's per-layer requests do not pay a
 * TCP handshake each. A request on a reused connection that the server had already closed
 * (keep-alive timeout) is retried once on a fresh one, but only when no byte of a response
 * arrived. */
#include "core/httpc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"

#define POOL_MAX 16
#define HEAD_MAX 16384 /* response status line + headers */

struct lq_httpc {
    char url[512];
    char host[256];
    char port[8];
    char prefix[256];
    int timeout_ms;
    pthread_mutex_t mu;
    int idle[POOL_MAX]; /* keep-alive connections not in use */
    int n_idle;
};

int lq_httpc_new(const char *url, int timeout_ms, lq_httpc **out, lq_err *err)
{
    *out = NULL;
    if (!url || strncasecmp(url, "http://", 7))
        return lq_err_set(err, LQ_EINVAL, "'%s' is not an http:// URL (https is not supported: use a TLS proxy's "
                                          "local side)", url ? url : "(null)");
    if (strlen(url) >= 512)
        return lq_err_set(err, LQ_EINVAL, "URL longer than 511 bytes");
    if (timeout_ms <= 0)
        return lq_err_set(err, LQ_EINVAL, "HTTP client timeout must be positive (got %d ms)", timeout_ms);
    lq_httpc *c = calloc(1, sizeof *c);
    if (!c)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    snprintf(c->url, sizeof c->url, "%s", url);
    const char *h = url + 7, *slash = strchr(h, '/'), *end = slash ? slash : h + strlen(h);
    const char *colon = memchr(h, ':', (size_t)(end - h));
    size_t hl = (size_t)((colon ? colon : end) - h);
    size_t pl = colon ? (size_t)(end - colon - 1) : 0;
    if (!hl || hl >= sizeof c->host || (colon && (!pl || pl > 5 || strspn(colon + 1, "0123456789") < pl))) {
        free(c);
        return lq_err_set(err, LQ_EINVAL, "bad host or port in URL '%s'", url);
    }
    memcpy(c->host, h, hl);
    snprintf(c->port, sizeof c->port, "%.*s", colon ? (int)pl : 2, colon ? colon + 1 : "80");
    snprintf(c->prefix, sizeof c->prefix, "%s", slash ? slash : "");
    size_t xl = strlen(c->prefix);
    while (xl && c->prefix[xl - 1] == '/')
        c->prefix[--xl] = 0;
    c->timeout_ms = timeout_ms;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return LQ_OK;
}

const char *lq_httpc_url(const lq_httpc *c) { return c ? c->url : NULL; }

void lq_httpc_free(lq_httpc *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_idle; i++)
        close(c->idle[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void lq_httpc_resp_free(lq_httpc_resp *resp)
{
    if (resp) {
        free(resp->body);
        resp->body = NULL;
        resp->len = 0;
    }
}

static int remaining(double deadline)
{
    double r = deadline - lq_now_ms();
    return r <= 0 ? 0 : r > 1e9 ? 1000000000 : (int)r + 1;
}

/* Waits until fd is ready for ev; 0, or -1 on timeout/error. */
static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        int ms = remaining(deadline);
        if (ms <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = ev};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

static int dial(lq_httpc *c, double deadline, lq_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(c->host, c->port, &hints, &ai);
    if (g)
        return lq_err_set(err, LQ_EIO, "%s: cannot resolve %s: %s", c->url, c->host, gai_strerror(g));
    int fd = -1, last = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        int one = 1; /* small request/response pairs: no Nagle delay */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc && errno == EINPROGRESS) {
            int e = 0;
            socklen_t el = sizeof e;
            if (wait_fd(fd, POLLOUT, deadline) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) || e) {
                last = e ? e : ETIMEDOUT;
                rc = -1;
            } else {
                rc = 0;
            }
        } else if (rc) {
            last = errno;
        }
        if (rc) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return lq_err_set(err, LQ_EIO, "%s: cannot connect: %s", c->url, strerror(last ? last : ECONNREFUSED));
    return fd;
}

static int send_all(int fd, const char *p, size_t n, double deadline)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (wait_fd(fd, POLLOUT, deadline))
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Reads at most n bytes; >0 read, 0 peer closed, -1 error or timeout. */
static ssize_t recv_some(int fd, char *p, size_t n, double deadline)
{
    for (;;) {
        ssize_t r = recv(fd, p, n, 0);
        if (r >= 0)
            return r;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        if (wait_fd(fd, POLLIN, deadline))
            return -1;
    }
}

/* A buffered reader over the connection: head bytes read past the blank line are the
 * body's first bytes. */
typedef struct rd {
    int fd;
    double deadline;
    char buf[HEAD_MAX];
    size_t have, off;
} rd;

static int rd_byte(rd *r, char *ch)
{
    if (r->off == r->have) {
        ssize_t n = recv_some(r->fd, r->buf, sizeof r->buf, r->deadline);
        if (n <= 0)
            return -1;
        r->have = (size_t)n;
        r->off = 0;
    }
    *ch = r->buf[r->off++];
    return 0;
}

static int rd_bytes(rd *r, char *dst, size_t n)
{
    while (n) {
        if (r->off < r->have) {
            size_t k = r->have - r->off < n ? r->have - r->off : n;
            memcpy(dst, r->buf + r->off, k);
            r->off += k;
            dst += k;
            n -= k;
            continue;
        }
        ssize_t got = recv_some(r->fd, dst, n, r->deadline);
        if (got <= 0)
            return -1;
        dst += got;
        n -= (size_t)got;
    }
    return 0;
}

/* One line (CRLF or LF stripped) of at most cap-1 bytes; -1 when longer or cut. */
static int rd_line(rd *r, char *line, size_t cap)
{
    size_t n = 0;
    for (;;) {
        char ch;
        if (rd_byte(r, &ch))
            return -1;
        if (ch == '\n')
            break;
        if (n + 1 >= cap)
            return -1;
        line[n++] = ch;
    }
    if (n && line[n - 1] == '\r')
        n--;
    line[n] = 0;
    return 0;
}

static int grow(char **body, size_t *cap, size_t need, size_t max)
{
    if (need <= *cap)
        return 0;
    if (need > max + 1)
        return -1;
    size_t nc = *cap ? *cap : 4096;
    while (nc < need)
        nc = nc > (max + 1) / 2 ? max + 1 : nc * 2;
    char *b = realloc(*body, nc);
    if (!b)
        return -1;
    *body = b;
    *cap = nc;
    return 0;
}

/* Reads one response. Returns 0; LQ_EIO with *fresh_fail set when the peer closed before any
 * byte (a stale keep-alive connection: retryable); LQ_EIO/LQ_EFORMAT otherwise. *keep: the
 * connection may be reused. */
static int read_resp(lq_httpc *c, int fd, double deadline, size_t max_resp, lq_httpc_resp *resp, int *keep,
                     int *fresh_fail, lq_err *err)
{
    rd *r = malloc(sizeof *r);
    if (!r)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    r->fd = fd;
    r->deadline = deadline;
    r->have = r->off = 0;
    char line[1024];
    int rc = LQ_OK;
    char *body = NULL;
    size_t cap = 0, len = 0;
    *keep = 1;
    if (rd_line(r, line, sizeof line)) {
        *fresh_fail = r->have == 0;
        rc = lq_err_set(err, LQ_EIO, "%s: no response (%s)", c->url,
                        remaining(deadline) <= 0 ? "timed out" : "connection closed");
        goto out;
    }
    int minor = 0;
    if (sscanf(line, "HTTP/1.%d %d", &minor, &resp->status) != 2 || resp->status < 100 || resp->status > 599) {
        rc = lq_err_set(err, LQ_EFORMAT, "%s: not an HTTP response: '%.60s'", c->url, line);
        goto out;
    }
    if (minor == 0)
        *keep = 0;
    long long clen = -1;
    int chunked = 0;
    size_t head = strlen(line);
    for (;;) {
        if (rd_line(r, line, sizeof line)) {
            rc = lq_err_set(err, LQ_EIO, "%s: response headers cut or too long", c->url);
            goto out;
        }
        head += strlen(line);
        if (head > HEAD_MAX) {
            rc = lq_err_set(err, LQ_EFORMAT, "%s: response headers over %d bytes", c->url, HEAD_MAX);
            goto out;
        }
        if (!line[0])
            break;
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = 0;
        char *v = colon + 1;
        v += strspn(v, " \t");
        if (!strcasecmp(line, "Content-Length")) {
            char *e;
            errno = 0;
            clen = strtoll(v, &e, 10);
            if (errno || e == v || clen < 0) {
                rc = lq_err_set(err, LQ_EFORMAT, "%s: bad Content-Length '%.40s'", c->url, v);
                goto out;
            }
        } else if (!strcasecmp(line, "Transfer-Encoding")) {
            chunked = strcasestr(v, "chunked") != NULL;
        } else if (!strcasecmp(line, "Content-Type")) {
            snprintf(resp->ctype, sizeof resp->ctype, "%s", v);
        } else if (!strcasecmp(line, "Connection")) {
            if (strcasestr(v, "close"))
                *keep = 0;
        }
    }
    if (chunked) {
        for (;;) {
            if (rd_line(r, line, sizeof line)) {
                rc = lq_err_set(err, LQ_EIO, "%s: chunked body cut", c->url);
                goto out;
            }
            char *e;
            errno = 0;
            unsigned long long sz = strtoull(line, &e, 16);
            if (errno || e == line) {
                rc = lq_err_set(err, LQ_EFORMAT, "%s: bad chunk size line", c->url);
                goto out;
            }
            if (sz == 0)
                break;
            if (sz > max_resp - len || grow(&body, &cap, len + sz + 1, max_resp)) {
                rc = lq_err_set(err, LQ_EFORMAT, "%s: response body over %zu bytes", c->url, max_resp);
                goto out;
            }
            if (rd_bytes(r, body + len, (size_t)sz) || rd_line(r, line, sizeof line)) {
                rc = lq_err_set(err, LQ_EIO, "%s: chunked body cut", c->url);
                goto out;
            }
            len += (size_t)sz;
        }
        while (!rd_line(r, line, sizeof line) && line[0]) /* trailers */
            ;
    } else if (clen >= 0) {
        if ((unsigned long long)clen > max_resp || grow(&body, &cap, (size_t)clen + 1, max_resp)) {
            rc = lq_err_set(err, LQ_EFORMAT, "%s: response body of %lld bytes is over the %zu expected", c->url,
                            clen, max_resp);
            *keep = 0;
            goto out;
        }
        if (rd_bytes(r, body, (size_t)clen)) {
            rc = lq_err_set(err, LQ_EIO, "%s: response body cut (%s)", c->url,
                            remaining(deadline) <= 0 ? "timed out" : "connection closed");
            goto out;
        }
        len = (size_t)clen;
    } else { /* no length: the body runs to the close */
        *keep = 0;
        for (;;) {
            if (grow(&body, &cap, len + 4096 + 1, max_resp + 4096)) {
                rc = lq_err_set(err, LQ_EFORMAT, "%s: response body over %zu bytes", c->url, max_resp);
                goto out;
            }
            if (r->off < r->have) {
                size_t k = r->have - r->off;
                memcpy(body + len, r->buf + r->off, k);
                r->off = r->have;
                len += k;
                continue;
            }
            ssize_t n = recv_some(fd, body + len, 4096, deadline);
            if (n < 0) {
                rc = lq_err_set(err, LQ_EIO, "%s: response body cut", c->url);
                goto out;
            }
            if (n == 0)
                break;
            len += (size_t)n;
            if (len > max_resp) {
                rc = lq_err_set(err, LQ_EFORMAT, "%s: response body over %zu bytes", c->url, max_resp);
                goto out;
            }
        }
    }
    if (r->off != r->have) /* bytes past the response: not a connection to reuse */
        *keep = 0;
    if (grow(&body, &cap, len + 1, max_resp + 4096)) {
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        goto out;
    }
    body[len] = 0;
    resp->body = body;
    resp->len = len;
    body = NULL;
out:
    free(body);
    free(r);
    return rc;
}

int lq_httpc_request(lq_httpc *c, const char *method, const char *path, const char *ctype, const char *accept,
                     const void *body, size_t len, size_t max_resp, lq_httpc_resp *resp, lq_err *err)
{
    memset(resp, 0, sizeof *resp);
    double deadline = lq_now_ms() + c->timeout_ms;
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "%s %s%s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: larql\r\nContent-Length: %zu\r\n%s%s%s%s%s%s\r\n",
                      method, c->prefix, path, c->host, c->port, len, ctype ? "Content-Type: " : "",
                      ctype ? ctype : "", ctype ? "\r\n" : "", accept ? "Accept: " : "", accept ? accept : "",
                      accept ? "\r\n" : "");
    if (hn < 0 || (size_t)hn >= sizeof head)
        return lq_err_set(err, LQ_EINVAL, "request line too long");
    for (int attempt = 0;; attempt++) {
        int fd = -1, reused = 0;
        pthread_mutex_lock(&c->mu);
        if (c->n_idle)
            fd = c->idle[--c->n_idle];
        pthread_mutex_unlock(&c->mu);
        if (fd >= 0) {
            reused = 1;
        } else {
            fd = dial(c, deadline, err);
            if (fd < 0)
                return LQ_EIO;
        }
        int keep = 0, fresh_fail = 0, rc;
        if (send_all(fd, head, (size_t)hn, deadline) || (len && send_all(fd, body, len, deadline))) {
            fresh_fail = 1;
            rc = lq_err_set(err, LQ_EIO, "%s: sending the request failed (%s)", c->url,
                            remaining(deadline) <= 0 ? "timed out" : strerror(errno));
        } else {
            rc = read_resp(c, fd, deadline, max_resp, resp, &keep, &fresh_fail, err);
        }
        if (rc == LQ_OK && keep) {
            pthread_mutex_lock(&c->mu);
            if (c->n_idle < POOL_MAX) {
                c->idle[c->n_idle++] = fd;
                fd = -1;
            }
            pthread_mutex_unlock(&c->mu);
        }
        if (fd >= 0)
            close(fd);
        if (rc && reused && fresh_fail && attempt == 0 && remaining(deadline) > 0) {
            memset(resp, 0, sizeof *resp);
            continue; /* the server dropped an idle connection: once more on a new one */
        }
        return rc;
    }
}
