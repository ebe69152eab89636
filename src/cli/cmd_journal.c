/* larql journal check|salvage FILE: an edit journal (--state-dir's journal.lqj and
 * sessions/ID.lqj) inspected without a server, and the intact records of a damaged one
 * recovered into a new file (the server refuses to start on a damaged journal and names
 * these commands). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "larql/patch.h"

static const char *USAGE = "larql journal check FILE [--quiet]\n"
                           "       larql journal salvage FILE [--output OUT] (default OUT: FILE.salvaged)";

typedef struct list_ctx {
    int quiet;
    FILE *report; /* salvage: the skipped ranges */
} list_ctx;

/* "edit (3 ops)", "apply NAME", "remove NAME", "checkpoint (N patches)" */
static void describe_record(const lq_journal_item *it, char *out, size_t cap)
{
    json_t *j = json_loadb(it->payload, it->payload_len, 0, NULL);
    const char *t = json_string_value(json_object_get(j, "t")), *name = json_string_value(json_object_get(j, "name"));
    if (!t)
        snprintf(out, cap, "(a record without a type)");
    else if (!strcmp(t, "edit"))
        snprintf(out, cap, "edit (%zu ops)", json_array_size(json_object_get(json_object_get(j, "ops"), "operations")));
    else if (!strcmp(t, "checkpoint"))
        snprintf(out, cap, "checkpoint (%lld patches follow)", (long long)json_integer_value(json_object_get(j, "patches")));
    else
        snprintf(out, cap, "%s %s", t, name ? name : "?");
    json_decref(j);
}

static int list_item(void *c, const lq_journal_item *it)
{
    list_ctx *L = c;
    if (!it->valid) {
        if (!L->quiet)
            printf("%10llu %9llu  BAD  %llu bytes that are no intact record\n", (unsigned long long)it->offset,
                   (unsigned long long)it->length, (unsigned long long)it->length);
        if (L->report)
            fprintf(L->report, "skipped: offset %llu, %llu bytes (no intact record)\n", (unsigned long long)it->offset,
                    (unsigned long long)it->length);
        return 0;
    }
    if (it->seq_break && L->report)
        fprintf(L->report, "kept out of sequence: offset %llu, sequence %llu (renumbered)\n",
                (unsigned long long)it->offset, (unsigned long long)it->seq);
    if (!L->quiet) {
        char what[300];
        describe_record(it, what, sizeof what);
        if (it->version == 1)
            printf("%10llu %9llu  v1   %s\n", (unsigned long long)it->offset, (unsigned long long)it->length, what);
        else
            printf("%10llu %9llu  #%llu%s %s\n", (unsigned long long)it->offset, (unsigned long long)it->length,
                   (unsigned long long)it->seq, it->seq_break ? " (OUT OF SEQUENCE)" : "", what);
    }
    return 0;
}

static void summary(FILE *f, const char *path, const lq_journal_report *r)
{
    fprintf(f, "%s: %llu bytes, %zu intact record%s", path, (unsigned long long)r->size, r->records,
            r->records == 1 ? "" : "s");
    if (r->legacy)
        fprintf(f, " (%zu in the old LQJ1 framing)", r->legacy);
    if (r->seq_last)
        fprintf(f, ", sequence %llu..%llu", (unsigned long long)r->seq_first, (unsigned long long)r->seq_last);
    fprintf(f, "\n");
    if (!r->corrupt && !r->torn_tail)
        fprintf(f, "clean\n");
    else if (r->torn_tail)
        fprintf(f, "torn tail at offset %llu (%llu bytes): an interrupted append, never acknowledged; the next "
                   "open cuts it\n",
                (unsigned long long)r->first_bad, (unsigned long long)(r->size - r->first_bad));
    else
        fprintf(f, "CORRUPT: first bad offset %llu, %zu intact record%s after it; %zu bad range%s (%llu bytes), "
                   "%zu sequence break%s; a server refuses this file (recover with `larql journal salvage`)\n",
                (unsigned long long)r->first_bad, r->after_bad, r->after_bad == 1 ? "" : "s", r->bad_ranges,
                r->bad_ranges == 1 ? "" : "s", (unsigned long long)r->bad_bytes, r->seq_breaks,
                r->seq_breaks == 1 ? "" : "s");
}

int lq_cli_journal(int argc, char **argv)
{
    const char *C = "journal", *pos[2] = {0}, *out = NULL;
    int quiet = 0, np = 0;
    const lq_opt opts[] = {LQ_FLAG("--quiet", &quiet), LQ_STR("--output", &out), LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE, argc, argv, 1, opts, NULL, pos, 2, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np != 2 || (strcmp(pos[0], "check") && strcmp(pos[0], "salvage")))
        return lq_cli_usage(C, USAGE, "a verb (check or salvage) and a FILE are required");
    const char *path = pos[1];
    lq_journal_report rep;
    lq_err err = {0};
    if (!strcmp(pos[0], "check")) {
        if (out)
            return lq_cli_usage(C, USAGE, "--output belongs to salvage");
        list_ctx L = {quiet, NULL};
        if (!quiet)
            printf("%10s %9s  seq  record\n", "offset", "bytes");
        if (lq_journal_scan(path, list_item, &L, &rep, &err))
            return lq_cli_error(C, "%s", err.msg);
        summary(stdout, path, &rep);
        return rep.corrupt ? 1 : 0;
    }
    if (quiet)
        return lq_cli_usage(C, USAGE, "--quiet belongs to check");
    char def[4200], rpath[4300], tmp[4400];
    if (!out) {
        snprintf(def, sizeof def, "%s.salvaged", path);
        out = def;
    }
    snprintf(rpath, sizeof rpath, "%s.report", out);
    if (lq_journal_salvage(path, out, &rep, &err))
        return lq_cli_error(C, "%s", err.msg);
    /* the report: written aside and renamed too, so a half-written one is never left */
    snprintf(tmp, sizeof tmp, "%s.partial", rpath);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return lq_cli_error(C, "%s: cannot write the report", tmp);
    fprintf(f, "larql journal salvage %s -> %s\n", path, out);
    list_ctx L = {1, f};
    lq_journal_report again;
    if (lq_journal_scan(path, list_item, &L, &again, &err)) {
        fclose(f);
        remove(tmp);
        return lq_cli_error(C, "%s", err.msg);
    }
    summary(f, path, &rep);
    fprintf(f, "kept %zu intact record%s, skipped %zu bad range%s (%llu bytes)\n", rep.records,
            rep.records == 1 ? "" : "s", rep.bad_ranges, rep.bad_ranges == 1 ? "" : "s",
            (unsigned long long)rep.bad_bytes);
    if (fclose(f) || rename(tmp, rpath)) {
        remove(tmp);
        return lq_cli_error(C, "%s: cannot write the report", rpath);
    }
    printf("kept %zu intact record%s, skipped %zu bad range%s (%llu bytes): %s (report: %s)\n", rep.records,
           rep.records == 1 ? "" : "s", rep.bad_ranges, rep.bad_ranges == 1 ? "" : "s",
           (unsigned long long)rep.bad_bytes, out, rpath);
    return 0;
}
