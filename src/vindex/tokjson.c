/* tokenizer.json (HuggingFace tokenizers format) synthesised from a GGUF's tokenizer.ggml.*
 * metadata, for GGUFs that come without a tokenizer.json next to them. Byte-level BPE
 * ("gpt2" model: GPT-2 / Llama 3 pre-tokenizers) becomes a BPE model with vocab + merges;
 * SentencePiece ("llama") becomes a Unigram model with the GGUF scores and byte fallback. */
#include <stdlib.h>
#include <string.h>

#include "larql/gguf.h"
#include "vindex/vindex_internal.h"

/* Llama 3's pre-tokenizer split pattern (as in Meta's tokenizer.json). */
static const char llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static void added_token(lq_sb *b, int64_t id, const char *s, uint64_t n, int special, int first)
{
    lq_sb_puts(b, first ? "\n    {\n" : ",\n    {\n");
    lq_sb_printf(b, "      \"id\": %lld,\n      \"content\": ", (long long)id);
    lq_sb_json_str(b, s, (size_t)n);
    lq_sb_printf(b, ",\n      \"single_word\": false,\n      \"lstrip\": false,\n      \"rstrip\": false,\n"
                    "      \"normalized\": false,\n      \"special\": %s\n    }",
                 special ? "true" : "false");
}

int lq_vx_tokenizer_json_from_gguf(const lq_gguf *g, char **json, size_t *len, lq_err *err)
{
    const char *model = NULL;
    uint64_t mlen = 0;
    if (lq_gguf_get_str(g, "tokenizer.ggml.model", &model, &mlen, NULL))
        return lq_err_set(err, LQ_ENOTFOUND,
                          "GGUF has no tokenizer.ggml.model and no tokenizer.json sits next to it");
    int bpe = mlen == 4 && !memcmp(model, "gpt2", 4);
    int spm = mlen == 5 && !memcmp(model, "llama", 5);
    if (!bpe && !spm)
        return lq_err_set(err, LQ_EUNSUPPORTED, "tokenizer.ggml.model '%.*s' (gpt2 or llama supported)",
                          (int)mlen, model);
    int64_t ti = lq_gguf_find_key(g, "tokenizer.ggml.tokens");
    if (ti < 0 || lq_gguf_arr_type(g, ti) != LQ_GGUF_STRING)
        return lq_err_set(err, LQ_EFORMAT, "GGUF: tokenizer.ggml.tokens missing or not a string array");
    uint64_t nt = lq_gguf_arr_len(g, ti);
    int64_t tt = lq_gguf_find_key(g, "tokenizer.ggml.token_type");
    if (tt >= 0 && lq_gguf_arr_len(g, tt) != nt)
        tt = -1;
    int64_t sc = lq_gguf_find_key(g, "tokenizer.ggml.scores");
    if (sc >= 0 && lq_gguf_arr_len(g, sc) != nt)
        sc = -1;
    int64_t mi = lq_gguf_find_key(g, "tokenizer.ggml.merges");
    uint64_t bos = 0;
    int has_bos = lq_gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &bos, NULL) == LQ_OK && bos < nt;
    int add_bos = 0;
    if (lq_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, NULL))
        add_bos = has_bos && bpe ? 1 : spm;
    const char *pre = NULL;
    uint64_t plen = 0;
    lq_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &plen, NULL);
    int llama3 = pre && plen == 9 && !memcmp(pre, "llama-bpe", 9);

    lq_sb b = {0};
    lq_sb_puts(&b, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
    int first = 1;
    for (uint64_t i = 0; i < nt; i++) {
        int64_t type = 1;
        if (tt >= 0)
            lq_gguf_arr_i64(g, tt, i, &type);
        if (type != 3 && type != 4) /* CONTROL, USER_DEFINED */
            continue;
        const char *s;
        uint64_t n;
        lq_gguf_arr_str(g, ti, i, &s, &n);
        added_token(&b, (int64_t)i, s, n, type == 3, first);
        first = 0;
    }
    lq_sb_puts(&b, first ? "],\n" : "\n  ],\n");
    if (bpe) {
        lq_sb_puts(&b, "  \"normalizer\": null,\n");
        if (llama3) {
            lq_sb_puts(&b, "  \"pre_tokenizer\": {\n    \"type\": \"Sequence\",\n    \"pretokenizers\": [\n"
                           "      {\n        \"type\": \"Split\",\n        \"pattern\": {\n          \"Regex\": ");
            lq_sb_json_str(&b, llama3_pattern, strlen(llama3_pattern));
            lq_sb_puts(&b, "\n        },\n        \"behavior\": \"Isolated\",\n        \"invert\": false\n      },\n"
                           "      {\n        \"type\": \"ByteLevel\",\n        \"add_prefix_space\": false,\n"
                           "        \"trim_offsets\": true,\n        \"use_regex\": false\n      }\n    ]\n  },\n");
        } else {
            lq_sb_puts(&b, "  \"pre_tokenizer\": {\n    \"type\": \"ByteLevel\",\n    \"add_prefix_space\": false,\n"
                           "    \"trim_offsets\": true,\n    \"use_regex\": true\n  },\n");
        }
    } else {
        lq_sb_puts(&b, "  \"normalizer\": {\n    \"type\": \"Sequence\",\n    \"normalizers\": [\n"
                       "      {\n        \"type\": \"Prepend\",\n        \"prepend\": \"\xe2\x96\x81\"\n      },\n"
                       "      {\n        \"type\": \"Replace\",\n        \"pattern\": {\n          \"String\": \" \"\n"
                       "        },\n        \"content\": \"\xe2\x96\x81\"\n      }\n    ]\n  },\n"
                       "  \"pre_tokenizer\": null,\n");
    }
    if (add_bos && has_bos) {
        const char *s;
        uint64_t n;
        lq_gguf_arr_str(g, ti, bos, &s, &n);
        lq_sb_puts(&b, "  \"post_processor\": {\n    \"type\": \"TemplateProcessing\",\n    \"single\": [\n"
                       "      {\n        \"SpecialToken\": {\n          \"id\": ");
        lq_sb_json_str(&b, s, (size_t)n);
        lq_sb_puts(&b, ",\n          \"type_id\": 0\n        }\n      },\n      {\n        \"Sequence\": {\n"
                       "          \"id\": \"A\",\n          \"type_id\": 0\n        }\n      }\n    ],\n"
                       "    \"pair\": [\n      {\n        \"SpecialToken\": {\n          \"id\": ");
        lq_sb_json_str(&b, s, (size_t)n);
        lq_sb_puts(&b, ",\n          \"type_id\": 0\n        }\n      },\n      {\n        \"Sequence\": {\n"
                       "          \"id\": \"A\",\n          \"type_id\": 0\n        }\n      },\n      {\n"
                       "        \"Sequence\": {\n          \"id\": \"B\",\n          \"type_id\": 1\n        }\n"
                       "      }\n    ],\n    \"special_tokens\": {\n      ");
        lq_sb_json_str(&b, s, (size_t)n);
        lq_sb_puts(&b, ": {\n        \"id\": ");
        lq_sb_json_str(&b, s, (size_t)n);
        lq_sb_printf(&b, ",\n        \"ids\": [\n          %llu\n        ],\n        \"tokens\": [\n          ",
                     (unsigned long long)bos);
        lq_sb_json_str(&b, s, (size_t)n);
        lq_sb_puts(&b, "\n        ]\n      }\n    }\n  },\n");
    } else {
        lq_sb_puts(&b, "  \"post_processor\": null,\n");
    }
    if (bpe) {
        lq_sb_puts(&b, "  \"decoder\": {\n    \"type\": \"ByteLevel\",\n    \"add_prefix_space\": true,\n"
                       "    \"trim_offsets\": true,\n    \"use_regex\": true\n  },\n"
                       "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
                       "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n"
                       "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n"
                       "    \"vocab\": {");
        for (uint64_t i = 0; i < nt; i++) {
            const char *s;
            uint64_t n;
            lq_gguf_arr_str(g, ti, i, &s, &n);
            lq_sb_puts(&b, i ? ",\n      " : "\n      ");
            lq_sb_json_str(&b, s, (size_t)n);
            lq_sb_printf(&b, ": %llu", (unsigned long long)i);
        }
        lq_sb_puts(&b, nt ? "\n    },\n    \"merges\": [" : "},\n    \"merges\": [");
        uint64_t nm = mi >= 0 && lq_gguf_arr_type(g, mi) == LQ_GGUF_STRING ? lq_gguf_arr_len(g, mi) : 0;
        for (uint64_t i = 0; i < nm; i++) {
            const char *s;
            uint64_t n;
            lq_gguf_arr_str(g, mi, i, &s, &n);
            lq_sb_puts(&b, i ? ",\n      " : "\n      ");
            lq_sb_json_str(&b, s, (size_t)n);
        }
        lq_sb_puts(&b, nm ? "\n    ]\n  }\n}" : "]\n  }\n}");
    } else {
        lq_sb_puts(&b, "  \"decoder\": {\n    \"type\": \"Sequence\",\n    \"decoders\": [\n"
                       "      {\n        \"type\": \"Replace\",\n        \"pattern\": {\n          \"String\": \"\xe2\x96\x81\"\n"
                       "        },\n        \"content\": \" \"\n      },\n      {\n        \"type\": \"ByteFallback\"\n      },\n"
                       "      {\n        \"type\": \"Fuse\"\n      },\n      {\n        \"type\": \"Strip\",\n"
                       "        \"content\": \" \",\n        \"start\": 1,\n        \"stop\": 0\n      }\n    ]\n  },\n"
                       "  \"model\": {\n    \"type\": \"Unigram\",\n    \"unk_id\": 0,\n    \"vocab\": [");
        for (uint64_t i = 0; i < nt; i++) {
            const char *s;
            uint64_t n;
            double score = 0;
            lq_gguf_arr_str(g, ti, i, &s, &n);
            if (sc >= 0)
                lq_gguf_arr_f64(g, sc, i, &score);
            lq_sb_puts(&b, i ? ",\n      [\n        " : "\n      [\n        ");
            lq_sb_json_str(&b, s, (size_t)n);
            lq_sb_puts(&b, ",\n        ");
            lq_sb_f64(&b, score);
            lq_sb_puts(&b, "\n      ]");
        }
        lq_sb_puts(&b, nt ? "\n    ],\n    \"byte_fallback\": true\n  }\n}" : "],\n    \"byte_fallback\": true\n  }\n}");
    }
    int rc = lq_sb_finish(&b, json, err);
    if (!rc)
        *len = strlen(*json);
    return rc;
}

/* ---- reading a Unigram (SentencePiece) tokenizer.json back ----
 * The tokenizer module reads BPE tokenizer.json files; SentencePiece vocabularies reach it
 * through GGUF metadata. A vindex built from a llama GGUF holds the Unigram form written
 * above (LARQL's own llama vindexes hold the same model type), so it is turned back into
 * tokenizer.ggml.* metadata in a GGUF buffer and loaded from there. Token types: pieces
 * <0xHH> are bytes (6), unk_id is unknown (2), added special tokens control (3), other added
 * tokens user-defined (4), the rest normal (1). BOS: the post-processor's special token
 * (then add_bos), else "<s>"; EOS: "</s>". Space prefix: a Prepend "▁" normalizer or a
 * Metaspace pre-tokenizer that prepends. */

static int is_byte_piece(const char *s)
{
    return strlen(s) == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' &&
           strchr("0123456789ABCDEFabcdef", s[3]) && strchr("0123456789ABCDEFabcdef", s[4]) && s[3] && s[4];
}

static int unigram_prefix(const json_t *root)
{
    const json_t *nz = json_object_get(root, "normalizer");
    const json_t *list = json_object_get(nz, "normalizers");
    size_t i;
    json_t *x;
    if (json_is_array(list)) {
        json_array_foreach(list, i, x) {
            const char *ty = json_string_value(json_object_get(x, "type"));
            if (ty && !strcmp(ty, "Prepend"))
                return 1;
        }
    } else {
        const char *ty = json_string_value(json_object_get(nz, "type"));
        if (ty && !strcmp(ty, "Prepend"))
            return 1;
    }
    const json_t *pt = json_object_get(root, "pre_tokenizer");
    const char *ty = json_string_value(json_object_get(pt, "type"));
    if (ty && !strcmp(ty, "Metaspace")) {
        const char *sch = json_string_value(json_object_get(pt, "prepend_scheme"));
        json_t *aps = json_object_get(pt, "add_prefix_space");
        return sch ? strcmp(sch, "never") != 0 : !json_is_false(aps);
    }
    return 0;
}

int lq_vx_tokenizer_from_unigram(const char *path, lq_tokenizer **out, lq_err *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return lq_err_set(err, LQ_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    const json_t *model = json_object_get(root, "model");
    const char *mty = json_string_value(json_object_get(model, "type"));
    const json_t *vocab = json_object_get(model, "vocab");
    int rc = LQ_OK;
    size_t n = json_array_size(vocab);
    const char **pieces = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    lq_gguf_writer *w = NULL;
    uint8_t *buf = NULL;
    size_t blen = 0;
    lq_gguf *g = NULL;
    if (!mty || strcmp(mty, "Unigram")) {
        rc = lq_err_set(err, LQ_EUNSUPPORTED, "%s: model type '%s' is not Unigram", path, mty ? mty : "(none)");
        goto out;
    }
    if (!json_is_array(vocab) || n == 0 || n > LQ_VINDEX_MAX_VOCAB) {
        rc = lq_err_set(err, LQ_EFORMAT, "%s: model.vocab must be a non-empty array of at most %d [piece, score]",
                        path, LQ_VINDEX_MAX_VOCAB);
        goto out;
    }
    pieces = calloc(n, sizeof *pieces);
    scores = calloc(n, sizeof *scores);
    types = calloc(n, sizeof *types);
    if (!pieces || !scores || !types) {
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(vocab, i);
        const json_t *p = json_array_get(e, 0), *sc = json_array_get(e, 1);
        if (json_array_size(e) != 2 || !json_is_string(p) || !json_is_number(sc)) {
            rc = lq_err_set(err, LQ_EFORMAT, "%s: model.vocab[%zu] is not [piece, score]", path, i);
            goto out;
        }
        pieces[i] = json_string_value(p);
        scores[i] = (float)json_number_value(sc);
        types[i] = is_byte_piece(pieces[i]) ? 6 : 1;
    }
    json_t *unk = json_object_get(model, "unk_id");
    if (json_is_integer(unk) && json_integer_value(unk) >= 0 && (size_t)json_integer_value(unk) < n)
        types[json_integer_value(unk)] = 2;
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(root, "added_tokens"), i, x) {
        json_t *id = json_object_get(x, "id");
        if (json_is_integer(id) && json_integer_value(id) >= 0 && (size_t)json_integer_value(id) < n)
            types[json_integer_value(id)] = json_is_true(json_object_get(x, "special")) ? 3 : 4;
    }
    /* BOS: the TemplateProcessing special token that opens "single" */
    long long bos = -1, eos = -1;
    int add_bos = 0;
    {
        const json_t *pp = json_object_get(root, "post_processor");
        const json_t *first = json_object_get(json_array_get(json_object_get(pp, "single"), 0), "SpecialToken");
        const char *bid = json_string_value(json_object_get(first, "id"));
        const json_t *st = bid ? json_object_get(json_object_get(pp, "special_tokens"), bid) : NULL;
        json_t *ids = json_object_get(st, "ids");
        if (json_is_integer(json_array_get(ids, 0))) {
            bos = json_integer_value(json_array_get(ids, 0));
            add_bos = 1;
        }
    }
    for (size_t k = 0; k < n; k++) {
        if (bos < 0 && !strcmp(pieces[k], "<s>"))
            bos = (long long)k;
        if (eos < 0 && !strcmp(pieces[k], "</s>"))
            eos = (long long)k;
    }
    w = lq_gguf_writer_create();
    if (!w) {
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        goto out;
    }
    int wr = lq_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama") |
             lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", pieces, n) |
             lq_gguf_writer_add_arr(w, "tokenizer.ggml.scores", LQ_GGUF_F32, scores, n) |
             lq_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LQ_GGUF_I32, types, n) |
             lq_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", add_bos) |
             lq_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", unigram_prefix(root));
    if (bos >= 0 && bos < (long long)n)
        wr |= lq_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0)
        wr |= lq_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (json_is_integer(unk) && json_integer_value(unk) >= 0 && (size_t)json_integer_value(unk) < n)
        wr |= lq_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)json_integer_value(unk));
    if (wr) {
        rc = lq_err_set(err, LQ_ENOMEM, "%s: cannot collect the vocabulary (out of memory)", path);
        goto out;
    }
    if ((rc = lq_gguf_writer_write_buffer(w, &buf, &blen, err)) || (rc = lq_gguf_open_buffer(buf, blen, &g, err)))
        goto out;
    rc = lq_tokenizer_from_gguf(g, out, err);
out:
    lq_gguf_close(g);
    free(buf);
    lq_gguf_writer_free(w);
    free(pieces);
    free(scores);
    free(types);
    json_decref(root);
    return rc;
}
