/* Chat formats: the model file's own Jinja template (tokenizer.chat_template), a template
 * given with --chat-template, or one of the three built-in formats for files that carry no
 * template. Also the public lq_jinja_* entry points of the interpreter. */
#include <jansson.h>

#include "core/json_obj.h"
#include <stdlib.h>
#include <string.h>

#include "engine/jinja_internal.h"
#include "larql/chat.h"
#include "larql/gguf.h"
#include "larql/model.h"
#include "larql/tokenizer.h"

int jj_render(const jtemplate *t, jv vars, lq_sb *out, lq_err *err);

struct lq_jinja {
    jtemplate t;
};

void lq_jinja_free(lq_jinja *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->t.n_nodes; i++) {
        jv_free(j->t.nodes[i]->val);
        free(j->t.nodes[i]->kid);
        free(j->t.nodes[i]);
    }
    free(j->t.nodes);
    jj_lex_free(&j->t.lx);
    free(j);
}

int lq_jinja_parse(const char *src, size_t len, lq_jinja **out, lq_err *err)
{
    if (!out || (!src && len))
        return lq_err_set(err, LQ_EINVAL, "jinja: NULL argument");
    *out = NULL;
    lq_jinja *j = calloc(1, sizeof *j);
    if (!j)
        return lq_err_set(err, LQ_ENOMEM, "jinja: out of memory");
    lq_err e = {0};
    jj_budget_reset();
    int rc = jj_lex(src ? src : "", len, &j->t.lx, &e);
    if (!rc)
        rc = jj_parse(&j->t, &e);
    if (rc) {
        lq_jinja_free(j);
        return lq_err_set(err, rc ? rc : LQ_EINVAL, "%s", e.msg[0] ? e.msg : "template: invalid");
    }
    *out = j;
    return LQ_OK;
}

static int render_vars(const lq_jinja *j, jv vars, char **out, size_t *out_len, lq_err *err)
{
    lq_sb b = {0};
    lq_err e = {0};
    int rc = jj_render(&j->t, vars, &b, &e);
    if (rc) {
        lq_sb_free(&b);
        return lq_err_set(err, rc, "%s", e.msg);
    }
    size_t n = b.n;
    if (lq_sb_finish(&b, out, err))
        return LQ_ENOMEM;
    if (out_len)
        *out_len = n;
    return LQ_OK;
}

static int render_json(const lq_jinja *j, const json_t *vars, char **out, size_t *out_len, lq_err *err)
{
    jv v;
    if (!json_is_object(vars))
        return lq_err_set(err, LQ_EINVAL, "jinja: the variables must be a JSON object");
    jj_budget_reset();
    if (jv_from_json(vars, &v, 0))
        return lq_err_set(err, LQ_EINVAL, "jinja: the variables are nested too deeply (or out of memory)");
    int rc = render_vars(j, v, out, out_len, err);
    jv_free(v);
    return rc;
}

int lq_jinja_render(const lq_jinja *j, const char *vars_json, size_t vars_len, char **out, size_t *out_len,
                    lq_err *err)
{
    if (!j || !out)
        return lq_err_set(err, LQ_EINVAL, "jinja: NULL argument");
    *out = NULL;
    json_error_t je;
    json_t *vars = vars_json ? json_loadb(vars_json, vars_len, JSON_ALLOW_NUL, &je) : lq_json_object();
    if (!vars)
        return lq_err_set(err, LQ_EINVAL, "jinja: variables are not JSON: %s (line %d)", je.text, je.line);
    int rc = render_json(j, vars, out, out_len, err);
    json_decref(vars);
    return rc;
}

/* ---- chat formats ---- */

struct lq_chat_format {
    int builtin;     /* LQ_CHAT_* or 0 for Jinja */
    lq_jinja *jinja;
    char *bos, *eos;
    int strip_bos;
    const char *source;
};

void lq_chat_format_free(lq_chat_format *f)
{
    if (!f)
        return;
    lq_jinja_free(f->jinja);
    free(f->bos);
    free(f->eos);
    free(f);
}

const char *lq_chat_format_name(const lq_chat_format *f)
{
    return !f ? "unknown" : f->builtin ? lq_chat_template_name(f->builtin) : "jinja";
}

const char *lq_chat_format_source(const lq_chat_format *f)
{
    return !f ? "" : f->source;
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

int lq_chat_format_jinja(const char *src, size_t len, const char *bos_token, const char *eos_token, int strip_bos,
                         lq_chat_format **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "chat: out is NULL");
    *out = NULL;
    lq_chat_format *f = calloc(1, sizeof *f);
    if (!f)
        return lq_err_set(err, LQ_ENOMEM, "chat: out of memory");
    f->source = "template";
    f->strip_bos = strip_bos;
    f->bos = strdup(bos_token ? bos_token : "");
    f->eos = strdup(eos_token ? eos_token : "");
    if (!f->bos || !f->eos) {
        lq_chat_format_free(f);
        return lq_err_set(err, LQ_ENOMEM, "chat: out of memory");
    }
    int rc = lq_jinja_parse(src, len, &f->jinja, err);
    if (rc) {
        lq_chat_format_free(f);
        return rc;
    }
    *out = f;
    return LQ_OK;
}

static char *token_text(const lq_tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const char *p = id >= 0 ? lq_tokenizer_piece(tok, id, &n) : NULL;
    return p ? dup_n(p, n) : strdup("");
}

int lq_chat_format_open(const lq_model *m, const char *spec, lq_chat_format **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "chat: out is NULL");
    *out = NULL;
    int builtin = spec ? lq_chat_template_from_name(spec) : -1;
    const char *src = spec;
    uint64_t slen = spec ? strlen(spec) : 0;
    const char *source = "--chat-template";
    if (!spec) {
        const struct lq_gguf *g = m ? lq_model_gguf(m) : NULL;
        source = "tokenizer.chat_template";
        if (!g || lq_gguf_get_str(g, "tokenizer.chat_template", &src, &slen, NULL) != LQ_OK || !slen) {
            builtin = lq_chat_template_for_model(m);
            source = "built-in: the file has no chat template";
        } else if (memmem(src, (size_t)slen, "BITNETAssistant", 15)) {
            /* microsoft/bitnet-b1.58-2B-4T's GGUF (ggml-model-i2_s.gguf) carries a placeholder
             * its conversion script wrote ("Human: ... BITNETAssistant: " + eos_token), not
             * the template the model was trained with (its tokenizer_config.json's, the
             * built-in bitnet format); under it the model does not stop. Said by
             * lq_chat_format_source and `larql info`; --chat-template FILE renders it anyway. */
            builtin = LQ_CHAT_BITNET;
            source = "built-in: the file's Human:/BITNETAssistant: template is a conversion placeholder";
        }
    }
    if (builtin > 0) {
        lq_chat_format *f = calloc(1, sizeof *f);
        if (!f)
            return lq_err_set(err, LQ_ENOMEM, "chat: out of memory");
        f->builtin = builtin;
        f->source = source;
        *out = f;
        return LQ_OK;
    }
    const lq_tokenizer *tok = m ? lq_model_tokenizer(m) : NULL;
    char *bos = tok ? token_text(tok, lq_tokenizer_bos(tok)) : strdup("");
    char *eos = tok ? token_text(tok, lq_tokenizer_eos(tok)) : strdup("");
    int rc = (bos && eos) ? lq_chat_format_jinja(src, (size_t)slen, bos, eos, tok && lq_tokenizer_add_bos(tok), out, err)
                          : lq_err_set(err, LQ_ENOMEM, "chat: out of memory");
    free(bos);
    free(eos);
    if (rc)
        return lq_err_prefix(err, "%s", source);
    (*out)->source = source;
    return LQ_OK;
}

/* messages for a built-in format: content strings (text parts joined), roles as given */
static int builtin_from_json(const lq_chat_format *f, const json_t *msgs, int add, char **out, lq_err *err)
{
    size_t n = json_array_size(msgs);
    lq_chat_msg *cm = calloc(n ? n : 1, sizeof *cm);
    char **texts = calloc(n ? n : 1, sizeof *texts);
    int rc = LQ_OK;
    if (!cm || !texts)
        rc = lq_err_set(err, LQ_ENOMEM, "chat: out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *mj = json_array_get(msgs, i), *c = json_object_get(mj, "content");
        cm[i].role = json_string_value(json_object_get(mj, "role"));
        if (json_is_string(c)) {
            cm[i].content = json_string_value(c);
        } else if (json_is_array(c)) {
            lq_sb b = {0};
            for (size_t k = 0; k < json_array_size(c); k++) {
                const char *t = json_string_value(json_object_get(json_array_get(c, k), "text"));
                if (t)
                    lq_sb_puts(&b, t);
            }
            if (lq_sb_finish(&b, &texts[i], err))
                rc = LQ_ENOMEM;
            cm[i].content = texts[i];
        }
    }
    if (!rc)
        rc = lq_chat_render(f->builtin, cm, n, add, out, err);
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(cm);
    return rc;
}

static int render_fmt(const lq_chat_format *f, json_t *msgs, int add, const char *tools_json, char **out,
                      lq_err *err)
{
    if (f->builtin)
        return builtin_from_json(f, msgs, add, out, err);
    json_t *vars = lq_json_object();
    if (!vars)
        return lq_err_set(err, LQ_ENOMEM, "chat: out of memory");
    json_object_set(vars, "messages", msgs);
    json_object_set_new(vars, "bos_token", json_string(f->bos));
    json_object_set_new(vars, "eos_token", json_string(f->eos));
    json_object_set_new(vars, "add_generation_prompt", json_boolean(add));
    if (tools_json) {
        json_error_t je;
        json_t *tools = json_loads(tools_json, 0, &je);
        if (!tools || !json_is_array(tools)) {
            json_decref(tools);
            json_decref(vars);
            return lq_err_set(err, LQ_EINVAL, "chat: tools must be a JSON array%s%s", tools ? "" : ": ",
                              tools ? "" : je.text);
        }
        json_object_set_new(vars, "tools", tools);
    }
    size_t n = 0;
    int rc = render_json(f->jinja, vars, out, &n, err);
    json_decref(vars);
    if (rc)
        return lq_err_prefix(err, "chat template (%s)", f->source);
    size_t bl = strlen(f->bos);
    if (f->strip_bos && bl && n >= bl && !memcmp(*out, f->bos, bl))
        memmove(*out, *out + bl, n - bl + 1);
    return LQ_OK;
}

int lq_chat_format_render(const lq_chat_format *f, const lq_chat_msg *msgs, size_t n, int add_generation_prompt,
                          const char *tools_json, char **out, lq_err *err)
{
    if (!f || !out)
        return lq_err_set(err, LQ_EINVAL, "chat: NULL argument");
    *out = NULL;
    if (f->builtin && !tools_json)
        return lq_chat_render(f->builtin, msgs, n, add_generation_prompt, out, err);
    if (n == 0)
        return lq_err_set(err, LQ_EINVAL, "chat: no messages");
    if (!msgs)
        return lq_err_set(err, LQ_EINVAL, "chat: %zu messages but the array is NULL", n);
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        if (!msgs[i].role) {
            json_decref(arr);
            return lq_err_set(err, LQ_EINVAL, "chat: message %zu has no role", i);
        }
        json_t *o = lq_json_object();
        json_object_set_new(o, "role", json_string(msgs[i].role));
        json_object_set_new(o, "content", msgs[i].content ? json_string(msgs[i].content) : json_null());
        if (!json_object_get(o, "role") || !json_object_get(o, "content")) {
            json_decref(o);
            json_decref(arr);
            return lq_err_set(err, LQ_EINVAL, "chat: message %zu is not valid UTF-8", i);
        }
        json_array_append_new(arr, o);
    }
    if (!arr)
        return lq_err_set(err, LQ_ENOMEM, "chat: out of memory");
    int rc = render_fmt(f, arr, add_generation_prompt, tools_json, out, err);
    json_decref(arr);
    return rc;
}

int lq_chat_format_render_json(const lq_chat_format *f, const char *messages_json, size_t len,
                               int add_generation_prompt, const char *tools_json, char **out, lq_err *err)
{
    if (!f || !out || !messages_json)
        return lq_err_set(err, LQ_EINVAL, "chat: NULL argument");
    *out = NULL;
    json_error_t je;
    json_t *arr = json_loadb(messages_json, len, 0, &je);
    if (!arr)
        return lq_err_set(err, LQ_EINVAL, "chat: messages are not JSON: %s", je.text);
    int rc = LQ_OK;
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        rc = lq_err_set(err, LQ_EINVAL, "chat: messages must be a non-empty JSON array");
    for (size_t i = 0; !rc && i < json_array_size(arr); i++)
        if (!json_is_object(json_array_get(arr, i)) ||
            !json_is_string(json_object_get(json_array_get(arr, i), "role")))
            rc = lq_err_set(err, LQ_EINVAL, "chat: message %zu must be an object with a string role", i);
    if (!rc)
        rc = render_fmt(f, arr, add_generation_prompt, tools_json, out, err);
    json_decref(arr);
    return rc;
}
