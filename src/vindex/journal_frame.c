/* Record framing of the edit journal: see journal_frame.h for the layout.
 *
 * Resynchronising after a bad range looks for a magic at every byte and accepts only a record
 * whose checksums hold, so a payload cannot pass for a record by accident: JSON text never
 * holds the zero bytes every header's length and sequence carry, and the two CRCs make a
 * chance match about 2^-64. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "vindex/journal_frame.h"
#include "vindex/vindex_internal.h"

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void lq_vx_jf_header(uint8_t hdr[JF_HDR], uint64_t seq, const void *p, uint32_t n)
{
    memcpy(hdr, "LQJ2", 4);
    wr32(hdr + 4, n);
    wr32(hdr + 8, (uint32_t)seq);
    wr32(hdr + 12, (uint32_t)(seq >> 32));
    wr32(hdr + 16, lq_crc32c(0, p, n));
    wr32(hdr + 20, lq_crc32c(0, hdr, 20));
}

/* a version-2 header at b[off] whose own checksum holds */
static int header_ok(const uint8_t *b, uint64_t size, uint64_t off)
{
    return size - off >= JF_HDR && !memcmp(b + off, "LQJ2", 4) && rd32(b + off + 20) == lq_crc32c(0, b + off, 20) &&
           rd32(b + off + 4) <= JF_MAX_RECORD;
}

int lq_vx_jf_parse(const uint8_t *b, uint64_t size, uint64_t off, jf_rec *r)
{
    if (off >= size || size - off < JF_HDR1)
        return 0;
    const uint8_t *h = b + off;
    if (!memcmp(h, "LQJ2", 4)) {
        if (!header_ok(b, size, off))
            return 0;
        uint32_t n = rd32(h + 4);
        if (size - off - JF_HDR < n || rd32(h + 16) != lq_crc32c(0, h + JF_HDR, n))
            return 0;
        *r = (jf_rec){off, JF_HDR + (uint64_t)n, 2, rd64(h + 8), (const char *)h + JF_HDR, n};
        return 1;
    }
    if (!memcmp(h, "LQJ1", 4)) {
        uint32_t n = rd32(h + 4);
        if (n > JF_MAX_RECORD || size - off - JF_HDR1 < n)
            return 0;
        uint8_t d[32];
        lq_sha256 s;
        lq_sha256_init(&s);
        lq_sha256_update(&s, h + JF_HDR1, n);
        lq_sha256_final(&s, d);
        if (memcmp(d, h + 8, 8))
            return 0;
        *r = (jf_rec){off, JF_HDR1 + (uint64_t)n, 1, 0, (const char *)h + JF_HDR1, n};
        return 1;
    }
    return 0;
}

int lq_vx_jf_resync(const uint8_t *b, uint64_t size, uint64_t off, jf_rec *r)
{
    while (off + JF_HDR1 <= size) {
        const uint8_t *m = memmem(b + off, size - off, "LQJ", 3);
        if (!m)
            return 0;
        off = (uint64_t)(m - b);
        if (lq_vx_jf_parse(b, size, off, r))
            return 1;
        off++;
    }
    return 0;
}

void lq_vx_jf_walk(const uint8_t *b, uint64_t size, jf_fn fn, void *ctx)
{
    uint64_t off = 0, prev_seq = 0;
    int have_seq = 0, gap = 0;
    while (off < size) {
        jf_item it = {0};
        if (lq_vx_jf_parse(b, size, off, &it.rec)) {
            it.valid = 1;
            it.off = off;
            it.len = it.rec.len;
            if (it.rec.version == 2) {
                /* after a bad range the missing numbers are its records: only going back is a break */
                it.seq_break = have_seq && (gap ? it.rec.seq <= prev_seq : it.rec.seq != prev_seq + 1);
                prev_seq = it.rec.seq;
                have_seq = 1;
            }
            gap = 0;
        } else {
            gap = 1;
            jf_rec next;
            uint64_t end = lq_vx_jf_resync(b, size, off + 1, &next) ? next.off : size;
            it.off = off;
            it.len = end - off;
        }
        if (fn(ctx, &it))
            return;
        off += it.len;
    }
}

int lq_vx_jf_tail_is_torn(const uint8_t *b, uint64_t size, uint64_t off, int prev_version)
{
    uint64_t left = size - off;
    if (prev_version == 1 || (prev_version == 0 && left >= 4 && !memcmp(b + off, "LQJ1", 4)))
        return 1; /* the old format has no header checksum: its tails are cut as they always were */
    if (left < JF_HDR)
        return 1;
    int zero = 1;
    for (unsigned i = 0; i < JF_HDR && zero; i++)
        zero = !b[off + i];
    if (zero)
        return 1;
    if (!header_ok(b, size, off))
        return 0;
    uint64_t n = rd32(b + off + 4);
    if (left - JF_HDR < n)
        return 1;
    return b[off + JF_HDR + n - 1] == 0 || n == 0 ? 1 : 0;
}

int lq_vx_jf_read_file(const char *path, const char *name, int missing_ok, uint8_t **b, uint64_t *size, lq_err *err)
{
    *b = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (missing_ok && errno == ENOENT)
            return LQ_OK;
        return lq_err_set(err, errno == ENOENT ? LQ_ENOTFOUND : LQ_EIO, "%s: cannot open: %s", name, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return lq_err_set(err, LQ_EIO, "%s: not a regular file", name);
    }
    uint64_t n = (uint64_t)st.st_size;
    uint8_t *buf = n ? malloc(n) : NULL;
    if (n && !buf) {
        close(fd);
        return lq_err_set(err, LQ_ENOMEM, "%s: out of memory for %llu bytes", name, (unsigned long long)n);
    }
    uint64_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (uint64_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return lq_err_set(err, LQ_EIO, "%s: short read", name);
    }
    *b = buf;
    *size = n;
    return LQ_OK;
}
