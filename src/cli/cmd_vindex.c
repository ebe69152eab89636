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

/* ---- describe ---- */

static int emit_json(const char *cmd, int rc, char *out, const lq_err *err)
{
    int status = 0;
    if (rc)
        status = query_error(cmd, err);
    else
        puts(out);
    free(out);
    return status;
}

static const char *USAGE_DESCRIBE =
    "larql describe DIR ENTITY [--band syntax|knowledge|output|all] [--limit N] [--min-score X]\n"
    "                          [--verbose] [--json] [--threads N]";

int lq_cli_describe(int argc, char **argv)
{
    const char *C = "describe", *pos[2] = {0};
    lq_describe_params p;
    lq_describe_params_init(&p);
    int json = 0, threads = 0, np = 0;
    const lq_opt opts[] = {
        LQ_STR("--band", &p.band), LQ_INT("--limit", &p.limit, 0, 1 << 20),
        LQ_NUM("--min-score", &p.min_score, -1e30, 1e30), LQ_FLAG("--verbose", &p.verbose),
        LQ_FLAG("--json", &json), LQ_INT("--threads", &threads, 1, 256), LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE_DESCRIBE, argc, argv, 1, opts, NULL, pos, 2, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 2)
        return lq_cli_usage(C, USAGE_DESCRIBE, "DIR and ENTITY are required");
    p.entity = pos[1];
    if (!*p.entity)
        return lq_cli_usage(C, USAGE_DESCRIBE, "empty entity");
    int bi;
    lq_err err = {0};
    if (lq_vindex_parse_band(p.band, &bi, &err))
        return lq_cli_usage(C, USAGE_DESCRIBE, "%s", err.msg);
    lq_vindex *v = NULL;
    if (open_vindex(C, pos[0], threads, &v))
        return 1;
    int rc = 0;
    if (json) {
        char *out = NULL;
        int qrc = lq_vindex_describe_json(v, &p, &out, &err);
        rc = emit_json(C, qrc, out, &err);
    } else {
        lq_describe_result res;
        if (lq_vindex_describe(v, &p, &res, &err)) {
            rc = query_error(C, &err);
        } else {
            printf("%s\n", p.entity);
            if (!res.n_edges)
                printf(lq_vindex_get_info(v)->dense_only ? "  (no edges: a dense-only vindex has no gate vectors)\n"
                                                         : "  (no edges found)\n");
            for (size_t i = 0; i < res.n_edges; i++) {
                const lq_describe_edge *e = &res.edges[i];
                printf("  %-14s -> %-20s %7.1f  L%-3d", e->relation ? e->relation : "", e->target,
                       (double)e->gate_score, e->layer);
                if (p.verbose)
                    printf(" L%d-%d %dx", e->layer_min, e->layer_max, e->count);
                for (int k = 0; k < e->n_also; k++)
                    printf(k ? ", %s" : "  also: %s", e->also[k]);
                printf("\n");
            }
            printf("%.1fms\n", res.latency_ms);
            lq_describe_result_free(&res);
        }
    }
    lq_vindex_close(v);
    return rc;
}

/* ---- walk ---- */

static const char *USAGE_WALK = "larql walk DIR PROMPT [--top N] [--layers a-b|a,b,c] [--json] [--threads N]";

int lq_cli_walk(int argc, char **argv)
{
    const char *C = "walk", *pos[2] = {0};
    lq_walk_params p;
    lq_walk_params_init(&p);
    int json = 0, threads = 0, np = 0;
    const lq_opt opts[] = {
        LQ_INT("--top", &p.top, 0, 1 << 20), LQ_STR("--layers", &p.layers),
        LQ_FLAG("--json", &json), LQ_INT("--threads", &threads, 1, 256), LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE_WALK, argc, argv, 1, opts, NULL, pos, 2, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 2)
        return lq_cli_usage(C, USAGE_WALK, "DIR and PROMPT are required");
    p.prompt = pos[1];
    if (!*p.prompt)
        return lq_cli_usage(C, USAGE_WALK, "empty prompt");
    lq_vindex *v = NULL;
    if (open_vindex(C, pos[0], threads, &v))
        return 1;
    lq_err err = {0};
    int rc = 0;
    if (json) {
        char *out = NULL;
        int qrc = lq_vindex_walk_json(v, &p, &out, &err);
        rc = emit_json(C, qrc, out, &err);
    } else {
        lq_walk_result res;
        if (lq_vindex_walk(v, &p, &res, &err)) {
            rc = query_error(C, &err);
        } else {
            for (size_t i = 0; i < res.n_hits; i++)
                printf("L%-3d F%-6d gate=%+.1f  %s%s%s\n", res.hits[i].layer, res.hits[i].feature,
                       (double)res.hits[i].gate_score, res.hits[i].target, res.hits[i].relation ? "  " : "",
                       res.hits[i].relation ? res.hits[i].relation : "");
            printf("%.1fms\n", res.latency_ms);
            lq_walk_result_free(&res);
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
    const char *C = "select", *pos[1] = {0};
    lq_select_params p;
    lq_select_params_init(&p);
    int json = 0, np = 0;
    const lq_opt opts[] = {
        LQ_STR("--entity", &p.entity), LQ_STR("--relation", &p.relation),
        LQ_STR("--order-by", &p.order_by), LQ_CHOICE("--order", &p.order, "asc|desc"),
        LQ_INT("--layer", &p.layer, 0, 1 << 24), LQ_INT("--limit", &p.limit, 0, 1 << 24),
        LQ_NUM("--min-confidence", &p.min_confidence, -1e30, 1e30),
        LQ_FLAG("--json", &json), LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE_SELECT, argc, argv, 1, opts, NULL, pos, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 1)
        return lq_cli_usage(C, USAGE_SELECT, "DIR is required");
    lq_vindex *v = NULL;
    if (open_vindex(C, pos[0], 0, &v))
        return 1;
    lq_err err = {0};
    int rc = 0;
    if (json) {
        char *out = NULL;
        int qrc = lq_vindex_select_json(v, &p, &out, &err);
        rc = emit_json(C, qrc, out, &err);
    } else {
        lq_select_result res;
        if (lq_vindex_select(v, &p, &res, &err)) {
            rc = query_error(C, &err);
        } else {
            printf("%-6s %-8s %-20s %10s  %s\n", "Layer", "Feature", "Token", "c_score", "Relation");
            for (size_t i = 0; i < res.n_edges; i++)
                printf("L%-5d F%-7d %-20s %10.4f  %s\n", res.edges[i].layer, res.edges[i].feature,
                       res.edges[i].target, (double)res.edges[i].c_score,
                       res.edges[i].relation ? res.edges[i].relation : "");
            printf("%zu of %zu rows, %.1fms\n", res.n_edges, res.total, res.latency_ms);
            lq_select_result_free(&res);
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
    const char *pos[1] = {0};
    int json = 0, np = 0;
    const lq_opt opts[] = {LQ_FLAG("--json", &json), LQ_OPT_END};
    int r = lq_cli_parse(C, usage, argc, argv, 1, opts, NULL, pos, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 1)
        return lq_cli_usage(C, usage, "DIR is required");
    return run_json_query(C, pos[0], json, fn, NULL);
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
    const char *C = "nearest", *pos[2] = {0};
    lq_nearest_params p;
    lq_nearest_params_init(&p);
    int json = 0, have_layer = 0, np = 0;
    const lq_opt opts[] = {
        LQ_INT_SEEN("--layer", &p.layer, 0, 1 << 20, &have_layer),
        LQ_INT("--top", &p.top, 0, 1 << 20), LQ_FLAG("--json", &json), LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE_NEAREST, argc, argv, 1, opts, NULL, pos, 2, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 2 || !have_layer)
        return lq_cli_usage(C, USAGE_NEAREST, "DIR, ENTITY and --layer are required");
    p.entity = pos[1];
    if (!*p.entity)
        return lq_cli_usage(C, USAGE_NEAREST, "empty entity");
    return run_json_query(C, pos[0], json, q_nearest, &p);
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
    const lq_opt opts[] = {LQ_FLAG("--json", &json), LQ_OPT_END};
    int r = lq_cli_parse(C, U, argc, argv, 1, opts, NULL, pos, 3, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
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
    const char *pos[2] = {0};
    show_ctx s = {0, -1, 50, NULL, 0.0};
    int json = 0, np = 0;
    const lq_opt opts[] = {
        LQ_INT("--layer", &s.layer, 0, 1 << 24), LQ_INT("--top", &s.top, 0, 1 << 24),
        LQ_STR("--filter", &s.filter), LQ_NUM("--min-score", &s.min_score, -1e30, 1e30),
        LQ_FLAG("--json", &json), LQ_OPT_END};
    int r = lq_cli_parse(C, U, argc, argv, 1, opts, NULL, pos, 2, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 2)
        return lq_cli_usage(C, U, "DIR and layers|features are required");
    if (!strcmp(pos[1], "features"))
        s.features = 1;
    else if (strcmp(pos[1], "layers"))
        return lq_cli_usage(C, U, "unknown listing '%s' (layers or features)", pos[1]);
    if (s.features && s.layer < 0)
        return lq_cli_usage(C, U, "show features needs --layer L");
    return run_json_query(C, pos[0], json, q_show, &s);
}

/* ---- infer ---- */

int lq_cli_infer(int argc, char **argv)
{
    const char *C = "infer",
               *U = "larql infer MODEL PROMPT [--top 5] [--mode walk|dense|compare] [--json] "
                    "[--threads N] [--act ms|float]\n"
                    "       [--knn FILE] [--knn-insert ENTITY:RELATION:TARGET[@LAYER]] [--knn-save FILE]\n"
                    "  MODEL: a vindex directory with model weights (--keep-quant --level inference, "
                    "or --dense-only), or a GGUF file (dense; walk with the edits a compiled one carries,\n"
                    "  unless --no-carried-edits)\n"
                    "  --knn: a KNN store (knn_store.bin, LARQL's layout) for walk mode; --knn-insert adds an\n"
                    "  INSERT ... MODE KNN entry (before the query); --knn-save writes the store afterwards";
    const char *pos[2] = {0}, *mode = "walk", *knn = NULL, *ins = NULL, *save = NULL;
    int json = 0, top = 5, np = 0;
    lq_cli_model_args ma;
    lq_cli_model_args_init(&ma);
    const lq_opt opts[] = {
        LQ_FLAG("--json", &json), LQ_INT("--top", &top, 0, 1 << 20),
        LQ_CHOICE("--mode", &mode, "walk|dense|compare"), LQ_STR("--knn", &knn),
        LQ_STR("--knn-insert", &ins), LQ_STR("--knn-save", &save), LQ_OPT_END};
    int r = lq_cli_parse(C, U, argc, argv, 1, opts, &ma, pos, 2, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 2)
        return lq_cli_usage(C, U, "MODEL and PROMPT are required");
    if (!*pos[1])
        return lq_cli_usage(C, U, "empty prompt");
    /* ENTITY:RELATION:TARGET[@LAYER] */
    char *ib = ins ? strdup(ins) : NULL;
    lq_knn_insert_params kip;
    lq_knn_insert_params_init(&kip);
    if (ins) {
        char *a = ib ? strchr(ib, ':') : NULL, *b = a ? strchr(a + 1, ':') : NULL;
        char *at = b ? strrchr(b + 1, '@') : NULL;
        if (!a || !b) {
            free(ib);
            return lq_cli_usage(C, U, "--knn-insert wants ENTITY:RELATION:TARGET[@LAYER]");
        }
        *a = *b = 0;
        if (at) {
            char *end;
            long l = strtol(at + 1, &end, 10);
            if (*end || l < 0 || l > 1 << 20) {
                free(ib);
                return lq_cli_usage(C, U, "--knn-insert: LAYER must be a non-negative integer");
            }
            *at = 0;
            kip.layer = (int)l;
        }
        kip.entity = ib;
        kip.relation = a + 1;
        kip.target = b + 1;
    }
    struct lq_model *m = NULL;
    if (!ma.lm_head_mode) /* every logit exact: no bounded copy to build */
        ma.lm_head_mode = LQ_LM_HEAD_EXACT;
    if (lq_cli_open_model_edited(C, pos[0], &ma, &m)) {
        free(ib);
        return 1;
    }
    if (ma.edits && (knn || ins)) {
        fprintf(stderr, "larql %s: %s carries edits (larql.patches); --knn / --knn-insert would replace them: "
                        "add --no-carried-edits to run the base model with a store\n", C, pos[0]);
        lq_cli_close_model(m, &ma);
        free(ib);
        return 1;
    }
    lq_infer_params p;
    lq_infer_params_init(&p);
    p.prompt = pos[1];
    p.top = top;
    p.mode = mode;
    lq_err err = {0};
    int rc = 0;
    lq_knn_store *ks = NULL;
    int hidden = lq_model_get_info(m)->n_embd;
    if (knn ? lq_knn_store_load(knn, hidden, &ks, &err)
            : (ins || save) ? lq_knn_store_create(hidden, &ks, &err) : 0) {
        fprintf(stderr, "larql %s: %s\n", C, err.msg);
        lq_cli_close_model(m, &ma);
        free(ib);
        return 1;
    }
    if (ins && lq_knn_insert(m, ks, &kip, &err)) {
        fprintf(stderr, "larql %s: --knn-insert: %s\n", C, err.msg);
        lq_knn_store_free(ks);
        lq_cli_close_model(m, &ma);
        free(ib);
        return 1;
    }
    p.knn = ks;
    p.edits = ma.edits; /* a compiled GGUF's carried edits (NULL: none) */
    if (json) {
        char *body = NULL;
        int qrc = lq_infer_json(m, &p, &body, &err);
        rc = emit_json(C, qrc, body, &err);
    } else {
        lq_infer_result res;
        if (lq_infer(m, &p, &res, &err)) {
            rc = query_error(C, &err);
        } else {
            const char *hdr[2] = {"walk", res.bitnet ? "dense (bitnet)" : "dense"};
            const lq_prediction *ps[2] = {res.walk, res.dense};
            size_t ns[2] = {res.n_walk, res.n_dense};
            double ms[2] = {res.walk_ms, res.dense_ms};
            int has[2] = {res.has_walk, res.has_dense};
            if (res.coerced)
                printf("(dense-only model: %s runs as dense)\n", mode);
            for (int k = 0; k < 2; k++) {
                if (!has[k])
                    continue;
                printf("%s (%.1f ms):\n", hdr[k], ms[k]);
                for (size_t i = 0; i < ns[k]; i++)
                    printf("  %2zu. %-24s %.4f\n", i + 1, ps[k][i].token, ps[k][i].probability);
            }
            if (res.knn_fired)
                printf("knn override at layer %d (cosine %.3f): %s\n", res.knn_layer, (double)res.knn_cosine,
                       res.knn_token);
            lq_infer_result_free(&res);
        }
    }
    if (!rc && save && lq_knn_store_save(ks, save, &err)) {
        fprintf(stderr, "larql %s: --knn-save: %s\n", C, err.msg);
        rc = 1;
    }
    lq_knn_store_free(ks);
    lq_cli_close_model(m, &ma);
    free(ib);
    return rc;
}
