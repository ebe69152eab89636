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
