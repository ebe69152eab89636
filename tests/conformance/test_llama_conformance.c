/* llama conformance: Karpathy's stories260K (real trained weights, all F32) against
 * llama2.c's run.c: greedy sequences [A] (BOS only) and [B] (a prompt) token for token, and
 * the full 512 logits of the first three positions. The ids come from the golden files. */
#include "harness.h"
#include "larql/model.h"

#define MAXIDS 256

/* Ids after the last ':' of the first line starting with prefix. */
static int read_ids(const char *path, const char *prefix, int32_t *ids, int cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[8192];
    int n = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, prefix, strlen(prefix)) != 0)
            continue;
        char *p = strrchr(line, ':');
        if (!p)
            break;
        p++;
        n = 0;
        char *end;
        for (long v = strtol(p, &end, 10); end != p && n < cap; v = strtol(p, &end, 10)) {
            ids[n++] = (int32_t)v;
            p = end;
        }
        break;
    }
    fclose(f);
    return n;
}

static lq_model *open_stories(char *golden, size_t cap, const char *kernels)
{
    const char *dir = harness_conformance_dir();
    if (!dir)
        return NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/llama/stories260K.gguf", dir);
    snprintf(golden, cap, "%s/llama/stories260K_golden.txt", dir);
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = {0};
    mo.n_threads = 2;
    mo.kernels = kernels;
    int rc = lq_model_open(path, &mo, &m, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return m;
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b])
            b = i;
    return b;
}

static void run_golden(const char *tag, const char *kernels)
{
    char golden[4200];
    if (!harness_conformance_dir())
        SKIP("../shared/conformance absent");
    lq_model *m = open_stories(golden, sizeof golden, kernels);
    if (!m)
        return;
    const lq_model_info *in = lq_model_get_info(m);
    CHECK_EQ_INT(in->arch, LQ_ARCH_LLAMA);
    CHECK_EQ_INT(in->n_vocab, 512);
    CHECK(lq_model_tokenizer(m) != NULL && lq_tokenizer_kind(lq_model_tokenizer(m)) == LQ_TOK_SPM);
    int32_t prompt[MAXIDS], next[MAXIDS];
    char pfx[64];
    snprintf(pfx, sizeof pfx, "[%s] prompt", tag);
    int np = read_ids(golden, pfx, prompt, MAXIDS);
    snprintf(pfx, sizeof pfx, "[%s] next ids", tag);
    int nn = read_ids(golden, pfx, next, MAXIDS);
    CHECK(np >= 1 && nn > np);
    if (np < 1 || nn <= np) {
        lq_model_close(m);
        return;
    }
    lq_session *s = NULL;
    lq_err err = {0};
    CHECK(lq_session_create(m, 0, &s, &err) == 0);
    float *all = calloc((size_t)np * 512, sizeof(float));
    float lg[512];
    CHECK(lq_session_eval(s, prompt, (size_t)np, NULL, all, &err) == 0);
    /* positions before the last prompt token are forced; llama2.c reports the prompt */
    for (int i = 0; i + 1 < np; i++)
        CHECK_EQ_INT(next[i], prompt[i + 1]);
    memcpy(lg, all + (size_t)(np - 1) * 512, sizeof lg);
    for (int pos = np - 1; pos < nn; pos++) {
        int tok = argmax(lg, 512);
        CHECK_MSG(tok == next[pos], "[%s] pos %d: %d, expected %d", tag, pos, tok, next[pos]);
        if (tok != next[pos])
            break;
        if (pos + 1 < nn)
            CHECK(lq_session_decode(s, tok, lg, &err) == 0);
    }
    free(all);
    lq_session_free(s);
    lq_model_close(m);
}

static void test_golden_a(void) { run_golden("A", NULL); }
static void test_golden_b(void) { run_golden("B", NULL); }
static void test_golden_a_scalar(void) { run_golden("A", "scalar"); }

static void test_first3_logits(void)
{
    char golden[4200];
    const char *dir = harness_conformance_dir();
    if (!dir)
        SKIP("../shared/conformance absent");
    lq_model *m = open_stories(golden, sizeof golden, NULL);
    if (!m)
        return;
    char path[4200];
    snprintf(path, sizeof path, "%s/llama/stories260K_logits_first3.txt", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) {
        lq_model_close(m);
        return;
    }
    lq_session *s = NULL;
    lq_err err = {0};
    CHECK(lq_session_create(m, 0, &s, &err) == 0);
    char line[16384];
    float lg[512];
    double maxd = 0;
    int npos = 0;
    while (fgets(line, sizeof line, f)) {
        int pos, tok, off = 0;
        if (sscanf(line, "pos %d tok %d logits:%n", &pos, &tok, &off) != 2 || off == 0)
            continue;
        CHECK_EQ_INT(pos, lq_session_pos(s));
        CHECK(lq_session_decode(s, tok, lg, &err) == 0);
        char *p = line + off, *end;
        for (int i = 0; i < 512; i++) {
            double want = strtod(p, &end);
            CHECK(end != p);
            p = end;
            double d = fabs(lg[i] - want);
            if (d > maxd)
                maxd = d;
        }
        npos++;
    }
    fclose(f);
    CHECK_EQ_INT(npos, 3);
    printf("# stories260K first-3 logits: max |diff| = %.3g\n", maxd);
    CHECK(maxd < 1e-4);
    lq_session_free(s);
    lq_model_close(m);
}

int main(void)
{
    RUN(test_golden_a);
    RUN(test_golden_b);
    RUN(test_golden_a_scalar);
    RUN(test_first3_logits);
    return harness_done();
}
