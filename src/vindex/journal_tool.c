/* Looking into a journal without replaying it (`larql journal check`) and recovering the
 * intact records of a damaged one (`larql journal salvage`): larql/patch.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "larql/patch.h"
#include "vindex/journal_frame.h"
#include "vindex/vindex_internal.h"

typedef struct scan_ctx {
    lq_journal_report *r;
    int (*fn)(void *, const lq_journal_item *);
    void *ctx;
    int prev_version;       /* of the last intact record before the first bad range */
    int stopped;
} scan_ctx;

static int scan_item(void *c, const jf_item *it)
{
    scan_ctx *S = c;
    lq_journal_report *r = S->r;
    int damage = !it->valid || it->seq_break;
    if (r->first_bad != r->size)
        r->after_bad += it->valid;
    else if (damage)
        r->first_bad = it->off;
    else
        S->prev_version = it->rec.version;
    if (it->valid) {
        r->records++;
        r->legacy += it->rec.version == 1;
        r->seq_breaks += it->seq_break;
        if (it->rec.version == 2) {
            if (!r->seq_first)
                r->seq_first = it->rec.seq;
            r->seq_last = it->rec.seq;
        }
    } else {
        r->bad_ranges++;
        r->bad_bytes += it->len;
    }
    if (!S->fn)
        return 0;
    lq_journal_item ji = {it->valid, it->off, it->len, it->rec.version, it->rec.seq, it->seq_break,
                          it->rec.payload, it->rec.plen};
    return S->stopped = S->fn(S->ctx, &ji);
}

static int scan_buf(const uint8_t *b, uint64_t size, int (*fn)(void *, const lq_journal_item *), void *ctx,
                    lq_journal_report *r)
{
    memset(r, 0, sizeof *r);
    r->size = r->first_bad = size;
    scan_ctx S = {r, fn, ctx, 0, 0};
    lq_vx_jf_walk(b, size, scan_item, &S);
    if (r->first_bad < size) {
        /* as an open decides: a sequence break is damage whatever follows; a single bad range
         * with nothing intact after it is torn if it looks like an interrupted append */
        r->torn_tail = !r->seq_breaks && r->bad_ranges == 1 && !r->after_bad &&
                       lq_vx_jf_tail_is_torn(b, size, r->first_bad, S.prev_version);
        r->corrupt = !r->torn_tail;
    }
    return S.stopped;
}

int lq_journal_scan(const char *path, int (*fn)(void *, const lq_journal_item *), void *ctx, lq_journal_report *rep,
                    lq_err *err)
{
    lq_journal_report dummy;
    if (!rep)
        rep = &dummy;
    memset(rep, 0, sizeof *rep);
    uint8_t *b = NULL;
    uint64_t size = 0;
    int rc = lq_vx_jf_read_file(path, path, 0, &b, &size, err);
    if (!rc)
        scan_buf(b, size, fn, ctx, rep);
    free(b);
    return rc;
}

typedef struct salvage_ctx {
    int fd;
    uint64_t off, seq;
    int failed;
} salvage_ctx;

static int salvage_item(void *c, const lq_journal_item *it)
{
    salvage_ctx *S = c;
    if (!it->valid)
        return 0;
    if (!S->seq) /* the intact records keep the first one's number, then count on */
        S->seq = it->version == 2 && it->seq ? it->seq : 1;
    else
        S->seq++;
    uint8_t hdr[JF_HDR];
    lq_vx_jf_header(hdr, S->seq, it->payload, (uint32_t)it->payload_len);
    if (pwrite(S->fd, hdr, JF_HDR, (off_t)S->off) != (ssize_t)JF_HDR ||
        pwrite(S->fd, it->payload, it->payload_len, (off_t)(S->off + JF_HDR)) != (ssize_t)it->payload_len) {
        S->failed = errno ? errno : EIO;
        return 1;
    }
    S->off += JF_HDR + it->payload_len;
    return 0;
}

int lq_journal_salvage(const char *path, const char *out, lq_journal_report *rep, lq_err *err)
{
    lq_journal_report dummy;
    if (!rep)
        rep = &dummy;
    memset(rep, 0, sizeof *rep);
    if (!path || !out)
        return lq_err_set(err, LQ_EINVAL, "journal salvage: a file and an output are required");
    uint8_t *b = NULL;
    uint64_t size = 0;
    int rc = lq_vx_jf_read_file(path, path, 0, &b, &size, err);
    if (rc)
        return rc;
    size_t cap = strlen(out) + 16;
    char *tmp = malloc(cap);
    if (!tmp) {
        free(b);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    snprintf(tmp, cap, "%s.partial", out);
    salvage_ctx S = {open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), 0, 0, 0};
    if (S.fd < 0)
        rc = lq_err_set(err, LQ_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    else {
        errno = 0;
        scan_buf(b, size, salvage_item, &S, rep);
        if (S.failed || fsync(S.fd))
            rc = lq_err_set(err, LQ_EIO, "%s: cannot write: %s", tmp, strerror(S.failed ? S.failed : errno));
        close(S.fd);
        if (!rc && rename(tmp, out))
            rc = lq_err_set(err, LQ_EIO, "%s: cannot rename to %s: %s", tmp, out, strerror(errno));
        if (rc)
            unlink(tmp);
    }
    free(tmp);
    free(b);
    return rc;
}
