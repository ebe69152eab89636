/* The local vindex registry, LARQL's layout (src/vindex/registry.c): larql list / link / rm,
 * and hf / pull / publish, which need the network and say so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "larql/vindex.h"

static const char *LIST_USAGE = "larql list\n"
                                "  The cached vindexes: the local registry ($LARQL_HOME/local, else\n"
                                "  ~/.cache/larql/local) and the Hugging Face hub cache ($HF_HOME/hub, else\n"
                                "  ~/.cache/huggingface/hub).";

int lq_cli_list(int argc, char **argv)
{
    const char *C = "list";
    const lq_opt opts[] = {LQ_OPT_END};
    int np = 0;
    int r = lq_cli_parse(C, LIST_USAGE, argc, argv, 1, opts, NULL, NULL, 0, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    lq_err err = {0};
    lq_registry_entry *e = NULL;
    size_t n = 0;
    if (lq_registry_scan(&e, &n, &err))
        return lq_cli_error(C, "%s", err.msg);
    if (!n) {
        printf("No cached vindexes.\nTry `larql pull hf://owner/name` (remote) or `larql link <path>` (local).\n");
        return 0;
    }
    printf("%-8s  %-48s  %10s  %7s  %8s\n", "SOURCE", "MODEL", "SIZE (MB)", "LAYERS", "HIDDEN");
    for (size_t i = 0; i < n; i++)
        printf("%-8s  %-48s  %10.1f  %7d  %8d\n", e[i].hub ? "hf" : "local", e[i].repo, (double)e[i].size_bytes / 1e6,
               e[i].num_layers, e[i].hidden_size);
    lq_registry_free(e, n);
    return 0;
}

static const char *LINK_USAGE = "larql link PATH [--as NAME] [-f|--force]\n"
                                "  Registers the vindex directory PATH in the local registry as NAME (default:\n"
                                "  its directory name without .vindex): a symbolic link <registry>/NAME.vindex.";

int lq_cli_link(int argc, char **argv)
{
    const char *C = "link", *pos[1] = {0}, *as = NULL;
    int force = 0, np = 0;
    const lq_opt opts[] = {LQ_STR("--as", &as), LQ_FLAG("--force", &force), LQ_FLAG("-f", &force), LQ_OPT_END};
    int r = lq_cli_parse(C, LINK_USAGE, argc, argv, 1, opts, NULL, pos, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 1)
        return lq_cli_usage(C, LINK_USAGE, "PATH is required");
    lq_err err = {0};
    char *link = NULL, *target = NULL;
    if (lq_registry_link(pos[0], as, force, &link, &target, &err))
        return lq_cli_error(C, "%s", err.msg);
    const char *slash = strrchr(link, '/');
    size_t n = strlen(slash ? slash + 1 : link);
    fprintf(stderr, "Linked %.*s\n  %s \xe2\x86\x92 %s\n", (int)(n > 7 ? n - 7 : n), slash ? slash + 1 : link, link,
            target);
    free(link);
    free(target);
    return 0;
}

static const char *RM_USAGE = "larql rm MODEL [-y|--yes]\n"
                              "  Removes a cached vindex: a local link (the vindex it names stays), a local\n"
                              "  directory, or a hub cache entry. Asks first unless --yes.";

int lq_cli_rm(int argc, char **argv)
{
    const char *C = "rm", *pos[1] = {0};
    int yes = 0, np = 0;
    const lq_opt opts[] = {LQ_FLAG("--yes", &yes), LQ_FLAG("-y", &yes), LQ_OPT_END};
    int r = lq_cli_parse(C, RM_USAGE, argc, argv, 1, opts, NULL, pos, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 1)
        return lq_cli_usage(C, RM_USAGE, "MODEL is required");
    lq_err err = {0};
    lq_registry_entry e;
    if (lq_registry_find(pos[0], &e, &err))
        return lq_cli_error(C, "%s", err.msg);
    int rc = 0;
    if (!yes) {
        fprintf(stderr, "Remove %s `%s` (%.1f MB)? [y/N] ", e.hub ? "HF cache" : "local link", e.repo,
                (double)e.size_bytes / 1e6);
        char line[16] = "";
        if (!fgets(line, sizeof line, stdin) || (strcmp(line, "y\n") && strcmp(line, "Y\n") && strcmp(line, "yes\n") &&
                                                 strcmp(line, "y") && strcmp(line, "yes"))) {
            fprintf(stderr, "aborted.\n");
            goto out;
        }
    }
    if (lq_registry_remove(&e, &err))
        rc = lq_cli_error(C, "%s", err.msg);
    else
        fprintf(stderr, "Removed %s.\n", e.repo);
out:
    free(e.repo);
    free(e.path);
    return rc;
}

/* hf / pull / publish: LARQL's hub commands; this larql works offline */
static int offline(const char *cmd, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("larql %s ...\n  LARQL's Hugging Face hub command. Not available: it needs the network, which "
                   "this larql does not use.\n  Copy a vindex by other means, then `larql link DIR`.\n", cmd);
            return 0;
        }
    return lq_cli_error(cmd, "needs the network (the Hugging Face hub), which this larql does not use: copy the "
                             "vindex by other means and register it with `larql link DIR`");
}

int lq_cli_hf(int argc, char **argv) { return offline("hf", argc, argv); }
int lq_cli_pull(int argc, char **argv) { return offline("pull", argc, argv); }
int lq_cli_publish(int argc, char **argv) { return offline("publish", argc, argv); }
