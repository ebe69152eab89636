/* larql convert gguf-to-vindex | safetensors-to-gguf | safetensors-to-vindex, and LARQL's
 * name for the last, `larql extract-index`: thin front ends over lq_vindex_build and
 * lq_hf_to_gguf. safetensors-to-vindex is safetensors-to-gguf into a temporary file beside
 * the output, then the gguf-to-vindex builder reading the folder's side files (tokenizer.json,
 * tokenizer_config.json ...): the vindex is the one gguf-to-vindex builds from the converted
 * GGUF placed in the folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "larql/safetensors.h"
#include "larql/vindex.h"

static const char *USAGE_CONVERT =
    "larql convert gguf-to-vindex IN.gguf --output DIR [--level browse|inference|all] [--keep-quant]\n"
    "                             [--dense-only] [--f16] [--threads N] [--tokenizer FILE] [--no-clusters]\n"
    "                             [--clusters (also below 8 layers)]\n"
    "larql convert safetensors-to-gguf HF_DIR --output F.gguf [--name NAME]\n"
    "larql convert safetensors-to-vindex HF_DIR --output DIR [the gguf-to-vindex options]";

static const char *USAGE_EXTRACT =
    "larql extract-index HF_DIR|IN.gguf -o DIR [--level browse|attention|inference|all] [--include-weights]\n"
    "                   [--keep-quant] [--f16] [--f32] [--down-top-k N] [--threads N] [--no-clusters]\n"
    "                   [--clusters (also below 8 layers)]";

typedef struct prog {
    int tty;
} prog;

static void progress_cb(void *ctx, const char *stage, uint64_t done, uint64_t total)
{
    prog *p = ctx;
    if (!p->tty)
        return;
    int w = 30, fill = total ? (int)(w * done / total) : w;
    fprintf(stderr, "\r%-14s [", stage);
    for (int i = 0; i < w; i++)
        fputc(i < fill ? '#' : ' ', stderr);
    fprintf(stderr, "] %llu/%llu", (unsigned long long)done, (unsigned long long)total);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

/* Exit status for a library error: bad request values are usage errors (2). */
static int lib_error(const char *cmd, const lq_err *err)
{
    lq_cli_error(cmd, "%s", err->msg);
    return err->code == LQ_EINVAL || err->code == LQ_ERANGE ? 2 : 1;
}

static int set_level(lq_vindex_build_opts *o, const char *cmd, const char *level)
{
    if (!level)
        return 0;
    if (!strcmp(level, "inference") || !strcmp(level, "infer"))
        o->level = LQ_VLEVEL_INFERENCE;
    else if (!strcmp(level, "all"))
        o->level = LQ_VLEVEL_ALL;
    else {
        /* LARQL's convert treats any other level as browse; say so */
        if (strcmp(level, "browse"))
            fprintf(stderr, "larql %s: level '%s' is treated as browse (accepted: browse, inference, all)\n", cmd,
                    level);
        o->level = LQ_VLEVEL_BROWSE;
    }
    return 0;
}

static int build_vindex(const char *cmd, const char *gguf, const char *out, lq_vindex_build_opts *o)
{
    static prog p; /* one build per process; static so the options may point at it */
    p.tty = isatty(2);
    o->progress = progress_cb;
    o->progress_ctx = &p;
    lq_err err = {0};
    int rc = lq_vindex_build(gguf, out, o, &err);
    if (o->keep_quant_ignored)
        fprintf(stderr, "larql %s: --keep-quant ignored: the model is not BitNet\n", cmd);
    if (rc)
        return lib_error(cmd, &err);
    fprintf(stderr, "larql %s: wrote %s\n", cmd, out);
    return 0;
}

static int hf_to_gguf(const char *cmd, const char *dir, const char *out, const char *name)
{
    lq_err err = {0};
    lq_hf_convert_opts ho = {.name = name};
    if (lq_hf_to_gguf(dir, out, &ho, &err))
        return lib_error(cmd, &err);
    return 0;
}

/* HF folder -> temporary GGUF beside out -> vindex with the folder's side files. */
static int hf_to_vindex(const char *cmd, const char *dir, const char *out, lq_vindex_build_opts *o)
{
    size_t l = strlen(out);
    char *tmp = malloc(l + 48);
    if (!tmp)
        return lq_cli_error(cmd, "out of memory");
    while (l > 1 && out[l - 1] == '/')
        l--;
    snprintf(tmp, l + 48, "%.*s.convert-%ld.gguf", (int)l, out, (long)getpid());
    int rc = hf_to_gguf(cmd, dir, tmp, NULL);
    if (!rc) {
        o->side_dir = dir;
        rc = build_vindex(cmd, tmp, out, o);
    }
    unlink(tmp);
    free(tmp);
    return rc;
}

int lq_cli_convert(int argc, char **argv)
{
    const char *C = "convert", *out = NULL, *level = NULL, *name = NULL, *pos[2] = {0};
    lq_vindex_build_opts o;
    lq_vindex_build_opts_init(&o);
    const lq_opt opts[] = {
        LQ_STR("--output", &out), LQ_STR("-o", &out), LQ_STR("--name", &name),
        LQ_STR("--level", &level), LQ_FLAG("--keep-quant", &o.keep_quant),
        LQ_FLAG("--dense-only", &o.dense_only), LQ_FLAG("--f16", &o.f16),
        LQ_STR("--tokenizer", &o.tokenizer_json), LQ_FLAG("--no-clusters", &o.no_clusters),
        LQ_FLAG("--clusters", &o.clusters_any_depth), LQ_INT("--threads", &o.n_threads, 1, 256), LQ_OPT_END};
    int np = 0, r = lq_cli_parse(C, USAGE_CONVERT, argc, argv, 1, opts, NULL, pos, 2, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np == 0)
        return lq_cli_usage(C, USAGE_CONVERT, "a conversion is required");
    int kind = !strcmp(pos[0], "gguf-to-vindex") ? 0 : !strcmp(pos[0], "safetensors-to-gguf") ? 1
               : !strcmp(pos[0], "safetensors-to-vindex") ? 2 : -1;
    if (kind < 0)
        return lq_cli_usage(C, USAGE_CONVERT,
                            "unknown conversion '%s' (gguf-to-vindex, safetensors-to-gguf, safetensors-to-vindex)",
                            pos[0]);
    if (!pos[1])
        return lq_cli_usage(C, USAGE_CONVERT, "%s is required", kind ? "HF_DIR" : "IN.gguf");
    if (!out)
        return lq_cli_usage(C, USAGE_CONVERT, "--output %s is required", kind == 1 ? "F.gguf" : "DIR");
    if (name && kind != 1)
        return lq_cli_usage(C, USAGE_CONVERT, "--name applies to safetensors-to-gguf");
    set_level(&o, C, level);
    if (kind == 1) {
        if (hf_to_gguf(C, pos[1], out, name))
            return 1;
        fprintf(stderr, "larql convert: wrote %s\n", out);
        return 0;
    }
    return kind == 2 ? hf_to_vindex(C, pos[1], out, &o) : build_vindex(C, pos[1], out, &o);
}

/* LARQL's `extract-index MODEL -o DIR`: a Hugging Face folder (or a GGUF file) to a vindex,
 * with LARQL's defaults: level inference, f16 float files (--f32 opts out); --include-weights
 * is its old spelling of --level all. */
int lq_cli_extract_index(int argc, char **argv)
{
    const char *C = "extract-index", *out = NULL, *level = "inference", *pos[1] = {0};
    int include_weights = 0, f32 = 0;
    lq_vindex_build_opts o;
    lq_vindex_build_opts_init(&o);
    const lq_opt opts[] = {
        LQ_STR("--output", &out), LQ_STR("-o", &out), LQ_STR("--level", &level),
        LQ_FLAG("--include-weights", &include_weights), LQ_FLAG("--keep-quant", &o.keep_quant),
        LQ_FLAG("--f16", &o.f16), LQ_FLAG("--f32", &f32), LQ_INT("--down-top-k", &o.down_top_k, 1, 1000),
        LQ_FLAG("--no-clusters", &o.no_clusters), LQ_FLAG("--clusters", &o.clusters_any_depth),
        LQ_INT("--threads", &o.n_threads, 1, 256), LQ_OPT_END};
    int np = 0, r = lq_cli_parse(C, USAGE_EXTRACT, argc, argv, 1, opts, NULL, pos, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (!pos[0])
        return lq_cli_usage(C, USAGE_EXTRACT, "MODEL (a Hugging Face folder or a GGUF file) is required");
    if (!out)
        return lq_cli_usage(C, USAGE_EXTRACT, "-o DIR is required");
    if (f32 && o.f16)
        return lq_cli_usage(C, USAGE_EXTRACT, "--f16 and --f32 contradict each other");
    o.f16 = !f32;
    if (!strcmp(level, "attention") || !strcmp(level, "attn")) {
        fprintf(stderr, "larql extract-index: level 'attention' is built as inference (a superset)\n");
        level = "inference";
    }
    set_level(&o, C, include_weights ? "all" : level);
    struct stat st;
    if (stat(pos[0], &st) == 0 && S_ISDIR(st.st_mode))
        return hf_to_vindex(C, pos[0], out, &o);
    return build_vindex(C, pos[0], out, &o);
}
