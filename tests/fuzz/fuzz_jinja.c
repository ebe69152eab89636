/* libFuzzer target for the Jinja chat-template interpreter: the input is a template, then
 * optionally a NUL and a JSON object of variables (when absent or not an object, a fixed
 * conversation with tools is used). The template is parsed, rendered with the variables, and
 * rendered again as a chat format (with and without the generation prompt, with tools).
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_jinja/). Properties checked:
 * no crash, no sanitizer report, no hang (the interpreter's step bound), a failure has a
 * message and no output, a success is NUL-terminated at its reported length and within the
 * output bound. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "larql/chat.h"

static const char DEFAULT_VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \" Hi \"},"
    " {\"role\": \"assistant\", \"content\": \"Hello\", \"tool_calls\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, {\"role\": \"user\", \"content\": [{\"type\": \"text\","
    " \"text\": \"parts\"}]}], \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true,"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]}";

static void check_result(int rc, char *out, size_t n, const lq_err *err)
{
    if (rc != LQ_OK) {
        if (out || !err->msg[0])
            abort();
        return;
    }
    if (!out || out[n] != 0 || n > ((size_t)16 << 20))
        abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    const char *vars = nul ? (const char *)nul + 1 : DEFAULT_VARS;
    size_t vlen = nul ? size - tlen - 1 : strlen(DEFAULT_VARS);
    lq_jinja *t = NULL;
    lq_err err = {0};
    int rc = lq_jinja_parse(src, tlen, &t, &err);
    if (rc != LQ_OK) {
        if (t || !err.msg[0])
            abort();
        return 0;
    }
    char *out = NULL;
    size_t n = 0;
    memset(&err, 0, sizeof err);
    rc = lq_jinja_render(t, vars, vlen, &out, &n, &err);
    check_result(rc, out, n, &err);
    if (rc != LQ_OK && vars != DEFAULT_VARS) { /* the variables did not parse: the fixed ones */
        out = NULL;
        memset(&err, 0, sizeof err);
        rc = lq_jinja_render(t, DEFAULT_VARS, strlen(DEFAULT_VARS), &out, &n, &err);
        check_result(rc, out, n, &err);
    }
    lq_jinja_free(t);
    /* the same template as a chat format, through the chat API */
    lq_chat_format *f = NULL;
    memset(&err, 0, sizeof err);
    if (lq_chat_format_jinja(src, tlen, "<s>", "</s>", (int)(tlen & 1), &f, &err) != LQ_OK)
        abort(); /* it parsed above */
    static const lq_chat_msg msgs[] = {{"system", "s"}, {"user", "u"}, {"assistant", NULL}};
    for (int add = 0; add <= 1; add++) {
        out = NULL;
        memset(&err, 0, sizeof err);
        rc = lq_chat_format_render(f, msgs, 3, add, add ? "[{\"type\": \"function\"}]" : NULL, &out, &err);
        check_result(rc, out, out ? strlen(out) : 0, &err);
    }
    lq_chat_format_free(f);
    return 0;
}
