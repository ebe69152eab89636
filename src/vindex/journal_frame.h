/* The edit journal's record framing (journal.c replays and appends, journal_tool.c checks and
 * salvages, both through the walker here).
 *
 * Record (LQJ2, every record written since this format):
 *   "LQJ2" | u32 LE payload length | u64 LE sequence | u32 LE CRC-32C of the payload |
 *   u32 LE CRC-32C of the 20 header bytes before it | payload (JSON)
 * Old record (LQJ1, still read; a file holding any is rewritten at its first checkpoint):
 *   "LQJ1" | u32 LE payload length | first 8 bytes of sha256(payload) | payload
 * The header's own checksum tells a damaged length from a short (torn) record; the sequence
 * tells a missing or repeated record from an intact run. */
#ifndef LQ_VINDEX_JOURNAL_FRAME_H
#define LQ_VINDEX_JOURNAL_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "larql/status.h"

#define JF_HDR 24u
#define JF_HDR1 16u
#define JF_MAX_RECORD ((uint32_t)1 << 30)

typedef struct jf_rec {
    uint64_t off, len;        /* the whole record in the file */
    int version;              /* 1 or 2 */
    uint64_t seq;             /* version 2 */
    const char *payload;
    uint32_t plen;
} jf_rec;

/* The header of a version-2 record of payload p[0..n) with sequence seq. */
void lq_vx_jf_header(uint8_t hdr[JF_HDR], uint64_t seq, const void *p, uint32_t n);
/* 1 when a complete, intact record starts at b[off] (r filled), else 0. */
int lq_vx_jf_parse(const uint8_t *b, uint64_t size, uint64_t off, jf_rec *r);
/* The first intact record at or after off: 1 (r filled) or 0. */
int lq_vx_jf_resync(const uint8_t *b, uint64_t size, uint64_t off, jf_rec *r);

/* A walk over a file's bytes: intact records in order, and the bad ranges between them. */
typedef struct jf_item {
    int valid;                /* 1: rec is a record; 0: [off, off + len) is bad */
    uint64_t off, len;
    jf_rec rec;
    int seq_break;            /* a record whose sequence does not follow the previous one's */
} jf_item;
typedef int (*jf_fn)(void *ctx, const jf_item *it); /* non-zero stops the walk */
void lq_vx_jf_walk(const uint8_t *b, uint64_t size, jf_fn fn, void *ctx);

/* A bad range that runs to the end of the file with nothing intact after it: 1 when it is
 * what an interrupted append leaves (shorter than a header, a header of zeros - blocks never
 * written -, a record cut short, or a complete record whose last byte is zero), 0 when an
 * acknowledged record was damaged there (its header's checksum fails, or its payload's while
 * every byte is present). prev_version: the record before it (0 none). */
int lq_vx_jf_tail_is_torn(const uint8_t *b, uint64_t size, uint64_t off, int prev_version);

/* The whole file into memory (*b NULL and *size 0 for an empty or absent file when
 * missing_ok). name: how errors name it. */
int lq_vx_jf_read_file(const char *path, const char *name, int missing_ok, uint8_t **b, uint64_t *size, lq_err *err);

#endif
