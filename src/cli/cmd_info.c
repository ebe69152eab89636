/* larql info: architecture, shapes, tensor types, tokenizer and memory of a model. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "larql/chat.h"
#include "larql/gguf.h"
#include "larql/model.h"

static const char *USAGE = "larql info MODEL [--json]";

int lq_cli_info(int argc, char **argv)
{
    const char *C = "info", *path = NULL;
    int json = 0, np = 0;
    lq_cli_model_args ma;
    lq_cli_model_args_init(&ma);
    const lq_opt opts[] = {LQ_FLAG("--json", &json), LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE, argc, argv, 1, opts, &ma, &path, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (!path)
        return lq_cli_usage(C, USAGE, "MODEL is required");
    lq_model *m = NULL;
    if (!ma.lm_head_mode) /* every logit exact: no bounded copy to build */
        ma.lm_head_mode = LQ_LM_HEAD_EXACT;
    if (lq_cli_open_model(C, path, &ma, &m))
        return 1;
    lq_model_weights_copied(m, 1); /* describe the weights as they end up */
    const lq_model_info *in = lq_model_get_info(m);
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    const lq_gguf *g = lq_model_gguf(m);
    /* tensor type histogram */
    int counts[64] = {0};
    int64_t nt = g ? lq_gguf_n_tensors(g) : 0;
    for (int64_t i = 0; i < nt; i++) {
        int t = lq_gguf_tensor_at(g, i)->type;
        if (t >= 0 && t < 64)
            counts[t]++;
    }
    const char *tk = tok ? (lq_tokenizer_kind(tok) == LQ_TOK_SPM ? "spm" : "bpe") : "none";
    double kv_per_tok = 2.0 * in->n_layer * in->n_head_kv * in->head_dim * (in->kv_type == LQ_KV_Q8 ? 1.125 : in->kv_type == LQ_KV_F16 ? 2.0 : 4.0);
    if (json) {
        printf("{\"architecture\": \"%s\", \"name\": ", in->arch_name);
        lq_cli_json_str(stdout, in->name, strlen(in->name));
        printf(", \"family\": ");
        lq_cli_json_str(stdout, in->family, strlen(in->family));
        printf(", \"i2s_layout\": ");
        lq_cli_json_str(stdout, in->i2s_layout, strlen(in->i2s_layout));
        printf(", \"n_layer\": %d, \"n_embd\": %d, \"n_ff\": %d, \"n_head\": %d, \"n_head_kv\": %d, "
               "\"head_dim\": %d, \"n_vocab\": %d, \"n_ctx_train\": %d, \"rope_theta\": %g, "
               "\"norm_eps\": %g, \"tied_embeddings\": %s, \"n_params\": %llu, \"weight_bytes\": %llu, "
               "\"bytes_per_token\": %llu, \"kv_bytes_per_token\": %.0f, \"tokenizer\": \"%s\", "
               "\"kernels\": \"%s\", \"threads\": %d, \"weights_copied\": %s, \"tensor_types\": {",
               in->n_layer, in->n_embd, in->n_ff, in->n_head, in->n_head_kv, in->head_dim, in->n_vocab,
               in->n_ctx_train, in->rope_theta, in->norm_eps, in->tied_embeddings ? "true" : "false",
               (unsigned long long)in->n_params, (unsigned long long)in->weight_bytes,
               (unsigned long long)in->bytes_per_token, kv_per_tok, tk, in->kernels, in->n_threads,
               in->weights_copied ? "true" : "false");
        int first = 1;
        for (int t = 0; t < 64; t++)
            if (counts[t]) {
                printf("%s\"%s\": %d", first ? "" : ", ", lq_ggml_type_name(t), counts[t]);
                first = 0;
            }
        printf("}}\n");
    } else {
        printf("file:            %s\n", path);
        printf("architecture:    %s\n", in->arch_name);
        printf("family:          %s\n", in->family);
        if (in->i2s_layout[0])
            printf("I2_S layout:     %s\n", in->i2s_layout);
        printf("name:            %s\n", in->name);
        printf("layers:          %d\n", in->n_layer);
        printf("embedding:       %d\n", in->n_embd);
        printf("feed-forward:    %d\n", in->n_ff);
        printf("heads:           %d (kv %d, head_dim %d)\n", in->n_head, in->n_head_kv, in->head_dim);
        printf("vocab:           %d (%s tokenizer", in->n_vocab, tk);
        if (tok)
            printf(", bos %d, eos %d, eot %d", lq_tokenizer_bos(tok), lq_tokenizer_eos(tok), lq_tokenizer_eot(tok));
        printf(")\n");
        {
            /* which chat format chat/run --chat/serve use: the file's template or a built-in */
            lq_chat_format *f = NULL;
            lq_err ferr = {0};
            if (lq_chat_format_open(m, NULL, &f, &ferr) == LQ_OK)
                printf("chat template:   %s (%s)\n", lq_chat_format_name(f), lq_chat_format_source(f));
            else
                printf("chat template:   unusable: %s\n", ferr.msg);
            lq_chat_format_free(f);
        }
        printf("context (train): %d\n", in->n_ctx_train);
        printf("rope theta:      %g\n", in->rope_theta);
        printf("rms eps:         %g\n", in->norm_eps);
        printf("lm_head:         %s (%s)\n", in->tied_embeddings ? "tied to token_embd" : "output.weight",
               lq_ggml_type_name(in->lm_head_type));
        printf("tensor types:   ");
        for (int t = 0; t < 64; t++)
            if (counts[t])
                printf(" %s x%d", lq_ggml_type_name(t), counts[t]);
        printf("\n");
        printf("parameters:      %.1f M\n", (double)in->n_params / 1e6);
        printf("weights:         %.1f MiB (%s)\n", (double)in->weight_bytes / 1048576.0,
               in->weights_copied ? "private copy in 2 MB pages" : "read-only mmap, shared");
        printf("read per token:  %.1f MiB\n", (double)in->bytes_per_token / 1048576.0);
        printf("KV cache:        %.1f KiB per token of context (%s)\n", kv_per_tok / 1024.0,
               lq_kv_type_name(in->kv_type));
        printf("kernels:         %s, %d thread(s)\n", in->kernels, in->n_threads);
        printf("load time:       %.1f ms\n", in->load_ms);
    }
    lq_model_close(m);
    return 0;
}
