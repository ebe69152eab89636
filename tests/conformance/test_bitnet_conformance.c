/* BitNet b1.58 conformance: the engine against the reference logits recorded in
 * ../shared/conformance (made by the shared reference forward pass) for the two tiny
 * random models in ../shared/conformance/bitnet (modes "ms" = INT8 activations and
 * "float" = f32 activations). Per position: the top-10 ids, their logits and the
 * log-sum-exp within 1e-3; then the 16-token greedy continuation exactly. */
#include <jansson.h>

#include "harness.h"
#include "larql/model.h"

#define TOL 1e-3

static double max_dlogit, max_dlse;

static void run_case(const char *model, const char *mode, int act_mode, const char *kernels)
{
    const char *dir = harness_conformance_dir();
    if (!dir)
        SKIP("../shared/conformance absent");
    char gpath[4200], jpath[4200];
    snprintf(gpath, sizeof gpath, "%s/bitnet/%s.gguf", dir, model);
    snprintf(jpath, sizeof jpath, "%s/bitnet/%s.expected.json", dir, model);
    json_error_t jerr;
    json_t *root = json_load_file(jpath, 0, &jerr);
    if (!root)
        SKIP("cannot read %s: %s", jpath, jerr.text);
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = {0};
    mo.n_threads = 2;
    mo.act_mode = act_mode;
    mo.kernels = kernels;
    int rc = lq_model_open(gpath, &mo, &m, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc != 0) {
        json_decref(root);
        return;
    }
    const lq_model_info *info = lq_model_get_info(m);
    int V = info->n_vocab;
    /* the GGUF carries a byte-level BPE tokenizer: the model builds it */
    CHECK(lq_model_tokenizer(m) != NULL);
    if (lq_model_tokenizer(m))
        CHECK_EQ_INT(lq_tokenizer_n_vocab(lq_model_tokenizer(m)), V);
    json_t *jids = json_object_get(root, "ids");
    json_t *jmode = json_object_get(json_object_get(root, "modes"), mode);
    json_t *positions = json_object_get(jmode, "positions");
    json_t *greedy = json_object_get(jmode, "greedy");
    size_t n = json_array_size(jids);
    CHECK(n > 0 && json_array_size(positions) == n && json_array_size(greedy) > 0);
    CHECK_EQ_INT(V, json_integer_value(json_object_get(json_object_get(root, "config"), "vocab")));
    int32_t *ids = calloc(n, sizeof *ids);
    float *all = calloc(n * (size_t)V, sizeof *all);
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
    lq_session *s = NULL;
    CHECK(lq_session_create(m, 0, &s, &err) == 0);
    rc = lq_session_eval(s, ids, n, NULL, all, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);

    for (size_t p = 0; p < n && rc == 0; p++) {
        const float *lg = all + p * (size_t)V;
        json_t *pos = json_array_get(positions, p);
        json_t *top = json_object_get(pos, "top");
        /* our top 10 */
        int ours[10];
        for (int r = 0; r < 10; r++) {
            int best = -1;
            for (int v = 0; v < V; v++) {
                int used = 0;
                for (int q = 0; q < r; q++)
                    used |= ours[q] == v;
                if (!used && (best < 0 || lg[v] > lg[best]))
                    best = v;
            }
            ours[r] = best;
        }
        for (int r = 0; r < 10 && r < (int)json_array_size(top); r++) {
            json_t *e = json_array_get(top, r);
            int id = (int)json_integer_value(json_array_get(e, 0));
            double want = json_number_value(json_array_get(e, 1));
            double d = fabs(lg[id] - want);
            if (d > max_dlogit)
                max_dlogit = d;
            CHECK_MSG(d <= TOL, "%s %s pos %zu rank %d id %d: logit %.6f, expected %.6f", model,
                      mode, p, r, id, lg[id], want);
            /* Same id at each rank, unless the reference itself has a near-tie there. */
            if (ours[r] != id) {
                double wl = json_number_value(json_array_get(e, 1));
                CHECK_MSG(fabs(lg[ours[r]] - wl) <= TOL,
                          "%s %s pos %zu rank %d: id %d, expected %d", model, mode, p, r,
                          ours[r], id);
            }
        }
        double mx = -INFINITY, z = 0;
        for (int v = 0; v < V; v++)
            mx = lg[v] > mx ? lg[v] : mx;
        for (int v = 0; v < V; v++)
            z += exp(lg[v] - mx);
        double lse = mx + log(z), want = json_number_value(json_object_get(pos, "lse"));
        if (fabs(lse - want) > max_dlse)
            max_dlse = fabs(lse - want);
        CHECK_MSG(fabs(lse - want) <= TOL, "%s %s pos %zu: lse %.6f, expected %.6f", model, mode,
                  p, lse, want);
    }

    /* greedy continuation after all ids, by decode steps */
    size_t ng = json_array_size(greedy);
    float *lg = malloc((size_t)V * sizeof *lg);
    memcpy(lg, all + (n - 1) * (size_t)V, (size_t)V * sizeof *lg);
    for (size_t g = 0; g < ng && rc == 0; g++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (lg[v] > lg[best])
                best = v;
        int want = (int)json_integer_value(json_array_get(greedy, g));
        CHECK_MSG(best == want, "%s %s greedy step %zu: %d, expected %d", model, mode, g, best,
                  want);
        if (best != want)
            break;
        if (g + 1 < ng) {
            rc = lq_session_decode(s, best, lg, &err);
            CHECK_MSG(rc == 0, "%s", err.msg);
        }
    }
    free(lg);
    free(ids);
    free(all);
    lq_session_free(s);
    lq_model_close(m);
    json_decref(root);
}

static void test_tiny_a_ms(void) { run_case("bitnet-tiny-a", "ms", LQ_ACT_INT8, NULL); }
static void test_tiny_b_ms(void) { run_case("bitnet-tiny-b", "ms", LQ_ACT_INT8, NULL); }
static void test_tiny_a_float(void) { run_case("bitnet-tiny-a", "float", LQ_ACT_F32, NULL); }
static void test_tiny_b_float(void) { run_case("bitnet-tiny-b", "float", LQ_ACT_F32, NULL); }
static void test_tiny_a_ms_scalar(void) { run_case("bitnet-tiny-a", "ms", LQ_ACT_INT8, "scalar"); }
static void test_tiny_b_float_scalar(void)
{
    run_case("bitnet-tiny-b", "float", LQ_ACT_F32, "scalar");
}

int main(void)
{
    RUN(test_tiny_a_ms);
    RUN(test_tiny_b_ms);
    RUN(test_tiny_a_float);
    RUN(test_tiny_b_float);
    RUN(test_tiny_a_ms_scalar);
    RUN(test_tiny_b_float_scalar);
    printf("# max |dlogit| over checked top-10 entries %.3g, max |dlse| %.3g\n", max_dlogit,
           max_dlse);
    return harness_done();
}
