/* Fixture generator: writes a random BitNet b1.58 GGUF of any shape in microsoft's real
 * I2_S layout, with an embedded byte-level BPE tokenizer trained on a small corpus,
 * deterministic from a seed. Used by the tests, the README demo and the benchmarks
 * (the 2B-4T-shaped model is generated on demand, never committed). */
#ifndef LARQL_FIXTURE_H
#define LARQL_FIXTURE_H

#include <stdint.h>

#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_fixture_opts {
    const char *arch;   /* "bitnet-b1.58" (default), "bitnet" or "llama" (f32 weights) */
    const char *name;   /* general.name */
    int dim, ffn, layers, heads, kv_heads, vocab, ctx;
    double rope_theta, eps;
    int emb_type;       /* LQ_GGML_F32 or LQ_GGML_F16 */
    uint64_t seed;
    double wscale;      /* I2_S scale = wscale * U(1,1.5) / sqrt(fan_in) */
    const char *corpus; /* BPE training text; NULL = built-in */
    int proj_type;      /* llama projections: 0 or LQ_GGML_F32 (default), LQ_GGML_F16.
                           BitNet: 0 (I2_S), LQ_GGML_TQ2_0 or LQ_GGML_TQ1_0 (llama-quantize's
                           ternary types; the same trits, each 256-block's d the I2_S scale;
                           dim, ffn and the q width must be multiples of 256) */
    int ternary;        /* llama only: I2_S projections, general.file_type 40 (the layout
                           bitnet.cpp's converter + llama-quantize I2_S write for llama-arch
                           ternary models); proj_type must be 0 */
    int out_type;       /* 0: tied (no output.weight); LQ_GGML_F16/F32: untied output.weight */
    const char *pre;    /* tokenizer.ggml.pre; NULL = "llama-bpe" */
    int spm;            /* 1: a SentencePiece ("llama") vocabulary laid out as llama.cpp's
                           converters write 1bitLLM's: the tokens <unk> <s> </s>, the 256 byte
                           tokens <0x00>..<0xFF>, then the trained pieces with U+2581 for
                           spaces (score -rank); bos 1, eos 2, unk 0 */
    int head_dim;       /* 0: dim / heads. Otherwise written as attention.key_length (and
                           rope.dimension_count): q is [heads*head_dim, dim], which must be a
                           multiple of 128 for I2_S. Lets a small file carry the 3B's 100. */
} lq_fixture_opts;

/* Applies a BitNet family's file layout on top of a preset's shape (README "Supported
 * models"): "2b4t" (bitnet-b1.58), "1bitllm" (bitnet, SentencePiece vocabulary),
 * "hf1bitllm" (llama + I2_S, F16 untied output, llama-bpe), "falcon3" (the same, pre-tokenizer
 * falcon3), "falcon-e" (the same, falcon_e). Unknown name -> LQ_EINVAL. */
int lq_fixture_family(lq_fixture_opts *o, const char *family, lq_err *err);

/* preset: "tiny" (dim 128, 2 layers, vocab 320), "demo" (dim 256, 4 layers, vocab 512),
 * "2b" (2B-4T shape: 30 layers, 2560, 6912, heads 20/5, vocab 128256, F16 embedding),
 * "8b" (Llama3-8B-1.58's shape: 32 layers, 4096, 14336, heads 32/8, vocab 128256, in the
 * "hf1bitllm" family's layout: llama + I2_S, F16 embedding and untied F16 output).
 * Unknown preset -> LQ_EINVAL. */
int lq_fixture_preset(lq_fixture_opts *o, const char *preset, lq_err *err);
/* Checks the shape (dim % 128, ffn % 128, head_dim % 2, heads % kv_heads, vocab >= 259 ...). */
int lq_fixture_check(const lq_fixture_opts *o, lq_err *err);
int lq_fixture_write(const lq_fixture_opts *o, const char *path, lq_err *err);

/* ---- planted facts (src/fixture/plant.c) ---- */

typedef struct lq_fact {
    const char *entity;     /* text encoded without special tokens (as describe does) */
    const char *target;     /* " " + target must be one vocabulary token */
    int layer, feature;
} lq_fact;

/* Parses "Entity>Target@layer:feature" into f (pointers into buf, which is modified). */
int lq_fact_parse(char *buf, lq_fact *f, lq_err *err);

/* Plants facts into a BitNet GGUF in place, the way shared/tools/plant_facts.py does: gate
 * row `feature` of blk.L.ffn_gate becomes the ternary sign pattern of the entity's mean
 * token embedding (components within 0.5 sigma of zero set to 0, sigma = RMS of the whole
 * embedding); column `feature` of blk.L.ffn_down becomes the sign pattern (+1/-1) of the
 * target token's embedding. Errors: non-BitNet GGUF, layer/feature out of range, target not
 * a single token, entity encoding to nothing. */
int lq_fixture_plant(const char *gguf_path, const lq_fact *facts, size_t n, lq_err *err);
/* Plants facts that form one relation: first moves every target's embedding row to the bare
 * entity word's embedding plus one shared offset (a random vector from seed, orthogonal to
 * the planted gate rows), so that relation clustering finds them together as in a real
 * model; then lq_fixture_plant. Needs an F32 token embedding. */
int lq_fixture_plant_relation(const char *gguf_path, const lq_fact *facts, size_t n, uint64_t seed, lq_err *err);

#ifdef __cplusplus
}
#endif
#endif
