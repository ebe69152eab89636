/* Private helpers shared by the GGUF reader, writer and type code. */
#ifndef LQ_GGUF_INTERNAL_H
#define LQ_GGUF_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "larql/gguf.h"
#include "core/hash.h"

#define LQ_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define LQ_GGUF_DEFAULT_ALIGNMENT 32u
#define LQ_GGUF_MAX_KEY 65535u /* the spec's limit on key length */

/* Explicit little-endian loads: GGUF is little-endian whatever the host is, and the
 * source bytes are usually unaligned. */
static inline uint16_t lq_rd_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t lq_rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t lq_rd_u64(const uint8_t *p)
{
    return (uint64_t)lq_rd_u32(p) | ((uint64_t)lq_rd_u32(p + 4) << 32);
}
static inline float lq_rd_f32(const uint8_t *p)
{
    uint32_t u = lq_rd_u32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline double lq_rd_f64(const uint8_t *p)
{
    uint64_t u = lq_rd_u64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}
static inline void lq_wr_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline void lq_wr_u64(uint8_t *p, uint64_t v)
{
    lq_wr_u32(p, (uint32_t)v);
    lq_wr_u32(p + 4, (uint32_t)(v >> 32));
}

/* Size in bytes of a scalar metadata value type, 0 for string/array/unknown. */
static inline uint32_t lq_gguf_scalar_size(int vt)
{
    switch (vt) {
    case LQ_GGUF_U8: case LQ_GGUF_I8: case LQ_GGUF_BOOL: return 1;
    case LQ_GGUF_U16: case LQ_GGUF_I16: return 2;
    case LQ_GGUF_U32: case LQ_GGUF_I32: case LQ_GGUF_F32: return 4;
    case LQ_GGUF_U64: case LQ_GGUF_I64: case LQ_GGUF_F64: return 8;
    default: return 0;
    }
}

const char *lq_gguf_vtype_name(int vt);

/* Whether a ggml type number is known at all (in the size table). */
int lq_ggml_type_known(int type);

/* the key and tensor-name hash tables */
static inline uint64_t lq_gguf_hash(const char *s, size_t n) { return lq_fnv1a64(s, n); }

#endif
