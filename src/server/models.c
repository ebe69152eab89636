/* The model behind a server (opened eagerly at start, or single-flight lazily on the first
 * request that needs it), its memory fit under --memory-limit, the generation scheduler, and
 * the pool of single-pass sessions (/v1/infer and friends). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

/* The memory bound (--memory-limit, else the cgroup's memory.max): the weights and 1/8 of
 * them for scratch and the rest stay resident, and what is left pays for KV caches. Every
 * session has the server's context, so its KV size is fixed: the generation slots (the
 * scheduler's) and the single-pass sessions (the pool's, /v1/infer) are capped to what fits,
 * so that a request beyond them waits for a slot or gets 503 instead of allocating past the
 * bound, and a context whose KV cache cannot fit even one of each is refused here, naming
 * the sizes, before anything is allocated. */
#define MIB(b) ((double)(b) / 1048576.0)
static int fit_memory(lq_server *s, lq_model *m, lq_scheduler_opts *so, lq_err *err)
{
    if (!s->mem_limit)
        return 0;
    const lq_model_info *mi = lq_model_get_info(m);
    int n_ctx = so->n_ctx > 0 ? so->n_ctx : mi->n_ctx_train;
    uint64_t kv = lq_model_kv_bytes(m, n_ctx);
    uint64_t resident = mi->weight_bytes + mi->weight_bytes / 8 + mi->repack_bytes;
    uint64_t left = s->mem_limit > resident ? s->mem_limit - resident : 0;
    uint64_t fit = kv ? left / kv : UINT64_MAX;
    if (fit < 2)
        return lq_err_set(err, LQ_ENOMEM,
                          "memory limit %.1f MiB: the weights keep about %.1f MiB resident and a session's KV "
                          "cache at context %d needs %.2f MiB; the %.2f MiB left is not enough for one generation "
                          "and one single-pass session (lower --ctx or raise --memory-limit)",
                          MIB(s->mem_limit), MIB(resident), n_ctx, MIB(kv), MIB(left));
    if (fit < 2 * (uint64_t)s->o.max_concurrent) {
        so->max_active = (int)(fit / 2);
        s->pool_cap = (int)(fit - fit / 2);
        srv_log(s, "memory limit %.1f MiB: KV caches (%.2f MiB each at context %d) for %d concurrent generations "
                "and %d single-pass sessions, not %d each",
                MIB(s->mem_limit), MIB(kv), n_ctx, so->max_active, s->pool_cap, s->o.max_concurrent);
    }
    return 0;
}

int srv_model_load(lq_server *s, lq_err *err)
{
    lq_model_opts mo = s->o.model;
    mo.kernels = s->kernels;
    double t = lq_now();
    lq_model *m = NULL;
    /* a vindex is opened once: the model borrows the one the browse routes use */
    int rc = s->vx ? lq_vindex_model_open(s->vx, &mo, &m, err) : lq_model_open_gguf(s->model_path, &mo, &m, err);
    if (rc)
        return rc;
    /* a file COMPILE ... INTO MODEL wrote: every request runs the edits it carries, as the
     * vindex with its patches would (set before the model is published: read-only after) */
    const lq_gguf *g = lq_model_gguf(m);
    if (!s->vx && g && lq_gguf_find_key(g, "larql.patches") >= 0) {
        size_t n = 0;
        lq_edit_set *es = NULL;
        if (s->o.no_carried_edits)
            srv_log(s, "%s carries edits (metadata larql.patches); --no-carried-edits: serving the base model",
                    s->model_path);
        else if ((rc = lq_carried_edits(s->model_path, mo.n_threads, &es, &n, err))) {
            lq_model_close(m);
            return rc;
        } else {
            __atomic_store_n(&s->carried, es, __ATOMIC_RELEASE);
            srv_log(s, "%s: applying the %zu patch(es) it carries (larql.patches; --no-carried-edits serves the "
                       "base model)", s->model_path, n);
        }
    }
    /* the bounded lm_head's copy, which the default mode builds on the first generation:
     * a server generates, so it is built here rather than in the first request's time */
    lq_model_head_wait(m);
    s->load_ms = (lq_now() - t) * 1000.0;
    /* Every generation request goes through one scheduler, so that concurrent streams
     * decode together (one batched step per token). Its slots match --max-concurrent: the
     * HTTP gate already bounds requests in flight, so the queue only absorbs the moment
     * between a request's end and its slot's release. */
    lq_scheduler_opts so;
    lq_scheduler_opts_init(&so);
    so.max_active = s->o.max_concurrent;
    so.max_queued = s->o.max_concurrent;
    so.n_ctx = s->o.n_ctx;
    so.draft = s->o.draft;
    so.draft_max = s->o.draft_max;
    s->pool_cap = s->o.max_concurrent;
    if ((rc = fit_memory(s, m, &so, err)) != 0) {
        lq_model_close(m);
        return rc;
    }
    /* the prompt cache: --cache-ram's worth of sessions, within what the memory limit leaves */
    {
        const lq_model_info *mi0 = lq_model_get_info(m);
        uint64_t kv = lq_model_kv_bytes(m, so.n_ctx > 0 ? so.n_ctx : mi0->n_ctx_train);
        uint64_t slots = kv ? s->o.cache_ram / kv : 0;
        if (s->mem_limit && kv) {
            uint64_t used = mi0->weight_bytes + mi0->weight_bytes / 8 + mi0->repack_bytes +
                            ((uint64_t)so.max_active + (uint64_t)s->pool_cap) * kv;
            uint64_t avail = s->mem_limit > used ? (s->mem_limit - used) / kv : 0;
            slots = slots < avail ? slots : avail;
        }
        so.prompt_cache = (int)(slots > 256 ? 256 : slots);
        s->prompt_cache_cap = so.prompt_cache;
    }
    rc = lq_scheduler_create(m, &so, &s->sched, err);
    if (rc) {
        lq_model_close(m);
        return rc;
    }
    const lq_model_info *mi = lq_model_get_info(m);
    /* every session, the scheduler's and the single-pass pool's, has this context and so
     * this KV size (f32 or f16 as the model keeps it) */
    s->n_ctx = lq_scheduler_n_ctx(s->sched);
    s->kv_bytes_per_session = lq_model_kv_bytes(m, s->n_ctx);
    __atomic_store_n(&s->model, m, __ATOMIC_RELEASE);
    srv_log(s, "loaded %s (%s, %d layers, %d dim, vocab %d, kernels %s, %d threads, KV %s, lm_head %s, "
            "weights %s) in %.1f ms",
            s->model_path, mi->arch_name, mi->n_layer, mi->n_embd, mi->n_vocab,
            mi->kernels ? mi->kernels : "?", mi->n_threads, lq_kv_type_name(mi->kv_type),
            mi->lm_head_q8 ? "q8" : "as stored", mi->weights_copied ? "mapped, copying into 2 MB pages" : "mapped",
            s->load_ms);
    return 0;
}

int srv_model(lq_server *s, lq_model **m, lq_err *err)
{
    lq_model *cur = __atomic_load_n(&s->model, __ATOMIC_ACQUIRE);
    if (cur) {
        *m = cur;
        return 0;
    }
    /* single flight: the first caller loads, the others wait on the mutex and reuse it */
    pthread_mutex_lock(&s->load_mu);
    int rc = 0;
    if (!s->model) {
        if (s->load_failed) {
            rc = s->load_err.code ? s->load_err.code : LQ_EIO;
            if (err)
                *err = s->load_err;
        } else if ((rc = srv_model_load(s, &s->load_err)) != 0) {
            s->load_failed = 1;
            s->load_err.code = rc;
            if (err)
                *err = s->load_err;
        }
    }
    *m = s->model;
    pthread_mutex_unlock(&s->load_mu);
    return rc;
}

int srv_session_get(lq_server *s, lq_session **out, lq_err *err)
{
    lq_model *m;
    int rc = srv_model(s, &m, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->pool_mu);
    if (s->n_free) {
        *out = s->pool_free[--s->n_free];
        pthread_mutex_unlock(&s->pool_mu);
        __atomic_add_fetch(&s->m.active_sessions, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (s->n_sessions >= s->pool_cap) {
        pthread_mutex_unlock(&s->pool_mu);
        return lq_err_set(err, LQ_EBUSY, "all %d sessions are busy%s", s->pool_cap,
                          s->pool_cap < s->o.max_concurrent ? " (as many as the memory limit allows)" : "");
    }
    s->n_sessions++; /* reserve, create outside the lock (KV allocation may be large) */
    pthread_mutex_unlock(&s->pool_mu);
    rc = lq_session_create(m, s->n_ctx, out, err);
    if (rc) {
        pthread_mutex_lock(&s->pool_mu);
        s->n_sessions--;
        pthread_mutex_unlock(&s->pool_mu);
        return rc;
    }
    __atomic_add_fetch(&s->m.active_sessions, 1, __ATOMIC_RELAXED);
    return 0;
}

lq_scheduler *srv_sched(lq_server *s)
{
    /* written before the model pointer is published (release/acquire on s->model) */
    return __atomic_load_n(&s->model, __ATOMIC_ACQUIRE) ? s->sched : NULL;
}

void srv_session_put(lq_server *s, lq_session *sess)
{
    if (!sess)
        return;
    lq_session_reset(sess);
    pthread_mutex_lock(&s->pool_mu);
    s->pool_free[s->n_free++] = sess;
    pthread_mutex_unlock(&s->pool_mu);
    __atomic_sub_fetch(&s->m.active_sessions, 1, __ATOMIC_RELAXED);
}

/* The cgroup v2 memory.max of this process, 0 when none is set (or not v2). */
uint64_t srv_cgroup_memory_max(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[4096], path[4200] = "";
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "0::", 3)) {
            line[strcspn(line, "\n")] = 0;
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3);
            break;
        }
    }
    fclose(f);
    if (!*path)
        return 0;
    f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long v = 0;
    char buf[64] = "";
    if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3))
        v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

