/* libFuzzer target for model loading and evaluation: the input is a GGUF file, opened with
 * lq_model_open (config, tensor shapes and types, tokenizer metadata), then its tokenizer
 * encodes and decodes a sentence and a session evaluates a few tokens.
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_model/, small models written
 * by `larql make-model`). Properties checked: no crash, no sanitizer report, no hang, every
 * failure has a message, a failed open leaves no handle. Weights are fuzzed too, so the
 * logits themselves (even NaN) are not judged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "larql/model.h"
#include "larql/tokenizer.h"

/* lq_model_open takes a path: the input goes into one memfd, reused for every run, that is
 * opened through /proc (no disk writes). */
static int input_path(const uint8_t *data, size_t size, char *path, size_t cap)
{
    static int fd = -1;
    if (fd < 0 && (fd = memfd_create("fuzz_model.gguf", MFD_CLOEXEC)) < 0)
        return -1;
    if (ftruncate(fd, 0) != 0)
        return -1;
    for (size_t off = 0; off < size;) {
        ssize_t w = pwrite(fd, data + off, size - off, (off_t)off);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return 0;
}

static void tokenizer_round_trip(const lq_tokenizer *t)
{
    static const char text[] = "The capital of France is Paris. <|eot_id|> \xc3\xa9t\xc3\xa9";
    int32_t *ids = NULL;
    size_t n = 0;
    lq_err err = {0};
    if (lq_tokenizer_encode(t, text, sizeof text - 1, LQ_TOK_ADD_BOS | LQ_TOK_PARSE_SPECIAL, &ids, &n,
                            &err) != LQ_OK) {
        if (!err.msg[0])
            abort();
        return;
    }
    char *back = NULL;
    size_t len = 0;
    if (lq_tokenizer_decode(t, ids, n, LQ_DETOK_SKIP_SPECIAL, &back, &len, &err) != LQ_OK && !err.msg[0])
        abort();
    free(back);
    free(ids);
}

static void evaluate(lq_model *m)
{
    const lq_model_info *info = lq_model_get_info(m);
    lq_session *s = NULL;
    lq_err err = {0};
    /* a short context keeps the KV cache small whatever the file claims */
    if (lq_session_create(m, 8, &s, &err) != LQ_OK) {
        if (s || !err.msg[0])
            abort();
        return;
    }
    float *logits = malloc((size_t)info->n_vocab * sizeof *logits);
    if (!logits) {
        lq_session_free(s);
        return;
    }
    int32_t v = info->n_vocab;
    const int32_t prompt[3] = {0, v - 1, v / 2};
    if (lq_session_eval(s, prompt, 3, logits, NULL, &err) != LQ_OK && !err.msg[0])
        abort();
    for (int step = 0; step < 2; step++)
        if (lq_session_decode(s, (int32_t)(step + 1) % v, logits, &err) != LQ_OK && !err.msg[0])
            abort();
    /* past the end of the context: refused with a message, nothing changed */
    const int32_t many[9] = {0};
    if (lq_session_eval(s, many, 9, logits, NULL, &err) == LQ_OK || !err.msg[0])
        abort();
    free(logits);
    lq_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    if (input_path(data, size, path, sizeof path) != 0)
        abort();
    lq_model_opts opts = {0};
    opts.n_threads = 1;
    opts.hugepages = -1; /* map the input; no 2 MB-page copy per run */
    lq_model *m = NULL;
    lq_err err = {0};
    if (lq_model_open(path, &opts, &m, &err) != LQ_OK) {
        if (m || !err.msg[0])
            abort();
        return 0;
    }
    tokenizer_round_trip(lq_model_tokenizer(m));
    evaluate(m);
    lq_model_close(m);
    return 0;
}
