/* The overlay's journal (larql/patch.h): every acknowledged change, appended and fsync'd
 * before the acknowledgement, replayed at open.
 *
 * Record: "LQJ1" | u32 LE payload length | first 8 bytes of sha256(payload) | payload (JSON).
 * A record is intact only if all of it is there and the hash matches; the first one that is
 * not ends the replay, and the file is cut back to the end of the last intact record, so the
 * next append never follows garbage. A failed append (disk full, I/O error) cuts the file
 * back to where it was: the journal then holds exactly the acknowledged changes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "larql/patch.h"
#include "vindex/vindex_internal.h"

#define J_MAGIC "LQJ1"
#define J_MAX_RECORD ((uint32_t)1 << 30)

struct lq_journal {
    int fd;
    char *path;
    uint64_t end;    /* bytes of intact records */
    int hidden;
};

static int write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int append(lq_journal *j, json_t *rec, lq_err *err)
{
    char *text = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    if (!text)
        return lq_err_set(err, LQ_ENOMEM, "journal: out of memory");
    size_t n = strlen(text);
    uint8_t hdr[16], h[32];
    memcpy(hdr, J_MAGIC, 4);
    hdr[4] = (uint8_t)n, hdr[5] = (uint8_t)(n >> 8), hdr[6] = (uint8_t)(n >> 16), hdr[7] = (uint8_t)(n >> 24);
    lq_sha256 s;
    lq_sha256_init(&s);
    lq_sha256_update(&s, text, n);
    lq_sha256_final(&s, h);
    memcpy(hdr + 8, h, 8);
    int rc = LQ_OK;
    if (n > J_MAX_RECORD)
        rc = lq_err_set(err, LQ_ERANGE, "journal: a record of %zu bytes is too large", n);
    else if (lseek(j->fd, (off_t)j->end, SEEK_SET) < 0 || write_all(j->fd, hdr, sizeof hdr) ||
             write_all(j->fd, text, n) || fsync(j->fd))
        rc = lq_err_set(err, LQ_EIO, "%s: cannot persist the change: %s", j->path, strerror(errno));
    free(text);
    if (rc) { /* the change is refused: leave the file as it was acknowledged */
        if (ftruncate(j->fd, (off_t)j->end) == 0)
            fsync(j->fd);
        return rc;
    }
    j->end += sizeof hdr + n;
    return LQ_OK;
}

static json_t *patch_value(const lq_patch *p, lq_err *err)
{
    char *text = NULL;
    if (lq_patch_json(p, &text, err))
        return NULL;
    json_t *v = json_loads(text, 0, NULL);
    free(text);
    if (!v)
        lq_err_set(err, LQ_ENOMEM, "journal: out of memory");
    return v;
}

int lq_journal_apply(lq_journal *j, const lq_patch *p, lq_err *err)
{
    json_t *v = patch_value(p, err);
    if (!v)
        return err ? err->code : LQ_ENOMEM;
    return append(j, json_pack("{s:s,s:s,s:o}", "t", "apply", "name", lq_patch_name(p), "patch", v), err);
}

int lq_journal_remove(lq_journal *j, const char *name, lq_err *err)
{
    return append(j, json_pack("{s:s,s:s}", "t", "remove", "name", name), err);
}

int lq_journal_edit(lq_journal *j, const lq_overlay *o, size_t n0, lq_err *err)
{
    const lq_patch *e = lq_overlay_edits(o);
    if (!e || n0 >= lq_patch_n_ops(e))
        return LQ_OK;
    lq_patch *part = NULL;
    int rc = lq_patch_create(lq_patch_name(e), lq_patch_base_model(e), j->hidden, &part, err);
    lq_patch_op op;
    for (size_t i = n0; !rc && lq_patch_op_at(e, i, &op); i++)
        rc = lq_patch_add(part, &op, err);
    json_t *v = rc ? NULL : patch_value(part, err);
    lq_patch_free(part);
    if (!v)
        return rc ? rc : err ? err->code : LQ_ENOMEM;
    return append(j, json_pack("{s:s,s:o}", "t", "edit", "ops", v), err);
}

/* one record's change into o */
static int replay(lq_overlay *o, int hidden, const char *text, size_t n, lq_err *err)
{
    json_t *r = json_loadb(text, n, 0, NULL);
    const char *t = json_string_value(json_object_get(r, "t"));
    int rc = LQ_OK;
    lq_patch *p = NULL;
    char *pt = NULL;
    if (!t)
        rc = lq_err_set(err, LQ_EFORMAT, "journal: a record without a type");
    else if (!strcmp(t, "remove"))
        rc = lq_overlay_remove(o, json_string_value(json_object_get(r, "name")), err);
    else if (!strcmp(t, "apply") || !strcmp(t, "edit")) {
        json_t *pv = json_object_get(r, !strcmp(t, "apply") ? "patch" : "ops");
        pt = pv ? json_dumps(pv, JSON_COMPACT) : NULL;
        rc = pt ? lq_patch_parse(pt, strlen(pt), json_string_value(json_object_get(r, "name")), hidden, &p, err)
                : lq_err_set(err, LQ_EFORMAT, "journal: a %s record without its patch", t);
        if (!rc)
            rc = !strcmp(t, "apply") ? lq_overlay_apply(o, p, err) : lq_overlay_record(o, p, err);
    } else
        rc = lq_err_set(err, LQ_EFORMAT, "journal: unknown record type '%s'", t);
    free(pt);
    lq_patch_free(p);
    json_decref(r);
    return rc;
}

int lq_journal_open(const char *path, lq_overlay *o, lq_journal **out, lq_journal_stats *st, lq_err *err)
{
    *out = NULL;
    lq_journal_stats dummy;
    if (!st)
        st = &dummy;
    memset(st, 0, sizeof *st);
    if (!path || !o)
        return lq_err_set(err, LQ_EINVAL, "journal: path and overlay are required");
    lq_journal *j = calloc(1, sizeof *j);
    if (!j || !(j->path = strdup(path))) {
        free(j);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    j->hidden = lq_vindex_get_info(lq_overlay_vindex(o))->hidden_size;
    j->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (j->fd < 0) {
        int rc = lq_err_set(err, LQ_EIO, "%s: cannot open the journal: %s", path, strerror(errno));
        free(j->path);
        free(j);
        return rc;
    }
    struct stat sb;
    uint64_t size = fstat(j->fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    int rc = LQ_OK;
    char *buf = NULL;
    while (!rc && j->end + 16 <= size) {
        uint8_t hdr[16];
        if (pread(j->fd, hdr, 16, (off_t)j->end) != 16 || memcmp(hdr, J_MAGIC, 4))
            break;
        uint32_t n = (uint32_t)hdr[4] | (uint32_t)hdr[5] << 8 | (uint32_t)hdr[6] << 16 | (uint32_t)hdr[7] << 24;
        if (n > J_MAX_RECORD || j->end + 16 + n > size)
            break; /* torn: the length promises more than the file holds */
        char *nb = realloc(buf, (size_t)n + 1);
        if (!nb) {
            rc = lq_err_set(err, LQ_ENOMEM, "journal: out of memory for a %u-byte record", n);
            break;
        }
        buf = nb;
        if (pread(j->fd, buf, n, (off_t)(j->end + 16)) != (ssize_t)n)
            break;
        uint8_t h[32];
        lq_sha256 s;
        lq_sha256_init(&s);
        lq_sha256_update(&s, buf, n);
        lq_sha256_final(&s, h);
        if (memcmp(h, hdr + 8, 8))
            break; /* corrupt */
        if ((rc = replay(o, j->hidden, buf, n, err)))
            lq_err_prefix(err, "%s: record %zu", path, st->records + 1);
        else {
            j->end += 16 + n;
            st->records++;
        }
    }
    free(buf);
    if (!rc && j->end < size) {
        st->dropped = size - j->end;
        if (ftruncate(j->fd, (off_t)j->end) || fsync(j->fd))
            rc = lq_err_set(err, LQ_EIO, "%s: cannot cut the torn tail: %s", path, strerror(errno));
    }
    if (rc) {
        lq_journal_close(j);
        return rc;
    }
    *out = j;
    return LQ_OK;
}

void lq_journal_close(lq_journal *j)
{
    if (!j)
        return;
    close(j->fd);
    free(j->path);
    free(j);
}
