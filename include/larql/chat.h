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

/* ---- Jinja chat templates (the model file's own tokenizer.chat_template) ----
 *
 * A Jinja subset interpreter matching Python Jinja2 as Hugging Face transformers renders chat
 * templates (trim_blocks and lstrip_blocks on, loop controls, tojson as json.dumps with
 * ensure_ascii=False, raise_exception, strftime_now): statements for/else, if/elif/else, set
 * (namespace attributes and set blocks), macro, break/continue; expressions with Python's
 * operators, literals, slicing, method calls (strip, split, startswith, items, get ...);
 * the filters and tests chat templates use. A construct outside the subset, a runtime error
 * or raise_exception() is an LQ_EINVAL error naming the template line. Steps, output size,
 * nesting and macro depth are bounded (a template comes from an untrusted file). */
typedef struct lq_jinja lq_jinja;

/* Parses src (at most 1 MiB). Unknown tags, filters and tests fail here. */
int lq_jinja_parse(const char *src, size_t len, lq_jinja **out, lq_err *err);
/* Renders with the variables of a JSON object (vars_json, vars_len bytes). *out is malloc'd
 * and NUL-terminated; *out_len (may be NULL) its length (the text may hold NUL bytes when a
 * JSON string did). */
int lq_jinja_render(const lq_jinja *t, const char *vars_json, size_t vars_len, char **out,
                    size_t *out_len, lq_err *err);
void lq_jinja_free(lq_jinja *t);

/* A chat format: one of the built-in templates above or a Jinja template. */
typedef struct lq_chat_format lq_chat_format;

/* The format for a model. spec NULL: the file's tokenizer.chat_template when it has one
 * (rendered with bos_token/eos_token from the model's vocabulary), else the built-in that
 * lq_chat_template_for_model picks (and bitnet for the 2B-4T GGUF's placeholder, above). spec "plain", "llama3" or "bitnet": that built-in. Any
 * other spec is Jinja template text (the CLI reads --chat-template FILE). m may be NULL
 * (then bos/eos are "" and spec NULL means plain). */
int lq_chat_format_open(const lq_model *m, const char *spec, lq_chat_format **out, lq_err *err);
/* A Jinja format from template text without a model. strip_bos: see lq_chat_format_render. */
int lq_chat_format_jinja(const char *src, size_t len, const char *bos_token, const char *eos_token,
                         int strip_bos, lq_chat_format **out, lq_err *err);
/* "plain", "llama3", "bitnet" or "jinja". */
const char *lq_chat_format_name(const lq_chat_format *f);
/* Where the format came from: "tokenizer.chat_template", "--chat-template", "template"
 * (lq_chat_format_jinja), or "built-in: <why>" when a model's file has no template or carries
 * microsoft's 2B-4T GGUF placeholder ("Human: ... BITNETAssistant: "), which is replaced by
 * the built-in bitnet format the model was trained with. */
const char *lq_chat_format_source(const lq_chat_format *f);

/* Renders messages (+ the assistant prefix when add_generation_prompt). tools_json: a JSON
 * array of tool definitions passed to the template as `tools`, or NULL (then `tools` is
 * undefined). Jinja formats pass any role through to the template (which may reject it
 * with raise_exception); built-in formats take system/user/assistant only. When the format
 * strips BOS (a model whose tokenizer adds BOS itself) a leading bos_token the template
 * wrote is removed, so the caller's LQ_TOK_ADD_BOS does not double it. */
int lq_chat_format_render(const lq_chat_format *f, const lq_chat_msg *msgs, size_t n,
                          int add_generation_prompt, const char *tools_json, char **out, lq_err *err);
/* The same from OpenAI-style JSON: messages_json an array of objects (role, content as a
 * string, null or a list of {type:"text", text} parts, and any other fields such as
 * tool_calls, passed to the template as they are). */
int lq_chat_format_render_json(const lq_chat_format *f, const char *messages_json, size_t len,
                               int add_generation_prompt, const char *tools_json, char **out,
                               lq_err *err);
void lq_chat_format_free(lq_chat_format *f);

#ifdef __cplusplus
}
#endif
#endif
