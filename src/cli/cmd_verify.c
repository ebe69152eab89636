/* larql verify DIR: every file index.json lists under "checksums" hashed again and compared
 * (LARQL's verify command and output); exit 1 when one differs or is missing. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "larql/vindex.h"

static const char *USAGE = "larql verify DIR\n"
                           "  Recomputes the sha256 of every file index.json lists under \"checksums\" and\n"
                           "  compares: one line per file, exit status 1 if any differs or is missing.";

typedef struct vctx {
    int failed;
} vctx;

static void on_file(void *ctx, const char *file, int status, uint64_t size)
{
    vctx *c = ctx;
    char sz[32];
    double mb = (double)size / (1024.0 * 1024.0);
    if (status == LQ_VERIFY_MISSING)
        snprintf(sz, sizeof sz, "missing");
    else if (mb > 1024.0)
        snprintf(sz, sizeof sz, "%.2f GB", mb / 1024.0);
    else
        snprintf(sz, sizeof sz, "%.1f MB", mb);
    printf("  %s ... %s (%s)\n", file, status == LQ_VERIFY_OK ? "OK" : "FAILED", sz);
    c->failed += status != LQ_VERIFY_OK;
}

int lq_cli_verify(int argc, char **argv)
{
    const char *C = "verify", *pos[1] = {0};
    int np = 0;
    const lq_opt opts[] = {LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE, argc, argv, 1, opts, NULL, pos, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 1)
        return lq_cli_usage(C, USAGE, "DIR is required");
    lq_vindex *v = NULL;
    lq_err err = {0};
    lq_vindex_open_opts o = {0};
    if (lq_vindex_open(pos[0], &o, &v, &err))
        return lq_cli_error(C, "%s", err.msg);
    vctx c = {0};
    size_t n = 0;
    fprintf(stderr, "Verifying: %s\n", pos[0]);
    int rc = lq_vindex_verify_each(v, on_file, &c, &n, &err);
    lq_vindex_close(v);
    if (rc)
        return lq_cli_error(C, "%s", err.msg);
    if (!n) {
        fprintf(stderr, "No checksums in index.json. Run extract to generate them.\n");
        return 0;
    }
    if (c.failed) {
        printf("\nVerification FAILED. Some files have been modified or corrupted.\n");
        return 1;
    }
    printf("\nAll %zu files verified.\n", n);
    return 0;
}
