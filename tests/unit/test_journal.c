/* The edit journal's durability (src/vindex/journal*.c, larql/patch.h): CRC-32C, the
 * framing, torn tails cut and damage refused with the file untouched, the corruption matrix
 * (a 1,000-record journal with bits flipped at every record boundary and inside every
 * record: no flip may lose an acknowledged record without a refusal), salvage, checkpoints,
 * old-format journals, per-scope patch names. */
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#include "core/crc32c.h"
#include "larql/fixture.h"
#include "larql/patch.h"
#include "larql/vindex.h"
#include "vindex/journal_frame.h"
#include "vindex/vindex_internal.h"

static lq_vindex *V;
static char tmp[4200];

static int setup(void)
{
    snprintf(tmp, sizeof tmp, "%s", harness_tmpdir());
    char gguf[4300], vx[4300];
    snprintf(gguf, sizeof gguf, "%s/j.gguf", tmp);
    snprintf(vx, sizeof vx, "%s/j.vindex", tmp);
    lq_fixture_opts fo;
    lq_err err = {0};
    lq_fixture_preset(&fo, "tiny", &err);
    fo.dim = 128, fo.ffn = 128, fo.layers = 2, fo.heads = 2, fo.kv_heads = 1, fo.vocab = 300, fo.ctx = 64;
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.level = LQ_VLEVEL_BROWSE;
    bo.n_threads = 1;
    if (lq_fixture_write(&fo, gguf, &err) || lq_vindex_build(gguf, vx, &bo, &err) || lq_vindex_open(vx, NULL, &V, &err))
        return printf("#   fixture: %s\n", err.msg), -1;
    return 0;
}

static char *slurp(const char *path, size_t *n)
{
    uint8_t *b = NULL;
    uint64_t sz = 0;
    lq_err err = {0};
    if (lq_vx_jf_read_file(path, path, 0, &b, &sz, &err))
        return NULL;
    *n = (size_t)sz;
    return (char *)b;
}

static int spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f)
        fclose(f);
    return ok ? 0 : -1;
}

/* a patch "p<i>" deleting one feature */
static lq_patch *small_patch(int i)
{
    char vlp[200];
    snprintf(vlp, sizeof vlp, "{\"description\":\"p%d\",\"operations\":[{\"op\":\"delete\",\"layer\":%d,\"feature\":%d}]}",
             i, i % 2, i % 128);
    lq_patch *p = NULL;
    lq_err err = {0};
    lq_patch_parse(vlp, strlen(vlp), NULL, 0, &p, &err);
    return p;
}

/* Writes a journal of n records as a server does: patches applied (each 4th removed again
 * after the next one) and edits (DELETE WHERE layer/feature) - every kind of record. Returns
 * 0, with the overlay's final patch count in *np. */
static int write_journal(const char *path, int n, const lq_journal_opts *jo, size_t *np, size_t *n_ck)
{
    unlink(path);
    lq_overlay *o = NULL;
    lq_journal *j = NULL;
    lq_err err = {0};
    lq_journal_stats st;
    int rc = lq_overlay_create(V, NULL, &o, &err) || lq_journal_open_opts(path, jo, o, &j, &st, &err);
    size_t cks = 0;
    for (int i = 0; !rc && i < n; i++) {
        size_t k = 0;
        if (i % 3 == 2) { /* an edit, when the feature is not deleted yet (else no record) */
            lq_edit_where w;
            lq_edit_where_init(&w);
            w.layer = i % 2;
            w.feature = (i * 7) % 128;
            const lq_patch *e = lq_overlay_edits(o);
            size_t n0 = e ? lq_patch_n_ops(e) : 0;
            rc = lq_overlay_delete(o, &w, &k, &err) || lq_journal_edit(j, o, n0, &err);
        }
        if (rc || k)
            ;
        else if (i % 4 == 3 && lq_overlay_n_patches(o) > 1) {
            const char *name = lq_patch_name(lq_overlay_patch_at(o, 0));
            char nm[64];
            snprintf(nm, sizeof nm, "%s", name);
            rc = lq_journal_remove(j, nm, &err) || lq_overlay_remove(o, nm, &err);
        } else {
            lq_patch *p = small_patch(i);
            rc = !p || lq_overlay_apply(o, p, &err) || lq_journal_apply(j, p, &err);
            lq_patch_free(p);
        }
        if (!rc && lq_journal_checkpoint_due(j)) {
            rc = lq_journal_checkpoint(j, o, &err);
            cks++;
        }
    }
    if (rc)
        printf("#   write_journal: %s\n", err.msg);
    if (np)
        *np = lq_overlay_n_patches(o);
    if (n_ck)
        *n_ck = cks;
    lq_journal_close(j);
    lq_overlay_free(o);
    return rc;
}

/* opens path on a fresh overlay: 0 and the stats, or the error */
static int reopen(const char *path, lq_journal_stats *st, size_t *np, lq_err *err)
{
    lq_overlay *o = NULL;
    lq_journal *j = NULL;
    int rc = lq_overlay_create(V, NULL, &o, err);
    if (!rc)
        rc = lq_journal_open(path, o, &j, st, err);
    if (np)
        *np = lq_overlay_n_patches(o);
    lq_journal_close(j);
    lq_overlay_free(o);
    return rc;
}

/* tmp/name written with n records (no checkpoint: one segment), its bytes in *b (*len) */
static int journal_bytes(const char *name, int n, char *path, size_t cap, char **b, size_t *len, size_t *np)
{
    snprintf(path, cap, "%s/%s", tmp, name);
    lq_journal_opts one = {.checkpoint_records = 100000, .checkpoint_bytes = (uint64_t)1 << 40};
    *b = NULL;
    if (write_journal(path, n, &one, np, NULL) || !(*b = slurp(path, len)))
        return -1;
    return 0;
}

static void test_crc32c(void)
{
    CHECK(lq_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(lq_crc32c(0, "", 0) == 0);
    uint8_t z[32] = {0}, f[32];
    memset(f, 0xff, sizeof f);
    CHECK(lq_crc32c(0, z, 32) == 0x8A9136AAu); /* RFC 3720 B.4 */
    CHECK(lq_crc32c(0, f, 32) == 0x62A8AB43u);
    /* incremental = whole, across the 8-byte stride */
    const char *s = "The quick brown fox jumps over the lazy dog, twice over.";
    size_t n = strlen(s);
    for (size_t k = 0; k <= n; k += 5)
        CHECK(lq_crc32c(lq_crc32c(0, s, k), s + k, n - k) == lq_crc32c(0, s, n));
}

/* a mid-file byte zeroed (the reproduction of issue 24: dd of one byte at offset 2000 of a
 * 50-record journal): refused naming the file, offset and the records after it; the file is
 * untouched; salvage keeps the other 49 */
static void test_mid_corruption_refused(void)
{
    if (!V)
        SKIP("fixture failed");
    char path[4300], out[4400], *b = NULL;
    size_t n = 0;
    snprintf(out, sizeof out, "%s/mid.salvaged", tmp);
    lq_journal_stats st;
    lq_err err = {0};
    CHECK(journal_bytes("mid.lqj", 50, path, sizeof path, &b, &n, NULL) == 0 && n > 2100);
    if (!b)
        return;
    b[2000] = 0;
    CHECK(spit(path, b, n) == 0);
    lq_journal_opts jo = {.name = "journal.lqj"};
    lq_overlay *o = NULL;
    lq_journal *j = NULL;
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    int rc = lq_journal_open_opts(path, &jo, o, &j, &st, &err);
    CHECK(rc == LQ_EFORMAT && !j);
    CHECK_STR_CONTAINS(err.msg, "journal.lqj is damaged");
    CHECK_STR_CONTAINS(err.msg, "offset ");
    CHECK(!strstr(err.msg, tmp)); /* named as the caller asked: no absolute path */
    lq_overlay_free(o);
    size_t n2 = 0;
    char *b2 = slurp(path, &n2);
    CHECK(b2 && n2 == n && !memcmp(b, b2, n)); /* untouched */
    free(b2);
    lq_journal_report rep;
    CHECK(lq_journal_scan(path, NULL, NULL, &rep, &err) == 0);
    CHECK(rep.corrupt && !rep.torn_tail && rep.records == 49 && rep.bad_ranges == 1 && rep.first_bad < 2000);
    char want[64];
    snprintf(want, sizeof want, "%zu intact records follow", rep.after_bad);
    CHECK_STR_CONTAINS(err.msg, want);
    CHECK(lq_journal_salvage(path, out, &rep, &err) == 0 && rep.records == 49);
    CHECK(lq_journal_scan(out, NULL, NULL, &rep, &err) == 0 && rep.records == 49 && !rep.corrupt && !rep.bad_ranges &&
          rep.seq_last - rep.seq_first == 48);
    free(b);
}

/* Every way an append can be interrupted is cut (nothing acknowledged is there), and only
 * that: the intact records before it all replay. */
static void test_torn_tails(void)
{
    if (!V)
        SKIP("fixture failed");
    char path[4300], t[4400], *b = NULL;
    size_t n = 0;
    snprintf(t, sizeof t, "%s/torn2.lqj", tmp);
    CHECK(journal_bytes("torn.lqj", 20, path, sizeof path, &b, &n, NULL) == 0);
    if (!b)
        return;
    lq_journal_report rep;
    lq_err err = {0};
    lq_journal_stats st;
    /* the last record's offset */
    uint64_t last = 0;
    jf_rec r;
    for (uint64_t off = 0; lq_vx_jf_parse((uint8_t *)b, n, off, &r); off += r.len)
        last = off;
    int bad = 0;
    for (size_t cut = (size_t)last + 1; cut < n; cut += 7) { /* a record cut short anywhere */
        CHECK(spit(t, b, cut) == 0);
        if (reopen(t, &st, NULL, &err) || st.records != 19 || st.dropped != cut - last)
            bad++;
    }
    CHECK_MSG(!bad, "%d cuts not handled as torn tails (%s)", bad, err.msg);
    /* blocks never written (a power loss after the size grew): zeros after the last record */
    char *z = calloc(1, n + 300);
    memcpy(z, b, n);
    CHECK(spit(t, z, n + 300) == 0);
    CHECK(reopen(t, &st, NULL, &err) == 0 && st.records == 20 && st.dropped == 300);
    /* a complete last record whose tail blocks were never written (zeros): torn */
    memcpy(z, b, n);
    memset(z + n - 10, 0, 10);
    CHECK(spit(t, z, n) == 0);
    CHECK(lq_journal_scan(t, NULL, NULL, &rep, &err) == 0 && rep.torn_tail && !rep.corrupt);
    CHECK(reopen(t, &st, NULL, &err) == 0 && st.records == 19);
    free(z);
    free(b);
}

/* The corruption matrix: a 1,000-record journal, one bit flipped at a time - the first and
 * the last byte of every record (its boundaries) and a byte inside its header and inside its
 * payload. Every flip must either be refused (the file untouched) or lose nothing. */
static void test_corruption_matrix(void)
{
    if (!V)
        SKIP("fixture failed");
    char path[4300], t[4400], *b = NULL;
    size_t n = 0, np_want = 0;
    snprintf(t, sizeof t, "%s/matrix_flip.lqj", tmp);
    CHECK(journal_bytes("matrix.lqj", 1000, path, sizeof path, &b, &n, &np_want) == 0);
    if (!b)
        return;
    uint64_t *offs = malloc(1001 * sizeof *offs);
    size_t nr = 0;
    jf_rec r;
    for (uint64_t off = 0; nr < 1001 && lq_vx_jf_parse((uint8_t *)b, n, off, &r); off += r.len)
        offs[nr++] = off;
    CHECK(nr == 1000);
    offs[nr] = n;
    lq_journal_stats st;
    lq_err err = {0};
    size_t np = 0;
    CHECK(reopen(path, &st, &np, &err) == 0 && st.records == 1000 && np == np_want);
    size_t cases = 0, refused = 0, lost = 0, untouched_bad = 0, kept = 0;
    char *c = malloc(n);
    for (size_t i = 0; i < nr; i++) {
        uint64_t start = offs[i], end = offs[i + 1];
        uint64_t at[4] = {start, end - 1, start + 4 + (i % 20), start + JF_HDR + (end - start - JF_HDR) / 2};
        for (int k = 0; k < 4; k++) {
            memcpy(c, b, n);
            c[at[k]] ^= (char)(1 << ((i + (size_t)k) % 8));
            if (spit(t, c, n))
                break;
            cases++;
            size_t np2 = 0;
            if (reopen(t, &st, &np2, &err)) {
                refused++;
                size_t n2 = 0;
                char *d = slurp(t, &n2);
                untouched_bad += !d || n2 != n || memcmp(c, d, n);
                free(d);
            } else if (st.records == 1000 && np2 == np_want) {
                kept++; /* harmless (none expected: every byte is covered by a checksum) */
            } else {
                lost++;
                if (lost < 4)
                    printf("#   record %zu, byte %llu: opened with %zu records\n", i, (unsigned long long)at[k],
                           st.records);
            }
        }
    }
    printf("#   corruption matrix: %zu flips, %zu refused (file untouched), %zu harmless, %zu lost an edit\n", cases,
           refused, kept, lost);
    CHECK(cases == 4000 && lost == 0 && untouched_bad == 0);
    free(c);
    free(offs);
    free(b);
}

/* a record out of sequence (here: one record repeated) is damage, not a torn tail */
static void test_sequence_break(void)
{
    if (!V)
        SKIP("fixture failed");
    char path[4300], *b = NULL;
    size_t n = 0;
    CHECK(journal_bytes("seq.lqj", 6, path, sizeof path, &b, &n, NULL) == 0);
    if (!b)
        return;
    jf_rec r;
    CHECK(lq_vx_jf_parse((uint8_t *)b, n, 0, &r));
    char *d = malloc(n + r.len);
    memcpy(d, b, n);
    memcpy(d + n, b, r.len); /* record 1 again at the end */
    CHECK(spit(path, d, n + r.len) == 0);
    lq_journal_stats st;
    lq_err err = {0};
    CHECK(reopen(path, &st, NULL, &err) == LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "sequence 1 where 7 was expected");
    lq_journal_report rep;
    CHECK(lq_journal_scan(path, NULL, NULL, &rep, &err) == 0 && rep.corrupt && rep.seq_breaks == 1);
    free(d);
    free(b);
}

/* checkpoints: the file shrinks to the state, the sequence goes on, the replay is the same */
static void test_checkpoints(void)
{
    if (!V)
        SKIP("fixture failed");
    char path[4300];
    snprintf(path, sizeof path, "%s/ck.lqj", tmp);
    lq_journal_opts jo = {.checkpoint_records = 64};
    size_t np_want = 0, cks = 0;
    CHECK(write_journal(path, 300, &jo, &np_want, &cks) == 0);
    CHECK(cks == 4);
    lq_journal_report rep;
    lq_err err = {0};
    CHECK(lq_journal_scan(path, NULL, NULL, &rep, &err) == 0 && !rep.corrupt && !rep.bad_ranges);
    /* 300 records + 4 checkpoints' own: the sequence never restarts */
    CHECK(rep.seq_first > 256 && rep.records < 300);
    lq_journal_stats st;
    size_t np = 0;
    CHECK(reopen(path, &st, &np, &err) == 0 && np == np_want);
    /* and the same state as without checkpoints */
    char path2[4300];
    snprintf(path2, sizeof path2, "%s/nock.lqj", tmp);
    lq_journal_opts none = {.checkpoint_records = 100000, .checkpoint_bytes = (uint64_t)1 << 40};
    CHECK(write_journal(path2, 300, &none, NULL, NULL) == 0);
    lq_overlay *a = NULL, *b = NULL;
    lq_journal *ja = NULL, *jb = NULL;
    CHECK(lq_overlay_create(V, NULL, &a, &err) == 0 && lq_journal_open(path, a, &ja, &st, &err) == 0);
    CHECK(lq_overlay_create(V, NULL, &b, &err) == 0 && lq_journal_open(path2, b, &jb, &st, &err) == 0);
    CHECK(lq_overlay_n_features(a) == lq_overlay_n_features(b) && lq_overlay_n_patches(a) == lq_overlay_n_patches(b));
    for (size_t i = 0; i < lq_overlay_n_patches(a) && i < lq_overlay_n_patches(b); i++)
        CHECK(!strcmp(lq_patch_name(lq_overlay_patch_at(a, i)), lq_patch_name(lq_overlay_patch_at(b, i))) &&
              lq_patch_n_ops(lq_overlay_patch_at(a, i)) == lq_patch_n_ops(lq_overlay_patch_at(b, i)));
    /* the records since the last checkpoint count across a reopen: 300 = 4 x 64 + 44, so the
     * next one is due after 20 more */
    lq_journal *jc = NULL;
    lq_overlay *c = NULL;
    CHECK(lq_overlay_create(V, NULL, &c, &err) == 0 && lq_journal_open_opts(path, &jo, c, &jc, &st, &err) == 0);
    int k = 0;
    while (jc && !lq_journal_checkpoint_due(jc) && k < 100 && lq_journal_remove(jc, "nothing", &err) == 0)
        k++;
    CHECK_MSG(k == 20, "due after %d", k);
    lq_journal_close(jc);
    lq_overlay_free(c);
    CHECK(truncate(path, (off_t)rep.size) == 0); /* the removes undone for what follows */
    /* appends after a reopen continue the sequence of a checkpointed file */
    lq_patch *p = small_patch(5000);
    CHECK(lq_overlay_apply(a, p, &err) == 0 && lq_journal_apply(ja, p, &err) == 0);
    lq_patch_free(p);
    lq_journal_close(ja);
    lq_journal_close(jb);
    lq_overlay_free(a);
    lq_overlay_free(b);
    CHECK(lq_journal_scan(path, NULL, NULL, &rep, &err) == 0 && !rep.corrupt && !rep.seq_breaks);
    /* no checkpoint file is left behind; one a crash left half-written is ignored and removed */
    char ckp[4400];
    snprintf(ckp, sizeof ckp, "%s.checkpoint", path);
    CHECK(access(ckp, F_OK) != 0);
    CHECK(spit(ckp, "LQJ2garbage", 11) == 0);
    CHECK(reopen(path, &st, &np, &err) == 0 && np == np_want + 1 && access(ckp, F_OK) != 0);
}

/* a checkpoint that fails (the file size limit standing in for a full disk) leaves the
 * journal as it was and in use */
static void test_checkpoint_fails(void)
{
    if (!V)
        SKIP("fixture failed");
    char path[4300], ckp[4400];
    snprintf(path, sizeof path, "%s/ckfail.lqj", tmp);
    snprintf(ckp, sizeof ckp, "%s.checkpoint", path);
    unlink(path);
    lq_overlay *o = NULL;
    lq_journal *j = NULL;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0 && lq_journal_open(path, o, &j, NULL, &err) == 0);
    for (int i = 0; i < 40; i++) {
        lq_patch *p = small_patch(i);
        CHECK(p && lq_overlay_apply(o, p, &err) == 0 && lq_journal_apply(j, p, &err) == 0);
        lq_patch_free(p);
    }
    size_t n = 0;
    char *before = slurp(path, &n);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)n / 2;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    int rc = lq_journal_checkpoint(j, o, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(rc == LQ_EIO && access(ckp, F_OK) != 0);
    size_t n2 = 0;
    char *after = slurp(path, &n2);
    CHECK(before && after && n2 == n && !memcmp(before, after, n));
    lq_patch *p = small_patch(99); /* the old journal goes on */
    CHECK(lq_overlay_apply(o, p, &err) == 0 && lq_journal_apply(j, p, &err) == 0);
    lq_patch_free(p);
    lq_journal_close(j);
    lq_overlay_free(o);
    lq_journal_stats st;
    size_t np = 0;
    CHECK(reopen(path, &st, &np, &err) == 0 && st.records == 41 && np == 41);
    free(before);
    free(after);
}

/* a journal of the old LQJ1 framing replays and is rewritten in the new one */
static void test_old_format(void)
{
    if (!V)
        SKIP("fixture failed");
    char path[4300];
    snprintf(path, sizeof path, "%s/old.lqj", tmp);
    FILE *f = fopen(path, "wb");
    for (int i = 0; f && i < 5; i++) {
        char rec[300];
        int n = snprintf(rec, sizeof rec,
                         "{\"t\":\"apply\",\"name\":\"o%d\",\"patch\":{\"description\":\"o%d\",\"operations\":"
                         "[{\"op\":\"delete\",\"layer\":1,\"feature\":%d}]}}",
                         i, i, i);
        uint8_t hdr[16], h[32];
        memcpy(hdr, "LQJ1", 4);
        for (int k = 0; k < 4; k++)
            hdr[4 + k] = (uint8_t)((unsigned)n >> (8 * k));
        lq_sha256 s;
        lq_sha256_init(&s);
        lq_sha256_update(&s, rec, (size_t)n);
        lq_sha256_final(&s, h);
        memcpy(hdr + 8, h, 8);
        fwrite(hdr, 1, 16, f);
        fwrite(rec, 1, (size_t)n, f);
    }
    if (f) {
        fwrite("LQJ1\x05\0\0\0torn", 1, 12, f); /* and an old-format torn tail */
        fclose(f);
    }
    lq_journal_stats st;
    lq_err err = {0};
    size_t np = 0;
    CHECK_MSG(reopen(path, &st, &np, &err) == 0, "%s", err.msg);
    CHECK(st.records == 5 && st.legacy == 5 && st.migrated && np == 5 && st.dropped == 12);
    lq_journal_report rep;
    CHECK(lq_journal_scan(path, NULL, NULL, &rep, &err) == 0 && !rep.legacy && !rep.corrupt && rep.records == 6);
    CHECK(reopen(path, &st, &np, &err) == 0 && np == 5 && !st.legacy);
}

/* no file until the first acknowledged append; a failed first append leaves none */
static void test_created_by_first_append(void)
{
    if (!V)
        SKIP("fixture failed");
    char path[4300];
    snprintf(path, sizeof path, "%s/lazy.lqj", tmp);
    unlink(path);
    lq_overlay *o = NULL;
    lq_journal *j = NULL;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0 && lq_journal_open(path, o, &j, NULL, &err) == 0);
    CHECK(access(path, F_OK) != 0);
    CHECK(lq_journal_remove(j, "x", &err) == 0 && access(path, F_OK) == 0);
    lq_journal_close(j);
    lq_overlay_free(o);
    /* a journal in a directory that refuses the file: the append fails and leaves nothing */
    char ro[4300], p2[4400];
    snprintf(ro, sizeof ro, "%s/ro", tmp);
    mkdir(ro, 0555);
    snprintf(p2, sizeof p2, "%s/s.lqj", ro);
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0 && lq_journal_open(p2, o, &j, NULL, &err) == 0);
    if (geteuid() != 0) {
        CHECK(lq_journal_remove(j, "x", &err) == LQ_EIO && access(p2, F_OK) != 0);
        CHECK_STR_CONTAINS(err.msg, "cannot persist");
    }
    lq_journal_close(j);
    lq_overlay_free(o);
}

/* scopes: a session's patch and a global one of the same name live side by side */
static void test_scopes(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *g = NULL, *s = NULL;
    lq_err err = {0};
    lq_patch *p = small_patch(1), *q = small_patch(1);
    CHECK(lq_overlay_create(V, NULL, &g, &err) == 0 && lq_overlay_clone(g, &s, &err) == 0);
    lq_overlay_set_scope(s, 1);
    CHECK(lq_overlay_set_edits_name(s, "session:W", &err) == 0);
    CHECK(lq_overlay_apply(s, p, &err) == 0);
    CHECK(lq_overlay_apply(s, p, &err) == LQ_EINVAL); /* once per scope */
    /* the global state gains a patch of the same name and one named like the session's edits */
    lq_patch *w = NULL;
    const char *vlp = "{\"description\":\"session:W\",\"operations\":[{\"op\":\"delete\",\"layer\":0,\"feature\":9}]}";
    CHECK(lq_patch_parse(vlp, strlen(vlp), NULL, 0, &w, &err) == 0);
    CHECK(lq_overlay_apply(g, q, &err) == 0 && lq_overlay_apply(g, w, &err) == 0);
    lq_overlay *s2 = NULL; /* the session rebuilt over it, as the server does */
    CHECK(lq_overlay_clone(g, &s2, &err) == 0);
    lq_overlay_set_scope(s2, 1);
    CHECK(lq_overlay_set_edits_name(s2, "session:W", &err) == 0);
    CHECK(lq_overlay_edits(s2) == NULL); /* the global "session:W" is not the session's edits */
    for (size_t i = 0; i < lq_overlay_n_patches(s); i++)
        if (lq_overlay_patch_scope(s, i) == 1)
            CHECK_MSG(lq_overlay_apply(s2, lq_overlay_patch_at(s, i), &err) == 0, "%s", err.msg);
    lq_edit_where wh;
    lq_edit_where_init(&wh);
    wh.layer = 1, wh.feature = 3;
    size_t k = 0;
    CHECK(lq_overlay_delete(s2, &wh, &k, &err) == 0);
    const lq_patch *e = lq_overlay_edits(s2);
    CHECK(e && lq_overlay_patch_scope(s2, lq_overlay_n_patches(s2) - 1) == 1 && lq_patch_n_ops(e) == 1);
    CHECK(lq_overlay_n_patches(s2) == 4);
    CHECK(lq_overlay_remove(s2, "p1", &err) == 0 && lq_overlay_n_patches(s2) == 3);
    CHECK(lq_overlay_patch_scope(s2, 0) == 0 && !strcmp(lq_patch_name(lq_overlay_patch_at(s2, 0)), "p1"));
    lq_patch_free(p);
    lq_patch_free(q);
    lq_patch_free(w);
    lq_overlay_free(s);
    lq_overlay_free(s2);
    lq_overlay_free(g);
}

/* a clone shares the patches (copy-on-write): the original's later edits stay out of it */
static void test_clone_shares(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *g = NULL, *c = NULL;
    lq_err err = {0};
    lq_edit_where w;
    lq_edit_where_init(&w);
    w.layer = 1, w.feature = 5;
    size_t k = 0;
    CHECK(lq_overlay_create(V, NULL, &g, &err) == 0 && lq_overlay_delete(g, &w, &k, &err) == 0 && k == 1);
    CHECK(lq_overlay_clone(g, &c, &err) == 0);
    CHECK(lq_overlay_patch_at(c, 0) == lq_overlay_patch_at(g, 0)); /* one copy in memory */
    w.feature = 6;
    CHECK(lq_overlay_delete(g, &w, &k, &err) == 0 && k == 1);
    CHECK(lq_overlay_patch_at(c, 0) != lq_overlay_patch_at(g, 0));
    CHECK(lq_patch_n_ops(lq_overlay_edits(g)) == 2 && lq_patch_n_ops(lq_overlay_edits(c)) == 1);
    CHECK(lq_overlay_n_features(g) == 2 && lq_overlay_n_features(c) == 1);
    lq_overlay_free(g); /* the clone's patch outlives the original */
    CHECK(lq_patch_n_ops(lq_overlay_edits(c)) == 1 && !strcmp(lq_patch_name(lq_overlay_edits(c)), "edits"));
    w.feature = 7;
    CHECK(lq_overlay_delete(c, &w, &k, &err) == 0 && lq_patch_n_ops(lq_overlay_edits(c)) == 2);
    lq_overlay_free(c);
}

static void test_fixture(void) { CHECK(V != NULL); }

int main(void)
{
    setup();
    RUN(test_fixture);
    RUN(test_crc32c);
    RUN(test_mid_corruption_refused);
    RUN(test_torn_tails);
    RUN(test_corruption_matrix);
    RUN(test_sequence_break);
    RUN(test_checkpoints);
    RUN(test_checkpoint_fails);
    RUN(test_old_format);
    RUN(test_created_by_first_append);
    RUN(test_scopes);
    RUN(test_clone_shares);
    lq_vindex_close(V);
    return harness_done();
}
