/* libFuzzer target for the LQL front end's parsing: the input is a script, arbitrary bytes.
 * It is cut into statements (lq_lql_split), each statement is lexed and parsed
 * (lq_lql_lex, lq_lql_parse, including "|>" pipes), and the REPL's completeness check runs on
 * the whole text. Statements are never executed: execution reads and writes the paths a
 * script names (USE, SAVE PATCH, COMPILE), which a fuzzer must not do.
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_lql/, one statement of each
 * form). Properties checked: no crash, no sanitizer report, no hang, every failure has a
 * message (with line and column), spans lie inside the text, a failed parse leaves nothing. */
#include <stdint.h>
#include <stdlib.h>

#include "larql/lql.h"
#include "lql/lql_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    lq_err err = {0};
    lq_lql_complete(text, size);
    lq_ltoks toks = {0};
    if (lq_lql_lex(text, size, 1, 1, &toks, &err) != LQ_OK && !err.msg[0])
        abort();
    lq_lql_toks_free(&toks);
    lq_lql_span *spans = NULL;
    size_t n = 0;
    if (lq_lql_split(text, size, &spans, &n, &err) != LQ_OK) {
        if (!err.msg[0])
            abort();
        free(spans);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (spans[i].off > size || spans[i].len > size - spans[i].off)
            abort();
        lq_lql_stmt *st = NULL;
        lq_err e2 = {0};
        if (lq_lql_parse(text + spans[i].off, spans[i].len, spans[i].line, spans[i].col, &st, &e2) != LQ_OK) {
            if (st || !e2.msg[0])
                abort();
        }
        lq_lql_stmt_free(st);
    }
    free(spans);
    return 0;
}
