/* larql logits: next-token logits after every prefix of the input, one JSON line each:
 *   {"pos": i, "top": [[id, logit], ...], "lse": log-sum-exp over the vocabulary}
 * Ids given with --ids are used verbatim (no BOS added); --prompt text gets BOS as the
 * model's tokenizer metadata says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "larql/model.h"
#include "larql/sampler.h"

static const char *USAGE =
    "larql logits MODEL (--ids 1,2,3 | --prompt TEXT) [--top K] [--act ms|float] [--threads N]\n"
    "       [--kernels scalar|avx2|avx512] [--lm-head f16|q8] [--kv f32|f16|q8]\n"
    "       [--weights auto|copy|mmap] [--no-carried-edits]";

int lq_cli_logits(int argc, char **argv)
{
    const char *C = "logits", *model_path = NULL, *ids_arg = NULL, *prompt = NULL;
    int top = 10, np = 0;
    lq_cli_model_args ma;
    lq_cli_model_args_init(&ma);
    const lq_opt opts[] = {LQ_STR("--ids", &ids_arg), LQ_STR("--prompt", &prompt),
                           LQ_INT("--top", &top, 1, 1000000), LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE, argc, argv, 1, opts, &ma, &model_path, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (!model_path)
        return lq_cli_usage(C, USAGE, "MODEL is required");
    if (!ids_arg == !prompt)
        return lq_cli_usage(C, USAGE, "give exactly one of --ids or --prompt");

    int32_t *ids = NULL;
    size_t n = 0;
    if (ids_arg && lq_parse_ids(ids_arg, &ids, &n))
        return lq_cli_usage(C, USAGE, "--ids: '%s' is not a comma-separated list of token ids", ids_arg);

    lq_model *m = NULL;
    lq_session *s = NULL;
    float *all = NULL;
    int32_t *top_ids = NULL;
    float *top_vals = NULL;
    int rc = 1;
    lq_err err = {0};
    if (!ma.lm_head_mode) /* every logit exact: no bounded copy to build */
        ma.lm_head_mode = LQ_LM_HEAD_EXACT;
    if (lq_cli_open_model_edited(C, model_path, &ma, &m))
        goto out;
    const lq_model_info *info = lq_model_get_info(m);
    if (prompt) {
        const lq_tokenizer *tok = lq_model_tokenizer(m);
        unsigned fl = lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0;
        if (lq_tokenizer_encode(tok, prompt, strlen(prompt), fl, &ids, &n, &err)) {
            lq_cli_error(C, "%s", err.msg);
            goto out;
        }
        if (n == 0) {
            lq_cli_error(C, "empty prompt: nothing to evaluate");
            goto out;
        }
    }
    int V = info->n_vocab;
    if (top > V)
        top = V;
    if (lq_session_create(m, ma.ctx ? ma.ctx : (int)n, &s, &err)) {
        lq_cli_error(C, "%s", err.msg);
        goto out;
    }
    lq_session_set_hook(s, ma.hook); /* a compiled GGUF's carried edits (NULL: none) */
    all = malloc(n * (size_t)V * sizeof *all);
    top_ids = malloc((size_t)top * sizeof *top_ids);
    top_vals = malloc((size_t)top * sizeof *top_vals);
    if (!all || !top_ids || !top_vals) {
        lq_cli_error(C, "out of memory for %zu x %d logits", n, V);
        goto out;
    }
    if (lq_session_eval(s, ids, n, NULL, all, &err)) {
        lq_cli_error(C, "%s", err.msg);
        goto out;
    }
    for (size_t p = 0; p < n; p++) {
        const float *lg = all + p * (size_t)V;
        int k = lq_top_k(lg, V, (int)top, top_ids, top_vals);
        printf("{\"pos\": %zu, \"top\": [", p);
        for (int j = 0; j < k; j++)
            printf("%s[%d, %.6f]", j ? ", " : "", top_ids[j], top_vals[j]);
        printf("], \"lse\": %.6f}\n", lq_logsumexp(lg, V));
    }
    rc = 0;
out:
    free(all);
    free(top_ids);
    free(top_vals);
    free(ids);
    lq_session_free(s);
    lq_cli_close_model(m, &ma);
    return rc;
}
