/* Planted facts for fixtures (the C version of shared/tools/plant_facts.py): rewrites gate
 * rows and down columns of a BitNet GGUF's I2_S FFN tensors so that describe/walk have a
 * known right answer. The file is read whole (fixtures are small), edited in memory and
 * written back through a temporary file + rename. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "larql/gguf.h"
#include "larql/tokenizer.h"
#include "vindex/vindex_internal.h"

int lq_fact_parse(char *buf, lq_fact *f, lq_err *err)
{
    char *gt = strchr(buf, '>');
    char *at = gt ? strrchr(gt, '@') : NULL;
    char *colon = at ? strchr(at, ':') : NULL;
    if (!gt || !at || !colon || gt == buf || at == gt + 1)
        return lq_err_set(err, LQ_EINVAL, "fact '%s': expected Entity>Target@layer:feature", buf);
    *gt = 0;
    *at = 0;
    *colon = 0;
    char *e1, *e2;
    long l = strtol(at + 1, &e1, 10), ft = strtol(colon + 1, &e2, 10);
    if (*e1 || *e2 || e1 == at + 1 || e2 == colon + 1 || l < 0 || ft < 0 || l > INT32_MAX || ft > INT32_MAX)
        return lq_err_set(err, LQ_EINVAL, "fact: layer '%s' / feature '%s' must be non-negative integers",
                          at + 1, colon + 1);
    f->entity = buf;
    f->target = gt + 1;
    f->layer = (int)l;
    f->feature = (int)ft;
    return LQ_OK;
}

/* Sets element i (row-major) of a microsoft I2_S buffer to 2-bit code (0 = -1, 1 = 0, 2 = +1). */
static void i2s_set(uint8_t *p, uint64_t i, int code)
{
    uint64_t blk = i / 128, j = i % 128;
    uint8_t *b = p + blk * 32 + (j % 32);
    int shift = 6 - 2 * (int)(j / 32);
    *b = (uint8_t)((*b & ~(3 << shift)) | (code << shift));
}

/* Validates one fact (layer, feature, tokens) before anything is changed. */
static int check_fact(const lq_gguf *g, const lq_tokenizer *tok, int D, int V, const lq_fact *f,
                      lq_err *err)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", f->layer);
    const lq_gguf_tensor *gate = lq_gguf_find_tensor(g, name);
    snprintf(name, sizeof name, "blk.%d.ffn_down.weight", f->layer);
    const lq_gguf_tensor *down = lq_gguf_find_tensor(g, name);
    if (!gate || !down)
        return lq_err_set(err, LQ_ERANGE, "fact %s>%s: layer %d not in the model", f->entity, f->target, f->layer);
    if (gate->type != LQ_GGML_I2_S || down->type != LQ_GGML_I2_S)
        return lq_err_set(err, LQ_EUNSUPPORTED, "fact: layer %d FFN is not I2_S (planting needs a BitNet GGUF)",
                          f->layer);
    uint64_t F = gate->ne[1];
    if (gate->ne[0] != (uint64_t)D || down->ne[0] != F || down->ne[1] != (uint64_t)D)
        return lq_err_set(err, LQ_EFORMAT, "fact: layer %d FFN shapes do not match hidden %d", f->layer, D);
    if ((uint64_t)f->feature >= F)
        return lq_err_set(err, LQ_ERANGE, "fact %s>%s: feature %d outside [0, %llu)", f->entity, f->target,
                          f->feature, (unsigned long long)F);
    int32_t *eids = NULL, *tids = NULL;
    size_t ne = 0, nt = 0;
    int rc = lq_tokenizer_encode(tok, f->entity, strlen(f->entity), 0, &eids, &ne, err);
    if (rc)
        return rc;
    size_t tl = strlen(f->target);
    char *tt = malloc(tl + 3);
    if (!tt) {
        free(eids);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    memcpy(tt, "x ", 2);
    memcpy(tt + 2, f->target, tl + 1);
    rc = lq_tokenizer_encode(tok, tt, tl + 2, 0, &tids, &nt, err);
    free(tt);
    if (!rc && ne == 0)
        rc = lq_err_set(err, LQ_EINVAL, "fact: entity '%s' encodes to no tokens", f->entity);
    if (!rc && nt != 2)
        rc = lq_err_set(err, LQ_EINVAL, "fact: target ' %s' is not a single token (%zu tokens)", f->target,
                        nt ? nt - 1 : 0);
    for (size_t i = 0; !rc && i < ne; i++)
        if (eids[i] < 0 || eids[i] >= V)
            rc = lq_err_set(err, LQ_ERANGE, "fact: entity token %d outside the embedding", eids[i]);
    if (!rc && (tids[1] < 0 || tids[1] >= V))
        rc = lq_err_set(err, LQ_ERANGE, "fact: target token %d outside the embedding", tids[1]);
    free(eids);
    free(tids);
    return rc;
}

int lq_fixture_plant(const char *gguf_path, const lq_fact *facts, size_t n, lq_err *err)
{
    FILE *fp = fopen(gguf_path, "rb");
    if (!fp)
        return lq_err_set(err, LQ_EIO, "%s: %s", gguf_path, strerror(errno));
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(fp, 0, SEEK_END) == 0)
        size = ftell(fp);
    if (size > 0 && fseek(fp, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size)) &&
        fread(buf, 1, (size_t)size, fp) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (!buf)
        return lq_err_set(err, LQ_EIO, "%s: cannot read", gguf_path);
    lq_gguf *g = NULL;
    lq_tokenizer *tok = NULL;
    float *emb = NULL;
    int rc = lq_gguf_open_buffer(buf, (size_t)size, &g, err);
    if (!rc)
        rc = lq_tokenizer_from_gguf(g, &tok, err);
    const lq_gguf_tensor *et = rc ? NULL : lq_gguf_find_tensor(g, "token_embd.weight");
    if (!rc && (!et || et->n_dims != 2))
        rc = lq_err_set(err, LQ_EFORMAT, "%s: token_embd.weight missing", gguf_path);
    int D = et ? (int)et->ne[0] : 0, V = et ? (int)et->ne[1] : 0;
    if (!rc && !(emb = malloc((size_t)D * V * sizeof *emb)))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = lq_gguf_tensor_to_f32(et, emb, err);
    double sigma = 0;
    if (!rc) {
        double ss = 0;
        for (size_t i = 0; i < (size_t)D * V; i++)
            ss += (double)emb[i] * emb[i];
        sigma = sqrt(ss / ((double)D * V));
    }
    float *q = rc ? NULL : malloc((size_t)D * sizeof *q);
    if (!rc && !q)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t k = 0; k < n && !rc; k++) {
        const lq_fact *f = &facts[k];
        rc = check_fact(g, tok, D, V, f, err);
        if (rc)
            break;
        /* query vector: mean embedding of the entity's tokens */
        int32_t *eids = NULL, *tids = NULL;
        size_t ne = 0, nt = 0;
        size_t tl = strlen(f->target);
        char *tt = malloc(tl + 3);
        if (!tt) {
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            break;
        }
        memcpy(tt, "x ", 2);
        memcpy(tt + 2, f->target, tl + 1);
        rc = lq_tokenizer_encode(tok, f->entity, strlen(f->entity), 0, &eids, &ne, err);
        if (!rc)
            rc = lq_tokenizer_encode(tok, tt, tl + 2, 0, &tids, &nt, err);
        free(tt);
        if (!rc) {
            for (int d = 0; d < D; d++) {
                double s = 0;
                for (size_t i = 0; i < ne; i++)
                    s += emb[(size_t)eids[i] * D + d];
                q[d] = (float)(s / (double)ne);
            }
            char name[96];
            snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", f->layer);
            const lq_gguf_tensor *gate = lq_gguf_find_tensor(g, name);
            snprintf(name, sizeof name, "blk.%d.ffn_down.weight", f->layer);
            const lq_gguf_tensor *down = lq_gguf_find_tensor(g, name);
            /* the tensors point into buf, which we own: edit in place */
            uint8_t *gp = buf + (gate->data - buf), *dp = buf + (down->data - buf);
            double t = 0.5 * sigma;
            for (int d = 0; d < D; d++)
                i2s_set(gp, (uint64_t)f->feature * D + d, q[d] > t ? 2 : q[d] < -t ? 0 : 1);
            uint64_t Fc = down->ne[0];
            const float *te = emb + (size_t)tids[1] * D;
            for (int r = 0; r < D; r++)
                i2s_set(dp, (uint64_t)r * Fc + (uint64_t)f->feature, te[r] > 0 ? 2 : 0);
        }
        free(eids);
        free(tids);
    }
    free(q);
    free(emb);
    lq_tokenizer_free(tok);
    lq_gguf_close(g);
    if (!rc) {
        size_t pl = strlen(gguf_path) + 32;
        char *tmp = malloc(pl);
        if (!tmp) {
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        } else {
            snprintf(tmp, pl, "%s.plant-%ld", gguf_path, (long)getpid());
            FILE *o = fopen(tmp, "wb");
            if (!o || fwrite(buf, 1, (size_t)size, o) != (size_t)size || fflush(o) || fsync(fileno(o))) {
                rc = lq_err_set(err, LQ_EIO, "%s: write failed: %s", tmp, strerror(errno));
                if (o)
                    fclose(o);
                remove(tmp);
            } else if (fclose(o) || rename(tmp, gguf_path)) {
                rc = lq_err_set(err, LQ_EIO, "%s: cannot replace: %s", gguf_path, strerror(errno));
                remove(tmp);
            }
            free(tmp);
        }
    }
    free(buf);
    return rc;
}

/* ---- planted relations ----
 * Facts of one relation share an offset direction in a real model (E[Paris] - E[France] ~
 * E[Berlin] - E[Germany]); in a random fixture they do not, so relation clustering has
 * nothing to find. This moves each target's embedding row to
 *     mean E[tokens of the entity's bare word] + R - alpha * g_i / |g_i|
 * with R one shared random vector kept orthogonal to every planted gate row g_i and alpha =
 * 0.3 |R|: the offset LARQL's clustering computes (target minus the gate's input word) is
 * then R up to a small per-fact term, the gate's best whole word stays the entity (the
 * target scores alpha |g_i| lower than the bare word on that gate), and lq_fixture_plant
 * then plants the facts on the moved rows. F32 embeddings only. */

static int read_whole(const char *path, uint8_t **buf, long *size, lq_err *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return lq_err_set(err, LQ_EIO, "%s: %s", path, strerror(errno));
    *buf = NULL;
    *size = -1;
    if (fseek(fp, 0, SEEK_END) == 0)
        *size = ftell(fp);
    if (*size > 0 && fseek(fp, 0, SEEK_SET) == 0 && (*buf = malloc((size_t)*size)) &&
        fread(*buf, 1, (size_t)*size, fp) != (size_t)*size) {
        free(*buf);
        *buf = NULL;
    }
    fclose(fp);
    return *buf ? LQ_OK : lq_err_set(err, LQ_EIO, "%s: cannot read", path);
}

static int write_whole(const char *path, const uint8_t *buf, long size, lq_err *err)
{
    size_t pl = strlen(path) + 32;
    char *tmp = malloc(pl);
    if (!tmp)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    snprintf(tmp, pl, "%s.plant-%ld", path, (long)getpid());
    FILE *o = fopen(tmp, "wb");
    int rc = 0;
    if (!o || fwrite(buf, 1, (size_t)size, o) != (size_t)size || fflush(o) || fsync(fileno(o))) {
        rc = lq_err_set(err, LQ_EIO, "%s: write failed: %s", tmp, strerror(errno));
        if (o)
            fclose(o);
        remove(tmp);
    } else if (fclose(o) || rename(tmp, path)) {
        rc = lq_err_set(err, LQ_EIO, "%s: cannot replace: %s", path, strerror(errno));
        remove(tmp);
    }
    free(tmp);
    return rc;
}

/* mean embedding row of text's tokens with ids > 2 (what LARQL's offset takes); 0 if none */
static int mean_rows(const lq_tokenizer *tok, const float *emb, int D, int V, const char *text, float *out)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (lq_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n, NULL)) {
        free(ids);
        return 0;
    }
    int used = 0;
    for (int d = 0; d < D; d++)
        out[d] = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] <= 2 || ids[i] >= V)
            continue;
        for (int d = 0; d < D; d++)
            out[d] += emb[(size_t)ids[i] * D + d];
        used++;
    }
    free(ids);
    for (int d = 0; used && d < D; d++)
        out[d] /= (float)used;
    return used;
}

int lq_fixture_plant_relation(const char *gguf_path, const lq_fact *facts, size_t n, uint64_t seed, lq_err *err)
{
    uint8_t *buf = NULL;
    long size = 0;
    int rc = read_whole(gguf_path, &buf, &size, err);
    if (rc)
        return rc;
    lq_gguf *g = NULL;
    lq_tokenizer *tok = NULL;
    rc = lq_gguf_open_buffer(buf, (size_t)size, &g, err);
    if (!rc)
        rc = lq_tokenizer_from_gguf(g, &tok, err);
    const lq_gguf_tensor *et = rc ? NULL : lq_gguf_find_tensor(g, "token_embd.weight");
    if (!rc && (!et || et->n_dims != 2 || et->type != LQ_GGML_F32))
        rc = lq_err_set(err, LQ_EUNSUPPORTED, "%s: planting a relation needs an F32 token_embd.weight (--emb-type f32)",
                        gguf_path);
    int D = et ? (int)et->ne[0] : 0, V = et ? (int)et->ne[1] : 0;
    float *emb = NULL, *G = NULL, *R = NULL, *q = NULL;
    int32_t *tgt = NULL;
    if (!rc) {
        emb = (float *)(buf + (et->data - buf)); /* edited in place, written back below */
        G = calloc(n * (size_t)D, sizeof *G);
        R = malloc((size_t)D * sizeof *R);
        q = malloc((size_t)D * sizeof *q);
        tgt = malloc(n * sizeof *tgt);
        if (!G || !R || !q || !tgt)
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    double sigma = 0;
    for (size_t i = 0; !rc && i < (size_t)D * V; i++)
        sigma += (double)emb[i] * emb[i];
    sigma = rc ? 0 : sqrt(sigma / ((double)D * V));
    /* each fact: its gate trits (as lq_fixture_plant makes them) and its target token */
    for (size_t k = 0; !rc && k < n; k++) {
        const lq_fact *f = &facts[k];
        if ((rc = check_fact(g, tok, D, V, f, err)))
            break;
        if (!mean_rows(tok, emb, D, V, f->entity, q)) {
            rc = lq_err_set(err, LQ_EINVAL, "relation: entity '%s' has no usable token", f->entity);
            break;
        }
        double t = 0.5 * sigma, nn = 0;
        for (int d = 0; d < D; d++) {
            G[k * D + d] = q[d] > t ? 1.0f : q[d] < -t ? -1.0f : 0.0f;
            nn += G[k * D + d] * G[k * D + d];
        }
        for (int d = 0; nn > 0 && d < D; d++)
            G[k * D + d] /= (float)sqrt(nn);
        size_t tl = strlen(f->target);
        char *tt = malloc(tl + 3);
        int32_t *tids = NULL;
        size_t nt = 0;
        if (!tt) {
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            break;
        }
        memcpy(tt, "x ", 2);
        memcpy(tt + 2, f->target, tl + 1);
        rc = lq_tokenizer_encode(tok, tt, tl + 2, 0, &tids, &nt, err);
        free(tt);
        if (!rc)
            tgt[k] = tids[1]; /* check_fact: exactly one token after "x" */
        free(tids);
    }
    /* R: Gaussian (sigma per component, a fixed xorshift stream from seed), then
     * Gram-Schmidt against the gate rows so that R . g_i = 0 */
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    for (int d = 0; !rc && d < D; d++) {
        double u1, u2;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        u1 = ((s >> 11) + 1.0) / 9007199254740993.0;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        u2 = (s >> 11) / 9007199254740992.0;
        R[d] = (float)(sigma * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
    for (size_t k = 0; !rc && k < n; k++) { /* orthonormal basis of the gates, in place */
        float *gk = G + k * D;
        for (size_t j = 0; j < k; j++) {
            const float *gj = G + j * D;
            double dot = 0;
            for (int d = 0; d < D; d++)
                dot += (double)gk[d] * gj[d];
            for (int d = 0; d < D; d++)
                gk[d] -= (float)dot * gj[d];
        }
        double nn = 0;
        for (int d = 0; d < D; d++)
            nn += (double)gk[d] * gk[d];
        for (int d = 0; nn > 1e-12 && d < D; d++)
            gk[d] /= (float)sqrt(nn);
    }
    for (size_t k = 0; !rc && k < n; k++) {
        double dot = 0;
        for (int d = 0; d < D; d++)
            dot += (double)R[d] * G[k * D + d];
        for (int d = 0; d < D; d++)
            R[d] -= (float)dot * G[k * D + d];
    }
    double rn = 0;
    for (int d = 0; !rc && d < D; d++)
        rn += (double)R[d] * R[d];
    rn = sqrt(rn);
    /* the gate directions again (un-orthogonalised) for the per-fact push away from them */
    for (size_t k = 0; !rc && k < n; k++) {
        const lq_fact *f = &facts[k];
        float *g1 = malloc((size_t)D * sizeof *g1);
        if (!g1) {
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            break;
        }
        mean_rows(tok, emb, D, V, f->entity, q);
        double t = 0.5 * sigma, nn = 0;
        for (int d = 0; d < D; d++) {
            g1[d] = q[d] > t ? 1.0f : q[d] < -t ? -1.0f : 0.0f;
            nn += g1[d] * g1[d];
        }
        /* the bare word ("Paris" for " Paris"): what the gate's whole-word token decodes to */
        const char *bare = f->entity;
        while (*bare == ' ')
            bare++;
        if (!mean_rows(tok, emb, D, V, bare, q)) {
            free(g1);
            rc = lq_err_set(err, LQ_EINVAL, "relation: entity '%s' has no usable token", bare);
            break;
        }
        float *row = emb + (size_t)tgt[k] * D;
        for (int d = 0; d < D; d++)
            row[d] = q[d] + R[d] - (float)(nn > 0 ? 0.3 * rn * g1[d] / sqrt(nn) : 0);
        free(g1);
    }
    free(G);
    free(R);
    free(q);
    free(tgt);
    lq_tokenizer_free(tok);
    lq_gguf_close(g);
    if (!rc)
        rc = write_whole(gguf_path, buf, size, err);
    free(buf);
    return rc ? rc : lq_fixture_plant(gguf_path, facts, n, err);
}
