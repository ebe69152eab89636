/* Shared by the Hugging Face folder converter's files (src/model/hf_*.c). */
#ifndef LQ_MODEL_HF_INTERNAL_H
#define LQ_MODEL_HF_INTERNAL_H

#include <jansson.h>

#include "larql/gguf.h"
#include "larql/status.h"

/* <dir>/<name> loaded as JSON (jansson flags: JSON_DECODE_INT_AS_REAL for files that carry
 * integers past 2^63, as Llama 3's tokenizer_config.json model_max_length); *out NULL (and
 * LQ_OK) when the file does not exist. */
int hf_load_json(const char *dir, const char *name, size_t flags, json_t **out, lq_err *err);

/* Adds the tokenizer.* keys from dir's tokenizer.json, tokenizer_config.json (bos, eos,
 * add_bos_token, chat_template) or chat_template.jinja; config (config.json) supplies
 * bos_token_id / eos_token_id when tokenizer_config.json does not name them. The vocabulary
 * is padded with "[PAD<id>]" tokens to n_vocab (the embedding's rows), as llama.cpp does.
 * *n_tokens: tokens written (0: the folder has no tokenizer.json, nothing is written). */
int hf_tokenizer_to_gguf(lq_gguf_writer *w, const char *dir, const json_t *config, int n_vocab,
                         int *n_tokens, lq_err *err);

#endif
