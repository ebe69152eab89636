/* Tokenizer from GGUF metadata (tokenizer.ggml.*), as llama.cpp writes and reads it:
 *   model        "gpt2" (byte-level BPE) or "llama" (SentencePiece-style)
 *   pre          BPE pre-tokenizer name ("llama-bpe"/"llama3" -> Llama 3 regex,
 *                "gpt2"/"gpt-2"/"default"/absent -> GPT-2 regex)
 *   tokens       string[n]; scores f32[n] (SPM); token_type i32[n]; merges string[m] "a b"
 *   bos/eos/eot/unknown_token_id (any integer type), add_bos_token, add_space_prefix */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static int opt_id(const lq_gguf *g, const lq_tokenizer *t, const char *key, int32_t *out,
                  lq_err *err)
{
    if (lq_gguf_find_key(g, key) < 0)
        return LQ_OK;
    int64_t v;
    int rc = lq_gguf_get_i64(g, key, &v, err);
    if (rc)
        return rc;
    if (v < 0 || v >= t->n_vocab)
        return lq_err_set(err, LQ_EFORMAT, "GGUF %s = %lld is outside the vocabulary 0..%d", key,
                          (long long)v, (int)t->n_vocab - 1);
    *out = (int32_t)v;
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

static int load(const lq_gguf *g, lq_tokenizer **out, lq_err *err)
{
    const char *s;
    uint64_t n;
    int rc = lq_gguf_get_str(g, "tokenizer.ggml.model", &s, &n, err);
    if (rc == LQ_ENOTFOUND)
        return lq_err_set(err, LQ_ENOTFOUND, "GGUF has no tokenizer (tokenizer.ggml.model missing)");
    if (rc)
        return rc;
    int kind;
    if (n == 4 && !memcmp(s, "gpt2", 4))
        kind = LQ_TOK_BPE;
    else if (n == 5 && !memcmp(s, "llama", 5))
        kind = LQ_TOK_SPM;
    else
        return lq_err_set(err, LQ_EUNSUPPORTED, "unsupported tokenizer model '%.*s'",
                          (int)(n > 64 ? 64 : n), s);

    int llama3 = 0;
    if (kind == LQ_TOK_BPE && lq_gguf_find_key(g, "tokenizer.ggml.pre") >= 0) {
        const char *p;
        uint64_t pn;
        if ((rc = lq_gguf_get_str(g, "tokenizer.ggml.pre", &p, &pn, err)))
            return rc;
        /* falcon3 and falcon_e (tiiuae's Falcon3-*-1.58bit and Falcon-E files) name their own
         * vocabularies but split text with the Llama 3 regex: llama.cpp's llama-vocab maps
         * falcon3 to LLAMA_VOCAB_PRE_TYPE_LLAMA3, and bitnet.cpp's llama.cpp fork maps falcon_e
         * there too, with ignore_merges and add_bos, as for llama3 here (README). */
        static const char *const l3[] = {"llama-bpe", "llama3", "llama-v3", "llama3.1", "llama-3",
                                         "falcon3", "falcon_e", NULL};
        static const char *const g2[] = {"gpt2", "gpt-2", "default", NULL};
        int known = 0;
        for (int i = 0; l3[i]; i++)
            if (pn == strlen(l3[i]) && !memcmp(p, l3[i], pn))
                known = llama3 = 1;
        for (int i = 0; g2[i]; i++)
            if (pn == strlen(g2[i]) && !memcmp(p, g2[i], pn))
                known = 1;
        if (!known)
            return lq_err_set(err, LQ_EUNSUPPORTED, "unsupported pre-tokenizer tokenizer.ggml.pre = '%.*s'",
                              (int)(pn > 64 ? 64 : pn), p);
    }

    int et;
    uint64_t nt;
    if ((rc = lq_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &nt, err)))
        return rc;
    if (et != LQ_GGUF_STRING)
        return lq_err_set(err, LQ_EFORMAT, "GGUF tokenizer.ggml.tokens is not a string array");
    if (nt == 0 || nt > TOK_MAX_VOCAB)
        return lq_err_set(err, LQ_EFORMAT, "GGUF tokenizer.ggml.tokens has %llu entries (1..%d)",
                          (unsigned long long)nt, TOK_MAX_VOCAB);
    int64_t k_tok = lq_gguf_find_key(g, "tokenizer.ggml.tokens");
    int64_t k_sc = lq_gguf_find_key(g, "tokenizer.ggml.scores");
    int64_t k_ty = lq_gguf_find_key(g, "tokenizer.ggml.token_type");

    lq_tokenizer *t = tok_new(kind);
    if (!t)
        return lq_err_set(err, LQ_ENOMEM, "tokenizer: out of memory");
    *out = t;
    if ((rc = tok_alloc_vocab(t, (int32_t)nt, kind == LQ_TOK_SPM, err)))
        return rc;
    for (uint64_t i = 0; i < nt; i++) {
        const char *ps;
        uint64_t pl;
        if (lq_gguf_arr_str(g, k_tok, i, &ps, &pl))
            return lq_err_set(err, LQ_EFORMAT, "GGUF tokenizer.ggml.tokens[%llu] unreadable",
                              (unsigned long long)i);
        if ((rc = tok_set_piece(t, (int32_t)i, ps, (size_t)pl, err)))
            return rc;
    }
    if (k_ty >= 0) {
        int ty = lq_gguf_arr_type(g, k_ty);
        if (ty < 0 || ty == LQ_GGUF_STRING || ty == LQ_GGUF_ARRAY || lq_gguf_arr_len(g, k_ty) != nt)
            return lq_err_set(err, LQ_EFORMAT,
                              "GGUF tokenizer.ggml.token_type must be an integer array of %llu",
                              (unsigned long long)nt);
        for (uint64_t i = 0; i < nt; i++) {
            int64_t v;
            if (lq_gguf_arr_i64(g, k_ty, i, &v) || v < 0 || v > TOK_T_BYTE)
                return lq_err_set(err, LQ_EFORMAT,
                                  "GGUF tokenizer.ggml.token_type[%llu] is not a type in 0..6",
                                  (unsigned long long)i);
            t->type[i] = (uint8_t)v;
        }
    }
    if (kind == LQ_TOK_SPM) {
        if (k_sc < 0)
            return lq_err_set(err, LQ_EFORMAT, "GGUF llama tokenizer without tokenizer.ggml.scores");
        int ty = lq_gguf_arr_type(g, k_sc);
        if (ty < 0 || ty == LQ_GGUF_STRING || ty == LQ_GGUF_ARRAY || lq_gguf_arr_len(g, k_sc) != nt)
            return lq_err_set(err, LQ_EFORMAT,
                              "GGUF tokenizer.ggml.scores must be a numeric array of %llu",
                              (unsigned long long)nt);
        for (uint64_t i = 0; i < nt; i++) {
            double d;
            if (lq_gguf_arr_f64(g, k_sc, i, &d))
                return lq_err_set(err, LQ_EFORMAT, "GGUF tokenizer.ggml.scores[%llu] unreadable",
                                  (unsigned long long)i);
            t->scores[i] = (float)d;
        }
    }
    if ((rc = tok_build_piece_map(t, err)))
        return rc;

    if (kind == LQ_TOK_BPE) {
        uint64_t nm;
        if ((rc = lq_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm, err)))
            return rc;
        if (et != LQ_GGUF_STRING)
            return lq_err_set(err, LQ_EFORMAT, "GGUF tokenizer.ggml.merges is not a string array");
        if ((rc = tok_merges_reserve(t, nm, err)))
            return rc;
        int64_t k_m = lq_gguf_find_key(g, "tokenizer.ggml.merges");
        for (uint64_t i = 0; i < nm; i++) {
            const char *ms;
            uint64_t ml;
            if (lq_gguf_arr_str(g, k_m, i, &ms, &ml))
                return lq_err_set(err, LQ_EFORMAT, "GGUF tokenizer.ggml.merges[%llu] unreadable",
                                  (unsigned long long)i);
            const char *sp = ml > 1 ? memchr(ms + 1, ' ', ml - 1) : NULL;
            if (!sp)
                return lq_err_set(err, LQ_EFORMAT, "GGUF tokenizer.ggml.merges[%llu] \"%.*s\" has no space",
                                  (unsigned long long)i, (int)(ml > 64 ? 64 : ml), ms);
            size_t na = (size_t)(sp - ms);
            if ((rc = tok_add_merge(t, ms, na, sp + 1, ml - na - 1, (int32_t)i, err)))
                return rc;
        }
        if ((rc = tok_add_regex(t, llama3 ? TOK_RE_LLAMA3 : TOK_RE_GPT2, PCRE2_ZERO_TERMINATED, err)))
            return rc;
        t->ignore_merges = llama3;
    }

    if ((rc = opt_id(g, t, "tokenizer.ggml.bos_token_id", &t->bos, err)) ||
        (rc = opt_id(g, t, "tokenizer.ggml.eos_token_id", &t->eos, err)) ||
        (rc = opt_id(g, t, "tokenizer.ggml.eot_token_id", &t->eot, err)) ||
        (rc = opt_id(g, t, "tokenizer.ggml.unknown_token_id", &t->unk, err)))
        return rc;
    if (kind == LQ_TOK_SPM) { /* llama.cpp's defaults for SentencePiece vocabularies */
        if (t->bos < 0 && nt > 1)
            t->bos = 1;
        if (t->eos < 0 && nt > 2)
            t->eos = 2;
    }
    if (t->eot < 0) { /* older conversions omit eot_token_id: find it by its text */
        static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", NULL};
        t->eot = find_first(t, eot_names);
    }
    t->add_bos = kind == LQ_TOK_SPM || llama3;
    if (lq_gguf_find_key(g, "tokenizer.ggml.add_bos_token") >= 0 &&
        (rc = lq_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err)))
        return rc;
    if (kind == LQ_TOK_SPM && lq_gguf_find_key(g, "tokenizer.ggml.add_space_prefix") >= 0 &&
        (rc = lq_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err)))
        return rc;
    return tok_finalize(t, err);
}

int lq_tokenizer_from_gguf(const lq_gguf *g, lq_tokenizer **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "tokenizer: NULL output");
    *out = NULL;
    if (!g)
        return lq_err_set(err, LQ_EINVAL, "tokenizer: NULL GGUF");
    lq_tokenizer *t = NULL;
    int rc = load(g, &t, err);
    if (rc) {
        lq_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return LQ_OK;
}
