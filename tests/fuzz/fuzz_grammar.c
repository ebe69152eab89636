/* libFuzzer target for the grammar engine: byte 0 picks the input kind (even: GBNF text,
 * odd: a JSON schema); the bytes after it up to the first NUL are the grammar or schema, the
 * rest is text fed to the recogniser in pieces of 1..8 bytes (byte 0's high bits).
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_grammar/). Properties checked:
 * no crash or hang, no sanitizer report; a refused grammar has a message and an expected
 * code; feeding text never fails with anything but "leaves the grammar"; a text fed whole
 * that ends where the grammar can end is matched by lq_grammar_match. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "larql/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    const char *nul = memchr(p, 0, n);
    size_t glen = nul ? (size_t)(nul - p) : n;
    const char *text = nul ? nul + 1 : p + n;
    size_t tlen = nul ? n - glen - 1 : 0;
    lq_grammar *g = NULL;
    lq_err err = {0};
    int rc = (mode & 1) ? lq_grammar_from_json_schema(p, glen, &g, &err)
                        : lq_grammar_parse(p, glen, &g, &err);
    if (rc) {
        if (g || !err.msg[0] ||
            (rc != LQ_EINVAL && rc != LQ_EUNSUPPORTED && rc != LQ_ENOMEM))
            abort();
        return 0;
    }
    lq_grammar_state *st = NULL;
    if (lq_grammar_state_create(g, &st, &err)) {
        if (err.code != LQ_ENOMEM && err.code != LQ_EINVAL)
            abort();
        lq_grammar_free(g);
        return 0;
    }
    size_t step = 1 + ((mode >> 1) & 7), fed = 0;
    int alive = 1;
    while (fed < tlen && alive) {
        size_t k = tlen - fed < step ? tlen - fed : step;
        int r = lq_grammar_state_accept(st, text + fed, k, &err);
        if (r == LQ_EINVAL)
            alive = 0;
        else if (r == LQ_OK)
            fed += k;
        else if (r != LQ_ENOMEM)
            abort();
    }
    if (alive && lq_grammar_state_can_end(st)) {
        int m = lq_grammar_match(g, text, tlen, &err);
        if (m != 1 && m != LQ_ENOMEM)
            abort();
    }
    lq_grammar_state_free(st);
    lq_grammar_free(g);
    return 0;
}
