/* A prompt's tokens and KV on disk. Little endian:
 *   "LQKVSLOT" | u32 version (1) | u32 n_layer, n_head_kv, head_dim, kv_type, n_vocab |
 *   u64 n_params | u32 n_tokens | u64 kv_bytes | i32 tokens[n_tokens] | kv_bytes of KV |
 *   u32 CRC-32C of everything before it
 * The shape fields make a file of another model's shape a clear error; a model of the same
 * shape with other weights is caught by the restore, which computes the first positions again
 * and compares (scheduler.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "core/le.h"
#include "engine/kv_file.h"

#define KVF_MAGIC "LQKVSLOT"
#define KVF_HEAD 56 /* magic 8, version 4, shape 5 * 4, n_params 8, n_tokens 4, kv_bytes 8, pad 4 */

static void put64(unsigned char *p, uint64_t v)
{
    lq_put_le32(p, (uint32_t)v);
    lq_put_le32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const unsigned char *p) { return lq_le32(p) | (uint64_t)lq_le32(p + 4) << 32; }

static void head_of(unsigned char *h, const lq_model *m, size_t n, size_t kv_bytes)
{
    const lq_model_info *mi = lq_model_get_info(m);
    memset(h, 0, KVF_HEAD);
    memcpy(h, KVF_MAGIC, 8);
    lq_put_le32(h + 8, 1);
    lq_put_le32(h + 12, (uint32_t)mi->n_layer);
    lq_put_le32(h + 16, (uint32_t)mi->n_head_kv);
    lq_put_le32(h + 20, (uint32_t)mi->head_dim);
    lq_put_le32(h + 24, (uint32_t)mi->kv_type);
    lq_put_le32(h + 28, (uint32_t)mi->n_vocab);
    put64(h + 32, mi->n_params);
    lq_put_le32(h + 40, (uint32_t)n);
    put64(h + 44, kv_bytes);
}

int kvf_write(const char *path, const lq_model *m, const int32_t *toks, size_t n, const void *kv, size_t kv_bytes,
              size_t *written, lq_err *err)
{
    unsigned char h[KVF_HEAD], c4[4];
    head_of(h, m, n, kv_bytes);
    size_t tl = n * 4;
    unsigned char *tb = malloc(tl ? tl : 1);
    if (!tb)
        return lq_err_set(err, LQ_ENOMEM, "slot save: out of memory");
    for (size_t i = 0; i < n; i++)
        lq_put_le32(tb + 4 * i, (uint32_t)toks[i]);
    uint32_t crc = lq_crc32c(lq_crc32c(lq_crc32c(0, h, KVF_HEAD), tb, tl), kv, kv_bytes);
    lq_put_le32(c4, crc);
    size_t pl = strlen(path) + 5;
    char *tmp = malloc(pl);
    if (!tmp) {
        free(tb);
        return lq_err_set(err, LQ_ENOMEM, "slot save: out of memory");
    }
    snprintf(tmp, pl, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(h, 1, KVF_HEAD, f) == KVF_HEAD && fwrite(tb, 1, tl, f) == tl &&
             fwrite(kv, 1, kv_bytes, f) == kv_bytes && fwrite(c4, 1, 4, f) == 4;
    if (f && fclose(f))
        ok = 0;
    free(tb);
    if (!ok || rename(tmp, path)) {
        remove(tmp);
        free(tmp);
        return lq_err_set(err, LQ_EIO, "slot save: cannot write the file");
    }
    free(tmp);
    *written = KVF_HEAD + tl + kv_bytes + 4;
    return LQ_OK;
}

int kvf_read(const char *path, const lq_model *m, size_t max_n, int32_t **toks, size_t *n, void **kv,
             size_t *kv_bytes, size_t *read, lq_err *err)
{
    *toks = NULL;
    *kv = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return lq_err_set(err, LQ_ENOTFOUND, "slot restore: no such file");
    unsigned char h[KVF_HEAD], want[KVF_HEAD], c4[4];
    int rc = LQ_OK;
    unsigned char *tb = NULL;
    if (fread(h, 1, KVF_HEAD, f) != KVF_HEAD || memcmp(h, KVF_MAGIC, 8) || lq_le32(h + 8) != 1) {
        rc = lq_err_set(err, LQ_EFORMAT, "slot restore: not a saved slot (magic or version)");
        goto out;
    }
    size_t nt = lq_le32(h + 40);
    uint64_t kb = get64(h + 44);
    if (nt < 1 || nt > max_n) {
        rc = lq_err_set(err, LQ_EFORMAT, "slot restore: %zu tokens (1..%zu fit the context)", nt, max_n);
        goto out;
    }
    head_of(want, m, nt, lq_model_kv_bytes(m, (int)nt));
    if (memcmp(h + 12, want + 12, 28)) {
        rc = lq_err_set(err, LQ_EFORMAT, "slot restore: the file was saved from another model (layers %u, kv heads "
                                         "%u, head dim %u, vocab %u; this one: %u, %u, %u, %u)",
                        lq_le32(h + 12), lq_le32(h + 16), lq_le32(h + 20), lq_le32(h + 28), lq_le32(want + 12),
                        lq_le32(want + 16), lq_le32(want + 20), lq_le32(want + 28));
        goto out;
    }
    if (kb != get64(want + 44)) {
        rc = lq_err_set(err, LQ_EFORMAT, "slot restore: %llu bytes of KV for %zu tokens (expected %llu)",
                        (unsigned long long)kb, nt, (unsigned long long)get64(want + 44));
        goto out;
    }
    tb = malloc(nt * 4);
    *toks = malloc(nt * sizeof **toks);
    *kv = malloc((size_t)kb);
    if (!tb || !*toks || !*kv) {
        rc = lq_err_set(err, LQ_ENOMEM, "slot restore: out of memory for %llu bytes", (unsigned long long)kb);
        goto out;
    }
    if (fread(tb, 1, nt * 4, f) != nt * 4 || fread(*kv, 1, (size_t)kb, f) != kb || fread(c4, 1, 4, f) != 4) {
        rc = lq_err_set(err, LQ_EFORMAT, "slot restore: the file is short");
        goto out;
    }
    if (fgetc(f) != EOF) {
        rc = lq_err_set(err, LQ_EFORMAT, "slot restore: bytes after the end");
        goto out;
    }
    if (lq_crc32c(lq_crc32c(lq_crc32c(0, h, KVF_HEAD), tb, nt * 4), *kv, (size_t)kb) != lq_le32(c4)) {
        rc = lq_err_set(err, LQ_EFORMAT, "slot restore: checksum mismatch (the file is corrupt)");
        goto out;
    }
    int32_t nv = lq_model_get_info(m)->n_vocab;
    for (size_t i = 0; i < nt; i++) {
        int32_t id = (int32_t)lq_le32(tb + 4 * i);
        if (id < 0 || id >= nv) {
            rc = lq_err_set(err, LQ_EFORMAT, "slot restore: token %zu is %d, outside the vocabulary", i, (int)id);
            goto out;
        }
        (*toks)[i] = id;
    }
    *n = nt;
    *kv_bytes = (size_t)kb;
    *read = KVF_HEAD + nt * 4 + (size_t)kb + 4;
out:
    fclose(f);
    free(tb);
    if (rc) {
        free(*toks);
        free(*kv);
        *toks = NULL;
        *kv = NULL;
    }
    return rc;
}
