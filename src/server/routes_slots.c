/* POST /slots/{id}?action=save|restore {"filename": NAME} and POST /slots/{id}?action=erase:
 * llama-server's slot save/restore/erase over the prompt cache (lq_scheduler_cache_save /
 * _restore / _erase). This server has no fixed slots: for save and erase, {id} is the rank of a
 * cached prompt by recency (0 = the conversation served last);
 * a restored file becomes the newest entry ({id} is echoed, as llama-server's reply has it).
 * Files live in --slot-save-path only: a name is one plain file name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "larql/scheduler.h"
#include "server/internal.h"

/* Letters, digits, '.', '_', '-'; not starting with '.' (no "..", no hidden files), at most
 * 255 bytes: nothing that leaves the directory. */
static int plain_name(const char *f, size_t len)
{
    if (len == 0 || len > 255 || f[0] == '.')
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)f[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

void route_slots(lq_server *s, req *q, reply *r)
{
    const char *action = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "action");
    int save = action && !strcmp(action, "save"), erase = action && !strcmp(action, "erase");
    if (!save && !erase && !(action && !strcmp(action, "restore"))) {
        reply_oai_err(r, 400, "action", action ? "unknown action '%s': save, restore or erase"
                                               : "%smissing query parameter 'action' (save, restore or erase)",
                      action ? action : "");
        return;
    }
    char *end = NULL;
    long id = q->path_arg_long ? -1 : strtol(q->path_arg, &end, 10);
    if (id < 0 || id > 65535 || !end || *end || end == q->path_arg) {
        reply_oai_err(r, 400, "id_slot", "slot id '%s' is not an integer 0..65535", q->path_arg);
        return;
    }
    if (erase) { /* no body, as llama-server's */
        lq_err err = {0};
        lq_model *m = NULL;
        size_t nt = 0;
        int rc = srv_model(s, &m, &err);
        if (rc) {
            reply_oai_err(r, 503, NULL, "%s", err.msg);
            return;
        }
        rc = lq_scheduler_cache_erase(srv_sched(s), (int)id, &nt, &err);
        if (rc)
            reply_oai_err(r, status_from_lq(rc), rc == LQ_ENOTFOUND ? "id_slot" : NULL, "%s", err.msg);
        else
            reply_json(r, 200, json_pack("{s:i,s:I}", "id_slot", (int)id, "n_erased", (json_int_t)nt));
        return;
    }
    if (!s->slot_dir) {
        reply_oai_err(r, 501, NULL, "slot save/restore is off: start the server with --slot-save-path DIR");
        return;
    }
    json_t *j = req_json_body(q, r);
    if (!j)
        return;
    const char *fn = NULL;
    size_t fl = 0;
    if (jget_str(q->rt, j, "filename", &fn, &fl, r) < 0)
        goto out;
    if (!fn || !plain_name(fn, fl)) {
        reply_oai_err(r, 400, "filename",
                      fn ? "invalid filename '%s': letters, digits, '.', '_' and '-' only, not starting with '.'"
                         : "%smissing field 'filename'",
                      fn ? fn : "");
        goto out;
    }
    lq_err err = {0};
    lq_model *m = NULL;
    int rc = srv_model(s, &m, &err);
    if (rc) {
        reply_oai_err(r, 503, NULL, "%s", err.msg);
        goto out;
    }
    size_t pl = strlen(s->slot_dir) + fl + 2;
    char *path = malloc(pl);
    if (!path) {
        reply_oai_err(r, 500, NULL, "out of memory");
        goto out;
    }
    snprintf(path, pl, "%s/%s", s->slot_dir, fn);
    size_t nt = 0, nb = 0;
    double t0 = lq_now_ms();
    rc = save ? lq_scheduler_cache_save(srv_sched(s), (int)id, path, &nt, &nb, &err)
              : lq_scheduler_cache_restore(srv_sched(s), path, &nt, &nb, &err);
    double ms = lq_now_ms() - t0;
    free(path);
    if (rc) {
        /* a file that is not a slot of this model is the request's fault */
        reply_oai_err(r, rc == LQ_EFORMAT ? 400 : status_from_lq(rc), rc == LQ_ENOTFOUND && save ? "id_slot" : NULL,
                      "%s", err.msg);
        goto out;
    }
    reply_json(r, 200, json_pack("{s:i,s:s,s:I,s:I,s:{s:f}}", "id_slot", (int)id, "filename", fn,
                                 save ? "n_saved" : "n_restored", (json_int_t)nt, save ? "n_written" : "n_read",
                                 (json_int_t)nb, "timings", save ? "save_ms" : "restore_ms", ms));
out:
    json_decref(j);
}
