/* Chat templates: render a list of messages into the prompt text a model was trained on. */
#ifndef LARQL_CHAT_H
#define LARQL_CHAT_H

#include <stddef.h>

#include "larql/model.h"
#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lq_chat_template {
    LQ_CHAT_PLAIN = 1,  /* "User: ...\nAssistant: " (LARQL's Plain) */
    LQ_CHAT_LLAMA3 = 2, /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> */
    LQ_CHAT_BITNET = 3, /* BitNet b1.58 2B-4T: "Role: content<|eot_id|>" ... "Assistant: " */
} lq_chat_template;

typedef struct lq_chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content; /* NULL renders as "" */
} lq_chat_msg;

/* The template for a model: from its tokenizer.chat_template metadata when recognisable,
 * else by architecture (bitnet* -> BITNET when the vocabulary has <|eot_id|>, llama with a
 * Llama 3 vocabulary -> LLAMA3), else PLAIN. */
int lq_chat_template_for_model(const lq_model *m);
/* The rule behind lq_chat_template_for_model, on plain values (for tests and for front
 * ends that read the metadata themselves): tmpl/tmpl_len = tokenizer.chat_template or NULL;
 * a template containing "<|start_header_id|>" -> LLAMA3; containing "Assistant: " and
 * "<|eot_id|>" -> BITNET; else arch_name "bitnet*" with vocab_has_eot -> BITNET; "llama"
 * with vocab_has_header (<|start_header_id|> in the vocabulary) -> LLAMA3; else PLAIN. */
int lq_chat_template_detect(const char *tmpl, size_t tmpl_len, const char *arch_name,
                            int vocab_has_eot, int vocab_has_header);
/* "plain", "llama3", "bitnet" -> enum; -1 if unknown. */
int lq_chat_template_from_name(const char *name);
const char *lq_chat_template_name(int tmpl);

/* Renders messages (+ the assistant prefix when add_assistant) into *out (malloc'd,
 * NUL-terminated). Unknown roles -> LQ_EINVAL; no messages -> LQ_EINVAL. The BOS token is
 * not included: the caller encodes with LQ_TOK_ADD_BOS | LQ_TOK_PARSE_SPECIAL. */
int lq_chat_render(int tmpl, const lq_chat_msg *msgs, size_t n, int add_assistant,
                   char **out, lq_err *err);

#ifdef __cplusplus
}
#endif
#endif
