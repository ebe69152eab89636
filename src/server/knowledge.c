/* What the served model knows: the global overlay over the vindex (with its journal under
 * --state-dir) and the X-Session-Id sessions, and the routes that edit them
 * (POST /v1/insert, POST /v1/patches/apply, GET /v1/patches, DELETE /v1/patches/{name}).
 *
 * Locking: the global overlay has a read-write lock (queries read, edits write). A session
 * has a mutex held for each request that uses it (requests of one session are serialised:
 * no lost update, no torn state); its overlay is a clone of the global one plus its own
 * patches, rebuilt when the global state moved on since. The session's own patches live in
 * scope 1 of that overlay (larql/patch.h), the global ones in scope 0, so a name is unique
 * per owner: a global patch named like a session's (or "session:ID") never collides with it.
 * Sessions are bounded (--max-sessions, 503 when full after evicting the idle ones), expire
 * after --session-ttl seconds without a request, and are created only by a successful edit:
 * a request that fails leaves no session and no journal behind.
 *
 * Durability (--state-dir DIR, held with flock on DIR/lock: one server per directory):
 * global changes go to DIR/journal.lqj, a session's to DIR/sessions/<id>.lqj (created by
 * its first acknowledged edit), each appended and fsync'd before the 200, checkpointed when
 * lq_journal_checkpoint_due says so. At start the global journal is replayed and every
 * session journal checked (a damaged one stops the start, the file untouched); a session's
 * journal is replayed over the global state at its first request, so it comes back with its
 * own patches without the restart folding the global state once per session. A session that expires takes its journal with it.
 * Messages name journals relative to DIR. (LARQL keeps sessions in memory only.) */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "larql/patch.h"
#include "server/internal.h"
#include "core/round.h"

#define SID_MAX 64

struct srv_ksession {
    char id[SID_MAX + 1];
    lq_overlay *ov;
    uint64_t global_ver;     /* the global version ov was built from */
    double last_used;
    int pristine;            /* made by a request that has not succeeded yet: dropped if it fails */
    int unreplayed;          /* restored at start: its journal (checked then) replays at first use */
    int refs;                /* requests holding it (never evicted while > 0) */
    pthread_mutex_t mu;
    lq_journal *journal;     /* --state-dir: DIR/sessions/<id>.lqj once it has edited */
};

static void ks_free(srv_ksession *k)
{
    if (!k)
        return;
    lq_overlay_free(k->ov);
    lq_journal_close(k->journal);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

static void ks_journal_path(const lq_server *s, const char *sid, char *out, size_t cap)
{
    snprintf(out, cap, "%s/sessions/%s.lqj", s->o.state_dir, sid);
}

/* An expired session: gone, with its journal. */
static void ks_drop(lq_server *s, srv_ksession *k)
{
    if (k->journal || k->unreplayed) {
        char path[4200];
        ks_journal_path(s, k->id, path, sizeof path);
        unlink(path);
    }
    ks_free(k);
}

/* A new session record (no overlay yet: built on first use). */
static srv_ksession *ks_new(const char *sid, double now)
{
    srv_ksession *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    size_t n = strnlen(sid, SID_MAX); /* valid_sid checked the length */
    memcpy(k->id, sid, n);
    k->id[n] = 0;
    pthread_mutex_init(&k->mu, NULL);
    k->last_used = now;
    k->global_ver = (uint64_t)-1;
    return k;
}

static int ks_refresh(lq_server *s, srv_ksession *k, lq_err *err);
static int valid_sid(const char *sid);

/* A journal's replay in the log ("what" names it). */
static void log_replay(lq_server *s, const char *what, const lq_journal_stats *st)
{
    srv_log(s, "%s: %zu change%s replayed%s%s", what, st->records, st->records == 1 ? "" : "s",
            st->dropped ? " (a torn tail was cut off)" : "",
            st->migrated ? " (rewritten in the checksummed framing)" : "");
}

/* With k->mu held and k->ov current: opens (replaying what it holds) the session's journal
 * into the session's scope (the file itself appears with the first acknowledged edit). */
static int ks_open_journal(lq_server *s, srv_ksession *k, lq_err *err)
{
    if (k->journal || !s->o.state_dir)
        return LQ_OK;
    char path[4200], name[SID_MAX + 16];
    snprintf(path, sizeof path, "%s/sessions", s->o.state_dir);
    if (mkdir(path, 0755) && errno != EEXIST)
        return lq_err_set(err, LQ_EIO, "sessions/: cannot create: %s", strerror(errno));
    ks_journal_path(s, k->id, path, sizeof path);
    snprintf(name, sizeof name, "sessions/%s.lqj", k->id);
    lq_journal_opts jo = {.name = name};
    lq_journal_stats st;
    int rc = lq_journal_open_opts(path, &jo, k->ov, &k->journal, &st, err);
    if (!rc && st.records) {
        char what[SID_MAX + 32];
        snprintf(what, sizeof what, "session %s", k->id);
        log_replay(s, what, &st);
    }
    return rc;
}

/* At start: every session journal under DIR/sessions, replayed over the global state. A
 * journal that cannot be replayed stops the start: its acknowledged edits must not vanish. */
static int ks_restore(lq_server *s, lq_err *err)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/sessions", s->o.state_dir);
    DIR *d = opendir(dir);
    if (!d)
        return LQ_OK;
    struct dirent *de;
    int rc = LQ_OK;
    while (!rc && (de = readdir(d))) {
        char sid[SID_MAX + 8];
        size_t n = strlen(de->d_name);
        if (n < 5 || n - 4 > SID_MAX || strcmp(de->d_name + n - 4, ".lqj"))
            continue;
        memcpy(sid, de->d_name, n - 4);
        sid[n - 4] = 0;
        if (!valid_sid(sid))
            continue;
        struct stat sb;
        if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0) {
            /* an empty journal holds no edit (older servers left them after failed requests) */
            unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        if (s->n_sess >= s->o.max_sessions) {
            srv_log(s, "session journal sessions/%s not restored: --max-sessions %d reached (kept on disk)",
                    de->d_name, s->o.max_sessions);
            continue;
        }
        /* checked now (a damaged journal stops the start), replayed at the session's first
         * request: a restart does not fold the global state once per session */
        char path[4600], name[300];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        snprintf(name, sizeof name, "sessions/%s", de->d_name);
        lq_journal_opts jo = {.name = name};
        srv_ksession *k = ks_new(sid, lq_now());
        srv_ksession **ns = k ? realloc(s->sess, (size_t)(s->n_sess + 1) * sizeof *ns) : NULL;
        if (ns)
            s->sess = ns;
        if (!ns)
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        else
            rc = lq_journal_verify(path, &jo, err);
        if (rc) {
            lq_err_prefix(err, "session %s not restored", sid);
            ks_free(k);
            break;
        }
        k->unreplayed = 1;
        s->sess[s->n_sess++] = k;
    }
    closedir(d);
    return rc;
}

/* One server per state directory: an exclusive flock on DIR/lock, held while it runs (the
 * kernel drops it when the process dies, so a kill -9 leaves nothing to clean up). */
static int lock_state_dir(lq_server *s, lq_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/lock", s->o.state_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return lq_err_set(err, LQ_EIO, "--state-dir %s: cannot open its lock file: %s", s->o.state_dir,
                          strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        close(fd);
        return e == EWOULDBLOCK
                   ? lq_err_set(err, LQ_EBUSY,
                                "--state-dir %s is in use by another larql serve (its lock file is held); stop "
                                "that server or give this one another directory",
                                s->o.state_dir)
                   : lq_err_set(err, LQ_EIO, "--state-dir %s: cannot lock: %s", s->o.state_dir, strerror(e));
    }
    s->state_lock = fd;
    return LQ_OK;
}

/* After an acknowledged change: a checkpoint when one is due. Failing one loses nothing (the
 * journal goes on as it was): it is logged and tried again after the next change. */
static void maybe_checkpoint(lq_server *s, lq_journal *j, const lq_overlay *ov)
{
    lq_err e = {0};
    if (j && lq_journal_checkpoint_due(j) && lq_journal_checkpoint(j, ov, &e))
        srv_log(s, "checkpoint skipped: %s", e.msg);
}

int srv_knowledge_init(lq_server *s, lq_err *err)
{
    s->state_lock = -1;
    pthread_rwlock_init(&s->kmu, NULL);
    pthread_mutex_init(&s->sess_mu, NULL);
    if (srv_dcache_init(s))
        return lq_err_set(err, LQ_ENOMEM, "out of memory for the describe cache");
    if (!s->vx)
        return LQ_OK; /* a GGUF: nothing to edit */
    if (s->o.state_db) {
        int rc = srv_statedb_start(s, err);
        if (rc)
            lq_err_prefix(err, "--state-db");
        return rc;
    }
    int rc = lq_overlay_create(s->vx, lq_vindex_knn_store(s->vx), &s->global, err);
    if (rc)
        return rc;
    if (!s->o.state_dir) {
        srv_log(s, "edits live in memory only (start with --state-dir DIR to keep them across restarts)");
        return LQ_OK;
    }
    if (mkdir(s->o.state_dir, 0755) && errno != EEXIST)
        return lq_err_set(err, LQ_EIO, "--state-dir %s: cannot create: %s", s->o.state_dir, strerror(errno));
    if ((rc = lock_state_dir(s, err)))
        return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/journal.lqj", s->o.state_dir);
    lq_journal_stats st;
    lq_journal_opts jo = {.name = "journal.lqj"};
    double t0 = lq_now();
    if (!(rc = lq_journal_open_opts(path, &jo, s->global, &s->journal, &st, err))) {
        char what[4300];
        snprintf(what, sizeof what, "state %s", path);
        log_replay(s, what, &st);
        rc = ks_restore(s, err);
    }
    if (rc) {
        lq_err_prefix(err, "--state-dir %s", s->o.state_dir);
        return rc;
    }
    srv_log(s, "state restored in %.0f ms (%d session journal%s checked, each replayed at its session's first "
            "request)", (lq_now() - t0) * 1000.0, s->n_sess, s->n_sess == 1 ? "" : "s");
    return LQ_OK;
}

void srv_knowledge_free(lq_server *s)
{
    for (int i = 0; i < s->n_sess; i++)
        ks_free(s->sess[i]);
    free(s->sess);
    lq_journal_close(s->journal);
    if (s->state_lock >= 0)
        close(s->state_lock);
    srv_statedb_stop(s); /* the global overlay is its fold, freed with it */
    lq_overlay_free(s->global);
    srv_dcache_free(s);
    pthread_rwlock_destroy(&s->kmu);
    pthread_mutex_destroy(&s->sess_mu);
}

static int valid_sid(const char *sid)
{
    size_t n = sid ? strlen(sid) : 0;
    if (n == 0 || n > SID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)sid[i]) && sid[i] != '-' && sid[i] != '_')
            return 0; /* ids name files: no '.', no separator */
    return 1;
}

/* Finds (or with create, makes) the session sid and takes a reference. 0, or LQ_EINVAL (a bad
 * id), LQ_EBUSY (the table is full) or LQ_ENOMEM, with e filled. */
static int ks_get(lq_server *s, const char *sid, int create, srv_ksession **out, lq_err *e)
{
    *out = NULL;
    if (!valid_sid(sid)) {
        return lq_err_set(e, LQ_EINVAL, "X-Session-Id must be 1..%d characters of [A-Za-z0-9_-]", SID_MAX);
    }
    double now = lq_now();
    pthread_mutex_lock(&s->sess_mu);
    for (int i = 0; i < s->n_sess; i++)
        if (!strcmp(s->sess[i]->id, sid)) {
            *out = s->sess[i];
            (*out)->refs++;
            (*out)->last_used = now;
            pthread_mutex_unlock(&s->sess_mu);
            return 0;
        }
    if (!create) {
        pthread_mutex_unlock(&s->sess_mu);
        return 0;
    }
    /* evict the sessions idle past their TTL, then check the bound */
    for (int i = 0; i < s->n_sess;) {
        srv_ksession *k = s->sess[i];
        if (!k->refs && now - k->last_used > s->o.session_ttl_s) {
            ks_drop(s, k);
            srv_dcache_bump(s);
            s->sess[i] = s->sess[--s->n_sess];
        } else {
            i++;
        }
    }
    if (s->n_sess >= s->o.max_sessions) {
        pthread_mutex_unlock(&s->sess_mu);
        return lq_err_set(e, LQ_EBUSY, "too many sessions (%d, --max-sessions); idle ones expire after %d s",
                          s->o.max_sessions, s->o.session_ttl_s);
    }
    srv_ksession *k = ks_new(sid, now);
    srv_ksession **ns = k ? realloc(s->sess, (size_t)(s->n_sess + 1) * sizeof *ns) : NULL;
    if (!ns) {
        ks_free(k);
        pthread_mutex_unlock(&s->sess_mu);
        return lq_err_set(e, LQ_ENOMEM, "out of memory");
    }
    s->sess = ns;
    k->refs = 1;
    k->pristine = 1;
    s->sess[s->n_sess++] = k;
    *out = k;
    pthread_mutex_unlock(&s->sess_mu);
    return 0;
}

/* Drops the reference; a session no request has succeeded in yet goes when the last of its
 * requests fails (a failed request creates nothing). */
static void ks_put(lq_server *s, srv_ksession *k)
{
    pthread_mutex_lock(&s->sess_mu);
    if (--k->refs == 0 && __atomic_load_n(&k->pristine, __ATOMIC_ACQUIRE))
        for (int i = 0; i < s->n_sess; i++)
            if (s->sess[i] == k) {
                s->sess[i] = s->sess[--s->n_sess];
                ks_free(k); /* its journal, if opened, was never written: no file exists */
                break;
            }
    pthread_mutex_unlock(&s->sess_mu);
}

/* With k->mu held: k->ov = the current global state + the session's own patches. */
static int ks_refresh(lq_server *s, srv_ksession *k, lq_err *err)
{
    pthread_rwlock_rdlock(&s->kmu);
    uint64_t gv = lq_overlay_version(s->global);
    if (k->ov && k->global_ver == gv) {
        pthread_rwlock_unlock(&s->kmu);
        return LQ_OK;
    }
    lq_overlay *n = NULL;
    int rc = lq_overlay_clone_layered(s->global, &n, err); /* its edit set shared */
    pthread_rwlock_unlock(&s->kmu);
    char ename[SID_MAX + 16];
    snprintf(ename, sizeof ename, "session:%s", k->id);
    if (!rc) {
        lq_overlay_set_scope(n, 1); /* the session's own names: apart from the global ones */
        rc = lq_overlay_set_edits_name(n, ename, err);
    }
    for (size_t j = 0; !rc && k->ov && j < lq_overlay_n_patches(k->ov); j++)
        if (lq_overlay_patch_scope(k->ov, j) == 1)
            rc = lq_overlay_apply(n, lq_overlay_patch_at(k->ov, j), err);
    if (rc) {
        lq_overlay_free(n);
        return rc;
    }
    lq_overlay_free(k->ov);
    k->ov = n;
    k->global_ver = gv;
    if (k->unreplayed) { /* restored at start: its own patches come from its journal now */
        if ((rc = ks_open_journal(s, k, err))) {
            lq_overlay_free(k->ov); /* every request of it fails, naming why, until fixed */
            k->ov = NULL;
            k->global_ver = (uint64_t)-1;
            return rc;
        }
        k->unreplayed = 0;
    }
    return LQ_OK;
}

int srv_kview_get(lq_server *s, const char *sid, kview *kv, lq_err *e)
{
    memset(kv, 0, sizeof *kv);
    kv->s = s;
    if (!s->global) { /* a GGUF, or no vindex: the plain handles (and a compiled GGUF's edits) */
        kv->v = s->vx;
        kv->edits = lq_edit_set_ref(__atomic_load_n(&s->carried, __ATOMIC_ACQUIRE));
        return 0;
    }
    if (sid) {
        int st = ks_get(s, sid, 0, &kv->ks, e);
        if (st)
            return st;
    }
    if (kv->ks) {
        pthread_mutex_lock(&kv->ks->mu);
        lq_err err = {0};
        if (ks_refresh(s, kv->ks, &err)) {
            pthread_mutex_unlock(&kv->ks->mu);
            ks_put(s, kv->ks);
            *e = err;
            return LQ_EIO; /* the session's state cannot be built: the server's fault (500) */
        }
        kv->ov = kv->ks->ov;
        kv->sid = kv->ks->id;
    } else {
        pthread_rwlock_rdlock(&s->kmu);
        kv->ov = s->global;
    }
    kv->v = lq_overlay_vindex(kv->ov);
    kv->knn = lq_overlay_knn(kv->ov);
    if (!(kv->edits = lq_overlay_edit_set(kv->ov, e))) {
        srv_kview_put(kv);
        return LQ_ENOMEM;
    }
    return 0;
}

int srv_edit_hook(lq_server *s, const char *sid, lq_resid_hook **out, uint64_t *key, lq_err *e)
{
    *out = NULL;
    *key = 0;
    if (!s->global && !__atomic_load_n(&s->carried, __ATOMIC_ACQUIRE))
        return 0;
    kview kv;
    int st = srv_kview_get(s, sid, &kv, e);
    if (st)
        return st;
    lq_edit_set *es = lq_edit_set_ref(kv.edits);
    srv_kview_put(&kv);
    if (lq_edit_set_n_knn(es) || lq_edit_set_n_features(es) || lq_edit_set_n_subject(es)) {
        st = lq_edit_set_hook(es, LQ_EDITS_COMPOSE | LQ_EDITS_KNN_FORCE, out, e) ? LQ_ENOMEM : 0;
        *key = lq_edit_set_serial(es); /* the prompt cache shares KV only under the same edits */
    }
    lq_edit_set_unref(es);
    return st;
}

void srv_kview_put(kview *kv)
{
    if (!kv->s)
        return;
    lq_edit_set_unref(kv->edits);
    if (!kv->s->global) {
        memset(kv, 0, sizeof *kv);
        return;
    }
    if (kv->ks) {
        pthread_mutex_unlock(&kv->ks->mu);
        ks_put(kv->s, kv->ks);
    } else if (kv->ov) {
        pthread_rwlock_unlock(&kv->s->kmu);
    }
    memset(kv, 0, sizeof *kv);
}

/* ---- editing: the overlay a request writes (global, or its session's) ---- */

typedef struct kedit {
    lq_server *s;
    srv_ksession *ks;
    lq_overlay *ov;
    lq_journal *j;   /* where the edit is persisted (the global or the session's), or NULL */
} kedit;

static int kedit_begin(lq_server *s, req *q, reply *r, kedit *ke)
{
    memset(ke, 0, sizeof *ke);
    ke->s = s;
    if (!s->global) {
        reply_larql_err(r, 503, "%s needs a vindex directory (this server runs a GGUF file)", q->rt->path);
        return -1;
    }
    const char *sid = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Session-Id");
    lq_err e = {0};
    if (sid) {
        int rc = ks_get(s, sid, 1, &ke->ks, &e);
        if (rc) {
            reply_larql_err(r, status_from_lq(rc), "%s", e.msg);
            return -1;
        }
        pthread_mutex_lock(&ke->ks->mu);
        if (ks_refresh(s, ke->ks, &e) || ks_open_journal(s, ke->ks, &e)) {
            pthread_mutex_unlock(&ke->ks->mu);
            ks_put(s, ke->ks);
            reply_larql_err(r, 500, "%s", e.msg);
            return -1;
        }
        ke->ov = ke->ks->ov;
        ke->j = ke->ks->journal;
    } else {
        pthread_rwlock_wrlock(&s->kmu);
        ke->ov = s->global;
        ke->j = s->journal;
    }
    return 0;
}

/* ok: the request succeeded (its session, if new, is kept); a checkpoint follows when due */
static void kedit_end(kedit *ke, int ok)
{
    if (ok)
        maybe_checkpoint(ke->s, ke->j, ke->ov);
    if (ke->ks) {
        /* the session's overlay was built from this global version and changed only by the
         * session: it stays current */
        if (ok) /* atomic: another request's ks_put reads it under the table's lock only */
            __atomic_store_n(&ke->ks->pristine, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&ke->ks->mu);
        ks_put(ke->s, ke->ks);
    } else if (ke->ov) {
        pthread_rwlock_unlock(&ke->s->kmu);
    }
}

static json_t *session_value(const kedit *ke) { return ke->ks ? json_string(ke->ks->id) : json_null(); }

/* an edit persisted (ops from n0 on): journaled, or with --state-db a global one stored as a
 * row and applied back as it; on failure undone: the reply is an error (LQ_EIO 500, LQ_EBUSY
 * 503 when the state database is unreachable) */
static int persist_edit(kedit *ke, size_t n0, lq_err *e)
{
    if (!ke->ks && ke->s->statedb)
        return srv_statedb_edit(ke->s, ke->ov, n0, e);
    if (!ke->j)
        return LQ_OK;
    if (lq_journal_edit(ke->j, ke->ov, n0, e)) {
        lq_overlay_truncate_edits(ke->ov, n0, NULL);
        return LQ_EIO;
    }
    return LQ_OK;
}

void route_insert(lq_server *s, req *q, reply *r)
{
    json_t *j = req_json_body(q, r);
    if (!j)
        return;
    lq_insert_params ip;
    lq_insert_params_init(&ip);
    const char *mode = NULL;
    long layer = -1;
    double alpha = 0.25, conf = NAN;
    if (jget_str(q->rt, j, "entity", &ip.entity, NULL, r) < 0 || jget_str(q->rt, j, "relation", &ip.relation, NULL, r) < 0 ||
        jget_str(q->rt, j, "target", &ip.target, NULL, r) < 0 || jget_str(q->rt, j, "mode", &mode, NULL, r) < 0 ||
        jget_int(q->rt, j, "layer", 0, LQ_VINDEX_MAX_LAYERS, &layer, r) < 0 ||
        jget_num(q->rt, j, "alpha", -1e6, 1e6, &alpha, r) < 0 || jget_num(q->rt, j, "confidence", 0, 1e6, &conf, r) < 0) {
        json_decref(j);
        return;
    }
    if (!ip.entity || !*ip.entity || !ip.relation || !*ip.relation || !ip.target || !*ip.target) {
        /* absent: the body is not an insert (422); empty: a bad value (400) */
        reply_larql_err(r, !ip.entity || !ip.relation || !ip.target ? 422 : 400,
                        "'entity', 'relation' and 'target' are required and non-empty");
        json_decref(j);
        return;
    }
    if (mode && strcmp(mode, "compose") && strcmp(mode, "knn") && strcmp(mode, "subject")) {
        reply_larql_err(r, 400, "mode '%s' is not one of subject, compose, knn", mode);
        json_decref(j);
        return;
    }
    ip.layer = (int)layer;
    ip.alpha = (float)alpha;
    ip.confidence = (float)conf;
    double t0 = lq_now();
    lq_model *m = NULL;
    lq_err e = {0};
    /* residual keys need the weights; a browse vindex inserts with the embedding key */
    if (!s->o.no_infer && srv_model(s, &m, &e))
        m = NULL;
    /* the default: a subject edit (every phrasing, chat included, reads it back) when the
     * weights are there to compute one, else LARQL's COMPOSE with the embedding key */
    if (!mode)
        mode = m ? "subject" : "compose";
    ip.mode = !strcmp(mode, "knn") ? LQ_INSERT_KNN : !strcmp(mode, "subject") ? LQ_INSERT_SUBJECT : LQ_INSERT_COMPOSE;
    kedit ke;
    if (kedit_begin(s, q, r, &ke)) {
        json_decref(j);
        return;
    }
    const lq_patch *ep = lq_overlay_edits(ke.ov);
    size_t n0 = ep ? lq_patch_n_ops(ep) : 0;
    lq_insert_result res;
    int rc = lq_overlay_insert(ke.ov, m, &ip, &res, &e);
    if (!rc)
        rc = persist_edit(&ke, n0, &e);
    if (rc) {
        reply_larql_err(r, rc == LQ_EIO ? 500 : status_from_lq(rc), "%s", e.msg);
    } else {
        srv_dcache_bump(s);
        const char *mname = ip.mode == LQ_INSERT_KNN       ? "knn"
                             : ip.mode == LQ_INSERT_SUBJECT ? "subject"
                             : res.weights                  ? "constellation"
                                                            : "embedding";
        json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:s,s:f,s:o,s:f,s:s}", "entity", ip.entity, "relation",
                              ip.relation, "target", ip.target, "inserted", res.n_layers, "mode", mname,
                              "alpha", (double)ip.alpha, "session", session_value(&ke), "latency_ms",
                              lq_round_dp((lq_now() - t0) * 1000.0, 1), "id", res.id);
        if (o && ip.mode == LQ_INSERT_COMPOSE && res.weights) { /* ours: the balance's outcome */
            json_object_set_new(o, "down_scale", json_real(lq_round_dp(res.down_scale, 4)));
            json_object_set_new(o, "target_probability", json_real(lq_round_dp(res.target_prob, 4)));
        }
        if (o && ip.mode == LQ_INSERT_SUBJECT) { /* measured after the edit, on the canonical prompt */
            json_object_set_new(o, "target_probability", json_real(lq_round_dp(res.target_prob, 4)));
            json_object_set_new(o, "tokens_on_logits", json_integer(res.n_forced));
        }
        reply_json(r, 200, o);
    }
    kedit_end(&ke, !rc);
    json_decref(j);
}

void route_patches(lq_server *s, req *q, reply *r)
{
    if (q->method == M_GET) {
        kview kv;
        lq_err e = {0};
        int rc = srv_kview_get(s, MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Session-Id"), &kv, &e);
        if (rc) {
            reply_larql_err(r, status_from_lq(rc), "%s", e.msg);
            return;
        }
        json_t *a = json_array();
        for (size_t i = 0; kv.ov && i < lq_overlay_n_patches(kv.ov); i++) {
            const lq_patch *p = lq_overlay_patch_at(kv.ov, i);
            json_array_append_new(a, json_pack("{s:s,s:I,s:s,s:s}", "name", lq_patch_name(p), "operations",
                                               (json_int_t)lq_patch_n_ops(p), "base_model", lq_patch_base_model(p),
                                               "scope", lq_overlay_patch_scope(kv.ov, i) == 1 ? "session" : "global"));
        }
        json_t *o = json_pack("{s:o}", "patches", a);
        /* ours: each edit as a row (id, entity, relation, target, mode, layer, patch) */
        char *rows = NULL;
        if (kv.ov && !lq_overlay_edit_rows_json(kv.ov, &rows, &e))
            json_object_set_new(o, "edits", json_loads(rows, 0, NULL));
        free(rows);
        if (kv.sid)
            json_object_set_new(o, "session", json_string(kv.sid));
        srv_kview_put(&kv);
        reply_json(r, 200, o);
        return;
    }
    json_t *j = req_json_body(q, r);
    if (!j)
        return;
    json_t *inl = json_object_get(j, "patch");
    const char *url = NULL;
    if (jget_str(q->rt, j, "url", &url, NULL, r) < 0) {
        json_decref(j);
        return;
    }
    lq_patch *p = NULL;
    lq_err e = {0};
    int rc;
    int hidden = s->vx ? lq_vindex_get_info(s->vx)->hidden_size : 0;
    if (inl && json_is_object(inl)) {
        char *text = json_dumps(inl, JSON_COMPACT);
        const char *desc = json_string_value(json_object_get(inl, "description"));
        rc = text ? lq_patch_parse(text, strlen(text), url ? url : desc ? desc : "inline-patch", hidden, &p, &e)
                  : lq_err_set(&e, LQ_ENOMEM, "out of memory");
        free(text);
    } else if (inl && !json_is_null(inl)) {
        reply_larql_err(r, 422, "'patch' must be a JSON object (a .vlp)");
        json_decref(j);
        return;
    } else if (url) {
        /* a plain name inside --patch-dir: no '/', nothing hidden, no link of either kind (read
         * through O_NOFOLLOW and refused with more than one hard link); errors name the file,
         * never the directory */
        if (!s->o.patch_dir) {
            reply_larql_err(r, 400, "'url' names a patch file, but the server has no --patch-dir");
            json_decref(j);
            return;
        }
        if (!*url || strchr(url, '/') || strstr(url, "..") || url[0] == '.' || strlen(url) > 255) {
            reply_larql_err(r, 400, "'url' must be a file name inside --patch-dir (no '/', no '..'): '%s'", url);
            json_decref(j);
            return;
        }
        rc = lq_patch_read_in(s->o.patch_dir, url, hidden, &p, &e);
        if (rc == LQ_EINVAL)
            lq_err_prefix(&e, "'url' must name a regular file inside --patch-dir");
    } else {
        reply_larql_err(r, 400, "must provide 'url' or 'patch' in request body");
        json_decref(j);
        return;
    }
    json_decref(j);
    if (rc) {
        reply_larql_err(r, rc == LQ_ENOTFOUND ? 404 : 400, "%s", e.msg);
        return;
    }
    kedit ke;
    if (kedit_begin(s, q, r, &ke)) {
        lq_patch_free(p);
        return;
    }
    if (!ke.ks && s->statedb) {
        rc = srv_statedb_apply(s, p, &e);
    } else {
        rc = lq_overlay_apply(ke.ov, p, &e);
        if (!rc && ke.j && lq_journal_apply(ke.j, p, &e)) {
            lq_overlay_remove(ke.ov, lq_patch_name(p), NULL);
            rc = LQ_EIO;
        }
    }
    if (rc) {
        reply_larql_err(r, rc == LQ_EIO ? 500 : rc == LQ_EBUSY ? 503 : 400, "%s", e.msg);
    } else {
        srv_dcache_bump(s);
        json_t *o = json_pack("{s:s,s:I,s:I}", "applied", lq_patch_name(p), "operations",
                              (json_int_t)lq_patch_n_ops(p), "active_patches", (json_int_t)lq_overlay_n_patches(ke.ov));
        if (ke.ks)
            json_object_set_new(o, "session", json_string(ke.ks->id));
        reply_json(r, 200, o);
    }
    kedit_end(&ke, !rc);
    lq_patch_free(p);
}

void route_patch_delete(lq_server *s, req *q, reply *r)
{
    if (q->path_arg_long) {
        reply_larql_err(r, 404, "patch not found");
        return;
    }
    const char *name = q->path_arg;
    kedit ke;
    if (kedit_begin(s, q, r, &ke))
        return;
    lq_err e = {0};
    int rc = LQ_OK, found = 0, scope = ke.ks ? 1 : 0; /* a session removes only its own */
    for (size_t i = 0; i < lq_overlay_n_patches(ke.ov); i++)
        found |= lq_overlay_patch_scope(ke.ov, i) == scope && !strcmp(lq_patch_name(lq_overlay_patch_at(ke.ov, i)), name);
    if (!found)
        rc = lq_err_set(&e, LQ_ENOTFOUND, ke.ks ? "patch '%s' not found in session '%s'" : "patch '%s' not found%s",
                        name, ke.ks ? ke.ks->id : "");
    if (!rc && !ke.ks && s->statedb) {
        rc = srv_statedb_remove(s, name, &e);
    } else {
        /* persisted first: a remove that is on disk always names a patch that existed */
        if (!rc && ke.j && lq_journal_remove(ke.j, name, &e))
            rc = LQ_EIO;
        if (!rc)
            rc = lq_overlay_remove(ke.ov, name, &e);
    }
    if (rc) {
        reply_larql_err(r, rc == LQ_ENOTFOUND ? 404 : rc == LQ_EBUSY ? 503 : 500, "%s", e.msg);
    } else {
        srv_dcache_bump(s);
        json_t *o = json_pack("{s:s,s:I}", "removed", name, "active_patches", (json_int_t)lq_overlay_n_patches(ke.ov));
        if (ke.ks)
            json_object_set_new(o, "session", json_string(ke.ks->id));
        reply_json(r, 200, o);
    }
    kedit_end(&ke, !rc);
}

/* DELETE /v1/edits/{id}: one edit removed (journaled like the rest) */
void route_edit_delete(lq_server *s, req *q, reply *r)
{
    if (q->path_arg_long) {
        reply_larql_err(r, 404, "edit not found");
        return;
    }
    kedit ke;
    if (kedit_begin(s, q, r, &ke))
        return;
    lq_err e = {0};
    const lq_patch *ep = lq_overlay_edits(ke.ov);
    size_t n0 = ep ? lq_patch_n_ops(ep) : 0;
    int rc = lq_overlay_delete_edit(ke.ov, q->path_arg, &e);
    if (!rc)
        rc = persist_edit(&ke, n0, &e);
    if (rc) {
        reply_larql_err(r, rc == LQ_EIO ? 500 : status_from_lq(rc), "%s", e.msg);
    } else {
        srv_dcache_bump(s);
        reply_json(r, 200, json_pack("{s:s,s:o}", "removed", q->path_arg, "session", session_value(&ke)));
    }
    kedit_end(&ke, !rc);
}
