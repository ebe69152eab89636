/* larql make-model: write a random BitNet b1.58 (or llama) GGUF fixture. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "larql/fixture.h"
#include "larql/gguf.h"
#include "larql/vindex.h"

static const char *USAGE =
    "larql make-model --out FILE [--preset tiny|demo|2b|3b|8b] [--arch bitnet-b1.58|bitnet|llama]\n"
    "       [--family 2b4t|1bitllm|hf1bitllm|falcon3|falcon-e] (that family's file layout; README)\n"
    "       [--dim N] [--ffn N] [--layers N] [--heads N] [--kv-heads N] [--head-dim N] [--vocab N] [--ctx N]\n"
    "       [--rope-theta X] [--eps X] [--emb-type f32|f16] [--proj-type f32|f16 (llama) | i2s|tq2_0|tq1_0 (bitnet)] [--seed N] [--wscale X] [--corpus-file F]\n"
    "       [--plant 'Entity>Target@layer:feature']... (plant facts for describe/walk fixtures)\n"
    "       [--plant-relation 'Entity>Target@layer:feature']... (facts of one relation: their targets\n"
    "       share an embedding offset from the entities, so relation clustering groups them)";

int lq_cli_make_model(int argc, char **argv)
{
    const char *C = "make-model", *out = NULL, *preset = "tiny";
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--preset") && i + 1 < argc)
            preset = argv[i + 1];
    lq_fixture_opts o;
    lq_err err = {0};
    if (lq_fixture_preset(&o, preset, &err))
        return lq_cli_usage(C, USAGE, "%s", err.msg);
    /* a family's layout goes on top of the preset's shape, before the other options (which
     * may override it, e.g. --emb-type) */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--family") && i + 1 < argc && lq_fixture_family(&o, argv[i + 1], &err))
            return lq_cli_usage(C, USAGE, "--family: %s", err.msg);
    char *corpus = NULL;
    int rc = 0;
    /* --plant values stay in argv (lq_fact_parse cuts them in place); planted after writing */
    lq_fact facts[64], rfacts[64];
    size_t n_facts = 0, n_rfacts = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        double x;
        int *ip = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: %s\n", USAGE);
            free(corpus);
            return 0;
        }
        if (!v) {
            rc = lq_cli_usage(C, USAGE, "option '%s' needs a value or is unknown", a);
            break;
        }
        i++;
        if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--preset") || !strcmp(a, "--family")) continue;
        else if (!strcmp(a, "--arch")) o.arch = v;
        else if (!strcmp(a, "--name")) o.name = v;
        else if (!strcmp(a, "--dim")) ip = &o.dim;
        else if (!strcmp(a, "--ffn")) ip = &o.ffn;
        else if (!strcmp(a, "--layers")) ip = &o.layers;
        else if (!strcmp(a, "--heads")) ip = &o.heads;
        else if (!strcmp(a, "--kv-heads")) ip = &o.kv_heads;
        else if (!strcmp(a, "--head-dim")) ip = &o.head_dim;
        else if (!strcmp(a, "--vocab")) ip = &o.vocab;
        else if (!strcmp(a, "--ctx")) ip = &o.ctx;
        else if (!strcmp(a, "--seed")) {
            if (lq_parse_long(v, 0, 0x7fffffffffffffffL, &n)) { rc = lq_cli_usage(C, USAGE, "--seed: '%s' is not a non-negative integer", v); break; }
            o.seed = (uint64_t)n;
        } else if (!strcmp(a, "--rope-theta") || !strcmp(a, "--eps") || !strcmp(a, "--wscale")) {
            if (lq_parse_double(v, 1e-30, 1e30, &x)) { rc = lq_cli_usage(C, USAGE, "%s: '%s' is not a positive number", a, v); break; }
            if (!strcmp(a, "--rope-theta")) o.rope_theta = x;
            else if (!strcmp(a, "--eps")) o.eps = x;
            else o.wscale = x;
        } else if (!strcmp(a, "--emb-type")) {
            if (!strcmp(v, "f32")) o.emb_type = LQ_GGML_F32;
            else if (!strcmp(v, "f16")) o.emb_type = LQ_GGML_F16;
            else { rc = lq_cli_usage(C, USAGE, "--emb-type: '%s' (expected f32 or f16)", v); break; }
        } else if (!strcmp(a, "--proj-type")) {
            if (!strcmp(v, "f32")) o.proj_type = LQ_GGML_F32;
            else if (!strcmp(v, "f16")) o.proj_type = LQ_GGML_F16;
            else if (!strcmp(v, "i2s")) o.proj_type = 0;
            else if (!strcmp(v, "tq2_0")) o.proj_type = LQ_GGML_TQ2_0;
            else if (!strcmp(v, "tq1_0")) o.proj_type = LQ_GGML_TQ1_0;
            else { rc = lq_cli_usage(C, USAGE, "--proj-type: '%s' (expected f32, f16, i2s, tq2_0 or tq1_0)", v); break; }
        } else if (!strcmp(a, "--corpus-file")) {
            size_t len;
            free(corpus);
            corpus = NULL;
            if (lq_read_file(v, &corpus, &len)) { rc = lq_cli_error(C, "cannot read corpus file '%s'", v); break; }
            for (size_t k = 0; k < len; k++)
                if (corpus[k] == '\n' || corpus[k] == '\r' || corpus[k] == '\t') corpus[k] = ' ';
            o.corpus = corpus;
        } else if (!strcmp(a, "--plant")) {
            if (n_facts == sizeof facts / sizeof facts[0]) { rc = lq_cli_usage(C, USAGE, "--plant: at most 64 facts"); break; }
            if (lq_fact_parse(argv[i], &facts[n_facts], &err)) { rc = lq_cli_usage(C, USAGE, "--plant: %s", err.msg); break; }
            n_facts++;
        } else if (!strcmp(a, "--plant-relation")) {
            if (n_rfacts == sizeof rfacts / sizeof rfacts[0]) { rc = lq_cli_usage(C, USAGE, "--plant-relation: at most 64 facts"); break; }
            if (lq_fact_parse(argv[i], &rfacts[n_rfacts], &err)) { rc = lq_cli_usage(C, USAGE, "--plant-relation: %s", err.msg); break; }
            n_rfacts++;
        } else {
            rc = lq_cli_usage(C, USAGE, "unknown option '%s'", a);
            break;
        }
        if (ip) {
            if (lq_parse_long(v, 1, 1 << 24, &n)) { rc = lq_cli_usage(C, USAGE, "%s: '%s' is not a positive integer", a, v); break; }
            *ip = (int)n;
        }
    }
    if (!rc && !out)
        rc = lq_cli_usage(C, USAGE, "--out FILE is required");
    if (!rc && lq_fixture_write(&o, out, &err))
        rc = lq_cli_error(C, "%s", err.msg);
    if (!rc && n_rfacts && lq_fixture_plant_relation(out, rfacts, n_rfacts, o.seed, &err))
        rc = lq_cli_error(C, "%s", err.msg);
    if (!rc && n_facts && lq_fixture_plant(out, facts, n_facts, &err))
        rc = lq_cli_error(C, "%s", err.msg);
    if (!rc)
        fprintf(stderr, "wrote %s: arch=%s dim=%d ffn=%d layers=%d heads=%d/%d vocab=%d seed=%llu\n", out,
                o.arch, o.dim, o.ffn, o.layers, o.heads, o.kv_heads, o.vocab, (unsigned long long)o.seed);
    free(corpus);
    return rc;
}
