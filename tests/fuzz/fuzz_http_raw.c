/* libFuzzer target for the server's HTTP framing: the input is sent as it is, the whole
 * connection's bytes (request lines, headers, chunked bodies, pipelined requests, duplicate
 * Content-Length, Transfer-Encoding beside Content-Length, bare LF, folded headers), then
 * the client half-closes and reads to EOF. fuzz_http builds well-formed requests to reach
 * the routes; this one is for what a proxy or an attacker puts on the wire.
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_http_raw/, one file per
 * framing case). Properties checked: no crash, no sanitizer report, no hang (the reply ends
 * within 20 s), every reply the server writes starts as an HTTP/1.x status line, and no
 * status is a 5xx other than the protocol's own answers to what the bytes ask (501: a method
 * it does not implement, 505: an HTTP version it does not speak) and 503. */
#include "server.inc"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 256 * 1024)
        return 0;
    fz_server();
    char *reply = malloc(1 << 20);
    if (!reply)
        abort();
    int fd = fz_connect();
    fz_send(fd, data, size);
    shutdown(fd, SHUT_WR); /* nothing more: a request cut short must not wait for the idle timeout */
    size_t n = fz_read_all(fd, reply, 1 << 20);
    fz_close(fd);
    if (n && strncmp(reply, "HTTP/1.", 7) != 0) {
        fprintf(stderr, "fuzz: the reply does not start with a status line:\n%.300s\n", reply);
        abort();
    }
    /* every status line of the pipelined replies */
    for (const char *p = reply; p && *p; p = strstr(p + 1, "\r\nHTTP/1.")) {
        if (p != reply)
            p += 2;
        fz_check_status(p, 1);
    }
    free(reply);
    return 0;
}
