/* tokenizer.json + tokenizer_config.json -> the GGUF tokenizer keys the loader reads
 * (src/tokenizer/tok_gguf.c), as llama.cpp's converter writes them for a byte-level BPE
 * (Llama 3, GPT-2): tokenizer.ggml.model "gpt2", .pre "llama-bpe" or "gpt2", .tokens,
 * .token_type (1 normal, 3 control = special added token, 4 user-defined = other added
 * token, 5 unused = padding), .merges "a b", bos / eos / eot ids, add_bos_token, and
 * tokenizer.chat_template. SentencePiece-style vocabularies (byte_fallback, ▁) are refused
 * with a message saying so rather than converted wrongly. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/mapfile.h"
#include "model/hf_internal.h"

int hf_load_json(const char *dir, const char *name, size_t flags, json_t **out, lq_err *err)
{
    *out = NULL;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return lq_err_set(err, LQ_EINVAL, "%s: path too long", dir);
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT ? LQ_OK : lq_err_set(err, LQ_EIO, "%s: %s", path, strerror(errno));
    json_error_t je;
    *out = json_load_file(path, JSON_REJECT_DUPLICATES | flags, &je);
    if (!*out)
        return lq_err_set(err, LQ_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    return LQ_OK;
}

/* Does the JSON value (a pre_tokenizer or decoder, possibly a Sequence) contain an object
 * whose "type" is `type`? Depth-bounded: the file is not trusted. */
static const json_t *find_type(const json_t *j, const char *type, int depth)
{
    if (!j || depth > 8)
        return NULL;
    if (json_is_object(j)) {
        const json_t *t = json_object_get(j, "type");
        if (json_is_string(t) && !strcmp(json_string_value(t), type))
            return j;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            const json_t *r = find_type(v, type, depth + 1);
            if (r)
                return r;
        }
    } else if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) {
            const json_t *r = find_type(json_array_get(j, i), type, depth + 1);
            if (r)
                return r;
        }
    }
    return NULL;
}

/* A token named by tokenizer_config.json: a string or {"content": ...}. */
static const char *token_text(const json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_string_value(v);
}

typedef struct vocab {
    char **tok; /* [n] */
    int32_t *type;
    int n;
} vocab;

static int id_of(const vocab *v, const char *s)
{
    for (int i = 0; s && i < v->n; i++)
        if (v->tok[i] && !strcmp(v->tok[i], s))
            return i;
    return -1;
}

static int set_token(vocab *v, int64_t id, const char *s, int type, const char *what, lq_err *err)
{
    if (id < 0 || id >= v->n)
        return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: %s '%.64s' has id %lld outside [0, %d)", what, s,
                          (long long)id, v->n);
    if (v->tok[id]) {
        if (!strcmp(v->tok[id], s)) { /* an added token repeats its vocab entry */
            v->type[id] = type;
            return LQ_OK;
        }
        return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: id %lld is both '%.64s' and '%.64s'", (long long)id,
                          v->tok[id], s);
    }
    if (!(v->tok[id] = strdup(s)))
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    v->type[id] = type;
    return LQ_OK;
}

static int fill_vocab(const json_t *model, const json_t *added, int n_vocab, vocab *v, lq_err *err)
{
    const json_t *jv = json_object_get(model, "vocab");
    if (!json_is_object(jv) || json_object_size(jv) == 0)
        return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: model.vocab must be a non-empty object");
    int64_t top = -1;
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)jv, k, x) {
        if (!json_is_integer(x))
            return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: vocab['%.64s'] is not an integer id", k);
        if (json_integer_value(x) > top)
            top = json_integer_value(x);
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *id = json_object_get(json_array_get(added, i), "id");
        if (json_is_integer(id) && json_integer_value(id) > top)
            top = json_integer_value(id);
    }
    if (top >= n_vocab)
        return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: token id %lld, but the embedding has %d rows",
                          (long long)top, n_vocab);
    v->n = n_vocab;
    v->tok = calloc((size_t)n_vocab, sizeof *v->tok);
    v->type = calloc((size_t)n_vocab, sizeof *v->type);
    if (!v->tok || !v->type)
        return lq_err_set(err, LQ_ENOMEM, "out of memory for %d tokens", n_vocab);
    int rc;
    json_object_foreach((json_t *)jv, k, x) if ((rc = set_token(v, json_integer_value(x), k, 1, "token", err)))
        return rc;
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i), *id = json_object_get(a, "id"),
                     *c = json_object_get(a, "content");
        if (!json_is_integer(id) || !json_is_string(c))
            return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: added_tokens[%zu] needs an id and a content", i);
        if ((rc = set_token(v, json_integer_value(id), json_string_value(c),
                            json_is_true(json_object_get(a, "special")) ? 3 : 4, "added token", err)))
            return rc;
    }
    for (int i = 0; i < v->n; i++) /* ids nobody names, up to the embedding's rows */
        if (!v->tok[i]) {
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%d]", i);
            if (!(v->tok[i] = strdup(pad)))
                return lq_err_set(err, LQ_ENOMEM, "out of memory");
            v->type[i] = 5;
        }
    return LQ_OK;
}

/* merges: "a b" strings (older files) or ["a", "b"] pairs (newer ones). */
static int merges_strings(const json_t *jm, char ***out, size_t *n, lq_err *err)
{
    size_t m = json_array_size(jm);
    char **v = calloc(m ? m : 1, sizeof *v);
    if (!v)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    *out = v;
    *n = m;
    for (size_t i = 0; i < m; i++) {
        const json_t *e = json_array_get(jm, i);
        if (json_is_string(e)) {
            if (!strchr(json_string_value(e), ' '))
                return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: merges[%zu] '%.64s' has no space", i,
                                  json_string_value(e));
            v[i] = strdup(json_string_value(e));
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            const char *a = json_string_value(json_array_get(e, 0)), *b = json_string_value(json_array_get(e, 1));
            size_t l = strlen(a) + strlen(b) + 2;
            if ((v[i] = malloc(l)))
                snprintf(v[i], l, "%s %s", a, b);
        } else {
            return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: merges[%zu] is neither \"a b\" nor [a, b]", i);
        }
        if (!v[i])
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    return LQ_OK;
}

/* Llama 3's split pattern differs from GPT-2's by its digit groups of 1-3. */
static const char *pre_name(const json_t *root)
{
    const json_t *split = find_type(json_object_get(root, "pre_tokenizer"), "Split", 0);
    const char *re = split ? json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex")) : NULL;
    return re && strstr(re, "\\p{N}{1,3}") ? "llama-bpe" : "gpt2";
}

/* The chat template: tokenizer_config.json's string, or the "default" entry of its list
 * form, else chat_template.jinja. Returns a malloc'd copy or NULL. */
static char *chat_template(const char *dir, const json_t *tc)
{
    const json_t *ct = json_object_get(tc, "chat_template");
    if (json_is_string(ct))
        return strdup(json_string_value(ct));
    for (size_t i = 0; json_is_array(ct) && i < json_array_size(ct); i++) {
        const json_t *e = json_array_get(ct, i);
        const char *nm = json_string_value(json_object_get(e, "name"));
        if (nm && !strcmp(nm, "default") && json_is_string(json_object_get(e, "template")))
            return strdup(json_string_value(json_object_get(e, "template")));
    }
    char path[4096];
    lq_mapfile m = {0};
    if (snprintf(path, sizeof path, "%s/chat_template.jinja", dir) >= (int)sizeof path ||
        lq_mapfile_open(&m, path, NULL) != LQ_OK)
        return NULL;
    char *s = strndup(m.data ? (const char *)m.data : "", m.size);
    lq_mapfile_close(&m);
    return s;
}

/* bos/eos: tokenizer_config.json names the token; else config.json gives the id. */
static int special_id(const vocab *v, const json_t *tc, const char *tc_key, const json_t *config,
                      const char *cfg_key)
{
    const char *s = token_text(json_object_get(tc, tc_key));
    if (s)
        return id_of(v, s);
    const json_t *id = json_object_get(config, cfg_key);
    if (json_is_integer(id) && json_integer_value(id) >= 0 && json_integer_value(id) < v->n)
        return (int)json_integer_value(id);
    return -1;
}

int hf_tokenizer_to_gguf(lq_gguf_writer *w, const char *dir, const json_t *config, int n_vocab,
                         int *n_tokens, lq_err *err)
{
    *n_tokens = 0;
    json_t *root = NULL, *tc = NULL;
    vocab v = {0};
    char **merges = NULL, *tmpl = NULL;
    size_t nm = 0;
    int rc = hf_load_json(dir, "tokenizer.json", 0, &root, err);
    if (rc || !root)
        return rc;
    if ((rc = hf_load_json(dir, "tokenizer_config.json", JSON_DECODE_INT_AS_REAL, &tc, err)))
        goto out;
    const json_t *model = json_object_get(root, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!json_is_object(model) || (mtype && strcmp(mtype, "BPE"))) {
        rc = lq_err_set(err, LQ_EUNSUPPORTED, "tokenizer.json: model type '%s' (only BPE is converted)",
                        mtype ? mtype : "?");
        goto out;
    }
    if (json_is_true(json_object_get(model, "byte_fallback")) ||
        !(find_type(json_object_get(root, "pre_tokenizer"), "ByteLevel", 0) ||
          find_type(json_object_get(root, "decoder"), "ByteLevel", 0))) {
        rc = lq_err_set(err, LQ_EUNSUPPORTED, "tokenizer.json: a SentencePiece-style BPE (byte_fallback, no "
                        "ByteLevel); only byte-level BPE vocabularies (Llama 3, GPT-2) are converted");
        goto out;
    }
    if ((rc = fill_vocab(model, json_object_get(root, "added_tokens"), n_vocab, &v, err)) ||
        (rc = merges_strings(json_object_get(model, "merges"), &merges, &nm, err)))
        goto out;
    int bos = special_id(&v, tc, "bos_token", config, "bos_token_id");
    int eos = special_id(&v, tc, "eos_token", config, "eos_token_id");
    int eot = id_of(&v, "<|eot_id|>");
    const json_t *ab = json_object_get(tc, "add_bos_token");
    int add_bos = json_is_boolean(ab) ? json_is_true(ab) : bos >= 0;
    tmpl = chat_template(dir, tc);

    int bad = 0;
    bad |= lq_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    bad |= lq_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre_name(root));
    bad |= lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, (uint64_t)v.n);
    bad |= lq_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LQ_GGUF_I32, v.type, (uint64_t)v.n);
    bad |= lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, nm);
    if (bos >= 0)
        bad |= lq_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0)
        bad |= lq_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (eot >= 0)
        bad |= lq_gguf_writer_add_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)eot);
    bad |= lq_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    if (tmpl)
        bad |= lq_gguf_writer_add_str(w, "tokenizer.chat_template", tmpl);
    if (bad)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory for the tokenizer metadata");
    else
        *n_tokens = v.n;
out:
    for (int i = 0; v.tok && i < v.n; i++)
        free(v.tok[i]);
    free(v.tok);
    free(v.type);
    for (size_t i = 0; merges && i < nm; i++)
        free(merges[i]);
    free(merges);
    free(tmpl);
    json_decref(root);
    json_decref(tc);
    return rc;
}
