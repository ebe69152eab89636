/* larql slice SRC -o DST (--parts a,b,c | --preset NAME) [--force] [--dry-run]: LARQL's
 * slice (src/vindex/slice.c does the work); SRC may be a registry name. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "larql/vindex.h"

static const char *USAGE =
    "larql slice SRC -o DST [--parts a,b,c] [--preset NAME] [--force] [--dry-run]\n"
    "  A vindex of some parts of SRC (a directory or a registry name; LARQL's slice).\n"
    "  Parts: embed, norms, attn, gate, down_meta, ffn, expert_layers, lm_head, router,\n"
    "  tokenizer, manifest, labels, readme (index.json always). Presets: client, attn,\n"
    "  embed, server, browse, router, expert-server, all (the union with --parts).";

static void human(char *b, size_t cap, uint64_t n)
{
    if (n >= (1ull << 30))
        snprintf(b, cap, "%.2f GB", (double)n / (1ull << 30));
    else if (n >= (1ull << 20))
        snprintf(b, cap, "%.1f MB", (double)n / (1ull << 20));
    else if (n >= 1024)
        snprintf(b, cap, "%.1f KB", (double)n / 1024);
    else
        snprintf(b, cap, "%llu B", (unsigned long long)n);
}

int lq_cli_slice(int argc, char **argv)
{
    const char *C = "slice", *pos[1] = {0}, *out = NULL, *parts = NULL, *preset = NULL;
    int force = 0, dry = 0, np = 0;
    const lq_opt opts[] = {LQ_STR("--output", &out), LQ_STR("-o", &out),       LQ_STR("--parts", &parts),
                           LQ_STR("--preset", &preset), LQ_FLAG("--force", &force), LQ_FLAG("--dry-run", &dry),
                           LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE, argc, argv, 1, opts, NULL, pos, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 1 || !out)
        return lq_cli_usage(C, USAGE, "SRC and -o DST are required");
    lq_err err = {0};
    unsigned mask = 0;
    if ((preset && lq_vindex_slice_preset(preset, &mask, &err)) || (parts && lq_vindex_slice_parts(parts, &mask, &err)))
        return lq_cli_error(C, "%s", err.msg);
    char *src = NULL;
    if (lq_registry_resolve(pos[0], &src, &err))
        return lq_cli_error(C, "%s", err.msg);
    lq_vindex_slice_result res;
    int rc = lq_vindex_slice(src, out, mask, force, dry, &res, &err);
    if (rc) {
        free(src);
        return lq_cli_error(C, "%s", err.msg);
    }
    static const char *const PN[] = {"embed", "norms", "attn", "gate", "down_meta", "ffn", "expert_layers",
                                     "lm_head", "router", "tokenizer", "manifest", "labels", "readme"};
    printf("Source:         %s\nDestination:    %s\nPreset:         %s\nParts:          ", src, out,
           preset ? preset : "\xe2\x80\x94");
    for (int i = 0, first = 1; i < 13; i++)
        if (mask & (1u << i)) {
            printf("%s%s", first ? "" : ", ", PN[i]);
            first = 0;
        }
    printf("\nExtract level:  %s \xe2\x86\x92 %s\nFFN weights:    %s\n", lq_vindex_level_name(res.source_level),
           lq_vindex_level_name(res.new_level), res.new_has_weights ? "present" : "absent");
    char hs[32];
    human(hs, sizeof hs, res.total_bytes);
    printf("\nCopying %zu file(s) \xe2\x80\x94 %s:\n", res.n_copied, hs);
    for (size_t i = 0; i < res.n_copied; i++) {
        human(hs, sizeof hs, res.copied[i].size);
        printf("  %-36s %12s\n", res.copied[i].name, hs);
    }
    if (res.n_skipped) {
        printf("\nSkipping %zu file(s):\n", res.n_skipped);
        for (size_t i = 0; i < res.n_skipped; i++)
            printf("  %s\n", res.skipped[i]);
    }
    human(hs, sizeof hs, res.total_bytes);
    if (dry)
        printf("\n(dry run \xe2\x80\x94 no files written)\n");
    else
        printf("\nWrote %s \xe2\x80\x94 %s\n", out, hs);
    lq_vindex_slice_result_free(&res);
    free(src);
    return 0;
}
