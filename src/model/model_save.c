/* A loaded model written back as a GGUF file (LQL's COMPILE ... INTO MODEL).
 *
 * What is written is what the forward pass computes with, so that the file opens to the same
 * logits: a model opened from a GGUF is copied (every metadata key and tensor as stored), a
 * model opened from a vindex is written from its tensors as the engine holds them (the I2_S
 * projections already repacked to microsoft's layout with their per-tensor scale, the f32 or
 * f16 embedding and head, the f32 norms) with the architecture keys the GGUF loader reads and
 * the tokenizer converted from the vindex's tokenizer.json. Extra string keys (the edits a
 * compile carries) are added last; a key the source already holds is replaced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_obj.h"
#include "model/hf_internal.h"
#include "model/model_internal.h"

static int is_extra(const lq_model_save_opts *o, const char *key)
{
    for (size_t i = 0; i < o->n_extra; i++)
        if (!strcmp(o->extra_keys[i], key))
            return 1;
    return 0;
}

typedef struct save_ctx {
    lq_gguf_writer *w;
    void **bufs;
    size_t n_bufs;
    lq_err *err;
} save_ctx;

static void *keep(save_ctx *c, size_t n)
{
    void **nb = realloc(c->bufs, (c->n_bufs + 1) * sizeof *nb);
    if (!nb)
        return NULL;
    c->bufs = nb;
    void *p = calloc(1, n ? n : 1);
    if (p)
        c->bufs[c->n_bufs++] = p;
    return p;
}

/* the writer's failures carry no message */
static int put(save_ctx *c, const char *name, uint32_t nd, const uint64_t *ne, int type, const void *p, uint64_t nb)
{
    int rc = lq_gguf_writer_add_tensor(c->w, name, nd, ne, type, p, nb);
    return rc ? lq_err_set(c->err, rc, "cannot add tensor %s", name) : LQ_OK;
}

static int add_vec(save_ctx *c, const char *name, const float *v, int n)
{
    uint64_t ne[1] = {(uint64_t)n};
    return put(c, name, 1, ne, LQ_GGML_F32, v, (uint64_t)n * 4);
}

static int add_dense(save_ctx *c, const char *name, const lq_dense_mat *d)
{
    uint64_t ne[2] = {(uint64_t)d->cols, (uint64_t)d->rows};
    uint64_t esz = d->type == LQ_GGML_F32 ? 4 : 2;
    return put(c, name, 2, ne, d->type, d->data, ne[0] * ne[1] * esz);
}

static int add_wmat(save_ctx *c, const char *name, const lq_wmat *x)
{
    if (x->kind == LQ_WK_DENSE)
        return add_dense(c, name, &x->dense);
    if (x->kind != LQ_WK_I2S)
        return lq_err_set(c->err, LQ_EUNSUPPORTED, "%s: held as an int8 copy (--lm-head q8); open the model "
                                                   "without it to write it", name);
    /* GGUF's I2_S: the packed trits, the f32 scale, padding to 32 bytes (microsoft's) */
    uint64_t n = (uint64_t)x->rows * (uint64_t)x->cols, nb = n / 4 + 32;
    uint8_t *p = keep(c, nb);
    if (!p)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory for %s", name);
    if (x->i2s.cols != x->cols) /* rows padded at load (model.c): back to the file's flat blocks */
        lq_i2s_flatten_rows(x->i2s.data, (uint64_t)x->rows, (uint64_t)x->cols, p);
    else
        memcpy(p, x->i2s.data, n / 4);
    memcpy(p + n / 4, &x->i2s.scale, 4);
    uint64_t ne[2] = {(uint64_t)x->cols, (uint64_t)x->rows};
    return put(c, name, 2, ne, LQ_GGML_I2_S, p, nb);
}

/* the source GGUF as stored, minus the keys the caller replaces */
static int copy_gguf(save_ctx *c, const lq_model *m, const lq_model_save_opts *o)
{
    int rc = 0;
    for (int64_t i = 0; !rc && i < lq_gguf_n_kv(m->gguf); i++)
        if (!is_extra(o, lq_gguf_key(m->gguf, i)) && lq_gguf_writer_copy_kv(c->w, m->gguf, i))
            rc = lq_err_set(c->err, LQ_ENOMEM, "cannot copy metadata key %s", lq_gguf_key(m->gguf, i));
    for (int64_t i = 0; !rc && i < lq_gguf_n_tensors(m->gguf); i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_at(m->gguf, i);
        const void *data = t->data;
        uint64_t nb = t->n_bytes;
        if (t->type == LQ_GGML_I2_S) {
            /* the reader holds the packed bytes and the scale (n/4 + 4); a file may end
             * there, so the 32-byte tail microsoft writes is made here, zero padded */
            nb = t->n_elements / 4 + 32;
            uint8_t *p = keep(c, nb);
            if (!p)
                return lq_err_set(c->err, LQ_ENOMEM, "out of memory for %s", t->name);
            memcpy(p, t->data, t->n_bytes < nb ? t->n_bytes : nb);
            data = p;
        }
        rc = put(c, t->name, t->n_dims, t->ne, t->type, data, nb);
    }
    return rc;
}

static int add_config(save_ctx *c, const lq_model *m, const lq_model_save_opts *o)
{
    lq_gguf_writer *w = c->w;
    const char *A = m->arch_name;
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", A, s), k)
    int pt = m->n_layer ? m->layers[0].q.src_type : LQ_GGML_F32;
    int rc = lq_gguf_writer_add_str(w, "general.architecture", A);
    if (!is_extra(o, "general.name")) /* the caller's name replaces the model's */
        rc |= lq_gguf_writer_add_str(w, "general.name", m->name);
    rc |= lq_gguf_writer_add_u32(w, "general.file_type", pt == LQ_GGML_I2_S ? 40 : pt == LQ_GGML_F16 ? 1 : 0);
    rc |= lq_gguf_writer_add_u32(w, KEY("vocab_size"), (uint32_t)m->n_vocab);
    rc |= lq_gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)m->n_ctx_train);
    rc |= lq_gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)m->n_embd);
    rc |= lq_gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)m->n_layer);
    rc |= lq_gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)m->n_ff);
    rc |= lq_gguf_writer_add_u32(w, KEY("rope.dimension_count"), (uint32_t)m->n_rot);
    rc |= lq_gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)m->head_dim);
    rc |= lq_gguf_writer_add_u32(w, KEY("attention.value_length"), (uint32_t)m->head_dim);
    rc |= lq_gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)m->n_head);
    rc |= lq_gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)m->n_head_kv);
    rc |= lq_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), m->eps);
    rc |= lq_gguf_writer_add_f32(w, KEY("rope.freq_base"), (float)m->rope_theta);
#undef KEY
    return rc ? lq_err_set(c->err, LQ_ENOMEM, "out of memory for the metadata") : LQ_OK;
}

/* the tokenizer.* keys from tok_dir's tokenizer.json; bos/eos ids from the loaded tokenizer
 * (a vindex has no tokenizer_config.json to name them) */
static int add_tokenizer(save_ctx *c, const lq_model *m, const char *tok_dir)
{
    if (!tok_dir)
        return lq_err_set(c->err, LQ_EINVAL, "the model has no GGUF: a tokenizer directory is required");
    json_t *cfg = lq_json_object();
    if (!cfg)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    if (m->tok && lq_tokenizer_bos(m->tok) >= 0)
        json_object_set_new(cfg, "bos_token_id", json_integer(lq_tokenizer_bos(m->tok)));
    if (m->tok && lq_tokenizer_eos(m->tok) >= 0)
        json_object_set_new(cfg, "eos_token_id", json_integer(lq_tokenizer_eos(m->tok)));
    int n = 0;
    int rc = hf_tokenizer_to_gguf(c->w, tok_dir, cfg, m->n_vocab, &n, c->err);
    json_decref(cfg);
    if (!rc && n == 0)
        rc = lq_err_set(c->err, LQ_ENOTFOUND, "no tokenizer.json to write the model's tokenizer from");
    return rc;
}

/* A vindex keeps a tied head as lm_head.bin, a copy of embeddings.bin: written once, tied
 * again, as the GGUF it came from had it. */
static int same_as_embd(const lq_model *m)
{
    const lq_dense_mat *e = &m->embd, *h = &m->lm_head.dense;
    if (m->lm_head.kind != LQ_WK_DENSE || h->type != e->type || h->rows != e->rows || h->cols != e->cols)
        return 0;
    size_t es = e->type == LQ_GGML_F32 ? 4 : 2;
    return h->data == e->data || !memcmp(h->data, e->data, (size_t)e->rows * (size_t)e->cols * es);
}

static int add_tensors(save_ctx *c, const lq_model *m)
{
    int rc = add_dense(c, "token_embd.weight", &m->embd);
    if (!rc)
        rc = add_vec(c, "output_norm.weight", m->output_norm, m->n_embd);
    if (!rc && !m->info.tied_embeddings && !same_as_embd(m))
        rc = add_wmat(c, "output.weight", &m->lm_head);
    for (int l = 0; !rc && l < m->n_layer; l++) {
        const lq_layer *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s ".weight", l), n)
        if ((rc = add_vec(c, NAME("attn_norm"), L->attn_norm, m->n_embd)) ||
            (rc = add_vec(c, NAME("ffn_norm"), L->ffn_norm, m->n_embd)) || (rc = add_wmat(c, NAME("attn_q"), &L->q)) ||
            (rc = add_wmat(c, NAME("attn_k"), &L->k)) || (rc = add_wmat(c, NAME("attn_v"), &L->v)) ||
            (rc = add_wmat(c, NAME("attn_output"), &L->o)) || (rc = add_wmat(c, NAME("ffn_gate"), &L->gate)) ||
            (rc = add_wmat(c, NAME("ffn_up"), &L->up)) || (rc = add_wmat(c, NAME("ffn_down"), &L->down)))
            break;
        if (L->attn_sub_norm && (rc = add_vec(c, NAME("attn_sub_norm"), L->attn_sub_norm, m->q_dim)))
            break;
        if (L->ffn_sub_norm && (rc = add_vec(c, NAME("ffn_sub_norm"), L->ffn_sub_norm, m->n_ff)))
            break;
#undef NAME
    }
    return rc;
}

int lq_model_save_gguf(const lq_model *m, const lq_model_save_opts *o, lq_err *err)
{
    if (!m || !o || !o->path || (o->n_extra && (!o->extra_keys || !o->extra_values)))
        return lq_err_set(err, LQ_EINVAL, "lq_model_save_gguf: model, path and the extra keys' values are required");
    if (m->ffn_remote)
        return lq_err_set(err, LQ_EUNSUPPORTED, "the model's FFN runs on a remote server (--ffn): its weights "
                                                "are not here to write");
    lq_gguf_writer *w = lq_gguf_writer_create();
    if (!w)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    save_ctx c = {.w = w, .err = err};
    int held = lq_model_weights_enter(m);
    int rc;
    if (m->gguf)
        rc = copy_gguf(&c, m, o);
    else if (!(rc = add_config(&c, m, o)) && !(rc = add_tokenizer(&c, m, o->tokenizer_dir)))
        rc = add_tensors(&c, m);
    for (size_t i = 0; !rc && i < o->n_extra; i++)
        if (lq_gguf_writer_add_str(w, o->extra_keys[i], o->extra_values[i]))
            rc = lq_err_set(err, LQ_EINVAL, "cannot add metadata key %s (given twice, or one the model's "
                                            "configuration writes)", o->extra_keys[i]);
    if (!rc)
        rc = lq_gguf_writer_write(w, o->path, err);
    lq_model_weights_leave(m, held);
    lq_gguf_writer_free(w);
    for (size_t i = 0; i < c.n_bufs; i++)
        free(c.bufs[i]);
    free(c.bufs);
    return rc;
}
