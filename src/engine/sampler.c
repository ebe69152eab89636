/* Token sampler: penalties, greedy, temperature, top-k, top-p, min-p and a seeded RNG.
 *
 * The hot path never sorts the whole vocabulary (128256 for Llama 3 / BitNet 2B-4T):
 *  - top-k: a bounded min-heap over the logits, O(n log k), then a sort of k entries;
 *  - top-p without top-k: the unnormalised weights exp((l - max) / T) are computed once and
 *    their mass histogrammed by -log w (1/32-nat buckets); only the bucket where the
 *    cumulative mass crosses top_p is sorted (typically tens to hundreds of tokens);
 *  - min-p is a plain threshold on the weights (no sort);
 *  - no truncation at all: inverse-CDF over the vocabulary in id order, no sort.
 * Every buffer is allocated in lq_sampler_create: nothing allocates per token. */
#include "larql/sampler.h"
#include "engine/sampler_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct lq_sampler {
    lq_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];          /* xoshiro256** state */
    /* penalty history */
    int32_t *count;           /* [n_vocab] accepted occurrences since reset */
    int32_t *seen;            /* [n_vocab] distinct accepted ids, in first-seen order */
    int32_t n_seen;
    int32_t *ring;            /* [repeat_last_n] last accepted ids (repeat window) */
    int32_t ring_len, ring_pos;
    uint32_t *stamp;          /* [n_vocab] marks "already penalised this call" */
    uint32_t stamp_now;
    /* scratch, reused every call */
    int32_t *cand_id;         /* [n_vocab] candidate ids */
    float *cand_val;          /* [n_vocab] candidate logits (penalised, unscaled) */
    float *weight;            /* [n_vocab] exp((l - max) / T) */
    double bmass[4096];       /* [SAMPLER_NB] top-p mass histogram by bucket of -log w */
};

/* top-p histogram: bucket = floor(-log(w) * 32), 4096 buckets cover 128 nats; beyond that
 * a weight is < e^-128, i.e. 0 in float, and such tokens are never kept. */
#define SAMPLER_NB 4096
#define BUCKETS_PER_NAT 32.0f

static inline int32_t bucket_of(float l, float mx, float inv_t)
{
    float d = (mx - l) * inv_t * BUCKETS_PER_NAT;
    return d < (float)(SAMPLER_NB - 1) ? (int32_t)d : SAMPLER_NB - 1;
}

void lq_sampler_defaults(lq_sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->frequency_penalty = 0.0f;
    p->presence_penalty = 0.0f;
    p->has_seed = 0;
    p->seed = 0;
}

int lq_sampler_params_check(const lq_sampler_params *p, lq_err *err)
{
    if (!p)
        return lq_err_set(err, LQ_EINVAL, "sampler: params is NULL");
    /* Every comparison is written so that NaN fails it. */
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f))
        return lq_err_set(err, LQ_EINVAL, "sampler: temperature %g outside [0, 100]",
                          (double)p->temperature);
    if (p->top_k < 0)
        return lq_err_set(err, LQ_EINVAL, "sampler: top_k %d must be >= 0 (0 = off)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return lq_err_set(err, LQ_EINVAL, "sampler: top_p %g outside (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return lq_err_set(err, LQ_EINVAL, "sampler: min_p %g outside [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return lq_err_set(err, LQ_EINVAL, "sampler: repeat_penalty %g must be > 0 and finite",
                          (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return lq_err_set(err, LQ_EINVAL, "sampler: repeat_last_n %d must be >= 0 (0 = all)",
                          p->repeat_last_n);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return lq_err_set(err, LQ_EINVAL, "sampler: frequency_penalty %g outside [-2, 2]",
                          (double)p->frequency_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return lq_err_set(err, LQ_EINVAL, "sampler: presence_penalty %g outside [-2, 2]",
                          (double)p->presence_penalty);
    return LQ_OK;
}

/* ---- RNG: splitmix64 expands the seed, xoshiro256** draws (Blackman & Vigna) ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

static void rng_seed(lq_sampler *s)
{
    uint64_t x = s->p.seed;
    if (!s->p.has_seed) {
        /* Unseeded: mix wall-clock nanoseconds with the handle's address, so two samplers
         * created in the same nanosecond still differ. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        x ^= (uint64_t)(uintptr_t)s * 0x9e3779b97f4a7c15ull;
    }
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
}

/* ---- create / free / history ---- */

int lq_sampler_create(const lq_sampler_params *p, int32_t n_vocab, lq_sampler **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "sampler: out is NULL");
    *out = NULL;
    int rc = lq_sampler_params_check(p, err);
    if (rc)
        return rc;
    if (n_vocab < 1)
        return lq_err_set(err, LQ_EINVAL, "sampler: n_vocab %d must be >= 1", (int)n_vocab);
    lq_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return lq_err_set(err, LQ_ENOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->count = calloc(n, sizeof *s->count);
    s->seen = malloc(n * sizeof *s->seen);
    s->stamp = calloc(n, sizeof *s->stamp);
    s->cand_id = malloc(n * sizeof *s->cand_id);
    s->cand_val = malloc(n * sizeof *s->cand_val);
    s->weight = malloc(n * sizeof *s->weight);
    if (p->repeat_last_n > 0)
        s->ring = malloc((size_t)p->repeat_last_n * sizeof *s->ring);
    if (!s->count || !s->seen || !s->stamp || !s->cand_id || !s->cand_val || !s->weight ||
        (p->repeat_last_n > 0 && !s->ring)) {
        lq_sampler_free(s);
        return lq_err_set(err, LQ_ENOMEM, "sampler: out of memory for %d-token vocabulary",
                          (int)n_vocab);
    }
    rng_seed(s);
    *out = s;
    return LQ_OK;
}

void lq_sampler_free(lq_sampler *s)
{
    if (!s)
        return;
    free(s->count);
    free(s->seen);
    free(s->ring);
    free(s->stamp);
    free(s->cand_id);
    free(s->cand_val);
    free(s->weight);
    free(s);
}

void lq_sampler_accept(lq_sampler *s, int32_t id)
{
    if (!s || id < 0 || id >= s->n_vocab)
        return;
    if (s->count[id] == 0)
        s->seen[s->n_seen++] = id;
    if (s->count[id] < INT32_MAX)
        s->count[id]++;
    if (s->ring) {
        s->ring[s->ring_pos] = id;
        s->ring_pos = (s->ring_pos + 1) % s->p.repeat_last_n;
        if (s->ring_len < s->p.repeat_last_n)
            s->ring_len++;
    }
}

void lq_sampler_reset(lq_sampler *s)
{
    if (!s)
        return;
    for (int32_t i = 0; i < s->n_seen; i++)
        s->count[s->seen[i]] = 0;
    s->n_seen = 0;
    s->ring_len = s->ring_pos = 0;
    rng_seed(s);
}

/* ---- helpers ---- */

/* Total order used everywhere: higher logit first, NaN as -inf, ties to the lower id. */
static inline float key_of(float v) { return isnan(v) ? -INFINITY : v; }
static inline int better(float va, int32_t ia, float vb, int32_t ib)
{
    va = key_of(va);
    vb = key_of(vb);
    return va > vb || (va == vb && ia < ib);
}

double lq_logsumexp(const float *logits, int32_t n)
{
    if (!logits || n <= 0)
        return -INFINITY;
    double mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > mx)
            mx = logits[i];
    if (isinf(mx))
        return mx; /* all -inf (or NaN): log 0; +inf dominates */
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(logits[i]))
            sum += exp((double)logits[i] - mx);
    /* sum >= 1: the finite maximum adds exp(0) (cppcheck assumes an empty loop) */
    /* cppcheck-suppress invalidFunctionArg */
    return mx + log(sum);
}

/* Min-heap (worst at the root) of candidate slots 0..k-1 in ids/vals. */
static void heap_sift_down(int32_t *ids, float *vals, int k, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && better(vals[w], ids[w], vals[l], ids[l]))
            w = l;
        if (r < k && better(vals[w], ids[w], vals[r], ids[r]))
            w = r;
        if (w == i)
            return;
        int32_t ti = ids[i];
        float tv = vals[i];
        ids[i] = ids[w];
        vals[i] = vals[w];
        ids[w] = ti;
        vals[w] = tv;
        i = w;
    }
}

/* Heap sort of the min-heap: popping the worst into the back leaves the array best first. */
static void heap_sort_best_first(int32_t *ids, float *vals, int k)
{
    for (int end = k - 1; end > 0; end--) {
        int32_t ti = ids[0];
        float tv = vals[0];
        ids[0] = ids[end];
        vals[0] = vals[end];
        ids[end] = ti;
        vals[end] = tv;
        heap_sift_down(ids, vals, end, 0);
    }
}

int lq_top_k(const float *logits, int32_t n, int k, int32_t *ids, float *vals)
{
    if (!logits || !ids || !vals || n <= 0 || k <= 0)
        return 0;
    if (k > n)
        k = n;
    for (int i = 0; i < k; i++) {
        ids[i] = i;
        vals[i] = logits[i];
    }
    for (int i = k / 2 - 1; i >= 0; i--)
        heap_sift_down(ids, vals, k, i);
    for (int32_t i = k; i < n; i++) {
        if (better(logits[i], i, vals[0], ids[0])) {
            ids[0] = i;
            vals[0] = logits[i];
            heap_sift_down(ids, vals, k, 0);
        }
    }
    heap_sort_best_first(ids, vals, k);
    return k;
}

static int32_t argmax(const float *l, int32_t n)
{
    int32_t best = 0;
    float bv = key_of(l[0]);
    for (int32_t i = 1; i < n; i++)
        if (l[i] > bv) { /* strict: ties keep the lower id; NaN never compares greater */
            bv = l[i];
            best = i;
        }
    return best;
}

static void apply_penalties(lq_sampler *s, float *logits)
{
    const lq_sampler_params *p = &s->p;
    if (p->repeat_penalty != 1.0f) {
        /* Each distinct id in the window is penalised once, as llama.cpp does. */
        if (++s->stamp_now == 0) { /* wrapped: clear the marks */
            memset(s->stamp, 0, (size_t)s->n_vocab * sizeof *s->stamp);
            s->stamp_now = 1;
        }
        int32_t nwin = s->ring ? s->ring_len : s->n_seen;
        const int32_t *win = s->ring ? s->ring : s->seen;
        for (int32_t i = 0; i < nwin; i++) {
            int32_t id = win[i];
            if (s->stamp[id] == s->stamp_now)
                continue;
            s->stamp[id] = s->stamp_now;
            float l = logits[id];
            logits[id] = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
        }
    }
    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) {
        for (int32_t i = 0; i < s->n_seen; i++) {
            int32_t id = s->seen[i];
            logits[id] -= p->frequency_penalty * (float)s->count[id] + p->presence_penalty;
        }
    }
}

/* Sort candidates best first by the shared total order. */
static void cand_sort(int32_t *ids, float *vals, int32_t m)
{
    /* Build a min-heap then heap-sort: O(m log m), deterministic, no qsort context hacks. */
    for (int32_t i = m / 2 - 1; i >= 0; i--)
        heap_sift_down(ids, vals, m, i);
    heap_sort_best_first(ids, vals, m);
}

/* Draws from the first m candidates with weights w[0..m-1] (unnormalised, sum total). */
static int32_t draw(lq_sampler *s, const int32_t *ids, const float *w, int32_t m, double total)
{
    double r = rng_uniform(s->rng) * total, cum = 0.0;
    for (int32_t i = 0; i < m; i++) {
        cum += w[i];
        if (r < cum)
            return ids[i];
    }
    /* Rounding left r at or beyond the summed mass: take the last token with weight. */
    for (int32_t i = m - 1; i > 0; i--)
        if (w[i] > 0.0f)
            return ids[i];
    return ids[0];
}

/* top-p and min-p over m candidates sorted best first with weights w (w[0] is the largest).
 * total: the mass of the distribution top-p refers to. Returns the kept count. */
static int32_t truncate_p(const lq_sampler_params *p, const float *w, int32_t m, double total,
                          double *kept_mass)
{
    int32_t keep = m;
    double cum = 0.0;
    if (p->top_p < 1.0f) {
        double target = (double)p->top_p * total;
        for (int32_t i = 0; i < m; i++) {
            cum += w[i];
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        float thr = p->min_p * w[0];
        int32_t j = 1; /* the best token always survives */
        while (j < keep && w[j] >= thr)
            j++;
        keep = j;
    }
    double mass = 0.0;
    for (int32_t i = 0; i < keep; i++)
        mass += w[i];
    *kept_mass = mass;
    return keep;
}

void lq_sampler_penalize(lq_sampler *s, float *logits)
{
    if (s && logits)
        apply_penalties(s, logits);
}

int32_t lq_sampler_sample(lq_sampler *s, float *logits)
{
    if (!s || !logits)
        return -1;
    apply_penalties(s, logits);
    return lq_sampler_pick(s, logits);
}

int32_t lq_sampler_pick(lq_sampler *s, float *logits)
{
    if (!s || !logits)
        return -1;
    const lq_sampler_params *p = &s->p;
    const int32_t n = s->n_vocab;
    if (p->temperature <= 0.0f)
        return argmax(logits, n);

    const float inv_t = 1.0f / p->temperature;
    int32_t *ci = s->cand_id;
    float *cv = s->cand_val;
    float *w = s->weight;

    if (p->top_k > 0 && p->top_k < n) {
        int32_t m = lq_top_k(logits, n, p->top_k, ci, cv);
        float mx = key_of(cv[0]);
        if (!isfinite(mx))
            return ci[0]; /* no finite logit: nothing to draw from */
        double total = 0.0;
        for (int32_t i = 0; i < m; i++) {
            w[i] = isnan(cv[i]) ? 0.0f : expf((cv[i] - mx) * inv_t);
            total += w[i];
        }
        double mass;
        int32_t keep = truncate_p(p, w, m, total, &mass);
        return draw(s, ci, w, keep, mass);
    }

    /* No top-k: weights over the whole vocabulary. */
    int32_t best = argmax(logits, n);
    float mx = key_of(logits[best]);
    if (!isfinite(mx))
        return best;
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) {
        w[i] = isnan(logits[i]) ? 0.0f : expf((logits[i] - mx) * inv_t);
        total += w[i];
    }
    if (p->top_p >= 1.0f && p->min_p <= 0.0f) {
        /* Untruncated: inverse CDF in id order over all tokens. */
        double r = rng_uniform(s->rng) * total, cum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            cum += w[i];
            if (r < cum)
                return i;
        }
        return best;
    }

    /* top-p without sorting the vocabulary: histogram the mass by bucket of -log w (width
     * 1/BUCKETS_PER_NAT), walk the buckets best first to the one where the cumulative mass
     * reaches top_p, and sort only that bucket's tokens to find the exact cut-off token. */
    int32_t cut_b = SAMPLER_NB; /* buckets < cut_b are kept whole; cut_b itself up to cut */
    float cut_l = 0.0f;
    int32_t cut_id = -1;
    if (p->top_p < 1.0f) {
        double target = (double)p->top_p * total, cum = 0.0;
        memset(s->bmass, 0, sizeof s->bmass);
        for (int32_t i = 0; i < n; i++)
            if (w[i] > 0.0f)
                s->bmass[bucket_of(logits[i], mx, inv_t)] += w[i];
        int32_t b = 0;
        while (b < SAMPLER_NB && cum + s->bmass[b] < target)
            cum += s->bmass[b++];
        if (b < SAMPLER_NB) {
            int32_t m = 0;
            for (int32_t i = 0; i < n; i++)
                if (w[i] > 0.0f && bucket_of(logits[i], mx, inv_t) == b) {
                    ci[m] = i;
                    cv[m] = logits[i];
                    m++;
                }
            cand_sort(ci, cv, m);
            int32_t c = 0;
            while (c < m - 1 && (cum += w[ci[c]]) < target)
                c++;
            cut_b = b;
            cut_l = cv[c];
            cut_id = ci[c];
        }
    }
    /* Kept: above the top-p cut and w >= min_p (w of the best token is 1). Both sets are
     * prefixes of the same best-first order, so their intersection is the shorter one. */
    int32_t m = 0;
    double mass = 0.0;
    for (int32_t i = 0; i < n; i++) {
        if (!(w[i] > 0.0f) || w[i] < p->min_p)
            continue;
        if (cut_b < SAMPLER_NB) {
            int32_t b = bucket_of(logits[i], mx, inv_t);
            if (b > cut_b || (b == cut_b && better(cut_l, cut_id, logits[i], i)))
                continue;
        }
        ci[m] = i;
        cv[m] = w[i];
        mass += w[i];
        m++;
    }
    if (m == 0)
        return best;
    return draw(s, ci, cv, m, mass);
}
