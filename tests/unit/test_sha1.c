/* SHA-1 against the FIPS 180-2 / RFC 3174 vectors (one block, two blocks, a million 'a's
 * fed in uneven pieces), base64 against RFC 4648 §10, and the RFC 6455 §1.3 handshake
 * example (Sec-WebSocket-Accept of "dGhlIHNhbXBsZSBub25jZQ=="). */
#include "harness.h"

#include "core/sha1.h"

static void hex(const uint8_t d[20], char out[41])
{
    for (int i = 0; i < 20; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check_sha1(const char *msg, const char *want)
{
    uint8_t d[20];
    char h[41];
    lq_sha1(msg, strlen(msg), d);
    hex(d, h);
    CHECK_MSG(!strcmp(h, want), "sha1(\"%.40s\") = %s, want %s", msg, h, want);
}

static void test_sha1_vectors(void)
{
    check_sha1("", "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    check_sha1("abc", "a9993e364706816aba3e25717850c26c9cd0d89d");
    check_sha1("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
               "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    /* 55, 56 and 64 bytes: the padding edge cases (length field in this or the next block);
     * digests from an independent implementation (Python hashlib) */
    check_sha1("0123456789012345678901234567890123456789012345678901234",
               "9f3a4ce7f66b1b74c34da2c5d732c39f81e0f8df");
    check_sha1("01234567012345670123456701234567012345670123456701234567",
               "e8db7ebaebb692565d590a48b1dc506b6f130950");
    check_sha1("0123456701234567012345670123456701234567012345670123456701234567",
               "e0c094e867ef46c350ef54a7f59dd60bed92ae83");
}

static void test_sha1_million_a(void)
{
    static char buf[1000];
    memset(buf, 'a', sizeof buf);
    lq_sha1_ctx c;
    lq_sha1_init(&c);
    size_t left = 1000000, step = 1;
    while (left) {
        size_t n = step < left ? step : left;
        if (n > sizeof buf)
            n = sizeof buf;
        lq_sha1_update(&c, buf, n);
        left -= n;
        step = step * 7 % 997 + 1; /* uneven pieces cross block boundaries everywhere */
    }
    uint8_t d[20];
    char h[41];
    lq_sha1_final(&c, d);
    hex(d, h);
    CHECK_MSG(!strcmp(h, "34aa973cd4c4daa4f61eeb2bdbad27316534016f"), "got %s", h);
}

static void test_base64(void)
{
    static const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *want[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char out[16];
        size_t n = lq_base64_encode(in[i], strlen(in[i]), out);
        CHECK_MSG(!strcmp(out, want[i]) && n == strlen(want[i]), "base64(%s) = %s", in[i], out);
    }
}

static void test_websocket_accept(void)
{
    const char *key = "dGhlIHNhbXBsZSBub25jZQ==", *guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    lq_sha1_ctx c;
    uint8_t d[20];
    char out[32];
    lq_sha1_init(&c);
    lq_sha1_update(&c, key, strlen(key));
    lq_sha1_update(&c, guid, strlen(guid));
    lq_sha1_final(&c, d);
    lq_base64_encode(d, 20, out);
    CHECK_MSG(!strcmp(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "accept = %s", out);
}

int main(void)
{
    RUN(test_sha1_vectors);
    RUN(test_sha1_million_a);
    RUN(test_base64);
    RUN(test_websocket_accept);
    return harness_done();
}
