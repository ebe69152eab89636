/* larql diag DIR [--probe [--probe-tokens N]]: LARQL's engine diagnostic for our engine:
 * the vindex's config, which inference files are there, whether the model loads from it and
 * which paths the forward pass will take (block family, kernels, BitLinear activations,
 * lm_head), and with --probe a short greedy decode's timings. Exit 2 when the model does not
 * load (LARQL's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "larql/generate.h"
#include "larql/model.h"
#include "larql/tokenizer.h"
#include "larql/vindex.h"

static const char *USAGE = "larql diag DIR [--probe] [--probe-tokens N] [model options]\n"
                           "  What the engine will do with the vindex DIR (a directory or a registry name):\n"
                           "  its config, the inference files present, the loader's result and the paths\n"
                           "  the forward pass takes; --probe decodes N greedy tokens (default 5) and\n"
                           "  prints the timings.";

static void file_row(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    struct stat st;
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    if (p && stat(p, &st) == 0) {
        double mb = (double)st.st_size / (1024.0 * 1024.0);
        printf("  \xe2\x9c\x93 %-38s %9.1f MB\n", name, mb);
    } else {
        printf("  - %-38s %12s\n", name, "absent");
    }
    free(p);
}

static int probe(lq_model *m, int n_tok)
{
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    lq_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    if (!tok || lq_tokenizer_encode(tok, "The", 3, 0, &ids, &n, &err) || !n) {
        printf("  probe failed: %s\n", tok ? err.msg : "the model has no tokenizer");
        free(ids);
        return 0;
    }
    lq_session *s = NULL;
    if (lq_session_create(m, 0, &s, &err)) {
        printf("  probe failed: %s\n", err.msg);
        free(ids);
        return 0;
    }
    lq_generate_params gp;
    lq_generate_defaults(&gp);
    gp.max_tokens = n_tok;
    gp.sampling.temperature = 0;
    gp.ignore_eos = 1;
    lq_generate_result gr;
    memset(&gr, 0, sizeof gr);
    if (lq_generate(s, ids, n, &gp, NULL, NULL, &gr, &err))
        printf("  probe failed: %s\n", err.msg);
    else
        printf("  prefill %d tok in %.2f ms, decode %d tok in %.2f ms (%.1f tok/s)\n", gr.n_prompt, gr.prefill_ms,
               gr.n_generated, gr.decode_ms, gr.decode_ms > 0 ? (gr.n_generated - 1) * 1000.0 / gr.decode_ms : 0.0);
    lq_session_free(s);
    free(ids);
    return 0;
}

int lq_cli_diag(int argc, char **argv)
{
    const char *C = "diag", *pos[1] = {0};
    int do_probe = 0, n_probe = 5, np = 0;
    lq_cli_model_args ma;
    lq_cli_model_args_init(&ma);
    const lq_opt opts[] = {LQ_FLAG("--probe", &do_probe), LQ_INT("--probe-tokens", &n_probe, 1, 100), LQ_OPT_END};
    int r = lq_cli_parse(C, USAGE, argc, argv, 1, opts, &ma, pos, 1, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np < 1)
        return lq_cli_usage(C, USAGE, "DIR is required");
    lq_err err = {0};
    char *dir = NULL;
    if (lq_registry_resolve(pos[0], &dir, &err))
        return lq_cli_error(C, "%s", err.msg);
    lq_vindex *v = NULL;
    lq_vindex_open_opts vo = {0};
    if (lq_vindex_open(dir, &vo, &v, &err)) {
        free(dir);
        return lq_cli_error(C, "%s", err.msg);
    }
    const lq_vindex_info *vi = lq_vindex_get_info(v);
    printf("Engine diagnostic \xe2\x80\x94 %s\n", dir);
    printf("======================================================================\n");
    printf("\nConfig (index.json):\n");
    printf("  family            : %s\n", vi->family ? vi->family : "");
    printf("  num_layers        : %d\n", vi->num_layers);
    printf("  hidden_size       : %d\n", vi->hidden_size);
    printf("  vocab_size        : %d\n", vi->vocab_size);
    printf("  intermediate_size : %d\n", vi->intermediate_size);
    printf("  extract_level     : %s\n", vi->extract_level_str ? vi->extract_level_str : "");
    printf("  has_model_weights : %s\n", vi->has_model_weights ? "true" : "false");
    lq_vindex_close(v);
    printf("\nFiles (inference-relevant):\n");
    static const char *const FILES[] = {"index.json",        "tokenizer.json",   "embeddings.bin",    "norms.bin",
                                        "attn_weights.bin",  "up_weights.bin",   "down_weights.bin",  "gate_vectors.bin",
                                        "lm_head.bin",       "weight_manifest.json", "bitnet_layout.json",
                                        "bitnet/scales.f32", "down_meta.bin",    "knn_store.bin"};
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++)
        file_row(dir, FILES[i]);
    printf("\nLoading the model\xe2\x80\xa6\n");
    lq_model *m = NULL;
    lq_model_opts mo;
    lq_cli_model_opts(&ma, &mo);
    if (lq_model_open(dir, &mo, &m, &err)) {
        printf("  \xe2\x9c\x97 the model does not load: %s\n", err.msg);
        printf("\nNo further diagnostics \xe2\x80\x94 this vindex won't run inference.\n");
        free(dir);
        return 2;
    }
    const lq_model_info *mi = lq_model_get_info(m);
    printf("  \xe2\x9c\x93 loaded in %.1f ms (%s, %d layers, hidden %d, vocab %d)\n", mi->load_ms, mi->arch_name,
           mi->n_layer, mi->n_embd, mi->n_vocab);
    printf("\nForward pass:\n");
    printf("  block             : %s\n", mi->family);
    printf("  kernels           : %s (%d threads)\n", mi->kernels ? mi->kernels : "", mi->n_threads);
    int lay = mi->i2s_layout && *mi->i2s_layout;
    printf("  projections       : %s%s%s%s\n", lq_ggml_type_name(mi->proj_type), mi->bitlinear ? ", BitLinear" : "",
           lay ? "; I2_S layout " : "", lay ? mi->i2s_layout : "");
    printf("  lm_head           : %s%s%s\n", lq_ggml_type_name(mi->lm_head_type),
           mi->tied_embeddings ? " (tied to the embedding)" : "",
           mi->lm_head_q8 ? ", int8 copy" : mi->lm_head_bounded ? ", bounded int8 copy for generation" : "");
    printf("  weights           : %.1f MB (%s), %.1f MB read per token\n", (double)mi->weight_bytes / 1e6,
           mi->weights_copied ? "private copy" : "mapped read-only", (double)mi->bytes_per_token / 1e6);
    if (do_probe) {
        printf("\nProbe \xe2\x80\x94 %d greedy tokens\xe2\x80\xa6\n", n_probe);
        probe(m, n_probe);
    }
    lq_model_close(m);
    free(dir);
    return 0;
}
