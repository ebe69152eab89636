/* Chat templates, hard-coded (no Jinja interpreter): the three formats our models use.
 *
 *  PLAIN  (LARQL's Plain):   "System: s\nUser: u\nAssistant: a\n" ... "Assistant: "
 *                            content verbatim.
 *  LLAMA3 (Meta Llama 3):    "<|start_header_id|>user<|end_header_id|>\n\nu<|eot_id|>" ...
 *                            "<|start_header_id|>assistant<|end_header_id|>\n\n"; content
 *                            trimmed, as Meta's template does ("| trim").
 *  BITNET (microsoft/bitnet-b1.58-2B-4T tokenizer_config.json):
 *                            "{{ role | capitalize + ': ' + content | trim + '<|eot_id|>' }}"
 *                            per message, then "Assistant: ".
 * BOS is never rendered: callers encode with LQ_TOK_ADD_BOS | LQ_TOK_PARSE_SPECIAL.
 *
 * Roles are "system", "user" and "assistant" (exact, lower case); anything else is
 * LQ_EINVAL, so a typo never turns silently into a differently-labelled turn. NULL content
 * renders as "" (OpenAI allows null content on assistant messages). */
#include "core/sb.h"
#include "larql/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int lq_chat_template_from_name(const char *name)
{
    if (!name)
        return -1;
    if (!strcasecmp(name, "plain"))
        return LQ_CHAT_PLAIN;
    if (!strcasecmp(name, "llama3") || !strcasecmp(name, "llama-3"))
        return LQ_CHAT_LLAMA3;
    if (!strcasecmp(name, "bitnet"))
        return LQ_CHAT_BITNET;
    return -1;
}

const char *lq_chat_template_name(int tmpl)
{
    switch (tmpl) {
    case LQ_CHAT_PLAIN: return "plain";
    case LQ_CHAT_LLAMA3: return "llama3";
    case LQ_CHAT_BITNET: return "bitnet";
    default: return "unknown";
    }
}

static int contains(const char *s, size_t n, const char *needle)
{
    return s && memmem(s, n, needle, strlen(needle)) != NULL;
}

int lq_chat_template_detect(const char *tmpl, size_t tmpl_len, const char *arch_name,
                            int vocab_has_eot, int vocab_has_header)
{
    if (tmpl && tmpl_len) {
        if (contains(tmpl, tmpl_len, "<|start_header_id|>"))
            return LQ_CHAT_LLAMA3;
        if (contains(tmpl, tmpl_len, "Assistant: ") && contains(tmpl, tmpl_len, "<|eot_id|>"))
            return LQ_CHAT_BITNET;
    }
    if (arch_name && !strncmp(arch_name, "bitnet", 6) && vocab_has_eot)
        return LQ_CHAT_BITNET;
    if (arch_name && !strcmp(arch_name, "llama") && vocab_has_header)
        return LQ_CHAT_LLAMA3;
    return LQ_CHAT_PLAIN;
}

static int is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* content with leading and trailing ASCII whitespace removed (Jinja's trim on our inputs). */
static void sb_trimmed(lq_sb *b, const char *s)
{
    size_t n = strlen(s), i = 0;
    while (i < n && is_ws((unsigned char)s[i]))
        i++;
    while (n > i && is_ws((unsigned char)s[n - 1]))
        n--;
    lq_sb_put(b, s + i, n - i);
}

int lq_chat_render(int tmpl, const lq_chat_msg *msgs, size_t n, int add_assistant, char **out,
                   lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "chat: out is NULL");
    *out = NULL;
    if (tmpl != LQ_CHAT_PLAIN && tmpl != LQ_CHAT_LLAMA3 && tmpl != LQ_CHAT_BITNET)
        return lq_err_set(err, LQ_EINVAL, "chat: unknown template %d", tmpl);
    if (n == 0)
        return lq_err_set(err, LQ_EINVAL, "chat: no messages");
    if (!msgs)
        return lq_err_set(err, LQ_EINVAL, "chat: %zu messages but the array is NULL", n);
    static const char *const roles[3] = {"system", "user", "assistant"};
    static const char *const labels[3] = {"System", "User", "Assistant"};
    /* validate every role first: no partial output on error */
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r)
            return lq_err_set(err, LQ_EINVAL, "chat: message %zu has no role", i);
        if (strcmp(r, roles[0]) && strcmp(r, roles[1]) && strcmp(r, roles[2]))
            return lq_err_set(err, LQ_EINVAL,
                              "chat: message %zu: unknown role '%.64s' (expected system, user "
                              "or assistant)", i, r);
    }
    lq_sb b = {0};
    for (size_t i = 0; i < n; i++) {
        int r = !strcmp(msgs[i].role, roles[0]) ? 0 : !strcmp(msgs[i].role, roles[1]) ? 1 : 2;
        const char *content = msgs[i].content ? msgs[i].content : "";
        switch (tmpl) {
        case LQ_CHAT_PLAIN:
            lq_sb_puts(&b, labels[r]);
            lq_sb_puts(&b, ": ");
            lq_sb_puts(&b, content);
            lq_sb_puts(&b, "\n");
            break;
        case LQ_CHAT_LLAMA3:
            lq_sb_puts(&b, "<|start_header_id|>");
            lq_sb_puts(&b, roles[r]);
            lq_sb_puts(&b, "<|end_header_id|>\n\n");
            sb_trimmed(&b, content);
            lq_sb_puts(&b, "<|eot_id|>");
            break;
        default: /* LQ_CHAT_BITNET */
            lq_sb_puts(&b, labels[r]);
            lq_sb_puts(&b, ": ");
            sb_trimmed(&b, content);
            lq_sb_puts(&b, "<|eot_id|>");
            break;
        }
    }
    if (add_assistant) {
        if (tmpl == LQ_CHAT_LLAMA3)
            lq_sb_puts(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        else
            lq_sb_puts(&b, "Assistant: ");
    }
    if (lq_sb_finish(&b, out, NULL))
        return lq_err_set(err, LQ_ENOMEM, "chat: out of memory rendering %zu messages", n);
    return LQ_OK;
}
