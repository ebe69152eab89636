/* Relation clusters, as LARQL's builder makes them (crates/larql-vindex/src/extract/build*,
 * clustering/): every feature of the knowledge band's layers (>= 8 layers; a smaller model,
 * which LARQL leaves without clusters, only when asked: its layers but the first and the
 * last) whose down_meta has a top token gets an offset direction
 *     normalize(E[top token] - mean E[tokens of the gate's whole-word input token])
 * (France -> Paris and Germany -> Berlin share "capital-of"); the directions are clustered
 * by cosine k-means (k = min(512, n), k-means++ seeded from the longest vector, 50 rounds)
 * and each cluster is named by, in order: the category word its members' embeddings are
 * closest to (mean cosine >= 0.25), a member pattern (language, country, month, number,
 * morphological), or its most distinctive tokens by tf-idf. LARQL first tries Wikidata /
 * WordNet databases it ships as data files; larql ships none, so that tier never fires.
 *
 * Written: relation_clusters.json {k, centres, labels, counts, top_tokens} and
 * feature_clusters.jsonl ({"l","f","c"} per feature). Read back by the vindex loader
 * (format.c) so that describe and relations can name relations without probe labels. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sb.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "larql/tokenizer.h"
#include "vindex/vindex_internal.h"
#include "core/hash.h"

#define MAX_RELATION_CLUSTERS 512
#define KMEANS_ITERS 50

/* ---- token helpers ---- */

/* decode([id], skip special) with ASCII whitespace trimmed; NULL when it cannot decode */
static char *decode_trim(const lq_tokenizer *tok, int32_t id)
{
    char *t = NULL;
    size_t n = 0;
    if (lq_tokenizer_decode(tok, &id, 1, LQ_DETOK_SKIP_SPECIAL, &t, &n, NULL)) {
        free(t);
        return NULL;
    }
    size_t a = 0;
    while (a < n && isspace((unsigned char)t[a]))
        a++;
    while (n > a && isspace((unsigned char)t[n - 1]))
        n--;
    memmove(t, t + a, n - a);
    t[n - a] = 0;
    return t;
}

/* LARQL's whole word: 3+ bytes, every character ASCII alphanumeric, '-' or '\'' */
static int whole_word(const char *s)
{
    size_t n = strlen(s);
    if (n < 3)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '\'')
            return 0;
    return 1;
}

/* Mean embedding of text's tokens (no specials) with ids > 2 and < V, L2-normalised when
 * norm says so: LARQL's input side of an offset (unnormalised) and its
 * encode_token_with_tokenizer (normalised). 0 = no usable token (or a zero vector). */
static int mean_embedding(const lq_vindex *v, const char *text, int normalise, float *out, float *row)
{
    int D = v->info.hidden_size, V = v->info.vocab_size;
    int32_t *ids = NULL;
    size_t n = 0;
    if (lq_tokenizer_encode(v->tok, text, strlen(text), 0, &ids, &n, NULL)) {
        free(ids);
        return 0;
    }
    memset(out, 0, (size_t)D * sizeof *out);
    int used = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] <= 2 || ids[i] >= V || lq_vindex_embed_row(v, ids[i], row, NULL))
            continue;
        for (int d = 0; d < D; d++)
            out[d] += row[d];
        used++;
    }
    free(ids);
    if (!used)
        return 0;
    for (int d = 0; d < D; d++)
        out[d] /= (float)used;
    if (normalise) {
        double ss = 0;
        for (int d = 0; d < D; d++)
            ss += (double)out[d] * out[d];
        float nrm = (float)sqrt(ss);
        if (!(nrm > 1e-8f))
            return 0;
        for (int d = 0; d < D; d++)
            out[d] /= nrm;
    }
    return 1;
}

/* ---- collected features ---- */

typedef struct feat {
    int layer, feature;
    char *top_tokens; /* the down_meta tokens, '|'-joined */
} feat;

typedef struct collect {
    float *dirs;      /* [n, D] unit offset directions */
    feat *fs;
    size_t n, cap;
} collect;

static int collect_push(collect *c, int D, const float *dir, int l, int f, char *toks)
{
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 1024;
        float *nd = realloc(c->dirs, nc * (size_t)D * sizeof *nd);
        if (nd)
            c->dirs = nd;
        feat *nf = realloc(c->fs, nc * sizeof *nf);
        if (nf)
            c->fs = nf;
        if (!nd || !nf)
            return -1;
        c->cap = nc;
    }
    memcpy(c->dirs + c->n * (size_t)D, dir, (size_t)D * sizeof *dir);
    c->fs[c->n] = (feat){l, f, toks};
    c->n++;
    return 0;
}

/* The gate's input token of every feature of layer l: the whole word whose embedding scores
 * highest against the gate row (first on ties), "" when there are no whole words. */
static int gate_top_tokens(const lq_vindex *v, int l, const float *ww_emb, const int32_t *ww_ids, size_t nww,
                           int nf, int32_t *best_id, lq_err *err)
{
    const size_t QB = 256;
    float *sc = malloc(QB * (size_t)nf * sizeof *sc), *best = malloc((size_t)nf * sizeof *best);
    if (!sc || !best) {
        free(sc);
        free(best);
        return lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
    }
    for (int f = 0; f < nf; f++)
        best[f] = -INFINITY, best_id[f] = -1;
    int rc = 0;
    for (size_t q0 = 0; !rc && q0 < nww; q0 += QB) {
        size_t nq = nww - q0 < QB ? nww - q0 : QB;
        rc = lq_vindex_gate_scores(v, l, ww_emb + q0 * (size_t)v->info.hidden_size, nq, sc, 0, err);
        for (size_t i = 0; !rc && i < nq; i++)
            for (int f = 0; f < nf; f++)
                if (sc[i * (size_t)nf + f] > best[f]) {
                    best[f] = sc[i * (size_t)nf + f];
                    best_id[f] = ww_ids[q0 + i];
                }
    }
    free(sc);
    free(best);
    return rc;
}

/* ---- k-means on unit vectors (cosine) ---- */

typedef struct km_job {
    const lq_kernels *kern;
    const float *data, *centres;
    size_t D, k;
    int *assign;
    int changed, failed;
} km_job;

#define KM_BLOCK 64

static void km_assign(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    (void)thread_idx;
    km_job *j = ctx;
    float *sims = malloc(KM_BLOCK * j->k * sizeof *sims);
    if (!sims) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t b = start; b < end; b++) {
        size_t i0 = (size_t)b * KM_BLOCK, cnt = KM_BLOCK; /* data is padded to whole blocks */
        j->kern->gate_scores(j->centres, 0, j->D, 0, j->k, j->data + i0 * j->D, cnt, sims, j->k);
        for (size_t i = 0; i < cnt; i++) {
            const float *row = sims + i * j->k;
            size_t bc = 0;
            float bs = -INFINITY;
            for (size_t c = 0; c < j->k; c++)
                if (row[c] > bs) {
                    bs = row[c];
                    bc = c;
                }
            if (j->assign[i0 + i] != (int)bc) {
                j->assign[i0 + i] = (int)bc;
                __atomic_store_n(&j->changed, 1, __ATOMIC_RELAXED);
            }
        }
    }
    free(sims);
}

typedef struct km_init_job {
    const lq_kernels *kern;
    const float *data, *centre;
    size_t D;
    float *sims;
} km_init_job;

/* sims[i] = data[i] . centre over a block of rows (the seeding pass, spread over the pool) */
static void km_init_chunk(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    (void)thread_idx;
    km_init_job *j = ctx;
    size_t r0 = (size_t)start * KM_BLOCK, r1 = (size_t)end * KM_BLOCK;
    j->kern->gate_scores(j->data + r0 * j->D, 0, j->D, 0, r1 - r0, j->centre, 1, j->sims + r0, r1 - r0);
}

/* data [n, D] (rows padded to a multiple of KM_BLOCK with zero rows that are never counted),
 * centres [k, D] out, assign [n] out */
static int kmeans(lq_pool *pool, const lq_kernels *kern, const float *data, size_t n, size_t npad, size_t D,
                  size_t k, float *centres, int *assign, lq_err *err)
{
    /* k-means++ as LARQL seeds it: the longest vector first, then each time the point
     * farthest (1 - cosine) from every centre so far */
    float *mind = malloc(npad * sizeof *mind), *sims = malloc(npad * sizeof *sims);
    if (!mind || !sims) {
        free(mind);
        free(sims);
        return lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory (k-means over %zu directions)", n);
    }
    size_t first = 0;
    float bn = 0;
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (size_t d = 0; d < D; d++)
            s += (double)data[i * D + d] * data[i * D + d];
        if ((float)s > bn) {
            bn = (float)s;
            first = i;
        }
    }
    memcpy(centres, data + first * D, D * sizeof *centres);
    for (size_t i = 0; i < n; i++)
        mind[i] = INFINITY;
    for (size_t c = 1; c < k; c++) {
        km_init_job ij = {kern, data, centres + (c - 1) * D, D, sims};
        lq_pool_for(pool, (int64_t)(npad / KM_BLOCK), 16, km_init_chunk, &ij);
        size_t bi = 0;
        float bd = -INFINITY;
        for (size_t i = 0; i < n; i++) {
            float dist = 1.0f - sims[i];
            if (dist < mind[i])
                mind[i] = dist;
            if (mind[i] > bd) {
                bd = mind[i];
                bi = i;
            }
        }
        memcpy(centres + c * D, data + bi * D, D * sizeof *centres);
    }
    free(mind);
    free(sims);
    /* Lloyd rounds: assign by the highest cosine (first on ties), stop when nothing moves,
     * else the mean of each cluster, renormalised (an empty cluster's centre is zero) */
    for (size_t i = 0; i < npad; i++)
        assign[i] = 0;
    double *acc = malloc(k * D * sizeof *acc);
    size_t *cnt = malloc(k * sizeof *cnt);
    if (!acc || !cnt) {
        free(acc);
        free(cnt);
        return lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
    }
    for (int it = 0; it < KMEANS_ITERS; it++) {
        km_job j = {kern, data, centres, D, k, assign, 0, 0};
        lq_pool_for(pool, (int64_t)(npad / KM_BLOCK), 1, km_assign, &j);
        if (j.failed) {
            free(acc);
            free(cnt);
            return lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory in k-means");
        }
        if (!j.changed)
            break;
        memset(acc, 0, k * D * sizeof *acc);
        memset(cnt, 0, k * sizeof *cnt);
        for (size_t i = 0; i < n; i++) {
            size_t c = (size_t)assign[i];
            cnt[c]++;
            for (size_t d = 0; d < D; d++)
                acc[c * D + d] += data[i * D + d];
        }
        for (size_t c = 0; c < k; c++) {
            float *ct = centres + c * D;
            if (!cnt[c]) {
                memset(ct, 0, D * sizeof *ct);
                continue;
            }
            double ss = 0;
            for (size_t d = 0; d < D; d++) {
                ct[d] = (float)(acc[c * D + d] / (double)cnt[c]);
                ss += (double)ct[d] * ct[d];
            }
            float nrm = (float)sqrt(ss);
            if (nrm > 1e-8f)
                for (size_t d = 0; d < D; d++)
                    ct[d] /= nrm;
        }
    }
    free(acc);
    free(cnt);
    return LQ_OK;
}

/* ---- labels ---- */

/* The category words and stop words LARQL labels with (its built-in sets; it reads a
 * Wikidata category file instead when one is present in its working directory). */
static const char *const CATEGORIES[] = {
    "country", "nation", "city", "place", "location", "region", "continent", "language", "nationality",
    "person", "people", "animal", "plant", "organism", "company", "organization", "institution", "brand",
    "product", "capital", "currency", "population", "leader", "president", "founder", "birthplace",
    "occupation", "profession", "genre", "category", "science", "biology", "chemistry", "physics",
    "mathematics", "medicine", "technology", "computer", "software", "internet", "digital", "music",
    "literature", "poetry", "film", "sport", "education", "politics", "government", "military", "religion",
    "philosophy", "food", "cooking", "ingredient", "agriculture", "art", "culture", "history", "geography",
    "economics", "business", "law", "health", "environment", "weather", "nature", "color", "shape", "size",
    "measurement", "quantity", "number", "time", "date", "month", "year", "period", "duration", "age",
    "direction", "position", "distance", "speed", "weight", "action", "movement", "creation", "destruction",
    "communication", "transport", "trade", "production", "construction", "concept", "quality", "property",
    "relation", "state", "condition", "emotion", "behavior", "process", "event", "structure", "system",
    "method", "theory", "principle", "material", "substance", "chemical", "mineral", "metal", "liquid",
    "family", "group", "community", "society", "role", "title", "code", "markup", "syntax", "format",
    "encoding", "protocol", "function", "variable", "type", "class", "pattern", "suffix", "prefix", "plural",
    "tense", "conjugation", "translation", "foreign", "multilingual"};

static const char *const STOP[] = {
    "the", "and", "for", "but", "not", "you", "all", "can", "her", "was", "one", "our", "out", "are", "has",
    "his", "how", "its", "may", "new", "now", "old", "see", "way", "who", "did", "get", "let", "say", "she",
    "too", "use", "from", "have", "been", "will", "with", "this", "that", "they", "were", "some", "them",
    "than", "when", "what", "your", "each", "make", "like", "just", "over", "such", "take", "also", "into",
    "only", "very", "more", "does", "most", "about", "which", "their", "would", "there", "could", "other",
    "after", "being", "where", "these", "those", "first", "should", "because", "through", "before",
    "between", "during", "while", "under", "still", "then", "here", "both", "never", "every", "much", "well",
    "same", "further", "again", "off", "always", "might", "often", "know", "need", "even", "really", "back",
    "must", "another", "without", "along", "until", "anything", "something", "nothing", "everything",
    "however", "already", "though", "either", "rather", "instead", "within", "right", "used", "using",
    "since", "down", "many", "long", "upon", "whether", "among", "later", "different", "possible", "given",
    "including", "called", "known", "based", "several", "become", "certain", "general", "together",
    "following", "number", "part", "found", "small", "large", "great"};

static const char *const LANGUAGES[] = {
    "english", "french", "german", "spanish", "italian", "portuguese", "russian", "chinese", "japanese",
    "korean", "arabic", "hindi", "bengali", "turkish", "dutch", "polish", "swedish", "norwegian", "danish",
    "finnish", "greek", "czech", "romanian", "hungarian", "thai", "vietnamese", "indonesian", "malay",
    "tagalog", "swahili", "hebrew", "persian", "urdu"};
static const char *const COUNTRIES[] = {
    "australia", "china", "chinese", "japan", "japanese", "germany", "german", "france", "french", "italy",
    "italian", "spain", "spanish", "russia", "russian", "brazil", "india", "indian", "canada", "canadian",
    "mexico", "mexican", "britain", "british", "korea", "korean", "turkey", "turkish", "poland", "polish",
    "sweden", "swedish", "norway", "norwegian", "portugal", "portuguese", "netherlands", "dutch", "greece",
    "greek", "egypt", "egyptian", "argentina", "iran", "iranian", "thailand", "thai", "vietnam", "vietnamese",
    "indonesia", "indonesian", "malaysia", "malaysian", "philippines", "filipino"};
static const char *const MONTHS[] = {"january", "february", "march",     "april",   "may",      "june",
                                     "july",    "august",   "september", "october", "november", "december"};
static const char *const NUMBERS[] = {"one", "two",   "three", "four",   "five",  "six",
                                      "seven", "eight", "nine", "ten", "first", "second",
                                      "third", "fourth", "fifth", "sixth", "seventh", "eighth"};

static int in_list(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, list[i]))
            return 1;
    return 0;
}
#define IN(s, L) in_list(s, L, sizeof L / sizeof L[0])

/* LARQL's member patterns: half or more of the members (rounded up) in one list */
static const char *entity_pattern(char **members, int n)
{
    if (n == 0)
        return NULL;
    int need = (n + 1) / 2, lang = 0, country = 0, month = 0, num = 0, morph = 0;
    for (int i = 0; i < n; i++) {
        const char *m = members[i]; /* lower case already */
        lang += IN(m, LANGUAGES);
        country += IN(m, COUNTRIES);
        month += IN(m, MONTHS);
        num += IN(m, NUMBERS);
        size_t len = strlen(m), alpha = 1;
        for (size_t k = 0; k < len; k++)
            alpha &= isalpha((unsigned char)m[k]) != 0;
        morph += len <= 4 && alpha;
    }
    return lang >= need ? "language" : country >= need ? "country" : month >= need ? "month"
           : num >= need ? "number" : morph >= need ? "morphological" : NULL;
}

/* one token of a cluster with its counts */
typedef struct tokc {
    char *tok;
    int count;
    double score;
} tokc;

/* tokens in insertion order plus an open-addressing index (capacity a power of 2, at most
 * half full) */
typedef struct tokmap {
    tokc *t;
    size_t n, cap;
    size_t *slot; /* index + 1, 0 = empty */
    size_t nslot;
} tokmap;

static size_t tm_hash(const char *s) { return (size_t)lq_fnv1a64_str(s); }

static tokc *tm_get(tokmap *m, const char *tok)
{
    if (m->nslot) {
        for (size_t j = tm_hash(tok) & (m->nslot - 1); m->slot[j]; j = (j + 1) & (m->nslot - 1))
            if (!strcmp(m->t[m->slot[j] - 1].tok, tok))
                return &m->t[m->slot[j] - 1];
    }
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 16;
        tokc *nt = realloc(m->t, nc * sizeof *nt);
        if (!nt)
            return NULL;
        m->t = nt;
        m->cap = nc;
    }
    if ((m->n + 1) * 2 > m->nslot) {
        size_t ns = m->nslot ? m->nslot * 2 : 32;
        size_t *sl = calloc(ns, sizeof *sl);
        if (!sl)
            return NULL;
        for (size_t i = 0; i < m->n; i++) {
            size_t j = tm_hash(m->t[i].tok) & (ns - 1);
            while (sl[j])
                j = (j + 1) & (ns - 1);
            sl[j] = i + 1;
        }
        free(m->slot);
        m->slot = sl;
        m->nslot = ns;
    }
    char *d = strdup(tok);
    if (!d)
        return NULL;
    size_t j = tm_hash(tok) & (m->nslot - 1);
    while (m->slot[j])
        j = (j + 1) & (m->nslot - 1);
    m->slot[j] = m->n + 1;
    m->t[m->n] = (tokc){d, 0, 0};
    return &m->t[m->n++];
}

static void tm_free(tokmap *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->t[i].tok);
    free(m->t);
    free(m->slot);
}

static int by_score(const void *a, const void *b)
{
    const tokc *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return strcmp(x->tok, y->tok); /* LARQL leaves ties in hash order: ours are by name */
}

static int by_count(const void *a, const void *b)
{
    const tokc *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->tok, y->tok);
}

/* Visits the label tokens of one feature's '|'-joined list: trimmed, lower case, 3+ bytes,
 * at least half of the characters ASCII alphanumeric, not a stop word. */
static void each_label_token(const char *list, void (*fn)(void *, const char *), void *ctx)
{
    const char *p = list;
    char buf[256];
    while (p) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        while (n && isspace((unsigned char)*p))
            p++, n--;
        while (n && isspace((unsigned char)p[n - 1]))
            n--;
        if (n >= 3 && n < sizeof buf) {
            size_t alnum = 0, chars = 0;
            for (size_t i = 0; i < n; i++) {
                buf[i] = (char)tolower((unsigned char)p[i]);
                alnum += isalnum((unsigned char)p[i]) != 0;
                chars += ((unsigned char)p[i] & 0xC0) != 0x80; /* UTF-8 lead bytes */
            }
            buf[n] = 0;
            if (alnum * 2 >= chars && !IN(buf, STOP))
                fn(ctx, buf);
        }
        p = bar ? bar + 1 : NULL;
    }
}

typedef struct count_ctx {
    tokmap *cluster, *global;
    int oom;
} count_ctx;

static void count_tok(void *ctx, const char *tok)
{
    count_ctx *c = ctx;
    tokc *a = tm_get(c->cluster, tok), *b = tm_get(c->global, tok);
    if (!a || !b) {
        c->oom = 1;
        return;
    }
    a->count++;
    b->count++;
}

typedef struct labels {
    char **label;      /* [k] */
    char ***top;       /* [k][<= 5] tf-idf tokens */
    int *n_top;        /* [k] */
} labels;

static void labels_free(labels *lb, size_t k)
{
    for (size_t c = 0; lb->label && c < k; c++) {
        free(lb->label[c]);
        for (int i = 0; lb->top && lb->top[c] && i < lb->n_top[c]; i++)
            free(lb->top[c][i]);
        if (lb->top)
            free(lb->top[c]);
    }
    free(lb->label);
    free(lb->top);
    free(lb->n_top);
}

static char *join3(tokc *t, size_t n)
{
    lq_sb b = {0};
    for (size_t i = 0; i < n && i < 3; i++) {
        if (i)
            lq_sb_puts(&b, "/");
        lq_sb_puts(&b, t[i].tok);
    }
    char *s = NULL;
    lq_sb_finish(&b, &s, NULL);
    return s;
}

static int label_clusters(const lq_vindex *v, const collect *co, const int *assign, size_t k, labels *lb,
                          lq_err *err)
{
    int D = v->info.hidden_size;
    lb->label = calloc(k, sizeof *lb->label);
    lb->top = calloc(k, sizeof *lb->top);
    lb->n_top = calloc(k, sizeof *lb->n_top);
    tokmap *cm = calloc(k, sizeof *cm), gm = {0};
    float *cat = malloc(sizeof CATEGORIES / sizeof CATEGORIES[0] * (size_t)D * sizeof *cat);
    int *cat_ok = calloc(sizeof CATEGORIES / sizeof CATEGORIES[0], sizeof *cat_ok);
    float *mem = malloc(10 * (size_t)D * sizeof *mem), *row = malloc((size_t)D * sizeof *row);
    int rc = 0;
    if (!lb->label || !lb->top || !lb->n_top || !cm || !cat || !cat_ok || !mem || !row)
        rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
    /* tf-idf over the members' down_meta tokens */
    for (size_t i = 0; !rc && i < co->n; i++) {
        count_ctx cc = {&cm[assign[i]], &gm, 0};
        each_label_token(co->fs[i].top_tokens, count_tok, &cc);
        if (cc.oom)
            rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
    }
    double total = co->n ? (double)co->n : 1.0;
    char **tfidf = rc ? NULL : calloc(k, sizeof *tfidf);
    if (!rc && !tfidf)
        rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
    for (size_t c = 0; !rc && c < k; c++) {
        tokmap *m = &cm[c];
        double size = 0;
        for (size_t i = 0; i < m->n; i++)
            size += m->t[i].count;
        if (size < 1)
            size = 1;
        for (size_t i = 0; i < m->n; i++) {
            tokc *g = tm_get(&gm, m->t[i].tok);
            double global = g && g->count ? g->count : 1;
            m->t[i].score = (m->t[i].count / size) * log(total / global);
        }
        if (m->n)
            qsort(m->t, m->n, sizeof *m->t, by_score);
        size_t nt = m->n < 5 ? m->n : 5;
        lb->top[c] = calloc(nt ? nt : 1, sizeof *lb->top[c]);
        for (size_t i = 0; lb->top[c] && i < nt; i++)
            lb->top[c][lb->n_top[c]++] = strdup(m->t[i].tok);
        char buf[32];
        if (nt) {
            tfidf[c] = join3(m->t, nt);
        } else if (m->n) {
            qsort(m->t, m->n, sizeof *m->t, by_count);
            tfidf[c] = join3(m->t, m->n);
        } else {
            snprintf(buf, sizeof buf, "cluster-%zu", c);
            tfidf[c] = strdup(buf);
        }
        if (!lb->top[c] || !tfidf[c])
            rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
    }
    /* the category word nearest to the members' embeddings, else a member pattern */
    size_t ncat = sizeof CATEGORIES / sizeof CATEGORIES[0];
    for (size_t w = 0; !rc && w < ncat; w++)
        cat_ok[w] = mean_embedding(v, CATEGORIES[w], 1, cat + w * (size_t)D, row);
    for (size_t c = 0; !rc && c < k; c++) {
        int nm = 0;
        for (int i = 0; i < lb->n_top[c] && i < 10; i++)
            nm += mean_embedding(v, lb->top[c][i], 1, mem + (size_t)nm * D, row);
        const char *pick = NULL;
        if (nm) {
            float best = -INFINITY;
            size_t bw = 0;
            for (size_t w = 0; w < ncat; w++) {
                if (!cat_ok[w])
                    continue;
                float s = 0;
                for (int i = 0; i < nm; i++) {
                    float d = 0;
                    for (int e = 0; e < D; e++)
                        d += mem[(size_t)i * D + e] * cat[w * (size_t)D + e];
                    s += d;
                }
                s /= (float)nm;
                if (s > best) {
                    best = s;
                    bw = w;
                }
            }
            pick = best >= 0.25f ? CATEGORIES[bw] : entity_pattern(lb->top[c], lb->n_top[c]);
        }
        lb->label[c] = strdup(pick ? pick : tfidf[c]);
        if (!lb->label[c])
            rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
    }
    for (size_t c = 0; tfidf && c < k; c++)
        free(tfidf[c]);
    free(tfidf);
    for (size_t c = 0; cm && c < k; c++)
        tm_free(&cm[c]);
    free(cm);
    tm_free(&gm);
    free(cat);
    free(cat_ok);
    free(mem);
    free(row);
    return rc;
}

/* ---- files ---- */

static int write_files(const char *dir, const collect *co, const float *centres, size_t k, size_t D,
                       const int *assign, const labels *lb, lq_err *err)
{
    /* serde_json's pretty layout (two-space indent, one element per line) */
    lq_sb b = {0};
    lq_sb_printf(&b, "{\n  \"k\": %zu,\n  \"centres\": [", k);
    for (size_t c = 0; c < k; c++) {
        lq_sb_puts(&b, c ? ",\n    [" : "\n    [");
        for (size_t d = 0; d < D; d++) {
            lq_sb_puts(&b, d ? ",\n      " : "\n      ");
            lq_sb_f32(&b, centres[c * D + d]);
        }
        lq_sb_puts(&b, "\n    ]");
    }
    lq_sb_puts(&b, k ? "\n  ],\n  \"labels\": [" : "],\n  \"labels\": [");
    for (size_t c = 0; c < k; c++) {
        lq_sb_puts(&b, c ? ",\n    " : "\n    ");
        lq_sb_json_str(&b, lb->label[c], strlen(lb->label[c]));
    }
    lq_sb_puts(&b, k ? "\n  ],\n  \"counts\": [" : "],\n  \"counts\": [");
    size_t *cnt = calloc(k ? k : 1, sizeof *cnt);
    for (size_t i = 0; cnt && i < co->n; i++)
        cnt[assign[i]]++;
    for (size_t c = 0; c < k; c++)
        lq_sb_printf(&b, c ? ",\n    %zu" : "\n    %zu", cnt ? cnt[c] : 0);
    free(cnt);
    lq_sb_puts(&b, k ? "\n  ],\n  \"top_tokens\": [" : "],\n  \"top_tokens\": [");
    for (size_t c = 0; c < k; c++) {
        lq_sb_puts(&b, c ? ",\n    [" : "\n    [");
        for (int i = 0; i < lb->n_top[c]; i++) {
            lq_sb_puts(&b, i ? ",\n      " : "\n      ");
            lq_sb_json_str(&b, lb->top[c][i], strlen(lb->top[c][i]));
        }
        lq_sb_puts(&b, lb->n_top[c] ? "\n    ]" : "]");
    }
    lq_sb_puts(&b, k ? "\n  ]\n}" : "]\n}");
    char *text = NULL;
    int rc = lq_sb_finish(&b, &text, err);
    if (!rc)
        rc = lq_vx_write_file(dir, "relation_clusters.json", text, strlen(text), err);
    free(text);
    if (rc)
        return rc;
    lq_sb j = {0};
    for (size_t i = 0; i < co->n; i++)
        lq_sb_printf(&j, "{\"l\":%d,\"f\":%d,\"c\":%d}\n", co->fs[i].layer, co->fs[i].feature, assign[i]);
    text = NULL;
    rc = lq_sb_finish(&j, &text, err);
    if (!rc)
        rc = lq_vx_write_file(dir, "feature_clusters.jsonl", text ? text : "", text ? strlen(text) : 0, err);
    free(text);
    return rc;
}

/* ---- the stage ---- */

int lq_vx_write_clusters(const char *dir, int n_threads, int any_depth, size_t *n_clustered, size_t *k_out, lq_err *err)
{
    *n_clustered = 0;
    *k_out = 0;
    lq_vindex_open_opts vo = {.n_threads = n_threads, .verify_checksums = 0};
    lq_vindex *v = NULL;
    int rc = lq_vindex_open(dir, &vo, &v, err);
    if (rc)
        return rc;
    const lq_vindex_info *in = &v->info;
    int L = in->num_layers, D = in->hidden_size, V = in->vocab_size;
    if (in->dense_only || !v->has_gate || !v->has_down || (!in->has_bands && !any_depth)) {
        lq_vindex_close(v);
        return LQ_OK;
    }
    /* A model below 8 layers has no knowledge band in LARQL's table (and LARQL writes no
     * clusters for it); with any_depth, the layers between the first and the last (every
     * layer of a model of one or two). */
    int l0 = in->has_bands ? in->bands[1].start : L > 2 ? 1 : 0;
    int l1 = in->has_bands ? in->bands[1].end + 1 : L > 2 ? L - 1 : L;
    l0 = l0 < L ? l0 : L;
    l1 = l1 < L ? l1 : L;
    /* the whole-word vocabulary and its embedding rows */
    int32_t *ww_ids = malloc((size_t)V * sizeof *ww_ids);
    float *ww = NULL, *dir_v = malloc((size_t)D * sizeof *dir_v), *row = malloc((size_t)D * sizeof *row),
          *avg = malloc((size_t)D * sizeof *avg);
    size_t nww = 0;
    collect co = {0};
    if (!ww_ids || !dir_v || !row || !avg)
        rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
    for (int32_t id = 0; !rc && id < V; id++) {
        char *t = decode_trim(v->tok, id);
        if (t && whole_word(t))
            ww_ids[nww++] = id;
        free(t);
    }
    if (!rc && nww && !(ww = malloc(nww * (size_t)D * sizeof *ww)))
        rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
    for (size_t i = 0; !rc && i < nww; i++)
        rc = lq_vindex_embed_row(v, ww_ids[i], ww + i * (size_t)D, err);
    /* offsets of the knowledge band's features */
    for (int l = l0; !rc && l < l1; l++) {
        int nf = v->layers[l].present ? v->layers[l].num_features : 0;
        if (!nf || !nww)
            continue; /* LARQL: no gate tokens, no directions for the layer */
        int32_t *gid = malloc((size_t)nf * sizeof *gid);
        if (!gid) {
            rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
            break;
        }
        rc = gate_top_tokens(v, l, ww, ww_ids, nww, nf, gid, err);
        for (int f = 0; !rc && f < nf; f++) {
            lq_feature_meta m;
            if (!lq_vindex_feature_meta(v, l, f, &m) || m.top_token_id <= 2 || m.top_token_id >= V || gid[f] < 0)
                continue;
            char *gate_tok = decode_trim(v->tok, gid[f]);
            int ok = gate_tok && *gate_tok && mean_embedding(v, gate_tok, 0, avg, row) &&
                     !lq_vindex_embed_row(v, m.top_token_id, row, NULL);
            free(gate_tok);
            if (!ok)
                continue;
            double ss = 0;
            for (int d = 0; d < D; d++) {
                dir_v[d] = row[d] - avg[d];
                ss += (double)dir_v[d] * dir_v[d];
            }
            float nrm = (float)sqrt(ss);
            if (!(nrm > 1e-8f))
                continue;
            for (int d = 0; d < D; d++)
                dir_v[d] /= nrm;
            lq_sb tb = {0};
            for (int k = 0; k < m.n_top; k++) {
                if (k)
                    lq_sb_puts(&tb, "|");
                lq_sb_puts(&tb, lq_vindex_token_text(v, m.top_ids[k]));
            }
            char *toks = NULL;
            if (lq_sb_finish(&tb, &toks, err) || collect_push(&co, D, dir_v, l, f, toks)) {
                free(toks);
                rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory");
            }
        }
        free(gid);
    }
    size_t n = co.n, k = n < MAX_RELATION_CLUSTERS ? n : MAX_RELATION_CLUSTERS;
    size_t npad = (n + KM_BLOCK - 1) / KM_BLOCK * KM_BLOCK;
    float *centres = NULL;
    int *assign = NULL;
    labels lb = {0};
    if (!rc && n) {
        float *nd = realloc(co.dirs, (npad ? npad : 1) * (size_t)D * sizeof *nd); /* zero rows pad the last block */
        centres = malloc(k * (size_t)D * sizeof *centres);
        assign = malloc(npad * sizeof *assign);
        if (nd)
            co.dirs = nd;
        if (!nd || !centres || !assign)
            rc = lq_err_set(err, LQ_ENOMEM, "relation clusters: out of memory (%zu directions)", n);
        else
            memset(co.dirs + n * (size_t)D, 0, (npad - n) * (size_t)D * sizeof *co.dirs);
        if (!rc)
            rc = kmeans(v->pool, v->kern, co.dirs, n, npad, (size_t)D, k, centres, assign, err);
        if (!rc)
            rc = label_clusters(v, &co, assign, k, &lb, err);
        if (!rc)
            rc = write_files(dir, &co, centres, k, (size_t)D, assign, &lb, err);
        if (!rc) {
            *n_clustered = n;
            *k_out = k;
        }
    }
    labels_free(&lb, k);
    for (size_t i = 0; i < co.n; i++)
        free(co.fs[i].top_tokens);
    free(co.fs);
    free(co.dirs);
    free(centres);
    free(assign);
    free(ww_ids);
    free(ww);
    free(dir_v);
    free(row);
    free(avg);
    lq_vindex_close(v);
    return rc;
}
