/* Little-endian integers and floats in byte buffers (wire formats and file records), safe at
 * any alignment. */
#ifndef LQ_CORE_LE_H
#define LQ_CORE_LE_H

#include <stdint.h>
#include <string.h>

static inline uint32_t lq_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void lq_put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static inline float lq_le_f32(const unsigned char *p)
{
    uint32_t u = lq_le32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void lq_put_le_f32(unsigned char *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    lq_put_le32(p, u);
}

#endif
