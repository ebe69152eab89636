/* Option parsing and model opening shared by the model commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "larql/chat.h"
#include "larql/generate.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "core/sb.h"

void lq_cli_model_args_init(lq_cli_model_args *a)
{
    memset(a, 0, sizeof *a);
    a->act = LQ_ACT_INT8;
}

int lq_cli_parse_draft(const char *cmd, const char *usage, const char *v, int *mode)
{
    if (!strcmp(v, "ngram"))
        *mode = LQ_DRAFT_NGRAM;
    else if (!strcmp(v, "none"))
        *mode = LQ_DRAFT_NONE;
    else {
        lq_cli_usage(cmd, usage, "--draft: '%s' is not ngram or none", v);
        return -1;
    }
    return 0;
}

int lq_cli_model_opt(const char *cmd, const char *usage, int argc, char **argv, int *i,
                     lq_cli_model_args *a)
{
    const char *o = argv[*i];
    if (!strcmp(o, "--no-carried-edits")) {
        a->no_carried = 1;
        return 1;
    }
    int known = !strcmp(o, "--threads") || !strcmp(o, "--act") || !strcmp(o, "--kernels") ||
                !strcmp(o, "--ctx") || !strcmp(o, "--lm-head") || !strcmp(o, "--kv") ||
                !strcmp(o, "--weights") || !strcmp(o, "--ffn") || !strcmp(o, "--ffn-timeout") ||
                !strcmp(o, "--ffn-timeout-secs");
    if (!known)
        return 0;
    if (*i + 1 >= argc) {
        lq_cli_usage(cmd, usage, "option '%s' needs a value", o);
        return -1;
    }
    const char *v = argv[++*i];
    long n;
    if (!strcmp(o, "--threads")) {
        if (lq_parse_long(v, 1, 256, &n)) {
            lq_cli_usage(cmd, usage, "--threads: '%s' is not an integer in [1, 256]", v);
            return -1;
        }
        a->threads = (int)n;
    } else if (!strcmp(o, "--ctx")) {
        if (lq_parse_long(v, 1, 1 << 20, &n)) {
            lq_cli_usage(cmd, usage, "--ctx: '%s' is not an integer in [1, 1048576]", v);
            return -1;
        }
        a->ctx = (int)n;
    } else if (!strcmp(o, "--act")) {
        if (!strcmp(v, "ms") || !strcmp(v, "int8"))
            a->act = LQ_ACT_INT8;
        else if (!strcmp(v, "float") || !strcmp(v, "f32"))
            a->act = LQ_ACT_F32;
        else {
            lq_cli_usage(cmd, usage, "--act: '%s' (expected ms or float)", v);
            return -1;
        }
    } else if (!strcmp(o, "--lm-head")) {
        /* q8: an int8 per-row-scaled copy of the lm_head used for logits (half the bytes,
         * small logit error); bounded (the default for generation): an int8 copy scores the
         * vocabulary and only the rows that can be chosen are computed exactly (the exact
         * model's tokens); exact (= f16, stored): the lm_head as stored, all of it */
        if (!strcmp(v, "q8") || !strcmp(v, "f16") || !strcmp(v, "stored") || !strcmp(v, "exact") ||
            !strcmp(v, "bounded")) {
            a->lm_head_q8 = !strcmp(v, "q8");
            a->lm_head_mode = !strcmp(v, "bounded") ? LQ_LM_HEAD_BOUNDED : LQ_LM_HEAD_EXACT;
        } else {
            lq_cli_usage(cmd, usage, "--lm-head: '%s' (expected exact, bounded, f16 or q8)", v);
            return -1;
        }
    } else if (!strcmp(o, "--kv")) {
        if (!strcmp(v, "f16") || !strcmp(v, "f32") || !strcmp(v, "q8"))
            a->kv_type = !strcmp(v, "f16") ? LQ_KV_F16 : !strcmp(v, "q8") ? LQ_KV_Q8 : LQ_KV_F32;
        else {
            lq_cli_usage(cmd, usage, "--kv: '%s' (expected f32, f16 or q8)", v);
            return -1;
        }
    } else if (!strcmp(o, "--ffn")) {
        a->ffn_url = v; /* checked (and connected to) when the model opens */
    } else if (!strcmp(o, "--ffn-timeout")) {
        if (lq_parse_long(v, 1, 3600000, &n)) {
            lq_cli_usage(cmd, usage, "--ffn-timeout: '%s' is not a number of milliseconds in [1, 3600000]", v);
            return -1;
        }
        a->ffn_timeout_ms = (int)n;
    } else if (!strcmp(o, "--ffn-timeout-secs")) { /* LARQL's spelling of the same deadline */
        if (lq_parse_long(v, 1, 3600, &n)) {
            lq_cli_usage(cmd, usage, "--ffn-timeout-secs: '%s' is not a number of seconds in [1, 3600]", v);
            return -1;
        }
        a->ffn_timeout_ms = (int)n * 1000;
    } else if (!strcmp(o, "--weights")) {
        /* copy: 2 MB-page private copy (fast streaming); mmap: shared read-only file pages */
        if (!strcmp(v, "copy") || !strcmp(v, "mmap") || !strcmp(v, "auto"))
            a->hugepages = !strcmp(v, "copy") ? 1 : !strcmp(v, "mmap") ? -1 : 0;
        else {
            lq_cli_usage(cmd, usage, "--weights: '%s' (expected copy, mmap or auto)", v);
            return -1;
        }
    } else {
        a->kernels = v;
    }
    return 1;
}

void lq_cli_model_opts(const lq_cli_model_args *a, lq_model_opts *o)
{
    *o = (lq_model_opts){.n_threads = a->threads, .act_mode = a->act, .kernels = a->kernels,
                         .lm_head_q8 = a->lm_head_q8, .lm_head_mode = a->lm_head_mode,
                         .kv_type = a->kv_type, .hugepages = a->hugepages, .ffn_url = a->ffn_url,
                         .ffn_timeout_ms = a->ffn_timeout_ms};
}

int lq_cli_open_model(const char *cmd, const char *path, const lq_cli_model_args *a, lq_model **m)
{
    lq_model_opts o;
    lq_cli_model_opts(a, &o);
    lq_err err = {0};
    if (lq_model_open(path, &o, m, &err)) {
        lq_cli_error(cmd, "%s", err.msg);
        return 1;
    }
    return 0;
}

int lq_cli_open_model_edited(const char *cmd, const char *path, lq_cli_model_args *a, lq_model **m)
{
    lq_model_opts o;
    lq_cli_model_opts(a, &o);
    lq_err err = {0};
    size_t n = 0;
    if (lq_model_open_edited(path, &o, a->no_carried, m, &a->hook, &a->edits, &n, &err)) {
        lq_cli_error(cmd, "%s", err.msg);
        return 1;
    }
    if (n)
        fprintf(stderr, "larql %s: applying the %zu patch(es) %s carries (larql.patches; --no-carried-edits runs "
                        "the base model)\n", cmd, n, path);
    return 0;
}

void lq_cli_close_model(lq_model *m, lq_cli_model_args *a)
{
    lq_edit_hook_free(a->hook); /* after the sessions that ran it */
    a->hook = NULL;
    lq_edit_set_unref(a->edits);
    a->edits = NULL;
    lq_model_close(m);
}

void lq_cli_json_str(FILE *f, const char *s, size_t len)
{
    lq_sb b = {0}; /* the library's escaper: the command prints strings as the server does */
    lq_sb_json_str(&b, s, len);
    if (b.s)
        fwrite(b.s, 1, b.n, f);
    lq_sb_free(&b);
}

static int choice_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *c = choices; *c;) {
        const char *e = strchr(c, '|');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        if (len == n && !strncmp(c, v, n))
            return 1;
        if (!e)
            break;
        c = e + 1;
    }
    return 0;
}

static int parse_one(const char *cmd, const char *usage, const lq_opt *o, const char *v)
{
    long n;
    double d;
    switch (o->kind) {
    case LQ_OPT_STR:
        *(const char **)o->out = v;
        return 0;
    case LQ_OPT_CHOICE:
        if (!choice_ok(o->choices, v))
            return lq_cli_usage(cmd, usage, "%s: '%s' (expected %s)", o->name, v, o->choices);
        *(const char **)o->out = v;
        return 0;
    case LQ_OPT_INT:
        if (lq_parse_long(v, (long)o->lo, (long)o->hi, &n))
            return lq_cli_usage(cmd, usage, "%s: '%s' is not an integer in [%.0f, %.0f]", o->name, v, o->lo, o->hi);
        *(int *)o->out = (int)n;
        return 0;
    case LQ_OPT_NUM:
        if (lq_parse_double(v, o->lo, o->hi, &d))
            return lq_cli_usage(cmd, usage, "%s: '%s' is not a number in [%g, %g]", o->name, v, o->lo, o->hi);
        *(double *)o->out = d;
        return 0;
    default:
        return 0;
    }
}

int lq_cli_parse(const char *cmd, const char *usage, int argc, char **argv, int first,
                 const lq_opt *opts, lq_cli_model_args *ma, const char **pos, int max_pos,
                 int *n_pos)
{
    int np = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: %s\n", usage);
            return LQ_CLI_HELP;
        }
        if (ma) {
            int r = lq_cli_model_opt(cmd, usage, argc, argv, &i, ma);
            if (r < 0)
                return 2;
            if (r)
                continue;
        }
        if (a[0] == '-' && a[1]) {
            const lq_opt *o = opts;
            while (o && o->name && strcmp(o->name, a))
                o++;
            if (!o || !o->name)
                return lq_cli_usage(cmd, usage, "unknown option '%s'", a);
            if (o->seen)
                *o->seen = 1;
            if (o->kind == LQ_OPT_FLAG) {
                *(int *)o->out = 1;
                continue;
            }
            if (i + 1 >= argc)
                return lq_cli_usage(cmd, usage, "option '%s' needs a value", a);
            if (parse_one(cmd, usage, o, argv[++i]))
                return 2;
        } else if (np < max_pos) {
            pos[np++] = a;
        } else {
            return lq_cli_usage(cmd, usage, "unexpected argument '%s'", a);
        }
    }
    if (n_pos)
        *n_pos = np;
    return 0;
}

int lq_cli_chat_template_arg(const char *cmd, const char *arg, char **spec)
{
    *spec = NULL;
    if (!arg)
        return 0;
    if (lq_chat_template_from_name(arg) >= 0) {
        *spec = strdup(arg);
        return *spec ? 0 : lq_cli_error(cmd, "out of memory");
    }
    size_t n = 0;
    if (lq_read_file(arg, spec, &n))
        return lq_cli_error(cmd, "--chat-template: '%s' is not plain, llama3, bitnet or a readable template file",
                            arg);
    if (strlen(*spec) != n) {
        free(*spec);
        *spec = NULL;
        return lq_cli_error(cmd, "--chat-template: '%s' holds a NUL byte", arg);
    }
    return 0;
}

int lq_cli_chat_format(const char *cmd, const struct lq_model *m, const char *arg, struct lq_chat_format **out)
{
    char *spec = NULL;
    if (lq_cli_chat_template_arg(cmd, arg, &spec))
        return 1;
    lq_err err = {0};
    int rc = lq_chat_format_open(m, spec, out, &err);
    free(spec);
    if (rc)
        return lq_cli_error(cmd, "%s", err.msg);
    return 0;
}
