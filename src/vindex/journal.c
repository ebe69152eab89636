/* The overlay's journal (larql/patch.h): every acknowledged change, appended and fsync'd
 * before the acknowledgement, replayed at open; checkpoints keep the replay short.
 *
 * Records are framed as journal_frame.h says (length, sequence, CRC-32C of the header and of
 * the payload). Opening reads the file, walks it, and tells the two ways a record can be bad
 * apart: a bad range at the end with nothing intact after it is what an interrupted append
 * leaves (never acknowledged): it is cut off. A bad record with intact records after it, a
 * damaged record at the end whose bytes are all there, or a break in the sequence is damage
 * to acknowledged edits: the open is refused, naming the file, the offset and how many
 * intact records follow, and the file is left exactly as it was (`larql journal check` and
 * `larql journal salvage` take it from there). The whole file is checked before anything is
 * replayed.
 *
 * A file is created only by its first append (a failed first append removes it again), so
 * a request that fails leaves no empty journal. A failed append (disk full, I/O error) cuts
 * the file back to where it was: the journal then holds exactly the acknowledged changes.
 *
 * A checkpoint writes the overlay's patches of the current scope (the state this journal
 * owns) as a new file: a "checkpoint" record and one "apply" record per patch, the sequence
 * going on from the old file; it is written aside, fsync'd, renamed over the journal and the
 * directory fsync'd, so a crash leaves either the old journal or the new one, both whole. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "larql/patch.h"
#include "vindex/journal_frame.h"
#include "vindex/vindex_internal.h"

#define CK_RECORDS 1024
#define CK_BYTES ((uint64_t)8 << 20)

struct lq_journal {
    int fd;           /* -1 until the first append creates the file */
    char *path, *name;
    uint64_t end;     /* bytes of intact records */
    uint64_t seq;     /* the last record's sequence */
    int hidden;
    int legacy;       /* the file holds old-format records: a checkpoint rewrites it */
    size_t since;     /* records since the last checkpoint (or the open) */
    uint64_t base;    /* bytes of the file after its last checkpoint */
    size_t ck_records;
    uint64_t ck_bytes;
};

static int write_all(int fd, const void *buf, size_t n, uint64_t off)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* fsync of the directory holding path: a created or renamed file's entry is durable too */
static int sync_dir(const char *path)
{
    char *d = strdup(path);
    if (!d)
        return -1;
    int fd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(d);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* one framed record of text at off in fd */
static int put_record(int fd, uint64_t off, uint64_t seq, const char *text, size_t n)
{
    uint8_t *buf = malloc(JF_HDR + n);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    lq_vx_jf_header(buf, seq, text, (uint32_t)n);
    memcpy(buf + JF_HDR, text, n);
    int rc = write_all(fd, buf, JF_HDR + n, off);
    free(buf);
    return rc;
}

static int append(lq_journal *j, json_t *rec, lq_err *err)
{
    char *text = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    if (!text)
        return lq_err_set(err, LQ_ENOMEM, "journal: out of memory");
    size_t n = strlen(text);
    if (n > JF_MAX_RECORD) {
        free(text);
        return lq_err_set(err, LQ_ERANGE, "%s: a record of %zu bytes is too large", j->name, n);
    }
    int created = 0, rc = LQ_OK;
    if (j->fd < 0) {
        j->fd = open(j->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        created = j->fd >= 0;
    }
    if (j->fd < 0 || put_record(j->fd, j->end, j->seq + 1, text, n) || fsync(j->fd) || (created && sync_dir(j->path)))
        rc = lq_err_set(err, LQ_EIO, "%s: cannot persist the change: %s", j->name, strerror(errno));
    free(text);
    if (rc) { /* the change is refused: leave the file as it was acknowledged */
        if (j->fd >= 0 && ftruncate(j->fd, (off_t)j->end) == 0)
            fsync(j->fd);
        if (created && j->end == 0) { /* nothing acknowledged: no empty journal left behind */
            close(j->fd);
            j->fd = -1;
            unlink(j->path);
        }
        return rc;
    }
    j->end += JF_HDR + n;
    j->seq++;
    j->since++;
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

static json_t *apply_record(const lq_patch *p, lq_err *err)
{
    json_t *v = patch_value(p, err);
    return v ? json_pack("{s:s,s:s,s:o}", "t", "apply", "name", lq_patch_name(p), "patch", v) : NULL;
}

int lq_journal_apply(lq_journal *j, const lq_patch *p, lq_err *err)
{
    json_t *r = apply_record(p, err);
    return r ? append(j, r, err) : err ? err->code : LQ_ENOMEM;
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

/* one record's change into o (a checkpoint's marker: *ck = 1 + the patches it announces) */
static int replay(lq_overlay *o, int hidden, const char *text, size_t n, size_t *ck, lq_err *err)
{
    json_t *r = json_loadb(text, n, JSON_REJECT_DUPLICATES, NULL);
    const char *t = json_string_value(json_object_get(r, "t"));
    int rc = LQ_OK;
    lq_patch *p = NULL;
    if (!t)
        rc = lq_err_set(err, LQ_EFORMAT, "journal: a record without a type");
    else if (!strcmp(t, "checkpoint"))
    { /* a marker: the state (its patches) follows it */
        json_int_t np = json_integer_value(json_object_get(r, "patches"));
        *ck = 1 + (size_t)(np > 0 ? np : 0);
    }
    else if (!strcmp(t, "remove"))
        rc = lq_overlay_remove(o, json_string_value(json_object_get(r, "name")), err);
    else if (!strcmp(t, "apply") || !strcmp(t, "edit")) {
        json_t *pv = json_object_get(r, !strcmp(t, "apply") ? "patch" : "ops");
        rc = json_is_object(pv)
                 ? lq_vx_patch_from_json(pv, json_string_value(json_object_get(r, "name")), hidden, &p, err)
                 : lq_err_set(err, LQ_EFORMAT, "journal: a %s record without its patch", t);
        if (!rc)
            rc = !strcmp(t, "apply") ? lq_overlay_apply(o, p, err) : lq_overlay_record(o, p, err);
    } else
        rc = lq_err_set(err, LQ_EFORMAT, "journal: unknown record type '%s'", t);
    lq_patch_free(p);
    json_decref(r);
    return rc;
}

/* ---- open: the file checked whole, then replayed ---- */

typedef struct layout {
    jf_rec *recs;      /* the intact records before the first bad one */
    size_t n, cap;
    int bad;           /* a bad range (or a sequence break) was met */
    uint64_t bad_off, bad_len;
    int seq_break;
    uint64_t seq_want, seq_got;
    size_t after;      /* intact records after the first bad range */
    int oom;
} layout;

static int layout_item(void *ctx, const jf_item *it)
{
    layout *L = ctx;
    if (L->bad) {
        L->after += it->valid;
        return 0;
    }
    if (!it->valid || it->seq_break) {
        L->bad = 1;
        L->bad_off = it->off;
        L->bad_len = it->len;
        L->seq_break = it->valid;
        if (it->valid) {
            L->seq_want = L->n ? L->recs[L->n - 1].seq + 1 : 0;
            L->seq_got = it->rec.seq;
            L->after = 1;
        }
        return 0;
    }
    if (L->n == L->cap) {
        size_t c = L->cap ? L->cap * 2 : 64;
        jf_rec *r = realloc(L->recs, c * sizeof *r);
        if (!r) {
            L->oom = 1;
            return 1;
        }
        L->recs = r;
        L->cap = c;
    }
    L->recs[L->n++] = it->rec;
    return 0;
}

/* A refusal: what is wrong, where, and what to do; the file is untouched. */
static int refuse(const char *name, const layout *L, lq_err *err)
{
    if (L->seq_break)
        return lq_err_set(err, LQ_EFORMAT,
                          "%s is damaged: the record at offset %llu has sequence %llu where %llu was expected "
                          "(records are missing or repeated; %zu intact record%s from there on); the file was "
                          "left as it is: inspect it with `larql journal check` and recover with `larql journal "
                          "salvage`",
                          name, (unsigned long long)L->bad_off, (unsigned long long)L->seq_got,
                          (unsigned long long)L->seq_want, L->after, L->after == 1 ? "" : "s");
    return lq_err_set(err, LQ_EFORMAT,
                      "%s is damaged: record %zu at offset %llu is corrupt (%llu bad bytes) and %zu intact "
                      "record%s follow%s it, so this is not a torn tail; the file was left as it is: inspect it "
                      "with `larql journal check` and recover the intact records with `larql journal salvage`",
                      name, L->n + 1, (unsigned long long)L->bad_off, (unsigned long long)L->bad_len, L->after,
                      L->after == 1 ? "" : "s", L->after == 1 ? "s" : "");
}

/* The walk of b and the decision: 0 (replay L.recs, cut what follows them) or the refusal. */
static int check_layout(const uint8_t *b, uint64_t size, const char *name, layout *L, lq_err *err)
{
    lq_vx_jf_walk(b, size, layout_item, L);
    if (L->oom)
        return lq_err_set(err, LQ_ENOMEM, "%s: out of memory", name);
    if (L->bad && (L->after || L->seq_break ||
                   !lq_vx_jf_tail_is_torn(b, size, L->bad_off, L->n ? L->recs[L->n - 1].version : 0)))
        return refuse(name, L, err);
    return LQ_OK;
}

int lq_journal_verify(const char *path, const lq_journal_opts *opts, lq_err *err)
{
    const char *name = opts && opts->name ? opts->name : path;
    uint8_t *b = NULL;
    uint64_t size = 0;
    int rc = lq_vx_jf_read_file(path, name, 1, &b, &size, err);
    layout L = {0};
    if (!rc)
        rc = check_layout(b, size, name, &L, err);
    free(L.recs);
    free(b);
    return rc;
}

/* where a checkpoint is written before its rename over path (malloc'd) */
static char *checkpoint_path(const char *path)
{
    size_t cap = strlen(path) + 16;
    char *p = malloc(cap);
    if (p)
        snprintf(p, cap, "%s.checkpoint", path);
    return p;
}

static void journal_free(lq_journal *j)
{
    if (j->fd >= 0)
        close(j->fd);
    free(j->path);
    free(j->name);
    free(j);
}

int lq_journal_open_opts(const char *path, const lq_journal_opts *opts, lq_overlay *o, lq_journal **out,
                         lq_journal_stats *st, lq_err *err)
{
    *out = NULL;
    lq_journal_stats dummy;
    if (!st)
        st = &dummy;
    memset(st, 0, sizeof *st);
    if (!path || !o)
        return lq_err_set(err, LQ_EINVAL, "journal: path and overlay are required");
    lq_journal *j = calloc(1, sizeof *j);
    const char *name = opts && opts->name ? opts->name : path;
    if (!j || !(j->path = strdup(path)) || !(j->name = strdup(name))) {
        if (j)
            free(j->path);
        free(j);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    j->fd = -1;
    j->hidden = lq_vindex_get_info(lq_overlay_vindex(o))->hidden_size;
    j->ck_records = opts && opts->checkpoint_records ? opts->checkpoint_records : CK_RECORDS;
    j->ck_bytes = opts && opts->checkpoint_bytes ? opts->checkpoint_bytes : CK_BYTES;
    uint8_t *b = NULL;
    uint64_t size = 0;
    int rc = lq_vx_jf_read_file(path, name, 1, &b, &size, err);
    if (rc) {
        journal_free(j);
        return rc;
    }
    layout L = {0};
    rc = check_layout(b, size, name, &L, err);
    lq_vx_overlay_defer(o, 1);
    size_t skip = 0;
    for (size_t i = 0; !rc && i < L.n; i++) {
        size_t ck = 0;
        if ((rc = replay(o, j->hidden, L.recs[i].payload, L.recs[i].plen, &ck, err)))
            lq_err_prefix(err, "%s: record %zu (offset %llu)", name, i + 1, (unsigned long long)L.recs[i].off);
        /* records since the last checkpoint (its own not counted) count towards the next one,
         * across restarts */
        if (ck) {
            j->since = 0;
            skip = ck - 1;
        } else if (skip) {
            skip--;
        } else {
            j->since++;
        }
        j->legacy |= L.recs[i].version == 1;
        if (L.recs[i].version == 2)
            j->seq = L.recs[i].seq;
    }
    int rc2 = lq_vx_overlay_settle(o, err);
    if (!rc)
        rc = rc2;
    if (!rc && L.n) {
        const jf_rec *last = &L.recs[L.n - 1];
        j->end = last->off + last->len;
        if (last->version == 1)
            j->seq = L.n; /* old records count as 1..n: the sequence goes on from there */
    }
    st->records = L.n;
    st->legacy = 0;
    for (size_t i = 0; i < L.n; i++)
        st->legacy += L.recs[i].version == 1;
    st->seq_last = j->seq;
    free(L.recs);
    free(b);
    if (!rc && size) {
        j->fd = open(path, O_RDWR | O_CLOEXEC);
        if (j->fd < 0)
            rc = lq_err_set(err, LQ_EIO, "%s: cannot open the journal: %s", name, strerror(errno));
    }
    if (!rc && j->end < size) { /* a torn tail: never acknowledged, cut so appends follow intact records */
        st->dropped = size - j->end;
        if (ftruncate(j->fd, (off_t)j->end) || fsync(j->fd))
            rc = lq_err_set(err, LQ_EIO, "%s: cannot cut the torn tail: %s", name, strerror(errno));
    }
    if (rc) {
        journal_free(j);
        return rc;
    }
    j->base = j->end;
    char *ck = checkpoint_path(path); /* one a crash stopped before its rename: never in use */
    if (ck)
        unlink(ck);
    free(ck);
    if (j->legacy) { /* migrate: the old format rewritten in the new one (kept as it is on failure) */
        lq_err cerr = {0};
        st->migrated = lq_journal_checkpoint(j, o, &cerr) == LQ_OK;
    }
    *out = j;
    return LQ_OK;
}

int lq_journal_open(const char *path, lq_overlay *o, lq_journal **out, lq_journal_stats *st, lq_err *err)
{
    return lq_journal_open_opts(path, NULL, o, out, st, err);
}

void lq_journal_close(lq_journal *j)
{
    if (j)
        journal_free(j);
}

/* ---- checkpoints ---- */

int lq_journal_checkpoint_due(const lq_journal *j)
{
    if (!j)
        return 0;
    uint64_t grown = j->end - j->base;
    /* appended bytes at least twice the snapshot's: each rewrite is paid for by what it saves */
    return j->legacy || j->since >= j->ck_records || (grown >= j->ck_bytes && grown >= 2 * j->base);
}

/* one record of a checkpoint being written (steals r) */
static int ck_put(lq_journal *j, int fd, uint64_t *off, uint64_t *seq, json_t *r, lq_err *err)
{
    char *text = r ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
    if (!text)
        return err && err->code ? err->code : lq_err_set(err, LQ_ENOMEM, "journal checkpoint: out of memory");
    size_t n = strlen(text);
    int rc = LQ_OK;
    if (n > JF_MAX_RECORD)
        rc = lq_err_set(err, LQ_ERANGE, "%s: a checkpoint record of %zu bytes is too large", j->name, n);
    else if (put_record(fd, *off, *seq + 1, text, n))
        rc = lq_err_set(err, LQ_EIO, "%s: cannot write a checkpoint: %s", j->name, strerror(errno));
    free(text);
    if (!rc) {
        *off += JF_HDR + n;
        ++*seq;
    }
    return rc;
}

int lq_journal_checkpoint(lq_journal *j, const lq_overlay *o, lq_err *err)
{
    if (!j || !o)
        return lq_err_set(err, LQ_EINVAL, "journal checkpoint: journal and overlay are required");
    size_t np = 0, total = lq_overlay_n_patches(o);
    char *tmp = checkpoint_path(j->path);
    if (!tmp)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int rc = lq_err_set(err, LQ_EIO, "%s: cannot write a checkpoint: %s", j->name, strerror(errno));
        free(tmp);
        return rc;
    }
    /* the patches this journal owns: those of the overlay's current scope */
    int cur = lq_vx_overlay_scope(o);
    for (size_t i = 0; i < total; i++)
        np += lq_overlay_patch_scope(o, i) == cur;
    uint64_t seq = j->seq, off = 0;
    int rc = ck_put(j, fd, &off, &seq, json_pack("{s:s,s:I}", "t", "checkpoint", "patches", (json_int_t)np), err);
    for (size_t i = 0; !rc && i < total; i++)
        if (lq_overlay_patch_scope(o, i) == cur)
            rc = ck_put(j, fd, &off, &seq, apply_record(lq_overlay_patch_at(o, i), err), err);
    if (!rc && fsync(fd))
        rc = lq_err_set(err, LQ_EIO, "%s: cannot write a checkpoint: %s", j->name, strerror(errno));
    if (!rc && rename(tmp, j->path))
        rc = lq_err_set(err, LQ_EIO, "%s: cannot put the checkpoint in place: %s", j->name, strerror(errno));
    if (rc) { /* the old journal goes on, untouched */
        close(fd);
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    sync_dir(j->path); /* the rename is done: a failure here only risks it on power loss */
    if (j->fd >= 0)
        close(j->fd);
    j->fd = fd;
    j->end = j->base = off;
    j->seq = seq;
    j->since = 0;
    j->legacy = 0;
    return LQ_OK;
}
