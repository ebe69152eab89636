/* libFuzzer target for the safetensors reader and the Hugging Face folder converter.
 *
 * The input is one .safetensors file. It is parsed from memory (lq_st_open_buffer); a file
 * that opens is read through (every tensor found by name, float elements decoded, metadata
 * looked up), then written as model.safetensors into a scratch folder with a fixed
 * config.json of the seeds' shape (a 1-layer tiny fixture: BitNet when a tensor is packed U8
 * or has a sub-norm, else llama) and converted to GGUF (lq_hf_to_gguf), which reads the result
 * back. Seeds: tests/fuzz/corpus/fuzz_safetensors/ (tests/fuzz/make_seeds.py: the three forms
 * of tests/safetensors/hf_twin.py and small hand-written headers). Properties checked: no
 * crash, no sanitizer report, every failure has a message and no handle, a converted GGUF
 * opens. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../scratch.h"
#include "larql/gguf.h"
#include "larql/safetensors.h"

static const char *CONFIG =
    "{\"architectures\": [\"%s\"], \"hidden_act\": \"%s\", \"hidden_size\": 128, \"intermediate_size\": 128,"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 270,"
    " \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"tie_word_embeddings\": true}";

static void exercise(const lq_safetensors *s, int *bitnet)
{
    volatile float sink = 0;
    for (int64_t i = 0; i < lq_st_n_tensors(s); i++) {
        const lq_st_tensor *t = lq_st_tensor_at(s, i);
        if (lq_st_find(s, t->name) != t)
            abort();
        if (t->n_bytes != t->n_elements * lq_st_dtype_size(t->dtype))
            abort();
        if (t->dtype == LQ_ST_F32 || t->dtype == LQ_ST_F16 || t->dtype == LQ_ST_BF16 || t->dtype == LQ_ST_F64)
            for (uint64_t k = 0; k < t->n_elements && k < 4096; k++)
                sink += lq_st_get_f32(t, k);
        *bitnet |= t->dtype == LQ_ST_U8 || strstr(t->name, "sub_norm") != NULL;
    }
    (void)lq_st_metadata(s, "format");
    (void)sink;
}

static void put(const char *dir, const char *name, const void *data, size_t len)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        abort();
    if (len && fwrite(data, 1, len, f) != len)
        abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *dir;
    if (!dir && !(dir = scratch_dir("fuzz-st", 1)))
        abort();
    lq_safetensors *s = NULL;
    lq_err err = {0};
    if (lq_st_open_buffer(data, size, &s, &err) != LQ_OK) {
        if (s || !err.msg[0])
            abort();
        return 0;
    }
    int bitnet = 0;
    exercise(s, &bitnet);
    lq_st_close(s);

    char cfg[1024], out[600];
    snprintf(cfg, sizeof cfg, CONFIG, bitnet ? "BitNetForCausalLM" : "LlamaForCausalLM", bitnet ? "relu2" : "silu");
    put(dir, "config.json", cfg, strlen(cfg));
    put(dir, "model.safetensors", data, size);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    lq_err e2 = {0};
    if (lq_hf_to_gguf(dir, out, NULL, &e2) == LQ_OK) {
        lq_gguf *g = NULL;
        if (lq_gguf_open(out, &g, NULL) != LQ_OK)
            abort();
        lq_gguf_close(g);
    } else if (!e2.msg[0]) {
        abort();
    }
    remove(out);
    return 0;
}
