/* Hugging Face safetensors reader (src/safetensors/), and the conversion of a Hugging Face
 * model folder to GGUF (src/model/hf_*.c).
 *
 * A safetensors file is: u64 little-endian header length N, N bytes of JSON
 *   {"NAME": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * then the data section; offsets are relative to its start (byte 8 + N). Nothing in the file
 * is trusted: the header length is capped and must fit the file, every dtype must be known,
 * every shape's element count times the dtype size must equal end - begin, every range must
 * lie inside the data section, and the ranges must tile it without overlap or hole (what the
 * reference library requires). The data is mapped, never copied: lq_st_tensor.data points
 * into the mapping until lq_st_close.
 *
 * A folder holds model.safetensors, or shards listed by model.safetensors.index.json
 * ("weight_map": tensor -> shard file name). A shard the index names that is absent, a
 * model-*.safetensors file in the folder the index does not name, a tensor in a shard that
 * the index places elsewhere or not at all, or the same tensor in two shards is an error
 * naming the file and tensor. */
#ifndef LARQL_SAFETENSORS_H
#define LARQL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LQ_ST_MAX_HEADER (100u << 20) /* JSON header bytes (the reference library's cap) */
#define LQ_ST_MAX_TENSORS (1u << 20)  /* tensors in one file or folder */
#define LQ_ST_MAX_DIMS 8
#define LQ_ST_MAX_NAME 1024           /* tensor name bytes */
#define LQ_ST_MAX_SHARDS 4096

typedef enum lq_st_dtype {
    LQ_ST_BOOL, LQ_ST_U8, LQ_ST_I8, LQ_ST_I16, LQ_ST_U16, LQ_ST_F16, LQ_ST_BF16, LQ_ST_I32,
    LQ_ST_U32, LQ_ST_F32, LQ_ST_F64, LQ_ST_I64, LQ_ST_U64, LQ_ST_F8_E4M3, LQ_ST_F8_E5M2,
    LQ_ST_N_DTYPES
} lq_st_dtype;

typedef struct lq_st_tensor {
    const char *name;          /* NUL-terminated, owned by the lq_safetensors */
    int dtype;                 /* lq_st_dtype */
    uint32_t n_dims;           /* 0..LQ_ST_MAX_DIMS (0: a scalar) */
    uint64_t shape[LQ_ST_MAX_DIMS]; /* as in the file: shape[0] slowest (rows first) */
    uint64_t n_elements;
    uint64_t n_bytes;
    const uint8_t *data;       /* n_bytes readable; not aligned (the header length is free) */
    const char *file;          /* the file (shard) name it came from, for messages */
} lq_st_tensor;

typedef struct lq_safetensors lq_safetensors;

/* One .safetensors file. */
int lq_st_open(const char *path, lq_safetensors **out, lq_err *err);
/* One file held in memory (fuzzing, tests); buf must outlive the handle. */
int lq_st_open_buffer(const void *buf, size_t len, lq_safetensors **out, lq_err *err);
/* A model folder: model.safetensors.index.json and its shards, else model.safetensors. */
int lq_st_open_dir(const char *dir, lq_safetensors **out, lq_err *err);
void lq_st_close(lq_safetensors *s); /* NULL-safe */

int64_t lq_st_n_tensors(const lq_safetensors *s);
const lq_st_tensor *lq_st_tensor_at(const lq_safetensors *s, int64_t i); /* file order */
const lq_st_tensor *lq_st_find(const lq_safetensors *s, const char *name); /* NULL if absent */
/* A "__metadata__" value of the (first) file, NULL if absent. */
const char *lq_st_metadata(const lq_safetensors *s, const char *key);

const char *lq_st_dtype_name(int dtype);  /* "BF16" ..., "unknown" */
uint32_t lq_st_dtype_size(int dtype);     /* bytes per element, 0 if unknown */
/* Element i of a F32/F16/BF16/F64 tensor as f32 (no check of i: callers bound it). */
float lq_st_get_f32(const lq_st_tensor *t, uint64_t i);

/* ---- Hugging Face folder -> GGUF (src/model/hf_convert.c) ----
 *
 * Reads config.json, the safetensors, tokenizer.json and tokenizer_config.json (or
 * chat_template.jinja) of hf_dir and writes a GGUF that the model loader reads, with the
 * names, types and metadata keys microsoft's and llama.cpp's converters write:
 *   BitNetForCausalLM, hidden_act relu2 -> "bitnet-b1.58"; hidden_act silu -> "bitnet";
 *   LlamaForCausalLM -> "llama" (q/k rows permuted for llama.cpp's adjacent-pair RoPE).
 * BitNet projections become I2_S: from the packed uint8 form ([out/4, in], 2-bit codes,
 * code - 1 = trit, row r of block i is output row i*(out/4)+r, a weight_scale s per tensor
 * with W = trit / s, as transformers' BitLinear divides by it), or from float master weights
 * quantised with absmean (scale = mean|W|, trit = round(W / scale) clamped to [-1, 1]).
 * Norms become F32; other F32 tensors stay F32, F16 and BF16 ones become F16. */
typedef struct lq_hf_convert_opts {
    const char *name;   /* general.name; NULL = the folder's base name */
} lq_hf_convert_opts;

int lq_hf_to_gguf(const char *hf_dir, const char *out_path, const lq_hf_convert_opts *opts,
                  lq_err *err);

#ifdef __cplusplus
}
#endif
#endif
