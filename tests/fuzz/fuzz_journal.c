/* libFuzzer target for the edit journal's replay: the input is a journal file. It is opened
 * on a fresh overlay of a real vindex (lq_journal_open: framing, checksums, sequence, the
 * torn-or-damaged decision, the replay of every record), scanned without an overlay
 * (lq_journal_scan) and salvaged (lq_journal_salvage).
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_journal/, made by
 * make_seeds.py). Properties checked: no crash, no sanitizer report; every failure has a
 * message and leaves no handle; the open and the scan agree - a file the scan calls corrupt
 * is refused as damaged, and any refusal leaves the file byte for byte as it was; an open
 * that succeeds replayed every intact record and cut at most a torn tail; the salvaged file
 * scans clean with every intact record. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "larql/patch.h"
#include "vindex/journal_frame.h"
#include "fixture.inc"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static lq_vindex *v;
    static char path[512], out[600];
    lq_err err = {0};
    if (!v) {
        const char *dir = fuzz_fixture_vindex();
        if (!dir || lq_vindex_open(dir, NULL, &v, &err) != LQ_OK)
            abort();
        snprintf(path, sizeof path, "%s/../fuzz.lqj", dir);
        snprintf(out, sizeof out, "%s/../fuzz.salvaged", dir);
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f))
        abort();
    lq_journal_report rep;
    if (lq_journal_scan(path, NULL, NULL, &rep, &err) != LQ_OK || rep.size != size)
        abort();

    lq_overlay *o = NULL;
    lq_journal *j = NULL;
    lq_journal_stats st;
    if (lq_overlay_create(v, NULL, &o, &err) != LQ_OK)
        abort();
    int rc = lq_journal_open(path, o, &j, &st, &err);
    uint8_t *after = NULL;
    uint64_t n = 0;
    if (lq_vx_jf_read_file(path, path, 0, &after, &n, &err) != LQ_OK)
        abort();
    if (rc != LQ_OK) {
        if (j || !err.msg[0])
            abort();
        /* refused: damaged exactly when the scan says so (else a record failed to replay), and
         * the file untouched either way */
        size_t pl = strlen(path);
        int damaged = !strncmp(err.msg, path, pl) && !strncmp(err.msg + pl, " is damaged:", 12);
        if (rep.corrupt != damaged)
            abort();
        if (n != size || (size && memcmp(after, data, size)))
            abort();
    } else {
        if (!j || rep.corrupt || st.records != rep.records)
            abort();
        /* at most a torn tail cut (an old-format file is rewritten: its size changes) */
        if (!st.legacy && n != (rep.torn_tail ? rep.first_bad : size))
            abort();
        lq_journal_close(j);
    }
    lq_overlay_free(o);
    free(after);

    lq_journal_report srep, again;
    unlink(out);
    if (lq_journal_salvage(path, out, &srep, &err) != LQ_OK)
        abort();
    if (lq_journal_scan(out, NULL, NULL, &again, &err) != LQ_OK || again.bad_ranges || again.corrupt ||
        again.seq_breaks || again.records != srep.records)
        abort();
    return 0;
}
