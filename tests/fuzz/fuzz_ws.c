/* libFuzzer target for the WebSocket frame parser and message handling (src/server/ws.c):
 * after a valid upgrade handshake on GET /v1/stream, the input is sent as raw client bytes
 * (frames: headers, lengths, masks, fragmentation, control frames, and the JSON messages
 * describe / infer / generate / cancel inside them), then the client half-closes (after the 101) and reads
 * until the server closes. The server runs in this process (server.inc). Byte 0 bit 0 sends
 * the handshake and the first frames in one write (they reach the parser as the upgrade's
 * extra bytes), else in two.
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_ws/, masked frames carrying
 * each message type, made by tests/fuzz/make_seeds.py). Properties checked: no crash, no
 * sanitizer report, no hang, the upgrade is answered 101, the server ends the session. */
#include "server.inc"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fz_server();
    int together = data[0] & 1;
    data++, size--;
    static const char hs[] = "GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                             "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                             "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer " FUZZ_API_KEY "\r\n\r\n";
    int fd = fz_connect();
    char *reply = malloc(1 << 20);
    if (!reply)
        abort();
    if (together) {
        char *all = malloc(sizeof hs - 1 + size);
        if (!all)
            abort();
        memcpy(all, hs, sizeof hs - 1);
        memcpy(all + sizeof hs - 1, data, size);
        fz_send(fd, all, sizeof hs - 1 + size);
        free(all);
    } else {
        fz_send(fd, hs, sizeof hs - 1);
        fz_send(fd, data, size);
    }
    /* half-close only once the 101 is in: MHD would drop a request whose client hung up */
    size_t got = fz_read_head(fd, reply, 1 << 20);
    shutdown(fd, SHUT_WR);
    fz_read_all(fd, reply + got, (1 << 20) - got);
    fz_close(fd);
    if (fz_check_status(reply, 0) != 101) {
        fprintf(stderr, "fuzz: the upgrade was not answered 101:\n%.500s\n", reply);
        abort();
    }
    free(reply);
    return 0;
}
