/* larql perplexity: perplexity and bits per byte of a text under a model (larql/perplexity.h).
 *   perplexity P, bits per byte B, tokens N          (or --json)
 * The model's options (--act, --kv, --lm-head, --kernels) are the mode measured; --ctx is the
 * window (default: the model's training context, for a vindex the one its index.json records). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "larql/model.h"
#include "larql/perplexity.h"

static const char *USAGE =
    "larql perplexity MODEL --file TEXT [--ctx N] [--json] [--act ms|float] [--threads N]\n"
    "       [--kernels scalar|avx2|avx512] [--lm-head f16|q8] [--kv f32|f16|q8] [--weights auto|copy|mmap] [--no-carried-edits]\n"
    "  TEXT: a UTF-8 file ('-' = stdin), scored in windows of the context as llama.cpp does";

int lq_cli_perplexity(int argc, char **argv)
{
    const char *C = "perplexity", *model_path = NULL, *file = NULL;
    int json = 0, np = 0;
    lq_cli_model_args ma;
    lq_cli_model_args_init(&ma);
    const lq_opt opts[] = {LQ_STR("--file", &file), LQ_FLAG("--json", &json), LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE, argc, argv, 1, opts, &ma, &model_path, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (!model_path)
        return lq_cli_usage(C, USAGE, "MODEL is required");
    if (!file)
        return lq_cli_usage(C, USAGE, "--file TEXT is required");
    char *text = NULL;
    size_t len = 0;
    if (lq_read_file(file, &text, &len))
        return lq_cli_error(C, "cannot read '%s'", file);
    lq_model *m = NULL;
    int rc = 1;
    lq_err err = {0};
    lq_perplexity_result res;
    if (!ma.lm_head_mode) /* every logit exact: no bounded copy to build */
        ma.lm_head_mode = LQ_LM_HEAD_EXACT;
    if (lq_cli_open_model_edited(C, model_path, &ma, &m))
        goto out;
    if (lq_perplexity_hook(m, text, len, ma.ctx, ma.hook, &res, &err)) {
        lq_cli_error(C, "%s", err.msg);
        goto out;
    }
    if (json)
        printf("{\"perplexity\": %.6f, \"bits_per_byte\": %.6f, \"tokens\": %llu, \"text_tokens\": %llu, "
               "\"text_bytes\": %llu, \"ctx\": %d, \"windows\": %d}\n",
               res.perplexity, res.bits_per_byte, (unsigned long long)res.tokens,
               (unsigned long long)res.text_tokens, (unsigned long long)res.text_bytes, res.n_ctx, res.windows);
    else
        printf("perplexity %.4f, bits per byte %.4f, tokens %llu\n", res.perplexity, res.bits_per_byte,
               (unsigned long long)res.tokens);
    rc = 0;
out:
    lq_cli_close_model(m, &ma);
    free(text);
    return rc;
}
