/* GGUF reader and writer.
 *
 * Reader: lq_gguf_open maps the file read-only (mmap) and parses the header, metadata and
 * tensor infos with bounds-checked reads. Tensor data is never copied: lq_gguf_tensor.data
 * points into the mapping, valid until lq_gguf_close. Versions 2 and 3, every metadata
 * value type, nested arrays (rejected beyond one level is fine), general.alignment.
 *
 * Every count, string length, dimension, dimension product and offset read from the file is
 * checked against the file size and against the caps below before it is used; a bad file
 * gives LQ_EFORMAT (or LQ_EUNSUPPORTED for an unknown tensor type) with a message naming the
 * field, e.g. "tensor 'blk.0.attn_q.weight': data [123..456) ends past end of file (400)". */
#ifndef LARQL_GGUF_H
#define LARQL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Caps that keep a hostile file from causing huge allocations or long loops. */
#define LQ_GGUF_MAX_TENSORS (1u << 20)
#define LQ_GGUF_MAX_KV (1u << 20)
#define LQ_GGUF_MAX_STRING (1u << 24)        /* bytes in one string */
#define LQ_GGUF_MAX_ARRAY (1u << 26)         /* elements in one metadata array */
#define LQ_GGUF_MAX_DIMS 4
#define LQ_GGUF_MAX_NAME 256                 /* tensor name bytes (ggml's GGML_MAX_NAME is 64) */

/* Metadata value types (GGUF spec numbering). */
typedef enum lq_gguf_vtype {
    LQ_GGUF_U8 = 0, LQ_GGUF_I8 = 1, LQ_GGUF_U16 = 2, LQ_GGUF_I16 = 3,
    LQ_GGUF_U32 = 4, LQ_GGUF_I32 = 5, LQ_GGUF_F32 = 6, LQ_GGUF_BOOL = 7,
    LQ_GGUF_STRING = 8, LQ_GGUF_ARRAY = 9, LQ_GGUF_U64 = 10, LQ_GGUF_I64 = 11,
    LQ_GGUF_F64 = 12,
} lq_gguf_vtype;

/* ggml tensor types we know by number. Only some are decodable (lq_ggml_type_supported). */
typedef enum lq_ggml_type {
    LQ_GGML_F32 = 0, LQ_GGML_F16 = 1, LQ_GGML_Q4_0 = 2, LQ_GGML_Q4_1 = 3,
    LQ_GGML_Q5_0 = 6, LQ_GGML_Q5_1 = 7, LQ_GGML_Q8_0 = 8, LQ_GGML_Q8_1 = 9,
    LQ_GGML_Q2_K = 10, LQ_GGML_Q3_K = 11, LQ_GGML_Q4_K = 12, LQ_GGML_Q5_K = 13,
    LQ_GGML_Q6_K = 14, LQ_GGML_Q8_K = 15,
    LQ_GGML_I8 = 24, LQ_GGML_I16 = 25, LQ_GGML_I32 = 26, LQ_GGML_I64 = 27, LQ_GGML_F64 = 28,
    LQ_GGML_BF16 = 30,
    LQ_GGML_TQ1_0 = 34, LQ_GGML_TQ2_0 = 35,
    LQ_GGML_I2_S = 36, /* microsoft BitNet: 128-elem/32-byte strided blocks + f32 scale at n/4 */
} lq_ggml_type;

typedef struct lq_gguf lq_gguf;

typedef struct lq_gguf_tensor {
    const char *name;       /* NUL-terminated copy owned by the lq_gguf */
    uint32_t n_dims;        /* 1..4 */
    uint64_t ne[LQ_GGUF_MAX_DIMS]; /* ne[0] = fastest (row length / cols); unused dims = 1 */
    int type;               /* lq_ggml_type */
    uint64_t offset;        /* from the start of the data section, as stored */
    uint64_t n_elements;    /* product of ne (checked, no overflow) */
    uint64_t n_bytes;       /* bytes of data this tensor needs (I2_S: n/4 + 4, i.e. incl. scale) */
    const uint8_t *data;    /* points into the mapping; n_bytes are readable */
} lq_gguf_tensor;

/* ---- reader ---- */

int lq_gguf_open(const char *path, lq_gguf **out, lq_err *err);

/* Parse a GGUF held in memory (for fuzzing and tests). buf is not copied and must outlive
 * the returned handle. */
int lq_gguf_open_buffer(const void *buf, size_t len, lq_gguf **out, lq_err *err);

void lq_gguf_close(lq_gguf *g); /* NULL-safe */

uint32_t lq_gguf_version(const lq_gguf *g);
uint32_t lq_gguf_alignment(const lq_gguf *g);
const char *lq_gguf_path(const lq_gguf *g);   /* "" for buffers */
uint64_t lq_gguf_file_size(const lq_gguf *g);
/* The file's bytes as parsed (the mapping, or the buffer of lq_gguf_open_buffer). */
const uint8_t *lq_gguf_bytes(const lq_gguf *g, uint64_t *size);

/* File offset where the tensor data section starts (tensor offsets are relative to it). */
uint64_t lq_gguf_data_offset(const lq_gguf *g);

/* Metadata, by index 0..n_kv-1 or by key. lq_gguf_find_key returns the index or -1. */
int64_t lq_gguf_n_kv(const lq_gguf *g);
int64_t lq_gguf_find_key(const lq_gguf *g, const char *key);
const char *lq_gguf_key(const lq_gguf *g, int64_t idx);
int lq_gguf_kv_type(const lq_gguf *g, int64_t idx);          /* lq_gguf_vtype */
int lq_gguf_arr_type(const lq_gguf *g, int64_t idx);         /* element type, or -1 if not array */
uint64_t lq_gguf_arr_len(const lq_gguf *g, int64_t idx);     /* 0 if not array */
/* The raw encoded value of entry idx (the bytes after its type field, as in the file:
 * strings with their u64 length, arrays with element type and count). For copying. */
int lq_gguf_kv_raw(const lq_gguf *g, int64_t idx, const uint8_t **val, uint64_t *len);

/* Typed getters by key. Missing key -> LQ_ENOTFOUND (err message names the key).
 * Numeric getters accept ANY numeric value type (u8..u64, i8..i64, f32, f64, bool for the
 * integer getters) and convert; a value that does not fit the target (negative for u64,
 * non-integral float for an integer, out of range) -> LQ_EFORMAT. Strings -> LQ_EFORMAT. */
int lq_gguf_get_u64(const lq_gguf *g, const char *key, uint64_t *out, lq_err *err);
int lq_gguf_get_i64(const lq_gguf *g, const char *key, int64_t *out, lq_err *err);
int lq_gguf_get_f64(const lq_gguf *g, const char *key, double *out, lq_err *err);
int lq_gguf_get_bool(const lq_gguf *g, const char *key, int *out, lq_err *err);
/* String: points into the mapping, NOT NUL-terminated; *len bytes. */
int lq_gguf_get_str(const lq_gguf *g, const char *key, const char **s, uint64_t *len, lq_err *err);

/* Arrays. lq_gguf_get_arr gives the element type and count. For string arrays use
 * lq_gguf_arr_str (O(1) per element: offsets are indexed at open). For numeric arrays
 * lq_gguf_arr_data returns the raw little-endian elements (possibly unaligned: memcpy). */
int lq_gguf_get_arr(const lq_gguf *g, const char *key, int *elem_type, uint64_t *n, lq_err *err);
int lq_gguf_arr_str(const lq_gguf *g, int64_t kv_idx, uint64_t i, const char **s, uint64_t *len);
const void *lq_gguf_arr_data(const lq_gguf *g, int64_t kv_idx);
/* Element i of a numeric array converted to double / int64 (any numeric element type). */
int lq_gguf_arr_f64(const lq_gguf *g, int64_t kv_idx, uint64_t i, double *out);
int lq_gguf_arr_i64(const lq_gguf *g, int64_t kv_idx, uint64_t i, int64_t *out);

/* Tensors. */
int64_t lq_gguf_n_tensors(const lq_gguf *g);
const lq_gguf_tensor *lq_gguf_tensor_at(const lq_gguf *g, int64_t i);
const lq_gguf_tensor *lq_gguf_find_tensor(const lq_gguf *g, const char *name); /* NULL if absent */

/* ---- tensor types ---- */

const char *lq_ggml_type_name(int type);       /* "F32", "I2_S", ... or "unknown" */
int lq_ggml_type_supported(int type);          /* 1 if decodable here */
/* Elements per block and bytes per block (I2_S: 4 and 1, the packed part only). 0 if unknown. */
uint32_t lq_ggml_block_size(int type);
uint32_t lq_ggml_type_size(int type);
/* Bytes a tensor of n elements with row length ne0 occupies, as stored in a file
 * (I2_S: n/4 + 32 as microsoft writes it; the reader only requires n/4 + 4 to be present).
 * LQ_EFORMAT if ne0 is not a multiple of the block size or the size overflows. */
int lq_ggml_nbytes(int type, uint64_t ne0, uint64_t n, uint64_t *out, lq_err *err);

/* Decode a whole tensor to f32 (out has n_elements floats). For I2_S the per-tensor scale
 * is applied (value = trit * scale). For tests, tools and small tensors: the engine's hot
 * paths read the packed data directly. */
int lq_gguf_tensor_to_f32(const lq_gguf_tensor *t, float *out, lq_err *err);
/* Decode row r (ne[0] elements) of a 2-D tensor whose rows are block-aligned. */
int lq_gguf_tensor_row_f32(const lq_gguf_tensor *t, uint64_t r, float *out, lq_err *err);
/* The I2_S per-tensor scale (the f32 after the n/4 packed bytes). */
int lq_gguf_i2s_scale(const lq_gguf_tensor *t, float *out, lq_err *err);
/* The optional F32 companion "<base>.scale" of a TQ1_0/TQ2_0 tensor "<base>.weight" (files of
 * the 2024 TQ fork): a per-tensor multiplier of the decoded weights; *mult = 1 when absent.
 * LQ_EFORMAT when it is not one finite F32 value. */
int lq_gguf_tq_mult(const lq_gguf *g, const char *wname, float *mult, lq_err *err);

/* ---- writer (fixtures and tools) ----
 * Collects metadata and tensors, then writes GGUF v3 with alignment 32 (or general.alignment
 * when set with lq_gguf_writer_set_alignment). Metadata values are copied; tensor data is
 * NOT copied: the pointer must stay valid until lq_gguf_writer_write returns. */
typedef struct lq_gguf_writer lq_gguf_writer;

lq_gguf_writer *lq_gguf_writer_create(void);
void lq_gguf_writer_free(lq_gguf_writer *w);
int lq_gguf_writer_set_alignment(lq_gguf_writer *w, uint32_t alignment); /* power of 2 */
int lq_gguf_writer_add_u32(lq_gguf_writer *w, const char *key, uint32_t v);
int lq_gguf_writer_add_i32(lq_gguf_writer *w, const char *key, int32_t v);
int lq_gguf_writer_add_u64(lq_gguf_writer *w, const char *key, uint64_t v);
int lq_gguf_writer_add_f32(lq_gguf_writer *w, const char *key, float v);
int lq_gguf_writer_add_f64(lq_gguf_writer *w, const char *key, double v);
int lq_gguf_writer_add_bool(lq_gguf_writer *w, const char *key, int v);
int lq_gguf_writer_add_str(lq_gguf_writer *w, const char *key, const char *v);
/* Any scalar type from raw bytes (for tests of every value type): size must match type. */
int lq_gguf_writer_add_scalar(lq_gguf_writer *w, const char *key, int vtype, const void *v);
int lq_gguf_writer_add_arr_str(lq_gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* Numeric array: elem_type is a numeric lq_gguf_vtype; data holds n packed LE elements. */
int lq_gguf_writer_add_arr(lq_gguf_writer *w, const char *key, int elem_type, const void *data, uint64_t n);
/* ne[0] fastest. nbytes must equal lq_ggml_nbytes (I2_S: n/4 + 32, scale at n/4). */
/* Copies entry idx of an open file verbatim (any type, nested arrays included). Copying
 * general.alignment also sets the writer's alignment. */
int lq_gguf_writer_copy_kv(lq_gguf_writer *w, const lq_gguf *g, int64_t idx);
int lq_gguf_writer_add_tensor(lq_gguf_writer *w, const char *name, uint32_t n_dims,
                              const uint64_t *ne, int type, const void *data, uint64_t nbytes);
int lq_gguf_writer_write(lq_gguf_writer *w, const char *path, lq_err *err);
/* Serialize to a malloc'd buffer (tests, fuzz seeds). Caller frees *buf. */
int lq_gguf_writer_write_buffer(lq_gguf_writer *w, uint8_t **buf, size_t *len, lq_err *err);

/* ---- packing helpers (fixtures, tests, kernels' references) ---- */

/* Pack n ternary values (-1/0/+1, row-major, n % 128 == 0) into microsoft's I2_S layout:
 * n/4 bytes, then the f32 scale, then 28 zero bytes (out must hold n/4 + 32 bytes). */
int lq_i2s_pack(const int8_t *trits, uint64_t n, float scale, uint8_t *out);
/* Pack n ternary values (-1/0/+1, row-major, n % 256 == 0) as llama.cpp's TQ2_0 or TQ1_0
 * (type): n/256 blocks of 66 or 54 bytes, block b with the f16 scale d[b] (d NULL: 1 for
 * every block). out must hold n/256 blocks. Returns 0 or LQ_EINVAL. */
int lq_tq_pack(int type, const int8_t *trits, uint64_t n, const float *d, uint8_t *out);
/* microsoft's x86 quantize_i2_s packs 128-element blocks over the FLATTENED tensor (n % 128
 * == 0), so a row whose length is not a multiple of 128 (1bitLLM 3B's ffn_down: 8640) starts
 * inside a block. The engine's kernels take rows of whole blocks: lq_i2s_repack_rows copies
 * such a tensor [rows, cols] (flat: its n/4 packed bytes) into rows of
 * lq_i2s_padded_cols(cols) elements, each row's tail zero trits (dst: rows * padded / 4
 * bytes). lq_i2s_flatten_rows is the inverse (flat: n/4 bytes; the padding is dropped). */
uint64_t lq_i2s_padded_cols(uint64_t cols);
void lq_i2s_repack_rows(const uint8_t *flat, uint64_t rows, uint64_t cols, uint8_t *dst);
void lq_i2s_flatten_rows(const uint8_t *padded, uint64_t rows, uint64_t cols, uint8_t *flat);
/* Trit of element i (0-based, row-major) of a packed I2_S buffer; code 3 reads as 0. */
int lq_i2s_get(const uint8_t *packed, uint64_t i);

#ifdef __cplusplus
}
#endif
#endif
