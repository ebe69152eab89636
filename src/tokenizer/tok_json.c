/* HuggingFace tokenizer.json loader (byte-level BPE: GPT-2, Llama 3).
 *
 * Reads model.vocab (piece -> id), model.merges ("a b" strings or [a, b] pairs),
 * model.ignore_merges, added_tokens (special=true -> control token, otherwise user-defined),
 * pre_tokenizer (ByteLevel, Split with a Regex, or a Sequence of those), and the
 * post_processor's TemplateProcessing for BOS. SentencePiece-style tokenizer.json files
 * (byte_fallback, Metaspace) are reported as unsupported. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "tokenizer/tok_internal.h"

static int json_bad(lq_err *err, const char *what)
{
    return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: %s", what);
}

/* Adds the split patterns of one pre-tokenizer node. */
static int add_pretok(lq_tokenizer *t, json_t *p, int depth, lq_err *err)
{
    if (!p || json_is_null(p))
        return LQ_OK;
    if (depth > 4)
        return json_bad(err, "pre_tokenizer nested too deeply");
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type)
        return json_bad(err, "pre_tokenizer without a \"type\"");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return json_bad(err, "pre_tokenizer Sequence without \"pretokenizers\" array");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e)
        {
            int rc = add_pretok(t, e, depth + 1, err);
            if (rc)
                return rc;
        }
        return LQ_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        json_t *ur = json_object_get(p, "use_regex");
        json_t *aps = json_object_get(p, "add_prefix_space");
        if (json_is_true(aps))
            return lq_err_set(err, LQ_EUNSUPPORTED,
                              "tokenizer.json: ByteLevel add_prefix_space=true is not supported");
        if (!ur || json_is_true(ur))
            return tok_add_regex(t, TOK_RE_GPT2, PCRE2_ZERO_TERMINATED, err);
        return LQ_OK;
    }
    if (!strcmp(type, "Split")) {
        json_t *pat = json_object_get(p, "pattern");
        const char *behavior = json_string_value(json_object_get(p, "behavior"));
        if (json_is_true(json_object_get(p, "invert")) || !behavior || strcmp(behavior, "Isolated"))
            return lq_err_set(err, LQ_EUNSUPPORTED,
                              "tokenizer.json: Split pre-tokenizer with behavior '%s'%s "
                              "(only Isolated is supported)",
                              behavior ? behavior : "(none)",
                              json_is_true(json_object_get(p, "invert")) ? " and invert" : "");
        json_t *re = json_object_get(pat, "Regex");
        if (json_is_string(re))
            return tok_add_regex(t, json_string_value(re), json_string_length(re), err);
        json_t *lit = json_object_get(pat, "String");
        if (json_is_string(lit)) {
            /* a literal split string: quote it for PCRE2 */
            size_t n = json_string_length(lit);
            char *q = malloc(n + 5);
            if (!q)
                return lq_err_set(err, LQ_ENOMEM, "tokenizer.json: pattern");
            memcpy(q, "\\Q", 2);
            memcpy(q + 2, json_string_value(lit), n);
            memcpy(q + 2 + n, "\\E", 2);
            int rc = tok_add_regex(t, q, n + 4, err);
            free(q);
            return rc;
        }
        return json_bad(err, "Split pre-tokenizer without a Regex or String pattern");
    }
    return lq_err_set(err, LQ_EUNSUPPORTED, "tokenizer.json: unsupported pre_tokenizer type '%s'",
                      type);
}

/* TemplateProcessing (possibly inside a Sequence): does "single" start with a special
 * token? Sets *bos to its id when the template names one. Returns 1 if a template was found. */
static int template_bos(const lq_tokenizer *t, json_t *pp, int depth, int32_t *bos)
{
    if (!pp || depth > 4)
        return 0;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!type)
        return 0;
    if (!strcmp(type, "Sequence")) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(pp, "processors"), i, e)
        {
            if (template_bos(t, e, depth + 1, bos))
                return 1;
        }
        return 0;
    }
    if (strcmp(type, "TemplateProcessing"))
        return 0;
    json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    json_t *st = json_object_get(first, "SpecialToken");
    *bos = -1;
    if (st) {
        const char *name = json_string_value(json_object_get(st, "id"));
        json_t *spec = json_object_get(json_object_get(pp, "special_tokens"), name ? name : "");
        json_t *idv = json_array_get(json_object_get(spec, "ids"), 0);
        if (json_is_integer(idv) && json_integer_value(idv) >= 0 &&
            json_integer_value(idv) < t->n_vocab)
            *bos = (int32_t)json_integer_value(idv);
        else if (name)
            *bos = tok_find(t, name, strlen(name));
    }
    return 1;
}

static int32_t find_first(const lq_tokenizer *t, const char *const *names)
{
    for (; *names; names++) {
        int32_t id = tok_find(t, *names, strlen(*names));
        if (id >= 0)
            return id;
    }
    return -1;
}

static int load(lq_tokenizer *t, json_t *root, lq_err *err)
{
    int rc;
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return json_bad(err, "no \"model\" object");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype && json_object_get(model, "merges"))
        mtype = "BPE";
    if (!mtype || strcmp(mtype, "BPE"))
        return lq_err_set(err, LQ_EUNSUPPORTED, "unsupported tokenizer model '%s'",
                          mtype ? mtype : "(none)");
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "tokenizer.json: BPE with byte_fallback (SentencePiece-style) is not "
                          "supported; use the model's GGUF");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab))
        return json_bad(err, "model.vocab is not an object");
    if (added && !json_is_array(added) && !json_is_null(added))
        return json_bad(err, "added_tokens is not an array");

    /* ids may have holes and added tokens may extend past model.vocab: size by the max id */
    json_int_t max_id = -1;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= TOK_MAX_VOCAB)
            return lq_err_set(err, LQ_EFORMAT,
                              "tokenizer.json: model.vocab[\"%.64s\"] is not an id in 0..%d", key,
                              TOK_MAX_VOCAB - 1);
        if (json_integer_value(v) > max_id)
            max_id = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v)
    {
        json_t *idv = json_object_get(v, "id");
        if (!json_is_integer(idv) || json_integer_value(idv) < 0 ||
            json_integer_value(idv) >= TOK_MAX_VOCAB || !json_is_string(json_object_get(v, "content")))
            return lq_err_set(err, LQ_EFORMAT,
                              "tokenizer.json: added_tokens[%zu] needs an id in 0..%d and a content",
                              i, TOK_MAX_VOCAB - 1);
        if (json_integer_value(idv) > max_id)
            max_id = json_integer_value(idv);
    }
    if (max_id < 0)
        return json_bad(err, "empty vocabulary");
    if ((rc = tok_alloc_vocab(t, (int32_t)(max_id + 1), 0, err)))
        return rc;
    memset(t->type, TOK_T_UNUSED, (size_t)t->n_vocab); /* holes stay unused */
    json_object_foreach(vocab, key, v)
    {
        int32_t id = (int32_t)json_integer_value(v);
        if (t->len[id])
            return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: id %d appears twice in model.vocab",
                              (int)id);
        /* jansson keys are NUL-terminated; a key with an embedded NUL is cut short there */
        if ((rc = tok_set_piece(t, id, key, strlen(key), err)))
            return rc;
        t->type[id] = TOK_T_NORMAL;
    }
    json_array_foreach(added, i, v)
    {
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        json_t *c = json_object_get(v, "content");
        size_t n = json_string_length(c);
        const char *s = json_string_value(c);
        if (t->len[id] && (t->len[id] != n || memcmp(t->blob + t->off[id], s, n)))
            return lq_err_set(err, LQ_EFORMAT,
                              "tokenizer.json: added_tokens[%zu] id %d is already \"%.64s\"", i,
                              (int)id, t->blob + t->off[id]);
        if (!t->len[id] && (rc = tok_set_piece(t, id, s, n, err)))
            return rc;
        t->type[id] = json_is_true(json_object_get(v, "special")) ? TOK_T_CONTROL : TOK_T_USER_DEFINED;
    }
    if ((rc = tok_build_piece_map(t, err)))
        return rc;

    json_t *merges = json_object_get(model, "merges");
    if (merges && !json_is_array(merges))
        return json_bad(err, "model.merges is not an array");
    if ((rc = tok_merges_reserve(t, json_array_size(merges), err)))
        return rc;
    json_array_foreach(merges, i, v)
    {
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            size_t n = json_string_length(v);
            /* split at the first space after the first character, as llama.cpp does */
            const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
            if (!sp)
                return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: merges[%zu] \"%.64s\" has no space",
                                  i, s);
            a = s;
            na = (size_t)(sp - s);
            b = sp + 1;
            nb = n - na - 1;
        } else if (json_is_array(v) && json_array_size(v) == 2 &&
                   json_is_string(json_array_get(v, 0)) && json_is_string(json_array_get(v, 1))) {
            a = json_string_value(json_array_get(v, 0));
            na = json_string_length(json_array_get(v, 0));
            b = json_string_value(json_array_get(v, 1));
            nb = json_string_length(json_array_get(v, 1));
        } else {
            return lq_err_set(err, LQ_EFORMAT,
                              "tokenizer.json: merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        if ((rc = tok_add_merge(t, a, na, b, nb, (int32_t)i, err)))
            return rc;
    }
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));

    if ((rc = add_pretok(t, json_object_get(root, "pre_tokenizer"), 0, err)))
        return rc;
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm))
        return lq_err_set(err, LQ_EUNSUPPORTED, "tokenizer.json: normalizer '%s' is not supported",
                          json_string_value(json_object_get(norm, "type")) ?
                              json_string_value(json_object_get(norm, "type")) : "?");

    static const char *const bos_names[] = {"<|begin_of_text|>", "<s>", "<|endoftext|>", NULL};
    static const char *const eos_names[] = {"<|end_of_text|>", "</s>", "<|endoftext|>", NULL};
    static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", NULL};
    t->bos = find_first(t, bos_names);
    t->eos = find_first(t, eos_names);
    t->eot = find_first(t, eot_names);
    int32_t tb;
    if (template_bos(t, json_object_get(root, "post_processor"), 0, &tb)) {
        t->add_bos = tb >= 0;
        if (tb >= 0)
            t->bos = tb;
    } else {
        /* No template (e.g. a Llama 3 file with only a ByteLevel post-processor): Llama 3
         * still expects <|begin_of_text|> first; GPT-2 style vocabularies add nothing. */
        t->add_bos = t->bos >= 0 && t->len[t->bos] == 17 &&
                     !memcmp(t->blob + t->off[t->bos], "<|begin_of_text|>", 17);
    }
    return tok_finalize(t, err);
}

int lq_tokenizer_from_json(const char *json, size_t len, lq_tokenizer **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "tokenizer.json: NULL output");
    *out = NULL;
    if (!json && len)
        return lq_err_set(err, LQ_EINVAL, "tokenizer.json: NULL input");
    json_error_t je;
    json_t *root = json_loadb(json ? json : "", len, JSON_ALLOW_NUL, &je);
    if (!root)
        return lq_err_set(err, LQ_EFORMAT, "tokenizer.json: line %d column %d: %s", je.line,
                          je.column, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return json_bad(err, "top level is not an object");
    }
    lq_tokenizer *t = tok_new(LQ_TOK_BPE);
    if (!t) {
        json_decref(root);
        return lq_err_set(err, LQ_ENOMEM, "tokenizer.json: out of memory");
    }
    int rc = load(t, root, err);
    json_decref(root);
    if (rc) {
        lq_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return LQ_OK;
}

int lq_tokenizer_from_json_file(const char *path, lq_tokenizer **out, lq_err *err)
{
    if (!out || !path)
        return lq_err_set(err, LQ_EINVAL, "tokenizer.json: NULL argument");
    *out = NULL;
    lq_mapfile m;
    int rc = lq_mapfile_open(&m, path, err);
    if (rc)
        return rc;
    rc = lq_tokenizer_from_json((const char *)m.data, m.size, out, err);
    lq_mapfile_close(&m);
    if (rc)
        lq_err_prefix(err, "%s", path);
    return rc;
}
