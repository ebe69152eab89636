/* A prompt's tokens and KV on disk (kv_file.c): what lq_scheduler_cache_save writes and
 * lq_scheduler_cache_restore reads. */
#ifndef LQ_ENGINE_KV_FILE_H
#define LQ_ENGINE_KV_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "larql/model.h"

/* Writes toks[0..n) and kv[0..kv_bytes) (lq_session_kv_get's layout) under the model's shape,
 * through a temporary file renamed into place; *written = the file's size. */
int kvf_write(const char *path, const lq_model *m, const int32_t *toks, size_t n, const void *kv, size_t kv_bytes,
              size_t *written, lq_err *err);
/* Reads such a file for model m: LQ_EFORMAT when it is not one, is short or corrupt (CRC), or
 * was written for a model of another shape; token ids checked against the vocabulary and n
 * against max_n. Fills malloc'd *toks, *kv. */
int kvf_read(const char *path, const lq_model *m, size_t max_n, int32_t **toks, size_t *n, void **kv,
             size_t *kv_bytes, size_t *read, lq_err *err);

#endif
