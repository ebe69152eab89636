/* HuggingFace tokenizer.json loader.
 *
 * Byte-level BPE (GPT-2, Llama 3): model.vocab (piece -> id), model.merges ("a b" strings or
 * [a, b] pairs), model.ignore_merges, added_tokens (special=true -> control token, otherwise
 * user-defined), pre_tokenizer (ByteLevel, Split with a Regex, or a Sequence of those), and
 * the post_processor's TemplateProcessing for BOS.
 *
 * SentencePiece-style BPE (Llama 2, TinyLlama: BPE with byte_fallback, spaces as U+2581 via
 * a Replace/Prepend normalizer or a Metaspace pre-tokenizer) loads as LQ_TOK_SPM with
 * rank-ordered merges and <0xXX> byte fallback. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/cancel.h"
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

/* One normalizer of a SentencePiece-style file: Prepend("▁") or Replace(" " -> "▁"). */
static int spm_normalizer(lq_tokenizer *t, json_t *n, int depth, int *replaced, lq_err *err)
{
    if (!n || json_is_null(n))
        return LQ_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (type && !strcmp(type, "Sequence") && depth < 4) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(n, "normalizers"), i, e)
        {
            int rc = spm_normalizer(t, e, depth + 1, replaced, err);
            if (rc)
                return rc;
        }
        return LQ_OK;
    }
    if (type && !strcmp(type, "Prepend")) {
        const char *p = json_string_value(json_object_get(n, "prepend"));
        if (p && !strcmp(p, "\xE2\x96\x81")) {
            t->add_space_prefix = 1;
            return LQ_OK;
        }
    } else if (type && !strcmp(type, "Replace")) {
        const char *from = json_string_value(json_object_get(json_object_get(n, "pattern"), "String"));
        const char *to = json_string_value(json_object_get(n, "content"));
        if (from && to && !strcmp(from, " ") && !strcmp(to, "\xE2\x96\x81")) {
            *replaced = 1;
            return LQ_OK;
        }
    }
    return lq_err_set(err, LQ_EUNSUPPORTED, "tokenizer.json: normalizer '%s' is not supported",
                      type ? type : "?");
}

/* SentencePiece-style settings: the space escape, the dummy prefix, byte and unk tokens. */
static int spm_config(lq_tokenizer *t, json_t *model, json_t *norm, json_t *pretok, lq_err *err)
{
    int replaced = 0, rc;
    if ((rc = spm_normalizer(t, norm, 0, &replaced, err)))
        return rc;
    if (pretok && !json_is_null(pretok)) {
        const char *type = json_string_value(json_object_get(pretok, "type"));
        const char *rep = json_string_value(json_object_get(pretok, "replacement"));
        if (!type || strcmp(type, "Metaspace") || !rep || strcmp(rep, "\xE2\x96\x81"))
            return lq_err_set(err, LQ_EUNSUPPORTED,
                              "tokenizer.json: pre_tokenizer '%s' with a SentencePiece-style model",
                              type ? type : "?");
        replaced = 1;
        const char *scheme = json_string_value(json_object_get(pretok, "prepend_scheme"));
        json_t *aps = json_object_get(pretok, "add_prefix_space");
        if (scheme)
            t->add_space_prefix = strcmp(scheme, "never") != 0;
        else
            t->add_space_prefix = !aps || json_is_true(aps);
        t->prefix_first_only = scheme && !strcmp(scheme, "first");
        json_t *split = json_object_get(pretok, "split");
        t->spm_split = !split || json_is_true(split);
    }
    if (!replaced)
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "tokenizer.json: SentencePiece-style model without the ' ' -> U+2581 "
                          "normalizer or a Metaspace pre-tokenizer");
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const char *p = t->blob + t->off[i];
        unsigned hx;
        if (t->len[i] == 6 && t->type[i] == TOK_T_NORMAL && !memcmp(p, "<0x", 3) && p[5] == '>' &&
            sscanf(p, "<0x%2X>", &hx) == 1)
            t->type[i] = TOK_T_BYTE;
    }
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (unk) {
        t->unk = tok_find(t, unk, strlen(unk));
        if (t->unk >= 0)
            t->type[t->unk] = TOK_T_UNKNOWN;
    }
    return LQ_OK;
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

/* The caller's cancel hook (core/cancel.h) in the loops over a vocabulary: 128k pieces and
 * 280k merges take tens of ms; asked every 8192 items. */
#define POLL_EVERY(i)                                                                   \
    do {                                                                                \
        if (((i) & 8191) == 8191 && lq_cancel_poll())                                   \
            return lq_err_set(err, LQ_ECANCELED, "tokenizer.json: load cancelled");    \
    } while (0)

static int load(lq_tokenizer *t, json_t *root, lq_err *err)
{
    size_t polls = 0;
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
    json_t *norm = json_object_get(root, "normalizer");
    json_t *pretok = json_object_get(root, "pre_tokenizer");
    const char *pretype = json_string_value(json_object_get(pretok, "type"));
    int spm = json_is_true(json_object_get(model, "byte_fallback")) ||
              (norm && !json_is_null(norm)) || (pretype && !strcmp(pretype, "Metaspace"));
    if (spm) {
        t->kind = LQ_TOK_SPM;
        t->spm_merges = 1;
        t->add_space_prefix = 0;
    }
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
        POLL_EVERY(polls++);
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
        POLL_EVERY(polls++);
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
        POLL_EVERY(i);
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

    if (spm) {
        if ((rc = spm_config(t, model, norm, pretok, err)))
            return rc;
    } else if ((rc = add_pretok(t, pretok, 0, err))) {
        return rc;
    }

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

typedef struct feed {
    const char *p;
    size_t len, pos;
    int cancelled;
} feed;

static size_t feed_piece(void *buf, size_t cap, void *ud)
{
    feed *f = ud;
    if (lq_cancel_poll()) {
        f->cancelled = 1;
        return (size_t)-1; /* jansson: stop with an error */
    }
    size_t n = f->len - f->pos;
    if (n > cap)
        n = cap;
    memcpy(buf, f->p + f->pos, n);
    f->pos += n;
    return n;
}

int lq_tokenizer_from_json(const char *json, size_t len, lq_tokenizer **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "tokenizer.json: NULL output");
    *out = NULL;
    if (!json && len)
        return lq_err_set(err, LQ_EINVAL, "tokenizer.json: NULL input");
    json_error_t je;
    /* fed to jansson through a callback (it asks for small pieces) so that the caller's
       cancel hook is asked all along the parse (a 128k-token tokenizer.json is several MB,
       tens of ms for jansson) */
    feed f = {json ? json : "", len, 0, 0};
    json_t *root = json_load_callback(feed_piece, &f, JSON_ALLOW_NUL, &je);
    if (!root && f.cancelled)
        return lq_err_set(err, LQ_ECANCELED, "tokenizer.json: load cancelled");
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
