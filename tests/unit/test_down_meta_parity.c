/* down_meta.bin carries LARQL's numbers (issue 15, item 1): for feature f of layer l the
 * logits are E . trits[:, f] over the whole vocabulary -- the embedding rows unscaled and the
 * I2_S down matrix as unit trits, its per-tensor scale NOT applied -- the top k is taken over
 * all tokens and the ones that decode to empty text are dropped afterwards, so a feature may
 * keep fewer than k entries. The expected values are computed here from the GGUF's bytes
 * (the I2_S codes unpacked by hand, in doubles) and compared with what the builder wrote, on
 * both down_meta paths (the int8 fast path and the f32 scan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "larql/fixture.h"
#include "larql/gguf.h"
#include "larql/tokenizer.h"
#include "larql/vindex.h"

/* element i of a flat I2_S stream: 128-element blocks of 32 bytes, element j of a block in
 * byte j%32 at shift 6-2*(j/32); code 0/1/2 = -1/0/+1 */
static int trit_at(const uint8_t *packed, uint64_t i)
{
    uint64_t blk = i / 128, j = i % 128;
    int code = (packed[blk * 32 + j % 32] >> (6 - 2 * (j / 32))) & 3;
    return code - 1;
}

/* Rust's str::trim() leaves nothing: every code point is Unicode White_Space (decoded here
 * independently of the library's check) */
static int decodes_empty(const lq_tokenizer *tok, int32_t id)
{
    char *text = NULL;
    size_t len = 0;
    int empty = 1;
    if (lq_tokenizer_decode(tok, &id, 1, LQ_DETOK_SKIP_SPECIAL, &text, &len, NULL) == LQ_OK) {
        const unsigned char *p = (const unsigned char *)text;
        for (size_t i = 0; i < len && empty;) {
            unsigned c = p[i], n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
            if (!n || i + n > len) {
                empty = 0; /* not UTF-8: U+FFFD, text */
                break;
            }
            unsigned cp = n == 1 ? c : c & (0x3f >> (n - 1));
            for (unsigned k = 1; k < n; k++)
                cp = cp << 6 | (p[i + k] & 0x3f);
            empty = (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
                    (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
                    cp == 0x3000;
            i += n;
        }
    }
    free(text);
    return empty;
}

typedef struct cand {
    int32_t id;
    double x;
} cand;

static int by_score(const void *a, const void *b)
{
    const cand *p = a, *q = b;
    if (p->x != q->x)
        return p->x > q->x ? -1 : 1;
    return p->id < q->id ? -1 : p->id > q->id;
}

static void check_build(int dm_exact, const char *tag)
{
    char g[4400], out[4400];
    snprintf(g, sizeof g, "%s/%s.gguf", harness_tmpdir(), tag);
    snprintf(out, sizeof out, "%s/%s.vindex", harness_tmpdir(), tag);
    lq_fixture_opts o;
    lq_err err = {0};
    lq_fixture_preset(&o, "tiny", &err);
    o.seed = 77;
    o.wscale = 3.0; /* a scale far from 1: scaled and unscaled logits cannot be confused */
    if (lq_fixture_write(&o, g, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.n_threads = 2;
    bo.dm_exact = dm_exact;
    bo.extracted_at = "2026-01-01T00:00:00Z";
    if (lq_vindex_build(g, out, &bo, &err)) {
        CHECK_MSG(0, "build: %s", err.msg);
        return;
    }
    lq_gguf *gg = NULL;
    lq_tokenizer *tok = NULL;
    lq_vindex *v = NULL;
    if (lq_gguf_open(g, &gg, &err) || lq_tokenizer_from_gguf(gg, &tok, &err) ||
        lq_vindex_open(out, NULL, &v, &err)) {
        CHECK_MSG(0, "open: %s", err.msg);
        goto done;
    }
    const lq_vindex_info *in = lq_vindex_get_info(v);
    const lq_gguf_tensor *E = lq_gguf_find_tensor(gg, "token_embd.weight");
    CHECK(E != NULL);
    if (!E)
        goto done;
    int D = (int)E->ne[0], V = (int)E->ne[1], K = in->down_top_k;
    float *emb = malloc((size_t)V * D * sizeof *emb);
    cand *all = malloc((size_t)V * sizeof *all);
    if (!emb || !all || lq_gguf_tensor_to_f32(E, emb, &err)) {
        CHECK_MSG(0, "embedding: %s", err.msg);
        free(emb);
        free(all);
        goto done;
    }
    int features = 0, id_mismatch = 0, short_lists = 0, scale_seen = 0;
    double worst = 0;
    for (int l = 0; l < in->num_layers; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        const lq_gguf_tensor *W = lq_gguf_find_tensor(gg, name);
        CHECK(W && W->type == LQ_GGML_I2_S);
        if (!W || W->type != LQ_GGML_I2_S)
            break;
        int F = (int)W->ne[0]; /* W_down [D rows, F cols] */
        float s;
        memcpy(&s, W->data + W->n_elements / 4, 4);
        scale_seen |= s < 0.5f || s > 2.0f;
        for (int f = 0; f < F; f++) {
            for (int t = 0; t < V; t++) {
                double x = 0;
                for (int d = 0; d < D; d++)
                    x += (double)emb[(size_t)t * D + d] * trit_at(W->data, (uint64_t)d * F + f);
                all[t].id = t;
                all[t].x = x;
            }
            qsort(all, (size_t)V, sizeof *all, by_score);
            cand want[64];
            int n = 0;
            for (int k = 0; k < K && k < V; k++)
                if (!decodes_empty(tok, all[k].id))
                    want[n++] = all[k];
            short_lists += n < K;
            lq_feature_meta m;
            int have = lq_vindex_feature_meta(v, l, f, &m);
            features++;
            if (!have || m.n_top != n) {
                printf("#   L%d F%d: have %d, %d entries, want %d (want[0] %d %.4f, k-th %d %.4f, k+1-th %d %.4f)\n", l, f, have,
                       have ? m.n_top : 0, n, want[0].id, want[0].x, all[K - 1].id, all[K - 1].x, all[K].id, all[K].x);
                id_mismatch++;
                continue;
            }
            CHECK_EQ_INT(m.top_token_id, want[0].id);
            CHECK_NEAR(m.c_score, want[0].x, 1e-3 * (1 + fabs(want[0].x)));
            for (int k = 0; k < n; k++) {
                /* a near-tie may swap two neighbours (the f32 sums run in another order) */
                if (m.top_ids[k] != want[k].id && fabs(want[k].x - (k + 1 < n ? want[k + 1].x : 1e30)) > 1e-3 &&
                    fabs(want[k].x - (k > 0 ? want[k - 1].x : 1e30)) > 1e-3)
                    id_mismatch++;
                double dl = fabs(m.top_logits[k] - want[k].x);
                if (dl > worst)
                    worst = dl;
            }
        }
    }
    printf("# %s: %d features, %d with fewer than %d entries after dropping empty decodes, "
           "%d mismatched, max |dlogit| %.3g\n", tag, features, short_lists, K, id_mismatch, worst);
    CHECK(scale_seen);         /* the fixture's scales are not 1: the test can tell */
    CHECK(short_lists > 0);    /* the "drop after top k" rule was exercised */
    CHECK_EQ_INT(id_mismatch, 0);
    CHECK(worst < 1e-3);
    free(emb);
    free(all);
done:
    lq_vindex_close(v);
    lq_tokenizer_free(tok);
    lq_gguf_close(gg);
}

static void test_fast_path(void) { check_build(0, "dmfast"); }
static void test_exact_path(void) { check_build(1, "dmexact"); }

int main(void)
{
    RUN(test_fast_path);
    RUN(test_exact_path);
    return harness_done();
}
