/* libFuzzer target for chat templates: the input is a template text and a conversation. The
 * bytes up to the first NUL are a tokenizer.chat_template value given to
 * lq_chat_template_detect (with the architecture and vocabulary flags from byte 0); the rest
 * is NUL-separated role, content, role, content ... (arbitrary bytes, unknown roles
 * included), rendered with every template, with and without the assistant prefix.
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_chat/). Properties checked:
 * no crash, no sanitizer report, a failure has a message and no output, a success is a
 * NUL-terminated string that contains every content rendered (trimmed). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "larql/chat.h"

#define MAX_MSGS 16

/* Is content, less leading and trailing ASCII whitespace (the Llama 3 and BitNet templates
 * trim it, as Jinja's "| trim" does), inside out? */
static int contains_trimmed(const char *out, const char *content)
{
    static const char ws[] = " \t\n\v\f\r";
    size_t n = strlen(content), i = 0;
    while (i < n && strchr(ws, content[i]))
        i++;
    while (n > i && strchr(ws, content[n - 1]))
        n--;
    return memmem(out, strlen(out), content + i, n - i) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* a private NUL-terminated copy: the pieces become C strings in place */
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    unsigned flags = (unsigned char)buf[0];
    char *p = buf + 1, *end = buf + size;
    size_t tl = strlen(p);
    static const char *const ARCH[] = {"bitnet-b1.58", "bitnet", "llama", "gpt2"};
    int t = lq_chat_template_detect(p, tl, ARCH[flags & 3], (flags >> 2) & 1, (flags >> 3) & 1);
    if (t != LQ_CHAT_PLAIN && t != LQ_CHAT_LLAMA3 && t != LQ_CHAT_BITNET)
        abort();
    p += tl + (p + tl < end);
    lq_chat_msg msgs[MAX_MSGS];
    size_t n = 0;
    while (p < end && n < MAX_MSGS) {
        msgs[n].role = p;
        p += strlen(p);
        p += p < end;
        msgs[n].content = p < end ? p : NULL;
        if (p < end) {
            p += strlen(p);
            p += p < end;
        }
        n++;
    }
    for (int tmpl = LQ_CHAT_PLAIN; tmpl <= LQ_CHAT_BITNET; tmpl++) {
        for (int add = 0; add <= 1; add++) {
            char *out = NULL;
            lq_err err = {0};
            if (lq_chat_render(tmpl, msgs, n, add, &out, &err) != LQ_OK) {
                if (out || !err.msg[0])
                    abort();
                continue;
            }
            for (size_t i = 0; i < n; i++)
                if (msgs[i].content && !contains_trimmed(out, msgs[i].content))
                    abort();
            free(out);
        }
    }
    if (lq_chat_template_from_name(buf + 1) >= 0 && !lq_chat_template_name(lq_chat_template_from_name(buf + 1)))
        abort();
    free(buf);
    return 0;
}
