/* The fixture generator writes a valid BitNet GGUF in microsoft's layout, deterministically. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "larql/fixture.h"
#include "larql/gguf.h"

static char path_a[4200], path_b[4200];

static void test_tiny_layout(void)
{
    lq_fixture_opts o;
    lq_err err = {0};
    CHECK_EQ_INT(lq_fixture_preset(&o, "tiny", &err), 0);
    snprintf(path_a, sizeof path_a, "%s/a.gguf", harness_tmpdir());
    CHECK_MSG(lq_fixture_write(&o, path_a, &err) == 0, "%s", err.msg);
    lq_gguf *g = NULL;
    CHECK_MSG(lq_gguf_open(path_a, &g, &err) == 0, "%s", err.msg);
    if (!g)
        return;
    CHECK_EQ_INT(lq_gguf_version(g), 3);
    CHECK_EQ_INT(lq_gguf_n_tensors(g), 2 + 2 * 11);
    const char *s;
    uint64_t len;
    CHECK_EQ_INT(lq_gguf_get_str(g, "general.architecture", &s, &len, &err), 0);
    CHECK(len == 12 && !memcmp(s, "bitnet-b1.58", 12));
    uint64_t v;
    CHECK_EQ_INT(lq_gguf_get_u64(g, "bitnet-b1.58.embedding_length", &v, &err), 0);
    CHECK_EQ_INT(v, 128);
    int et;
    uint64_t nt;
    CHECK_EQ_INT(lq_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &nt, &err), 0);
    CHECK_EQ_INT(nt, 320);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &v, &err), 0);
    CHECK_EQ_INT(v, 317);
    const lq_gguf_tensor *t = lq_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->type, LQ_GGML_I2_S);
        CHECK_EQ_INT(t->ne[0], 256); /* cols = ffn */
        CHECK_EQ_INT(t->ne[1], 128); /* rows = dim */
        int counts[3] = {0};
        int code3 = 0;
        for (uint64_t i = 0; i < t->n_elements; i++) {
            int tr = lq_i2s_get(t->data, i);
            counts[tr + 1]++;
        }
        for (uint64_t b = 0; b < t->n_elements / 4; b++)
            for (int sh = 0; sh < 8; sh += 2)
                code3 += ((t->data[b] >> sh) & 3) == 3;
        CHECK_EQ_INT(code3, 0);
        /* P(0) = 1/2, P(+-1) = 1/4: loose bounds on 32768 draws */
        CHECK(counts[1] > 15000 && counts[1] < 17800);
        CHECK(counts[0] > 7200 && counts[2] > 7200);
        float sc;
        CHECK_EQ_INT(lq_gguf_i2s_scale(t, &sc, &err), 0);
        CHECK(sc > 0.2f && sc < 0.4f); /* 4 * U(1, 1.5) / sqrt(256) */
    }
    lq_gguf_close(g);
}

static void test_deterministic(void)
{
    lq_fixture_opts o;
    lq_err err = {0};
    lq_fixture_preset(&o, "tiny", &err);
    snprintf(path_b, sizeof path_b, "%s/b.gguf", harness_tmpdir());
    CHECK_EQ_INT(lq_fixture_write(&o, path_b, &err), 0);
    FILE *a = fopen(path_a, "rb"), *b = fopen(path_b, "rb");
    CHECK(a && b);
    int same = 1, ca, cb;
    if (a && b) {
        do {
            ca = fgetc(a);
            cb = fgetc(b);
            if (ca != cb)
                same = 0;
        } while (ca != EOF && cb != EOF && same);
    }
    if (a) fclose(a);
    if (b) fclose(b);
    CHECK(same);
}

static void test_llama_arch(void)
{
    lq_fixture_opts o;
    lq_err err = {0};
    lq_fixture_preset(&o, "tiny", &err);
    o.arch = "llama";
    char p[4200];
    snprintf(p, sizeof p, "%s/l.gguf", harness_tmpdir());
    CHECK_MSG(lq_fixture_write(&o, p, &err) == 0, "%s", err.msg);
    lq_gguf *g = NULL;
    CHECK_EQ_INT(lq_gguf_open(p, &g, &err), 0);
    if (g) {
        const lq_gguf_tensor *t = lq_gguf_find_tensor(g, "blk.0.attn_q.weight");
        CHECK(t && t->type == LQ_GGML_F32);
        CHECK(lq_gguf_find_tensor(g, "blk.0.attn_sub_norm.weight") == NULL);
        lq_gguf_close(g);
    }
}

static void test_bad_shapes(void)
{
    lq_fixture_opts o;
    lq_err err = {0};
    lq_fixture_preset(&o, "tiny", &err);
    o.dim = 100;
    CHECK_EQ_INT(lq_fixture_check(&o, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "multiple of 128");
    lq_fixture_preset(&o, "tiny", &err);
    o.kv_heads = 3;
    CHECK_EQ_INT(lq_fixture_check(&o, &err), LQ_EINVAL);
    lq_fixture_preset(&o, "tiny", &err);
    o.vocab = 10;
    CHECK_EQ_INT(lq_fixture_check(&o, &err), LQ_EINVAL);
    lq_fixture_preset(&o, "tiny", &err);
    o.arch = "gpt2";
    CHECK_EQ_INT(lq_fixture_check(&o, &err), LQ_EINVAL);
    CHECK_EQ_INT(lq_fixture_preset(&o, "nope", &err), LQ_EINVAL);
}

/* the benchmarks' 8B shape: Llama3-8B-1.58 in the hf1bitllm layout (not written here: 3.9 GB) */
static void test_preset_8b(void)
{
    lq_fixture_opts o;
    lq_err err = {0};
    CHECK_EQ_INT(lq_fixture_preset(&o, "8b", &err), 0);
    CHECK_EQ_INT(o.layers, 32);
    CHECK_EQ_INT(o.dim, 4096);
    CHECK_EQ_INT(o.ffn, 14336);
    CHECK_EQ_INT(o.heads, 32);
    CHECK_EQ_INT(o.kv_heads, 8);
    CHECK_EQ_INT(o.vocab, 128256);
    CHECK(!strcmp(o.arch, "llama"));
    CHECK_EQ_INT(o.ternary, 1);
    CHECK_EQ_INT(o.out_type, LQ_GGML_F16);
    CHECK_EQ_INT(o.emb_type, LQ_GGML_F16);
    CHECK_EQ_INT(lq_fixture_check(&o, &err), 0);
}

int main(void)
{
    RUN(test_tiny_layout);
    RUN(test_deterministic);
    RUN(test_llama_arch);
    RUN(test_bad_shapes);
    RUN(test_preset_8b);
    return harness_done();
}
