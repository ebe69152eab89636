/* libFuzzer target for the HTTP request handling of every route: byte 0 picks the route,
 * byte 1 the headers (bit 0: the API key, bit 1: an X-Session-Id, bit 2: Content-Type
 * application/octet-stream instead of JSON, bit 3: Accept: application/octet-stream), and the
 * rest is the request: the JSON body of a POST route, the query string of a GET route
 * (percent-encoded as sent), the path segment of /v1/embed/{id} and DELETE /v1/patches/{name}.
 * The request goes to a real server in this process (server.inc), whose route handler parses
 * and runs it.
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_http/, one valid request per
 * route). Properties checked: no crash, no sanitizer report, no hang, a complete HTTP reply
 * whose status is not a 5xx other than 503. */
#include "server.inc"

typedef struct fz_route {
    const char *method, *path;
    int kind; /* 0 body, 1 query string, 2 path segment */
} fz_route;

static const fz_route ROUTES[] = {
    {"POST", "/v1/chat/completions", 0}, {"POST", "/v1/completions", 0}, {"POST", "/v1/embeddings", 0},
    {"POST", "/v1/infer", 0},            {"POST", "/v1/select", 0},      {"POST", "/v1/embed", 0},
    {"POST", "/v1/logits", 0},           {"POST", "/v1/explain-infer", 0}, {"POST", "/v1/insert", 0},
    {"POST", "/v1/patches/apply", 0},    {"GET", "/v1/describe", 1},     {"GET", "/v1/walk", 1},
    {"GET", "/v1/relations", 1},         {"GET", "/v1/token/encode", 1}, {"GET", "/v1/token/decode", 1},
    {"GET", "/v1/patches", 1},           {"GET", "/v1/models", 1},       {"GET", "/v1/stats", 1},
    {"GET", "/v1/embed/", 2},            {"DELETE", "/v1/patches/", 2},
    {"GET", "/assets/", 2},              {"GET", "/", 1},                {"POST", "/v1/walk-ffn", 0},
};
#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

/* bytes a request line may carry as they are; the rest is %XX */
static int url_safe(unsigned char c, int segment)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return strchr(segment ? "-._~" : "-._~=&+,:", c) != NULL && c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    fz_server();
    const fz_route *rt = &ROUTES[data[0] % N_ROUTES];
    unsigned h = data[1];
    data += 2, size -= 2;
    size_t cap = 1024 + (rt->kind ? 3 * size : size);
    char *req = malloc(cap);
    char *reply = malloc(1 << 20);
    if (!req || !reply)
        abort();
    size_t n = (size_t)snprintf(req, cap, "%s %s", rt->method, rt->path);
    if (rt->kind) {
        if (rt->kind == 1 && size)
            req[n++] = '?';
        for (size_t i = 0; i < size; i++)
            n += url_safe(data[i], rt->kind == 2) ? (size_t)(req[n] = (char)data[i], 1)
                                                  : (size_t)sprintf(req + n, "%%%02X", data[i]);
    }
    n += (size_t)snprintf(req + n, cap - n,
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s%sContent-Length: %zu\r\n\r\n",
                          (h & 1) ? "Authorization: Bearer " FUZZ_API_KEY "\r\n" : "",
                          (h & 2) ? "X-Session-Id: fuzz-session\r\n" : "",
                          (h & 4) ? "Content-Type: application/octet-stream\r\n" : "Content-Type: application/json\r\n",
                          (h & 8) ? "Accept: application/octet-stream\r\n" : "", rt->kind ? (size_t)0 : size);
    int fd = fz_connect();
    fz_send(fd, req, n);
    if (!rt->kind)
        fz_send(fd, data, size);
    fz_read_all(fd, reply, 1 << 20);
    fz_close(fd);
    fz_check_status(reply, 0);
    free(req);
    free(reply);
    return 0;
}
