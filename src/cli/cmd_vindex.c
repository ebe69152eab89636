/* larql convert / describe / walk / select / relations / nearest / similar / stats / show /
 * infer: thin front ends over the vindex library. --json prints exactly the body the HTTP
 * server returns (the library renders it). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "larql/model.h"
#include "larql/vindex.h"

/* ---- shared ---- */

static int open_vindex(const char *cmd, const char *dir, int threads, lq_vindex **v)
{
    lq_err err = {0};
    lq_vindex_open_opts o = {.n_threads = threads};
    if (lq_vindex_open(dir, &o, v, &err))
        return lq_cli_error(cmd, "%s", err.msg);
    return 0;
}

/* Exit status for a library error: bad request values are usage errors (2). */
static int query_error(const char *cmd, const lq_err *err)
{
    lq_cli_error(cmd, "%s", err->msg);
    return err->code == LQ_EINVAL || err->code == LQ_ERANGE ? 2 : 1;
}

static int need_value(const char *cmd, const char *usage, int argc, char **argv, int i)
{
    if (i + 1 >= argc) {
        lq_cli_usage(cmd, usage, "option '%s' needs a value", argv[i]);
        return 0;
    }
    return 1;
}

static int is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

/* Pretty-prints a JSON body for the text mode of commands without a table layout. */
static void print_pretty(const char *json)
{
    json_t *j = json_loads(json, 0, NULL);
    if (!j) {
        puts(json);
        return;
    }
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    puts(s ? s : json);
    free(s);
    json_decref(j);
}

/* ---- convert ---- */

static const char *USAGE_CONVERT =
    "larql convert gguf-to-vindex IN.gguf --output DIR [--level browse|inference|all] [--keep-quant]\n"
    "                             [--dense-only] [--f16] [--threads N] [--tokenizer FILE]";

typedef struct prog {
    int tty;
    char last_stage[32];
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

int lq_cli_convert(int argc, char **argv)
{
    const char *C = "convert", *in = NULL, *out = NULL;
    lq_vindex_build_opts o;
    lq_vindex_build_opts_init(&o);
    if (argc < 2 || is_help(argv[1])) {
        if (argc >= 2) {
            printf("usage: %s\n", USAGE_CONVERT);
            return 0;
        }
        return lq_cli_usage(C, USAGE_CONVERT, "a conversion is required");
    }
    if (strcmp(argv[1], "gguf-to-vindex"))
        return lq_cli_usage(C, USAGE_CONVERT, "unknown conversion '%s' (gguf-to-vindex)", argv[1]);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        long n;
        if (is_help(a)) {
            printf("usage: %s\n", USAGE_CONVERT);
            return 0;
        } else if (!strcmp(a, "--output") || !strcmp(a, "-o")) {
            if (!need_value(C, USAGE_CONVERT, argc, argv, i))
                return 2;
            out = argv[++i];
        } else if (!strcmp(a, "--level")) {
            if (!need_value(C, USAGE_CONVERT, argc, argv, i))
                return 2;
            const char *l = argv[++i];
            if (!strcmp(l, "inference"))
                o.level = LQ_VLEVEL_INFERENCE;
            else if (!strcmp(l, "all"))
                o.level = LQ_VLEVEL_ALL;
            else {
                /* LARQL's convert treats any other level as browse; say so */
                if (strcmp(l, "browse"))
                    fprintf(stderr, "larql convert: level '%s' is treated as browse (accepted: browse, inference, all)\n", l);
                o.level = LQ_VLEVEL_BROWSE;
            }
        } else if (!strcmp(a, "--keep-quant")) {
            o.keep_quant = 1;
        } else if (!strcmp(a, "--dense-only")) {
            o.dense_only = 1;
        } else if (!strcmp(a, "--f16")) {
            o.f16 = 1;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!need_value(C, USAGE_CONVERT, argc, argv, i))
                return 2;
            o.tokenizer_json = argv[++i];
        } else if (!strcmp(a, "--threads")) {
            if (!need_value(C, USAGE_CONVERT, argc, argv, i))
                return 2;
            if (lq_parse_long(argv[++i], 1, 256, &n))
                return lq_cli_usage(C, USAGE_CONVERT, "--threads: '%s' is not an integer in [1, 256]", argv[i]);
            o.n_threads = (int)n;
        } else if (a[0] == '-' || in) {
            return lq_cli_usage(C, USAGE_CONVERT, "unexpected argument '%s'", a);
        } else {
            in = a;
        }
    }
    if (!in)
        return lq_cli_usage(C, USAGE_CONVERT, "IN.gguf is required");
    if (!out)
        return lq_cli_usage(C, USAGE_CONVERT, "--output DIR is required");
    prog p = {.tty = isatty(2)};
    o.progress = progress_cb;
    o.progress_ctx = &p;
    lq_err err = {0};
    int rc = lq_vindex_build(in, out, &o, &err);
    if (o.keep_quant_ignored)
        fprintf(stderr, "larql convert: --keep-quant ignored: %s is not a BitNet GGUF\n", in);
    if (rc)
        return query_error(C, &err);
    fprintf(stderr, "larql convert: wrote %s\n", out);
    return 0;
}

/* ---- describe ---- */

static const char *USAGE_DESCRIBE =
    "larql describe DIR ENTITY [--band syntax|knowledge|output|all] [--limit N] [--min-score X]\n"
    "                          [--verbose] [--json] [--threads N]";

int lq_cli_describe(int argc, char **argv)
{
    const char *C = "describe", *dir = NULL;
    lq_describe_params p;
    lq_describe_params_init(&p);
    int json = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long n;
        double d;
        if (is_help(a)) {
            printf("usage: %s\n", USAGE_DESCRIBE);
            return 0;
        } else if (!strcmp(a, "--band")) {
            if (!need_value(C, USAGE_DESCRIBE, argc, argv, i))
                return 2;
            p.band = argv[++i];
        } else if (!strcmp(a, "--limit")) {
            if (!need_value(C, USAGE_DESCRIBE, argc, argv, i))
                return 2;
            if (lq_parse_long(argv[++i], 0, 1 << 20, &n))
                return lq_cli_usage(C, USAGE_DESCRIBE, "--limit: '%s' is not an integer in [0, 1048576]", argv[i]);
            p.limit = (int)n;
        } else if (!strcmp(a, "--min-score")) {
            if (!need_value(C, USAGE_DESCRIBE, argc, argv, i))
                return 2;
            if (lq_parse_double(argv[++i], -1e30, 1e30, &d))
                return lq_cli_usage(C, USAGE_DESCRIBE, "--min-score: '%s' is not a number", argv[i]);
            p.min_score = d;
        } else if (!strcmp(a, "--verbose")) {
            p.verbose = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--threads")) {
            if (!need_value(C, USAGE_DESCRIBE, argc, argv, i) || lq_parse_long(argv[++i], 1, 256, &n))
                return lq_cli_usage(C, USAGE_DESCRIBE, "--threads needs an integer in [1, 256]");
            threads = (int)n;
        } else if (a[0] == '-' && a[1]) {
            return lq_cli_usage(C, USAGE_DESCRIBE, "unexpected argument '%s'", a);
        } else if (!dir) {
            dir = a;
        } else if (!p.entity) {
            p.entity = a;
        } else {
            return lq_cli_usage(C, USAGE_DESCRIBE, "unexpected argument '%s'", a);
        }
    }
    if (!dir || !p.entity)
        return lq_cli_usage(C, USAGE_DESCRIBE, "DIR and ENTITY are required");
    if (!*p.entity)
        return lq_cli_usage(C, USAGE_DESCRIBE, "empty entity");
    int bi;
    lq_err err = {0};
    if (lq_vindex_parse_band(p.band, &bi, &err))
        return lq_cli_usage(C, USAGE_DESCRIBE, "%s", err.msg);
    lq_vindex *v = NULL;
    if (open_vindex(C, dir, threads, &v))
        return 1;
    int rc = 0;
    if (json) {
        char *out = NULL;
        if (lq_vindex_describe_json(v, &p, &out, &err))
            rc = query_error(C, &err);
        else
            puts(out);
        free(out);
    } else {
        lq_describe_result r;
        if (lq_vindex_describe(v, &p, &r, &err)) {
            rc = query_error(C, &err);
        } else {
            printf("%s\n", p.entity);
            if (!r.n_edges)
                printf("  (no edges found)\n");
            for (size_t i = 0; i < r.n_edges; i++) {
                const lq_describe_edge *e = &r.edges[i];
                printf("  %-14s -> %-20s %7.1f  L%-3d", e->relation ? e->relation : "", e->target,
                       (double)e->gate_score, e->layer);
                if (p.verbose)
                    printf(" L%d-%d %dx", e->layer_min, e->layer_max, e->count);
                for (int k = 0; k < e->n_also; k++)
                    printf(k ? ", %s" : "  also: %s", e->also[k]);
                printf("\n");
            }
            printf("%.1fms\n", r.latency_ms);
            lq_describe_result_free(&r);
        }
    }
    lq_vindex_close(v);
    return rc;
}

/* ---- walk ---- */

static const char *USAGE_WALK = "larql walk DIR PROMPT [--top N] [--layers a-b|a,b,c] [--json] [--threads N]";

int lq_cli_walk(int argc, char **argv)
{
    const char *C = "walk", *dir = NULL;
    lq_walk_params p;
    lq_walk_params_init(&p);
    int json = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long n;
        if (is_help(a)) {
            printf("usage: %s\n", USAGE_WALK);
            return 0;
        } else if (!strcmp(a, "--top")) {
            if (!need_value(C, USAGE_WALK, argc, argv, i))
                return 2;
            if (lq_parse_long(argv[++i], 0, 1 << 20, &n))
                return lq_cli_usage(C, USAGE_WALK, "--top: '%s' is not an integer in [0, 1048576]", argv[i]);
            p.top = (int)n;
        } else if (!strcmp(a, "--layers")) {
            if (!need_value(C, USAGE_WALK, argc, argv, i))
                return 2;
            p.layers = argv[++i];
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--threads")) {
            if (!need_value(C, USAGE_WALK, argc, argv, i) || lq_parse_long(argv[++i], 1, 256, &n))
                return lq_cli_usage(C, USAGE_WALK, "--threads needs an integer in [1, 256]");
            threads = (int)n;
        } else if (a[0] == '-' && a[1]) {
            return lq_cli_usage(C, USAGE_WALK, "unexpected argument '%s'", a);
        } else if (!dir) {
            dir = a;
        } else if (!p.prompt) {
            p.prompt = a;
        } else {
            return lq_cli_usage(C, USAGE_WALK, "unexpected argument '%s'", a);
        }
    }
    if (!dir || !p.prompt)
        return lq_cli_usage(C, USAGE_WALK, "DIR and PROMPT are required");
    if (!*p.prompt)
        return lq_cli_usage(C, USAGE_WALK, "empty prompt");
    lq_vindex *v = NULL;
    if (open_vindex(C, dir, threads, &v))
        return 1;
    lq_err err = {0};
    int rc = 0;
    if (json) {
        char *out = NULL;
        if (lq_vindex_walk_json(v, &p, &out, &err))
            rc = query_error(C, &err);
        else
            puts(out);
        free(out);
    } else {
        lq_walk_result r;
        if (lq_vindex_walk(v, &p, &r, &err)) {
            rc = query_error(C, &err);
        } else {
            for (size_t i = 0; i < r.n_hits; i++)
                printf("L%-3d F%-6d gate=%+.1f  %s%s%s\n", r.hits[i].layer, r.hits[i].feature,
                       (double)r.hits[i].gate_score, r.hits[i].target, r.hits[i].relation ? "  " : "",
                       r.hits[i].relation ? r.hits[i].relation : "");
            printf("%.1fms\n", r.latency_ms);
            lq_walk_result_free(&r);
        }
    }
    lq_vindex_close(v);
    return rc;
}

/* ---- select ---- */

static const char *USAGE_SELECT =
    "larql select DIR [--entity E] [--relation R] [--layer L] [--limit N] [--min-confidence X]\n"
    "                 [--order-by confidence|c_score|layer] [--order asc|desc] [--json]";

int lq_cli_select(int argc, char **argv)
{
    const char *C = "select", *dir = NULL;
    lq_select_params p;
    lq_select_params_init(&p);
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long n;
        double d;
        if (is_help(a)) {
            printf("usage: %s\n", USAGE_SELECT);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--entity") || !strcmp(a, "--relation") || !strcmp(a, "--order-by") ||
                   !strcmp(a, "--order")) {
            if (!need_value(C, USAGE_SELECT, argc, argv, i))
                return 2;
            const char *val = argv[++i];
            if (!strcmp(a, "--entity"))
                p.entity = val;
            else if (!strcmp(a, "--relation"))
                p.relation = val;
            else if (!strcmp(a, "--order-by"))
                p.order_by = val;
            else if (strcmp(val, "asc") && strcmp(val, "desc"))
                return lq_cli_usage(C, USAGE_SELECT, "--order: '%s' (asc or desc)", val);
            else
                p.order = val;
        } else if (!strcmp(a, "--layer") || !strcmp(a, "--limit")) {
            if (!need_value(C, USAGE_SELECT, argc, argv, i))
                return 2;
            if (lq_parse_long(argv[++i], 0, 1 << 24, &n))
                return lq_cli_usage(C, USAGE_SELECT, "%s: '%s' is not a non-negative integer", a, argv[i]);
            if (!strcmp(a, "--layer"))
                p.layer = (int)n;
            else
                p.limit = (int)n;
        } else if (!strcmp(a, "--min-confidence")) {
            if (!need_value(C, USAGE_SELECT, argc, argv, i))
                return 2;
            if (lq_parse_double(argv[++i], -1e30, 1e30, &d))
                return lq_cli_usage(C, USAGE_SELECT, "--min-confidence: '%s' is not a number", argv[i]);
            p.min_confidence = d;
        } else if (a[0] == '-' || dir) {
            return lq_cli_usage(C, USAGE_SELECT, "unexpected argument '%s'", a);
        } else {
            dir = a;
        }
    }
    if (!dir)
        return lq_cli_usage(C, USAGE_SELECT, "DIR is required");
    lq_vindex *v = NULL;
    if (open_vindex(C, dir, 0, &v))
        return 1;
    lq_err err = {0};
    int rc = 0;
    if (json) {
        char *out = NULL;
        if (lq_vindex_select_json(v, &p, &out, &err))
            rc = query_error(C, &err);
        else
            puts(out);
        free(out);
    } else {
        lq_select_result r;
        if (lq_vindex_select(v, &p, &r, &err)) {
            rc = query_error(C, &err);
        } else {
            printf("%-6s %-8s %-20s %10s  %s\n", "Layer", "Feature", "Token", "c_score", "Relation");
            for (size_t i = 0; i < r.n_edges; i++)
                printf("L%-5d F%-7d %-20s %10.4f  %s\n", r.edges[i].layer, r.edges[i].feature, r.edges[i].target,
                       (double)r.edges[i].c_score, r.edges[i].relation ? r.edges[i].relation : "");
            printf("%zu of %zu rows, %.1fms\n", r.n_edges, r.total, r.latency_ms);
            lq_select_result_free(&r);
        }
    }
    lq_vindex_close(v);
    return rc;
}

/* ---- commands rendered from the JSON body ---- */

typedef int (*json_query_fn)(const lq_vindex *v, void *ctx, char **out, lq_err *err);

static int run_json_query(const char *C, const char *dir, int json, json_query_fn fn, void *ctx)
{
    lq_vindex *v = NULL;
    if (open_vindex(C, dir, 0, &v))
        return 1;
    lq_err err = {0};
    char *out = NULL;
    int rc = 0;
    if (fn(v, ctx, &out, &err))
        rc = query_error(C, &err);
    else if (json)
        puts(out);
    else
        print_pretty(out);
    free(out);
    lq_vindex_close(v);
    return rc;
}

static int q_relations(const lq_vindex *v, void *ctx, char **out, lq_err *err)
{
    (void)ctx;
    return lq_vindex_relations_json(v, out, err);
}

static int q_stats(const lq_vindex *v, void *ctx, char **out, lq_err *err)
{
    (void)ctx;
    return lq_vindex_stats_json(v, out, err);
}

/* DIR [--json] commands */
static int dir_only(const char *C, const char *usage, int argc, char **argv, json_query_fn fn)
{
    const char *dir = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            printf("usage: %s\n", usage);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-' || dir) {
            return lq_cli_usage(C, usage, "unexpected argument '%s'", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (!dir)
        return lq_cli_usage(C, usage, "DIR is required");
    return run_json_query(C, dir, json, fn, NULL);
}

int lq_cli_relations(int argc, char **argv)
{
    return dir_only("relations", "larql relations DIR [--json]", argc, argv, q_relations);
}

int lq_cli_stats(int argc, char **argv)
{
    return dir_only("stats", "larql stats DIR [--json]", argc, argv, q_stats);
}

static const char *USAGE_NEAREST = "larql nearest DIR ENTITY --layer L [--top N] [--json]";

static int q_nearest(const lq_vindex *v, void *ctx, char **out, lq_err *err)
{
    return lq_vindex_nearest_json(v, ctx, out, err);
}

int lq_cli_nearest(int argc, char **argv)
{
    const char *C = "nearest", *dir = NULL;
    lq_nearest_params p;
    lq_nearest_params_init(&p);
    int json = 0, have_layer = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long n;
        if (is_help(a)) {
            printf("usage: %s\n", USAGE_NEAREST);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--layer") || !strcmp(a, "--top")) {
            if (!need_value(C, USAGE_NEAREST, argc, argv, i))
                return 2;
            if (lq_parse_long(argv[++i], 0, 1 << 20, &n))
                return lq_cli_usage(C, USAGE_NEAREST, "%s: '%s' is not a non-negative integer", a, argv[i]);
            if (!strcmp(a, "--layer"))
                p.layer = (int)n, have_layer = 1;
            else
                p.top = (int)n;
        } else if (a[0] == '-' && a[1]) {
            return lq_cli_usage(C, USAGE_NEAREST, "unexpected argument '%s'", a);
        } else if (!dir) {
            dir = a;
        } else if (!p.entity) {
            p.entity = a;
        } else {
            return lq_cli_usage(C, USAGE_NEAREST, "unexpected argument '%s'", a);
        }
    }
    if (!dir || !p.entity || !have_layer)
        return lq_cli_usage(C, USAGE_NEAREST, "DIR, ENTITY and --layer are required");
    if (!*p.entity)
        return lq_cli_usage(C, USAGE_NEAREST, "empty entity");
    return run_json_query(C, dir, json, q_nearest, &p);
}

typedef struct sim_ctx {
    const char *a, *b;
} sim_ctx;

static int q_similar(const lq_vindex *v, void *ctx, char **out, lq_err *err)
{
    sim_ctx *s = ctx;
    return lq_vindex_similar_json(v, s->a, s->b, out, err);
}

int lq_cli_similar(int argc, char **argv)
{
    const char *C = "similar", *U = "larql similar DIR A B [--json]";
    const char *pos[3] = {0};
    int np = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            printf("usage: %s\n", U);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if ((argv[i][0] == '-' && argv[i][1]) || np == 3) {
            return lq_cli_usage(C, U, "unexpected argument '%s'", argv[i]);
        } else {
            pos[np++] = argv[i];
        }
    }
    if (np != 3)
        return lq_cli_usage(C, U, "DIR, A and B are required");
    if (!*pos[1] || !*pos[2])
        return lq_cli_usage(C, U, "empty entity");
    sim_ctx s = {pos[1], pos[2]};
    return run_json_query(C, pos[0], json, q_similar, &s);
}

typedef struct show_ctx {
    int features, layer, top;
    const char *filter;
    double min_score;
} show_ctx;

static int q_show(const lq_vindex *v, void *ctx, char **out, lq_err *err)
{
    show_ctx *s = ctx;
    if (!s->features)
        return lq_vindex_show_layers_json(v, out, err);
    return lq_vindex_show_features_json(v, s->layer, s->filter, s->min_score, s->top, out, err);
}

int lq_cli_show(int argc, char **argv)
{
    const char *C = "show",
               *U = "larql show DIR layers|features [--layer L] [--filter S] [--min-score X] [--top N] [--json]";
    const char *dir = NULL, *what = NULL;
    show_ctx s = {0, -1, 50, NULL, 0.0};
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long n;
        double d;
        if (is_help(a)) {
            printf("usage: %s\n", U);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--layer") || !strcmp(a, "--top")) {
            if (!need_value(C, U, argc, argv, i))
                return 2;
            if (lq_parse_long(argv[++i], 0, 1 << 24, &n))
                return lq_cli_usage(C, U, "%s: '%s' is not a non-negative integer", a, argv[i]);
            if (!strcmp(a, "--layer"))
                s.layer = (int)n;
            else
                s.top = (int)n;
        } else if (!strcmp(a, "--filter")) {
            if (!need_value(C, U, argc, argv, i))
                return 2;
            s.filter = argv[++i];
        } else if (!strcmp(a, "--min-score")) {
            if (!need_value(C, U, argc, argv, i))
                return 2;
            if (lq_parse_double(argv[++i], -1e30, 1e30, &d))
                return lq_cli_usage(C, U, "--min-score: '%s' is not a number", argv[i]);
            s.min_score = d;
        } else if (a[0] == '-') {
            return lq_cli_usage(C, U, "unexpected argument '%s'", a);
        } else if (!dir) {
            dir = a;
        } else if (!what) {
            what = a;
        } else {
            return lq_cli_usage(C, U, "unexpected argument '%s'", a);
        }
    }
    if (!dir || !what)
        return lq_cli_usage(C, U, "DIR and layers|features are required");
    if (!strcmp(what, "features"))
        s.features = 1;
    else if (strcmp(what, "layers"))
        return lq_cli_usage(C, U, "unknown listing '%s' (layers or features)", what);
    if (s.features && s.layer < 0)
        return lq_cli_usage(C, U, "show features needs --layer L");
    return run_json_query(C, dir, json, q_show, &s);
}

/* ---- infer ---- */

int lq_cli_infer(int argc, char **argv)
{
    const char *C = "infer",
               *U = "larql infer MODEL PROMPT [--top 5] [--mode walk|dense|compare] [--json] "
                    "[--threads N] [--act ms|float]\n"
                    "  MODEL: a vindex directory with model weights (--keep-quant --level inference, "
                    "or --dense-only), or a GGUF file (dense)";
    const char *dir = NULL, *prompt = NULL, *mode = "walk";
    int json = 0;
    long top = 5;
    lq_cli_model_args ma;
    lq_cli_model_args_init(&ma);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = lq_cli_model_opt(C, U, argc, argv, &i, &ma);
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (is_help(a)) {
            printf("usage: %s\n", U);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--top")) {
            if (!need_value(C, U, argc, argv, i) || lq_parse_long(argv[++i], 0, 1 << 20, &top))
                return lq_cli_usage(C, U, "--top needs a non-negative integer");
        } else if (!strcmp(a, "--mode")) {
            if (!need_value(C, U, argc, argv, i))
                return 2;
            mode = argv[++i];
            if (strcmp(mode, "walk") && strcmp(mode, "dense") && strcmp(mode, "compare"))
                return lq_cli_usage(C, U, "--mode: '%s' (walk, dense or compare)", mode);
        } else if (a[0] == '-' && a[1]) {
            return lq_cli_usage(C, U, "unexpected argument '%s'", a);
        } else if (!dir) {
            dir = a;
        } else if (!prompt) {
            prompt = a;
        } else {
            return lq_cli_usage(C, U, "unexpected argument '%s'", a);
        }
    }
    if (!dir || !prompt)
        return lq_cli_usage(C, U, "MODEL and PROMPT are required");
    if (!*prompt)
        return lq_cli_usage(C, U, "empty prompt");
    struct lq_model *m = NULL;
    if (lq_cli_open_model(C, dir, &ma, &m))
        return 1;
    lq_infer_params p;
    lq_infer_params_init(&p);
    p.prompt = prompt;
    p.top = (int)top;
    p.mode = mode;
    lq_err err = {0};
    int rc = 0;
    if (json) {
        char *body = NULL;
        if (lq_infer_json(m, &p, &body, &err))
            rc = query_error(C, &err);
        else
            puts(body);
        free(body);
    } else {
        lq_infer_result r;
        if (lq_infer(m, &p, &r, &err)) {
            rc = query_error(C, &err);
        } else {
            const char *hdr[2] = {"walk", r.bitnet ? "dense (bitnet)" : "dense"};
            const lq_prediction *ps[2] = {r.walk, r.dense};
            size_t ns[2] = {r.n_walk, r.n_dense};
            double ms[2] = {r.walk_ms, r.dense_ms};
            int has[2] = {r.has_walk, r.has_dense};
            if (r.coerced)
                printf("(dense-only model: %s runs as dense)\n", mode);
            for (int k = 0; k < 2; k++) {
                if (!has[k])
                    continue;
                printf("%s (%.1f ms):\n", hdr[k], ms[k]);
                for (size_t i = 0; i < ns[k]; i++)
                    printf("  %2zu. %-24s %.4f\n", i + 1, ps[k][i].token, ps[k][i].probability);
            }
            if (r.knn_fired)
                printf("knn override at layer %d (cosine %.3f): %s\n", r.knn_layer, (double)r.knn_cosine,
                       r.knn_token);
            lq_infer_result_free(&r);
        }
    }
    lq_model_close(m);
    return rc;
}
