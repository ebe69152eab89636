/* libFuzzer target for tokenizer loading and encoding: the input is a tokenizer source and a
 * text. Byte 0 chooses the source's kind (even: tokenizer.json, odd: a GGUF file's
 * tokenizer.ggml.* metadata) and the encode flags; bytes 1..4 (u32 little-endian) are the
 * source's length; the rest after the source is the text, arbitrary bytes. A tokenizer that
 * loads encodes the text, decodes the ids back, streams them through the detokenizer and
 * encodes the detokenized text again.
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_tokenizer/, a fixture's
 * tokenizer.json and GGUF, made by tests/fuzz/make_seeds.py). Properties checked: no crash,
 * no sanitizer report, no hang, every failure has a message, every id produced is in the
 * vocabulary, a failed load leaves no handle. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "larql/gguf.h"
#include "larql/tokenizer.h"

static void round_trip(const lq_tokenizer *t, const char *text, size_t len, unsigned flags)
{
    int32_t *ids = NULL;
    size_t n = 0;
    lq_err err = {0};
    if (lq_tokenizer_encode(t, text, len, flags, &ids, &n, &err) != LQ_OK) {
        if (!err.msg[0] || ids)
            abort();
        return;
    }
    int32_t nv = lq_tokenizer_n_vocab(t);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv)
            abort();
    char *back = NULL;
    size_t blen = 0;
    if (lq_tokenizer_decode(t, ids, n, 0, &back, &blen, &err) != LQ_OK && !err.msg[0])
        abort();
    lq_detok *d = NULL;
    if (lq_detok_create(t, LQ_DETOK_SKIP_SPECIAL, &d, &err) == LQ_OK) {
        char out[64];
        size_t olen;
        for (size_t i = 0; i < n; i++)
            if (lq_detok_push(d, ids[i], out, sizeof out, &olen, &err) != LQ_OK && !err.msg[0])
                abort();
        lq_detok_flush(d, out, sizeof out, &olen);
        lq_detok_free(d);
    }
    if (back) {
        int32_t *ids2 = NULL;
        size_t n2 = 0;
        if (lq_tokenizer_encode(t, back, blen, 0, &ids2, &n2, &err) != LQ_OK && !err.msg[0])
            abort();
        free(ids2);
    }
    for (int32_t id = 0; id < nv && id < 512; id++) {
        size_t plen;
        lq_tokenizer_piece(t, id, &plen);
    }
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    unsigned mode = data[0];
    size_t slen = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
    data += 5, size -= 5;
    if (slen > size)
        slen = size;
    const char *text = (const char *)data + slen;
    size_t tlen = size - slen;
    lq_tokenizer *t = NULL;
    lq_err err = {0};
    int rc;
    if (mode & 1) {
        lq_gguf *g = NULL;
        if (lq_gguf_open_buffer(data, slen, &g, &err) != LQ_OK) {
            if (g || !err.msg[0])
                abort();
            return 0;
        }
        rc = lq_tokenizer_from_gguf(g, &t, &err);
        lq_gguf_close(g);
    } else {
        rc = lq_tokenizer_from_json((const char *)data, slen, &t, &err);
    }
    if (rc != LQ_OK) {
        if (t || !err.msg[0])
            abort();
        return 0;
    }
    unsigned flags = ((mode & 2) ? LQ_TOK_ADD_BOS : 0) | ((mode & 4) ? LQ_TOK_PARSE_SPECIAL : 0);
    round_trip(t, text, tlen, flags);
    lq_tokenizer_free(t);
    return 0;
}
