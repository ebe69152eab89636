/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of the edit journal's
 * records. Table-driven, portable C (no SIMD: that would live in src/kernels). */
#ifndef LQ_CORE_CRC32C_H
#define LQ_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc (0 to start) over p[0..n): lq_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t lq_crc32c(uint32_t crc, const void *p, size_t n);

#endif
