/* Random BitNet b1.58 (or llama) GGUF fixtures, deterministic from a seed.
 *
 * The file is what microsoft's converter writes for BitNet: GGUF v3, alignment 32,
 * architecture string as key prefix, hyper-parameters as UINT32/FLOAT32, I2_S projections
 * (128-element/32-byte strided blocks, f32 scale at n/4, padded to n/4 + 32), F32 norms,
 * F32 or F16 tied embedding, and a byte-level BPE vocabulary (256 byte tokens, merges trained
 * on a small corpus, then <|begin_of_text|>, <|end_of_text|>, <|eot_id|>) in the metadata.
 * The weights are random, so generated text is noise; the point is the exact file layout
 * at any shape, including the 2B-4T shape used by the benchmarks. */
#include "larql/fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "larql/gguf.h"

/* Our own training text: short factual sentences with the target words spaced from
 * punctuation, so that each frequent word becomes one token. */
static const char builtin_corpus[] =
    "The capital of France is Paris . The capital of Germany is Berlin . "
    "The capital of Italy is Rome . The capital of Spain is Madrid . "
    "The capital of Japan is Tokyo . The capital of Egypt is Cairo . "
    "Paris is in France and Berlin is in Germany . Rome is in Italy . "
    "Once upon a time there was a little model that learned to count in ternary . "
    "Its weights were minus one , zero and plus one , and it ran fast on the CPU . "
    "The model read the text again and again , and then it knew the capital of France . "
    "Two plus two equals four . The sky is blue and the grass is green . "
    "Hello world ! This is a test of the tokenizer and of the inference engine . "
    "The quick brown fox jumps over the lazy dog . A database of what the weights know . "
    "Describe France : capital Paris , language French , currency euro . "
    "Describe Germany : capital Berlin , language German , currency euro . ";

/* ---- deterministic RNG: splitmix64 seeding a xoshiro256** stream ---- */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [0, 1). */
static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Approximately normal (sum of 4 uniforms, variance-corrected): cheap and deterministic. */
static float rng_normalish(rng *r)
{
    double s = rng_unit(r) + rng_unit(r) + rng_unit(r) + rng_unit(r) - 2.0;
    return (float)(s * 1.7320508075688772); /* var of the sum is 4/12 */
}

/* ---- presets and checks ---- */

int lq_fixture_preset(lq_fixture_opts *o, const char *preset, lq_err *err)
{
    memset(o, 0, sizeof *o);
    o->arch = "bitnet-b1.58";
    o->name = "larql-fixture";
    o->rope_theta = 500000.0;
    o->eps = 1e-5;
    o->emb_type = LQ_GGML_F32;
    o->seed = 1234;
    o->wscale = 4.0;
    o->ctx = 256;
    if (!preset || !strcmp(preset, "tiny")) {
        o->dim = 128, o->ffn = 256, o->layers = 2, o->heads = 4, o->kv_heads = 2, o->vocab = 320;
    } else if (!strcmp(preset, "demo")) {
        o->dim = 256, o->ffn = 512, o->layers = 4, o->heads = 4, o->kv_heads = 2, o->vocab = 512;
        o->ctx = 1024;
        o->name = "larql-demo";
    } else if (!strcmp(preset, "2b")) {
        /* microsoft/bitnet-b1.58-2B-4T's shape */
        o->dim = 2560, o->ffn = 6912, o->layers = 30, o->heads = 20, o->kv_heads = 5;
        o->vocab = 128256, o->ctx = 4096, o->emb_type = LQ_GGML_F16;
        o->name = "larql-2b4t-shaped-random";
    } else {
        return lq_err_set(err, LQ_EINVAL, "unknown preset '%s' (tiny, demo, 2b)", preset);
    }
    return LQ_OK;
}

static int is_bitnet(const char *arch) { return strncmp(arch, "bitnet", 6) == 0; }

int lq_fixture_check(const lq_fixture_opts *o, lq_err *err)
{
    if (!o->arch || (!is_bitnet(o->arch) && strcmp(o->arch, "llama")))
        return lq_err_set(err, LQ_EINVAL, "arch '%s': expected bitnet-b1.58, bitnet or llama",
                          o->arch ? o->arch : "(null)");
    if (o->dim <= 0 || o->dim % 128 || o->dim > 65536)
        return lq_err_set(err, LQ_EINVAL, "dim %d: must be a positive multiple of 128 (I2_S blocks), at most 65536", o->dim);
    if (o->ffn <= 0 || o->ffn % 128 || o->ffn > 262144)
        return lq_err_set(err, LQ_EINVAL, "ffn %d: must be a positive multiple of 128, at most 262144", o->ffn);
    if (o->layers <= 0 || o->layers > 512)
        return lq_err_set(err, LQ_EINVAL, "layers %d: must be in [1, 512]", o->layers);
    if (o->heads <= 0 || o->dim % o->heads || (o->dim / o->heads) % 2)
        return lq_err_set(err, LQ_EINVAL, "heads %d: must divide dim %d into an even head_dim", o->heads, o->dim);
    if (o->kv_heads <= 0 || o->heads % o->kv_heads)
        return lq_err_set(err, LQ_EINVAL, "kv_heads %d: must divide heads %d", o->kv_heads, o->heads);
    if (o->vocab < 259 || o->vocab > (1 << 24))
        return lq_err_set(err, LQ_EINVAL, "vocab %d: must be in [259, 16777216] (256 bytes + 3 specials)", o->vocab);
    if (o->ctx <= 0 || o->ctx > (1 << 20))
        return lq_err_set(err, LQ_EINVAL, "ctx %d: must be in [1, 1048576]", o->ctx);
    if (o->emb_type != LQ_GGML_F32 && o->emb_type != LQ_GGML_F16)
        return lq_err_set(err, LQ_EINVAL, "embedding type %d: must be F32 or F16", o->emb_type);
    if (o->proj_type && o->proj_type != LQ_GGML_F32 && (o->proj_type != LQ_GGML_F16 || is_bitnet(o->arch)))
        return lq_err_set(err, LQ_EINVAL, "projection type %d: llama takes F32 or F16 (BitNet's are I2_S)",
                          o->proj_type);
    if (!(o->rope_theta > 0) || !(o->eps > 0) || !(o->wscale > 0))
        return lq_err_set(err, LQ_EINVAL, "rope_theta, eps and wscale must be positive");
    return LQ_OK;
}

/* ---- vocabulary: GPT-2 byte-level symbols + BPE merges trained on the corpus ---- */

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

static int sv_push(strvec *s, char *str)
{
    if (!str)
        return -1;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 256;
        char **nv = realloc(s->v, nc * sizeof *nv);
        if (!nv) {
            free(str);
            return -1;
        }
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = str;
    return 0;
}

static void sv_free(strvec *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* GPT-2's byte -> unicode code point table: printable bytes map to themselves, the rest to
 * 256 + n in order. Returns the UTF-8 encoding (1 or 2 bytes) in out. */
static int byte_symbol(int b, char out[3])
{
    int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int i = 0; i < b; i++) {
            int p = (i >= 0x21 && i <= 0x7e) || (i >= 0xa1 && i <= 0xac) || (i >= 0xae && i <= 0xff);
            n += !p;
        }
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    out[2] = 0;
    return 2;
}

static char *concat2(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

/* A word of the training corpus as a list of symbol indices into `syms`. */
typedef struct word {
    int *sym;
    int n;
} word;

static int find_sym(const strvec *syms, const char *s)
{
    for (size_t i = 0; i < syms->n; i++)
        if (!strcmp(syms->v[i], s))
            return (int)i;
    return -1;
}

/* Trains up to max_merges BPE merges (most frequent adjacent pair first; ties broken by the
 * lower pair of symbol ids, so the result is deterministic). Appends merged symbols to
 * tokens and "a b" strings to merges. */
static int train_bpe(const char *corpus, int max_merges, strvec *tokens, strvec *merges)
{
    /* symbols in use: index into tokens->v */
    size_t len = strlen(corpus);
    word *words = calloc(len + 1, sizeof *words);
    int nw = 0, rc = -1;
    if (!words)
        return -1;
    for (size_t i = 0; i < len;) {
        while (i < len && corpus[i] == ' ')
            i++;
        if (i >= len)
            break;
        size_t j = i;
        while (j < len && corpus[j] != ' ')
            j++;
        int lead = i > 0; /* the space before a word belongs to it (Ġ) */
        int n = (int)(j - i) + lead;
        words[nw].sym = malloc((size_t)n * sizeof(int));
        if (!words[nw].sym)
            goto out;
        words[nw].n = n;
        int k = 0;
        if (lead)
            words[nw].sym[k++] = ' ';
        for (size_t c = i; c < j; c++)
            words[nw].sym[k++] = (unsigned char)corpus[c];
        nw++;
        i = j;
    }
    size_t base = tokens->n; /* byte symbols occupy ids 0..255 == byte values */
    (void)base;
    for (int m = 0; m < max_merges; m++) {
        /* count pairs: small corpus, so a quadratic scan over distinct pairs is fine */
        int best_a = -1, best_b = -1, best_c = 0;
        for (int w = 0; w < nw; w++) {
            for (int k = 0; k + 1 < words[w].n; k++) {
                int a = words[w].sym[k], b = words[w].sym[k + 1];
                if (best_a == a && best_b == b)
                    continue;
                int c = 0;
                for (int w2 = 0; w2 < nw; w2++)
                    for (int k2 = 0; k2 + 1 < words[w2].n; k2++)
                        c += words[w2].sym[k2] == a && words[w2].sym[k2 + 1] == b;
                if (c > best_c || (c == best_c && (a < best_a || (a == best_a && b < best_b)))) {
                    best_a = a, best_b = b, best_c = c;
                }
            }
        }
        if (best_c == 0)
            break;
        char *merged = concat2(tokens->v[best_a], tokens->v[best_b]);
        if (!merged)
            goto out;
        int id = find_sym(tokens, merged);
        if (id < 0) {
            char *ms = malloc(strlen(tokens->v[best_a]) + strlen(tokens->v[best_b]) + 2);
            if (!ms) {
                free(merged);
                goto out;
            }
            sprintf(ms, "%s %s", tokens->v[best_a], tokens->v[best_b]);
            if (sv_push(merges, ms) || sv_push(tokens, merged))
                goto out;
            id = (int)tokens->n - 1;
        } else {
            free(merged);
        }
        for (int w = 0; w < nw; w++) {
            int o = 0;
            for (int k = 0; k < words[w].n; k++) {
                if (k + 1 < words[w].n && words[w].sym[k] == best_a && words[w].sym[k + 1] == best_b) {
                    words[w].sym[o++] = id;
                    k++;
                } else {
                    words[w].sym[o++] = words[w].sym[k];
                }
            }
            words[w].n = o;
        }
    }
    rc = 0;
out:
    for (int w = 0; w < nw; w++)
        free(words[w].sym);
    free(words);
    return rc;
}

/* ---- tensors ---- */

typedef struct tensor_buf {
    void *data;
    uint64_t nbytes;
} tensor_buf;

typedef struct fixture_ctx {
    lq_gguf_writer *w;
    tensor_buf *bufs;
    size_t n_bufs, cap_bufs;
    rng r;
} fixture_ctx;

static void *ctx_alloc(fixture_ctx *c, uint64_t nbytes)
{
    if (c->n_bufs == c->cap_bufs) {
        size_t nc = c->cap_bufs ? c->cap_bufs * 2 : 64;
        tensor_buf *nb = realloc(c->bufs, nc * sizeof *nb);
        if (!nb)
            return NULL;
        c->bufs = nb;
        c->cap_bufs = nc;
    }
    void *p = calloc(1, (size_t)nbytes);
    if (!p)
        return NULL;
    c->bufs[c->n_bufs].data = p;
    c->bufs[c->n_bufs].nbytes = nbytes;
    c->n_bufs++;
    return p;
}

static int add_norm(fixture_ctx *c, const char *name, int n)
{
    float *v = ctx_alloc(c, (uint64_t)n * 4);
    if (!v)
        return LQ_ENOMEM;
    for (int i = 0; i < n; i++)
        v[i] = 1.0f + 0.1f * (float)(2.0 * rng_unit(&c->r) - 1.0);
    uint64_t ne[1] = {(uint64_t)n};
    return lq_gguf_writer_add_tensor(c->w, name, 1, ne, LQ_GGML_F32, v, (uint64_t)n * 4);
}

/* Byte -> byte table folding the unused 2-bit code 3 into code 1 (zero): uniform random
 * bytes then give P(-1) = P(+1) = 1/4, P(0) = 1/2 per element. */
static uint8_t fold3[256];

static int add_i2s(fixture_ctx *c, const char *name, int rows, int cols, double wscale)
{
    uint64_t n = (uint64_t)rows * cols, nbytes = n / 4 + 32;
    uint8_t *p = ctx_alloc(c, nbytes);
    if (!p)
        return LQ_ENOMEM;
    for (uint64_t i = 0; i < n / 4; i += 8) {
        uint64_t x = rng_next(&c->r);
        for (int k = 0; k < 8 && i + k < n / 4; k++)
            p[i + k] = fold3[(x >> (8 * k)) & 0xff];
    }
    float scale = (float)(wscale * (1.0 + 0.5 * rng_unit(&c->r)) / sqrt((double)cols));
    memcpy(p + n / 4, &scale, 4);
    uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    return lq_gguf_writer_add_tensor(c->w, name, 2, ne, LQ_GGML_I2_S, p, nbytes);
}

static int add_dense(fixture_ctx *c, const char *name, int rows, int cols, int type, float std)
{
    uint64_t n = (uint64_t)rows * cols;
    uint64_t esz = type == LQ_GGML_F16 ? 2 : 4;
    void *p = ctx_alloc(c, n * esz);
    if (!p)
        return LQ_ENOMEM;
    if (type == LQ_GGML_F16) {
        uint16_t *h = p;
        for (uint64_t i = 0; i < n; i++)
            h[i] = lq_f32_to_f16(std * rng_normalish(&c->r));
    } else {
        float *f = p;
        for (uint64_t i = 0; i < n; i++)
            f[i] = std * rng_normalish(&c->r);
    }
    uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    return lq_gguf_writer_add_tensor(c->w, name, 2, ne, type, p, n * esz);
}

static int add_kv(fixture_ctx *c, const lq_fixture_opts *o, const strvec *tokens,
                  const float *scores, const int32_t *types, const strvec *merges, int bos)
{
    lq_gguf_writer *w = c->w;
    char key[128];
    const char *A = o->arch;
    int hd = o->dim / o->heads;
    int rc = 0;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", A, suffix), key)
    rc |= lq_gguf_writer_add_str(w, "general.architecture", A);
    rc |= lq_gguf_writer_add_str(w, "general.name", o->name ? o->name : "larql-fixture");
    /* llama.cpp's file types: 40 MOSTLY_I2_S, 1 MOSTLY_F16, 0 ALL_F32 */
    rc |= lq_gguf_writer_add_u32(w, "general.file_type", is_bitnet(A) ? 40 : o->proj_type == LQ_GGML_F16 ? 1 : 0);
    rc |= lq_gguf_writer_add_u32(w, KEY("vocab_size"), (uint32_t)tokens->n);
    rc |= lq_gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)o->ctx);
    rc |= lq_gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)o->dim);
    rc |= lq_gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)o->layers);
    rc |= lq_gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)o->ffn);
    rc |= lq_gguf_writer_add_u32(w, KEY("rope.dimension_count"), (uint32_t)hd);
    rc |= lq_gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)o->heads);
    rc |= lq_gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)o->kv_heads);
    rc |= lq_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)o->eps);
    rc |= lq_gguf_writer_add_f32(w, KEY("rope.freq_base"), (float)o->rope_theta);
#undef KEY
    rc |= lq_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    rc |= lq_gguf_writer_add_str(w, "tokenizer.ggml.pre", "llama-bpe");
    rc |= lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens->v, tokens->n);
    rc |= lq_gguf_writer_add_arr(w, "tokenizer.ggml.scores", LQ_GGUF_F32, scores, tokens->n);
    rc |= lq_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LQ_GGUF_I32, types, tokens->n);
    rc |= lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges->v, merges->n);
    rc |= lq_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    rc |= lq_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)bos + 1);
    rc |= lq_gguf_writer_add_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)bos + 2);
    rc |= lq_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 1);
    return rc ? LQ_ENOMEM : LQ_OK;
}

int lq_fixture_write(const lq_fixture_opts *o, const char *path, lq_err *err)
{
    int rc = lq_fixture_check(o, err);
    if (rc)
        return rc;
    for (int b = 0; b < 256; b++) {
        int v = 0;
        for (int s = 0; s < 8; s += 2) {
            int code = (b >> s) & 3;
            v |= (code == 3 ? 1 : code) << s;
        }
        fold3[b] = (uint8_t)v;
    }

    fixture_ctx c;
    memset(&c, 0, sizeof c);
    rng_seed(&c.r, o->seed);
    strvec tokens = {0}, merges = {0};
    float *scores = NULL;
    int32_t *types = NULL;
    rc = LQ_ENOMEM;

    /* vocabulary: 256 byte symbols (id = byte value), merges, padding, 3 specials */
    for (int b = 0; b < 256; b++) {
        char s[3];
        byte_symbol(b, s);
        if (sv_push(&tokens, strdup(s)))
            goto out;
    }
    const int n_special = 3;
    int n_merge_max = o->vocab - 256 - n_special;
    if (train_bpe(o->corpus ? o->corpus : builtin_corpus, n_merge_max, &tokens, &merges))
        goto out;
    /* a large vocabulary (the 2B shape) outgrows the corpus: pad with unreachable tokens */
    while ((int)tokens.n < o->vocab - n_special) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%zu]", tokens.n);
        if (sv_push(&tokens, strdup(pad)))
            goto out;
    }
    int bos = (int)tokens.n;
    if (sv_push(&tokens, strdup("<|begin_of_text|>")) || sv_push(&tokens, strdup("<|end_of_text|>")) ||
        sv_push(&tokens, strdup("<|eot_id|>")))
        goto out;
    scores = malloc(tokens.n * sizeof *scores);
    types = malloc(tokens.n * sizeof *types);
    if (!scores || !types)
        goto out;
    for (size_t i = 0; i < tokens.n; i++) {
        /* earlier merge = higher score; bytes 0; specials CONTROL (3) */
        scores[i] = i < 256 ? 0.0f : (i < 256 + merges.n ? -(float)(i - 255) : -1e9f);
        types[i] = (int)i >= bos ? 3 : 1;
    }
    for (size_t i = (size_t)bos; i < tokens.n; i++)
        scores[i] = 0.0f;

    c.w = lq_gguf_writer_create();
    if (!c.w)
        goto out;
    rc = add_kv(&c, o, &tokens, scores, types, &merges, bos);
    if (rc)
        goto out;

    int V = (int)tokens.n, D = o->dim, F = o->ffn, hd = D / o->heads, kvd = hd * o->kv_heads;
    int bitnet = is_bitnet(o->arch);
    rc = add_dense(&c, "token_embd.weight", V, D, o->emb_type, (float)(2.0 / sqrt((double)D)));
    if (!rc)
        rc = add_norm(&c, "output_norm.weight", D);
    char name[96];
    for (int l = 0; l < o->layers && !rc; l++) {
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", l, s), name)
        rc = add_norm(&c, NAME("attn_norm.weight"), D);
        if (bitnet) {
            if (!rc) rc = add_i2s(&c, NAME("attn_q.weight"), D, D, o->wscale);
            if (!rc) rc = add_i2s(&c, NAME("attn_k.weight"), kvd, D, o->wscale);
            if (!rc) rc = add_i2s(&c, NAME("attn_v.weight"), kvd, D, o->wscale);
            if (!rc) rc = add_norm(&c, NAME("attn_sub_norm.weight"), D);
            if (!rc) rc = add_i2s(&c, NAME("attn_output.weight"), D, D, o->wscale);
            if (!rc) rc = add_norm(&c, NAME("ffn_norm.weight"), D);
            if (!rc) rc = add_i2s(&c, NAME("ffn_gate.weight"), F, D, o->wscale);
            if (!rc) rc = add_i2s(&c, NAME("ffn_up.weight"), F, D, o->wscale);
            if (!rc) rc = add_norm(&c, NAME("ffn_sub_norm.weight"), F);
            if (!rc) rc = add_i2s(&c, NAME("ffn_down.weight"), D, F, o->wscale);
        } else {
            float sd = (float)(1.0 / sqrt((double)D)), sf = (float)(1.0 / sqrt((double)F));
            int pt = o->proj_type ? o->proj_type : LQ_GGML_F32;
            if (!rc) rc = add_dense(&c, NAME("attn_q.weight"), D, D, pt, sd);
            if (!rc) rc = add_dense(&c, NAME("attn_k.weight"), kvd, D, pt, sd);
            if (!rc) rc = add_dense(&c, NAME("attn_v.weight"), kvd, D, pt, sd);
            if (!rc) rc = add_dense(&c, NAME("attn_output.weight"), D, D, pt, sd);
            if (!rc) rc = add_norm(&c, NAME("ffn_norm.weight"), D);
            if (!rc) rc = add_dense(&c, NAME("ffn_gate.weight"), F, D, pt, sd);
            if (!rc) rc = add_dense(&c, NAME("ffn_up.weight"), F, D, pt, sd);
            if (!rc) rc = add_dense(&c, NAME("ffn_down.weight"), D, F, pt, sf);
        }
#undef NAME
    }
    if (rc) {
        lq_err_set(err, rc, "fixture: cannot build tensors (%s)", lq_status_str(rc));
        goto out;
    }
    rc = lq_gguf_writer_write(c.w, path, err);
out:
    if (rc == LQ_ENOMEM && err && !err->msg[0])
        lq_err_set(err, rc, "fixture: out of memory");
    lq_gguf_writer_free(c.w);
    for (size_t i = 0; i < c.n_bufs; i++)
        free(c.bufs[i].data);
    free(c.bufs);
    sv_free(&tokens);
    sv_free(&merges);
    free(scores);
    free(types);
    return rc;
}
