/* --state-db CONNINFO: the server's global edits are rows of PostgreSQL's infer.edits (the
 * table of pg_infer, ext/pg_infer), shared by every server and every SQL session on it.
 *
 * The global overlay is the fold of the model's rows (lq_edit_log, src/vindex/edit_log.c).
 * A global edit is made on the overlay as without a database, then taken out of it
 * (lq_overlay_take_edits), stored as a row (autocommit: the row is committed when INSERT
 * returns) and applied back as that row: the 200 follows the COMMIT. If the database cannot
 * be reached the edit is undone and answered 503; reads go on with the last state applied.
 * Patches applied by name are rows too (op 'patch', entity = the name); removing one deletes
 * its row and refolds.
 *
 * Rows committed elsewhere arrive through LISTEN infer_edits (the table's trigger notifies
 * with the model's name at COMMIT): a thread of its own waits on that connection and folds
 * the new rows within milliseconds. It also reads infer.edit_versions every second (a lost
 * notification or a reconnect costs at most that) and reconnects with backoff.
 *
 * Locking: the write connection is used only under the global overlay's write lock (every
 * global edit holds it), the listening one only by the thread, which takes the write lock
 * to apply what it fetched. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "larql/patch.h"
#include "server/internal.h"

struct srv_statedb {
    char *conninfo, *model;
    PGconn *w;              /* writes, under s->kmu's write lock */
    PGconn *l;              /* LISTEN, the sync thread's */
    lq_edit_log *log;       /* its overlay is s->global */
    pthread_t thr;
    int thr_started;
    int wake[2];            /* stop: a byte written here */
    int64_t version;        /* infer.edit_versions of the last sync (thread only) */
    /* figures (atomic): rows applied, rows that did not apply, syncs, reconnects */
    uint64_t applied, failed, syncs, reconnects;
    int connected;          /* the listening connection is up */
};

static int64_t be64(const char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | (unsigned char)p[i];
    return (int64_t)v;
}

static PGconn *connect_db(const char *conninfo, lq_err *e)
{
    /* a database host that does not answer must not hold the edit lock (and every reader
     * behind it) for TCP's minutes: 5 s unless the connection string says otherwise (its
     * own connect_timeout, expanded after this one, wins) */
    const char *const keys[] = {"connect_timeout", "dbname", NULL};
    const char *const vals[] = {"5", conninfo, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (!c)
        return lq_err_set(e, LQ_ENOMEM, "out of memory"), NULL;
    if (PQstatus(c) != CONNECTION_OK) {
        lq_err_set(e, LQ_EBUSY, "state database: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    PQclear(PQexec(c, "SET application_name = 'larql serve'"));
    return c;
}

/* The write connection, re-established once if it dropped. */
static PGconn *wconn(srv_statedb *d, lq_err *e)
{
    if (d->w && PQstatus(d->w) == CONNECTION_OK)
        return d->w;
    if (d->w)
        PQreset(d->w);
    if (d->w && PQstatus(d->w) == CONNECTION_OK)
        return d->w;
    lq_err_set(e, LQ_EBUSY, "state database unreachable: %s", d->w ? PQerrorMessage(d->w) : "no connection");
    return NULL;
}

static int db_err(PGconn *c, PGresult *r, const char *what, lq_err *e)
{
    /* a dropped connection is "unreachable" (503); a statement the database refused is ours */
    int down = PQstatus(c) != CONNECTION_OK;
    lq_err_set(e, down ? LQ_EBUSY : LQ_EIO, "state database: %s: %s", what,
               r ? PQresultErrorMessage(r) : PQerrorMessage(c));
    PQclear(r);
    return down ? LQ_EBUSY : LQ_EIO;
}

static int64_t read_version(PGconn *c, const char *model, lq_err *e, int *rc)
{
    const char *pv[1] = {model};
    PGresult *r = PQexecParams(c, "SELECT version FROM infer.edit_versions WHERE model = $1", 1, NULL, pv, NULL, NULL, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        *rc = db_err(c, r, "reading infer.edit_versions", e);
        return -1;
    }
    int64_t v = PQntuples(r) && PQgetlength(r, 0, 0) == 8 ? be64(PQgetvalue(r, 0, 0)) : 0;
    PQclear(r);
    *rc = LQ_OK;
    return v;
}

/* (id, vectors past after, patch name) of the model's rows, id order, binary results */
static PGresult *fetch_rows(PGconn *c, const char *model, int64_t after, lq_err *e, int *rc)
{
    char a[32];
    snprintf(a, sizeof a, "%" PRId64, after);
    const char *pv[2] = {model, a};
    PGresult *r = PQexecParams(c,
                               "SELECT id, CASE WHEN id > $2::int8 THEN vectors END, "
                               "CASE WHEN op = 'patch' THEN entity END "
                               "FROM infer.edits WHERE model = $1 ORDER BY id",
                               2, NULL, pv, NULL, NULL, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        *rc = db_err(c, r, "reading infer.edits", e);
        return NULL;
    }
    *rc = LQ_OK;
    return r;
}

/* Applies rows [from, n) of r (vectors present) to the log. */
static void apply_rows(lq_server *s, srv_statedb *d, PGresult *r, size_t from)
{
    for (size_t i = from; i < (size_t)PQntuples(r); i++) {
        int64_t id = be64(PQgetvalue(r, (int)i, 0));
        const char *name = PQgetisnull(r, (int)i, 2) ? NULL : PQgetvalue(r, (int)i, 2);
        lq_err e = {0};
        int rc = PQgetisnull(r, (int)i, 1)
                     ? lq_err_set(&e, LQ_EFORMAT, "row without vectors")
                     : lq_edit_log_apply(d->log, id, name, PQgetvalue(r, (int)i, 1), (size_t)PQgetlength(r, (int)i, 1), &e);
        if (rc) {
            __atomic_add_fetch(&d->failed, 1, __ATOMIC_RELAXED);
            srv_log(s, "state db: edit %" PRId64 " of model '%s' does not apply and is skipped: %s", id, d->model,
                    e.msg);
        } else {
            __atomic_add_fetch(&d->applied, 1, __ATOMIC_RELAXED);
        }
    }
}

/* Folds the rows c can see. With the write lock held (locked) or taking it to apply. */
static int sync_rows(lq_server *s, PGconn *c, int locked, lq_err *e)
{
    srv_statedb *d = s->statedb;
    int rc;
    if (!locked)
        pthread_rwlock_rdlock(&s->kmu);
    int64_t after = lq_edit_log_last_id(d->log);
    if (!locked)
        pthread_rwlock_unlock(&s->kmu);
    PGresult *r = fetch_rows(c, d->model, after, e, &rc);
    if (!r)
        return rc;
    if (!locked)
        pthread_rwlock_wrlock(&s->kmu);
    size_t n = (size_t)PQntuples(r), from = 0;
    int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    int reset = 0;
    if (!ids)
        rc = lq_err_set(e, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n; i++)
        ids[i] = be64(PQgetvalue(r, (int)i, 0));
    if (!rc)
        rc = lq_edit_log_sync(d->log, ids, n, &from, &reset, e);
    /* the vectors fetched are those past `after`: a refold (or a log that moved on since)
     * needs the rows before it too */
    if (!rc && from < n && ids[from] <= after) {
        PQclear(r);
        r = fetch_rows(c, d->model, -1, e, &rc);
        n = r ? (size_t)PQntuples(r) : 0;
        int64_t *ids2 = r ? realloc(ids, (n ? n : 1) * sizeof *ids) : NULL;
        if (r && !ids2)
            rc = lq_err_set(e, LQ_ENOMEM, "out of memory");
        if (ids2)
            ids = ids2;
        for (size_t i = 0; !rc && i < n; i++)
            ids[i] = be64(PQgetvalue(r, (int)i, 0));
        if (!rc)
            rc = lq_edit_log_sync(d->log, ids, n, &from, &reset, e);
    }
    if (!rc && (from < n || reset)) {
        apply_rows(s, d, r, from);
        srv_dcache_bump(s);
    }
    if (!locked)
        pthread_rwlock_unlock(&s->kmu);
    free(ids);
    PQclear(r);
    __atomic_add_fetch(&d->syncs, 1, __ATOMIC_RELAXED);
    return rc;
}

/* ---- writes (the caller holds the global write lock) ---- */

/* The write connection, synced. A connection the database dropped since its last use (a
 * restart) is found dead only now: it is re-established and the sync tried once more. Safe
 * to repeat: nothing has been written yet. */
static int sync_first(lq_server *s, PGconn **c, lq_err *e)
{
    srv_statedb *d = s->statedb;
    int rc = LQ_EBUSY;
    for (int attempt = 0; attempt < 2 && rc == LQ_EBUSY; attempt++) {
        if (attempt && d->w)
            PQreset(d->w);
        if (!(*c = wconn(d, e)))
            return LQ_EBUSY;
        rc = sync_rows(s, *c, 1, e);
    }
    return rc;
}

/* The row's descriptive columns, from the first op of the edit. */
static void describe_ops(const lq_patch *p, const char **op, const char **entity, const char **relation,
                         const char **target, const char **mode, const char **edit_id, char *layer, size_t cap)
{
    lq_patch_op o;
    *op = "insert";
    *entity = "";
    *relation = *target = *mode = *edit_id = NULL;
    layer[0] = 0;
    if (!lq_patch_op_at(p, 0, &o))
        return;
    switch (o.kind) {
    case LQ_OP_INSERT_SUBJECT: *mode = "subject"; break;
    case LQ_OP_INSERT_KNN: *mode = "knn"; break;
    case LQ_OP_INSERT: *mode = "compose"; break;
    case LQ_OP_UPDATE: *op = "update"; break;
    default: *op = "delete"; break;
    }
    *entity = o.entity ? o.entity : o.kind == LQ_OP_DELETE_EDIT && o.id ? o.id : "";
    *relation = o.relation;
    *target = o.target;
    *edit_id = o.id;
    if (o.layer >= 0 && *mode)
        snprintf(layer, cap, "%d", o.layer);
}

static int insert_row(srv_statedb *d, PGconn *c, const char *op, const char *entity, const char *relation,
                      const char *target, const char *layer, const char *mode, const char *edit_id,
                      const char *vlp, size_t len, int64_t *id, lq_err *e)
{
    const char *pv[9] = {d->model, op, entity, relation, target, layer && *layer ? layer : NULL, mode, edit_id, vlp};
    int pl[9] = {0, 0, 0, 0, 0, 0, 0, 0, (int)len};
    int pf[9] = {0, 0, 0, 0, 0, 0, 0, 0, 1};
    if (len > (size_t)0x3fffffff)
        return lq_err_set(e, LQ_ERANGE, "state database: an edit of %zu bytes is too large for a row", len);
    PGresult *r = PQexecParams(c,
                               "INSERT INTO infer.edits (model, op, entity, relation, target, layer, mode, edit_id, "
                               "vectors) VALUES ($1, $2, $3, $4, $5, $6::int, $7, $8, $9::bytea) RETURNING id",
                               9, NULL, pv, pl, pf, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQgetlength(r, 0, 0) != 8)
        return db_err(c, r, "writing infer.edits", e);
    *id = be64(PQgetvalue(r, 0, 0));
    PQclear(r);
    return LQ_OK;
}

/* Stores p as a row (committed when this returns LQ_OK) and applies it to the fold: under
 * name when it is a patch applied by name (checked again after the sync, which may have
 * brought one of that name), else as "edit:<id>". */
static int store(lq_server *s, const lq_patch *p, const char *name, lq_err *e)
{
    srv_statedb *d = s->statedb;
    char *vlp = NULL;
    PGconn *c = NULL;
    int rc = lq_patch_json(p, &vlp, e);
    /* the rows committed elsewhere first, so that this one lands on top of them */
    if (!rc)
        rc = sync_first(s, &c, e);
    if (!rc && name)
        rc = lq_overlay_check_patch(s->global, p, e);
    const char *op = "patch", *entity = name, *relation = NULL, *target = NULL, *mode = NULL, *edit_id = NULL;
    char layer[16] = "";
    if (!name)
        describe_ops(p, &op, &entity, &relation, &target, &mode, &edit_id, layer, sizeof layer);
    int64_t id = 0;
    if (!rc)
        rc = insert_row(d, c, op, entity, relation, target, layer, mode, edit_id, vlp, strlen(vlp), &id, e);
    /* committed: from here on the edit is acknowledged; applying the row cannot fail short
     * of memory (it was made on, or checked against, this overlay) */
    if (!rc && (rc = lq_edit_log_apply_patch(d->log, id, name, p, e)) == LQ_OK)
        __atomic_add_fetch(&d->applied, 1, __ATOMIC_RELAXED);
    if (!rc)
        srv_dcache_bump(s);
    free(vlp);
    return rc;
}

int srv_statedb_edit(lq_server *s, lq_overlay *ov, size_t n0, lq_err *e)
{
    lq_patch *p = NULL;
    int rc = lq_overlay_take_edits(ov, n0, "edit:new", &p, e);
    if (rc || !p)
        return rc;
    rc = store(s, p, NULL, e);
    lq_patch_free(p);
    return rc;
}

int srv_statedb_apply(lq_server *s, const lq_patch *p, lq_err *e)
{
    int rc = lq_overlay_check_patch(s->global, p, e);
    return rc ? rc : store(s, p, lq_patch_name(p), e);
}

int srv_statedb_remove(lq_server *s, const char *name, lq_err *e)
{
    srv_statedb *d = s->statedb;
    PGconn *c = NULL;
    int rc = sync_first(s, &c, e);
    if (rc)
        return rc;
    const char *pv[2] = {d->model, name};
    PGresult *r = PQexecParams(c, "DELETE FROM infer.edits WHERE model = $1 AND op = 'patch' AND entity = $2", 2, NULL,
                               pv, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return db_err(c, r, "deleting from infer.edits", e);
    int n = atoi(PQcmdTuples(r));
    PQclear(r);
    if (n == 0)
        return lq_err_set(e, LQ_ENOTFOUND, "patch '%s' not found", name);
    return sync_rows(s, c, 1, e);
}

/* ---- the listening thread ---- */

static PGconn *listen_conn(srv_statedb *d, lq_err *e)
{
    PGconn *c = connect_db(d->conninfo, e);
    if (!c)
        return NULL;
    PGresult *r = PQexec(c, "LISTEN infer_edits");
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        db_err(c, r, "LISTEN", e);
        PQfinish(c);
        return NULL;
    }
    PQclear(r);
    return c;
}

static void *sync_thread(void *arg)
{
    lq_server *s = arg;
    srv_statedb *d = s->statedb;
    double backoff = 0.1, last_check = lq_now();
    for (;;) {
        lq_err e = {0};
        int rc;
        if (!d->l || PQstatus(d->l) != CONNECTION_OK) {
            if (d->l) {
                PQfinish(d->l);
                d->l = NULL;
                __atomic_store_n(&d->connected, 0, __ATOMIC_RELAXED);
                srv_log(s, "state db: connection lost; reconnecting");
            }
            if ((d->l = listen_conn(d, &e)) != NULL && sync_rows(s, d->l, 0, &e) == LQ_OK) {
                __atomic_add_fetch(&d->reconnects, 1, __ATOMIC_RELAXED);
                __atomic_store_n(&d->connected, 1, __ATOMIC_RELAXED);
                srv_log(s, "state db: reconnected; edits synced");
                backoff = 0.1;
            } else {
                struct pollfd w = {.fd = d->wake[0], .events = POLLIN};
                if (poll(&w, 1, (int)(backoff * 1000)) > 0)
                    break;
                backoff = backoff * 2 > 2.0 ? 2.0 : backoff * 2;
                continue;
            }
        }
        struct pollfd p[2] = {{.fd = PQsocket(d->l), .events = POLLIN}, {.fd = d->wake[0], .events = POLLIN}};
        int n = poll(p, 2, 1000);
        if (n < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        int hit = 0;
        if (n > 0 && p[0].revents) {
            if (!PQconsumeInput(d->l))
                continue; /* the connection is gone: reconnect above */
            PGnotify *nt;
            while ((nt = PQnotifies(d->l)) != NULL) {
                hit |= nt->extra && !strcmp(nt->extra, d->model);
                PQfreemem(nt);
            }
        }
        /* a notification is the fast path; the version, read every second, the safety net */
        if (!hit && lq_now() - last_check >= 1.0) {
            last_check = lq_now();
            int64_t v = read_version(d->l, d->model, &e, &rc);
            hit = !rc && v != d->version;
        }
        if (hit) {
            int64_t v = read_version(d->l, d->model, &e, &rc);
            if (!rc && (rc = sync_rows(s, d->l, 0, &e)) == LQ_OK)
                d->version = v;
            if (rc)
                srv_log(s, "state db: sync failed: %s", e.msg);
        }
    }
    return NULL;
}

/* ---- life ---- */

int srv_statedb_start(lq_server *s, lq_err *e)
{
    srv_statedb *d = calloc(1, sizeof *d);
    if (!d)
        return lq_err_set(e, LQ_ENOMEM, "out of memory");
    d->wake[0] = d->wake[1] = -1;
    s->statedb = d;
    d->conninfo = strdup(s->o.state_db);
    d->model = strdup(s->o.state_model && *s->o.state_model ? s->o.state_model : s->model_id);
    if (!d->conninfo || !d->model)
        return lq_err_set(e, LQ_ENOMEM, "out of memory");
    int rc = lq_edit_log_create(s->vx, lq_vindex_knn_store(s->vx), &d->log, e);
    if (rc)
        return rc;
    s->global = lq_edit_log_overlay(d->log);
    if (!(d->w = connect_db(d->conninfo, e)))
        return LQ_EBUSY;
    PGresult *r = PQexec(d->w, "SELECT to_regclass('infer.edits') IS NOT NULL AND "
                               "to_regclass('infer.edit_versions') IS NOT NULL");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return db_err(d->w, r, "checking for infer.edits", e);
    int have = PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!have)
        return lq_err_set(e, LQ_EINVAL, "state database has no table infer.edits: run CREATE EXTENSION pg_infer in "
                                        "that database first (ext/pg_infer; README: PostgreSQL)");
    if (!(d->l = listen_conn(d, e)))
        return LQ_EBUSY;
    /* LISTEN first, then the rows: an edit committed in between is both notified and read */
    if ((rc = sync_rows(s, d->w, 1, e)))
        return rc;
    d->version = read_version(d->w, d->model, e, &rc);
    if (rc)
        return rc;
    d->connected = 1;
    srv_log(s, "state db: %zu edit%s of model '%s' loaded from infer.edits", lq_edit_log_n_applied(d->log),
            lq_edit_log_n_applied(d->log) == 1 ? "" : "s", d->model);
    if (pipe(d->wake))
        return lq_err_set(e, LQ_EIO, "pipe: %s", strerror(errno));
    if (pthread_create(&d->thr, NULL, sync_thread, s))
        return lq_err_set(e, LQ_EIO, "cannot start the state db thread");
    d->thr_started = 1;
    return LQ_OK;
}

void srv_statedb_stop(lq_server *s)
{
    srv_statedb *d = s->statedb;
    if (!d)
        return;
    if (d->thr_started) {
        ssize_t w = write(d->wake[1], "x", 1);
        (void)w;
        pthread_join(d->thr, NULL);
    }
    if (d->wake[0] >= 0) {
        close(d->wake[0]);
        close(d->wake[1]);
    }
    PQfinish(d->w);
    PQfinish(d->l);
    if (s->global == lq_edit_log_overlay(d->log))
        s->global = NULL;
    lq_edit_log_free(d->log);
    free(d->conninfo);
    free(d->model);
    free(d);
    s->statedb = NULL;
}

void srv_statedb_figures(const lq_server *s, srv_statedb_fig *f)
{
    memset(f, 0, sizeof *f);
    const srv_statedb *d = s->statedb;
    if (!d)
        return;
    f->on = 1;
    f->connected = __atomic_load_n(&d->connected, __ATOMIC_RELAXED);
    f->applied = __atomic_load_n(&d->applied, __ATOMIC_RELAXED);
    f->failed = __atomic_load_n(&d->failed, __ATOMIC_RELAXED);
    f->syncs = __atomic_load_n(&d->syncs, __ATOMIC_RELAXED);
    f->reconnects = __atomic_load_n(&d->reconnects, __ATOMIC_RELAXED);
}
