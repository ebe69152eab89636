/* larql eval-edits DIR --suite FILE: how well edits are read back (lq_edit_eval), as a table
 * or the JSON the library returns. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "larql/vindex.h"

static double num(json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

static void print_table(json_t *doc)
{
    json_t *cs = json_object_get(doc, "cases"), *c, *t = json_object_get(doc, "totals");
    size_t i;
    printf("%-16s %-10s %-18s %5s %5s %5s %5s %5s %8s\n", "entity", "relation", "target", "eff", "para", "chat", "gen",
           "neigh", "unrel");
    json_array_foreach(cs, i, c) {
        printf("%-16.16s %-10.10s %-18.18s %5.2f %5.2f %5.2f %5.2f %5.2f %8.2g%s%s\n",
               json_string_value(json_object_get(c, "entity")), json_string_value(json_object_get(c, "relation")),
               json_string_value(json_object_get(c, "target")), num(c, "efficacy"), num(c, "paraphrase"),
               num(c, "chat"), num(c, "generation"), num(c, "neighbourhood"), num(c, "unrelated_max_dlogit"),
               json_is_string(json_object_get(c, "error")) ? "  refused: " : "",
               json_is_string(json_object_get(c, "error")) ? json_string_value(json_object_get(c, "error")) : "");
    }
    printf("\nmode %s, %s: %d cases, %d refused, %d with tokens written on the logits\n",
           json_string_value(json_object_get(doc, "mode")),
           json_integer_value(json_object_get(doc, "together")) ? "applied together" : "one at a time",
           (int)json_integer_value(json_object_get(t, "cases")), (int)json_integer_value(json_object_get(t, "refused")),
           (int)json_integer_value(json_object_get(t, "logit_written")));
    printf("efficacy %.1f%%, paraphrase %.1f%%, chat %.1f%%, generation %.1f%%, neighbourhood %.1f%%\n",
           100 * num(t, "efficacy"), 100 * num(t, "paraphrase"), 100 * num(t, "chat"), 100 * num(t, "generation"),
           100 * num(t, "neighbourhood"));
    printf("neighbourhood: %d prompts about entities no edit of the run touches; without the edits %.1f%%; their "
           "max |delta logit| %.3g\n",
           (int)json_integer_value(json_object_get(t, "neighbourhood_prompts")), 100 * num(t, "neighbourhood_unedited"),
           num(t, "neighbourhood_max_dlogit"));
    printf("unrelated prompts: max |delta logit| %.3g (%s)\n", num(t, "unrelated_max_dlogit"),
           json_is_true(json_object_get(t, "unrelated_bit_identical")) ? "bit-identical" : "changed");
    json_t *f = json_object_get(t, "fluency_ratio"), *ms = json_object_get(t, "insert_ms_median");
    if (json_is_number(f))
        printf("fluency: perplexity ratio %.4f\n", json_number_value(f));
    if (json_is_number(ms))
        printf("insert: median %.1f ms\n", json_number_value(ms));
}

int lq_cli_eval_edits(int argc, char **argv)
{
    const char *C = "eval-edits",
               *U = "larql eval-edits DIR --suite FILE [--json] [--together N] [--mode subject|knn|compose]\n"
                    "       [--cases N] [--fluency TEXT_FILE] [--fluency-ctx N] [--threads N]\n"
                    "  DIR: a vindex with model weights (--keep-quant --level inference). Each edit of the suite\n"
                    "  (JSONL) goes into a scratch overlay, is scored and dropped (--together N: the first N at once)";
    const char *pos[1] = {0}, *suite = NULL, *mode = NULL, *flu = NULL;
    int json = 0, together = 0, cases = 0, fctx = 128, np = 0;
    lq_cli_model_args ma;
    lq_cli_model_args_init(&ma);
    const lq_opt opts[] = {LQ_STR("--suite", &suite),       LQ_FLAG("--json", &json),
                           LQ_INT("--together", &together, 0, 100000),
                           LQ_CHOICE("--mode", &mode, "subject|knn|compose"),
                           LQ_INT("--cases", &cases, 0, 100000), LQ_STR("--fluency", &flu),
                           LQ_INT("--fluency-ctx", &fctx, 4, 1 << 20), LQ_OPT_END};
    int r = lq_cli_parse(C, U, argc, argv, 1, opts, &ma, pos, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 1 || !suite)
        return lq_cli_usage(C, U, "DIR and --suite are required");
    char *text = NULL, *ftext = NULL;
    size_t len = 0, flen = 0;
    if (lq_read_file(suite, &text, &len))
        return lq_cli_error(C, "cannot read the suite '%s'", suite);
    if (flu && lq_read_file(flu, &ftext, &flen)) {
        free(text);
        return lq_cli_error(C, "cannot read the fluency text '%s'", flu);
    }
    struct lq_model *m = NULL;
    if (lq_cli_open_model(C, pos[0], &ma, &m)) {
        free(text), free(ftext);
        return 1;
    }
    const lq_vindex *v = lq_vindex_of_model(m);
    if (!v) {
        lq_model_close(m);
        free(text), free(ftext);
        return lq_cli_error(C, "'%s' is not a vindex: build one with `larql convert gguf-to-vindex IN.gguf --output "
                               "DIR --keep-quant --level inference`",
                            pos[0]);
    }
    lq_edit_eval_opts o;
    lq_edit_eval_opts_init(&o);
    o.together = together;
    o.max_cases = cases;
    o.mode = !mode ? -1 : !strcmp(mode, "knn") ? LQ_INSERT_KNN : !strcmp(mode, "compose") ? LQ_INSERT_COMPOSE
                                                                                         : LQ_INSERT_SUBJECT;
    o.fluency_text = ftext;
    o.fluency_len = flen;
    o.fluency_ctx = fctx;
    char *out = NULL;
    lq_err err = {0};
    int rc = lq_edit_eval(v, m, text, len, &o, &out, &err);
    if (rc) {
        lq_cli_error(C, "%s", err.msg);
    } else if (json) {
        printf("%s\n", out);
    } else {
        json_t *doc = json_loads(out, 0, NULL);
        print_table(doc);
        json_decref(doc);
    }
    free(out), free(text), free(ftext);
    lq_model_close(m);
    return rc ? 1 : 0;
}
