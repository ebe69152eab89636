/* The local registry of vindexes: LARQL's two caches, read and written as LARQL's CLI does
 * (larql list / link / rm, and the names slice and diag accept).
 *   - the local registry: $LARQL_HOME/local, else ~/.cache/larql/local; an entry is
 *     <name>.vindex, a symbolic link (larql link) or a directory, holding index.json;
 *   - the Hugging Face hub cache: $HF_HOME/hub, else ~/.cache/huggingface/hub; an entry is
 *     {models,datasets}--<owner>--<name>/snapshots/<rev>/ with index.json (the newest
 *     snapshot that has one), listed as owner/name. Filled by `larql pull` in LARQL; here it
 *     is only read (downloading needs the network).
 * A name resolves as LARQL's: an existing directory is itself; owner/name is that hub entry;
 * a plain name is the one entry whose name (local) or name half (hub) it is, and two are an
 * error listing both. Nothing here touches the network. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json_obj.h"
#include "vindex/vindex_internal.h"

static char *cache_dir(const char *env, const char *sub, const char *home_rel, lq_err *err)
{
    const char *e = getenv(env), *home = getenv("HOME");
    char *p = NULL;
    if (e && *e)
        p = lq_vx_join(e, sub);
    else if (home && *home)
        p = lq_vx_join(home, home_rel);
    else
        lq_err_set(err, LQ_ENOTFOUND, "no HOME (or %s) to find the cache in", env);
    if (!p && ((e && *e) || (home && *home)))
        lq_err_set(err, LQ_ENOMEM, "out of memory");
    return p;
}

char *lq_registry_local_dir(lq_err *err) { return cache_dir("LARQL_HOME", "local", ".cache/larql/local", err); }
char *lq_registry_hub_dir(lq_err *err) { return cache_dir("HF_HOME", "hub", ".cache/huggingface/hub", err); }

static int has_index(const char *dir)
{
    char *p = lq_vx_join(dir, "index.json");
    struct stat st;
    int ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

/* bytes of the regular files under dir (links to files followed, links to directories not) */
static uint64_t dir_size(const char *dir, int depth)
{
    DIR *d = depth < 16 ? opendir(dir) : NULL;
    if (!d)
        return 0;
    uint64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *p = lq_vx_join(dir, e->d_name);
        struct stat lst, st;
        if (p && lstat(p, &lst) == 0) {
            if (S_ISDIR(lst.st_mode))
                n += dir_size(p, depth + 1);
            else if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
                n += (uint64_t)st.st_size;
        }
        free(p);
    }
    closedir(d);
    return n;
}

typedef struct ent_vec {
    lq_registry_entry *v;
    size_t n, cap;
} ent_vec;

static int push(ent_vec *ev, const char *repo, const char *path, int hub, lq_err *err)
{
    if (ev->n == ev->cap) {
        size_t c = ev->cap ? 2 * ev->cap : 16;
        lq_registry_entry *nv = realloc(ev->v, c * sizeof *nv);
        if (!nv)
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        ev->v = nv;
        ev->cap = c;
    }
    lq_registry_entry *x = &ev->v[ev->n];
    x->repo = strdup(repo);
    x->path = strdup(path);
    x->hub = hub;
    x->size_bytes = dir_size(path, 0);
    /* LARQL's list reads the config only: index.json, not the vindex */
    char *ip = lq_vx_join(path, "index.json");
    json_t *ix = ip ? json_load_file(ip, 0, NULL) : NULL;
    free(ip);
    json_int_t nl = json_integer_value(json_object_get(ix, "num_layers"));
    json_int_t hs = json_integer_value(json_object_get(ix, "hidden_size"));
    x->num_layers = nl > 0 && nl < INT_MAX ? (int)nl : 0;
    x->hidden_size = hs > 0 && hs < INT_MAX ? (int)hs : 0;
    json_decref(ix);
    if (!x->repo || !x->path) {
        free(x->repo), free(x->path);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    ev->n++;
    return LQ_OK;
}

static int scan_local(const char *local, ent_vec *ev, lq_err *err)
{
    DIR *d = opendir(local);
    if (!d)
        return LQ_OK; /* no registry yet */
    int rc = LQ_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *p = lq_vx_join(local, e->d_name);
        struct stat st;
        if (p && stat(p, &st) == 0 && S_ISDIR(st.st_mode) && has_index(p)) {
            char name[NAME_MAX + 1];
            snprintf(name, sizeof name, "%s", e->d_name);
            size_t n = strlen(name);
            if (n > 7 && !strcmp(name + n - 7, ".vindex"))
                name[n - 7] = 0;
            rc = push(ev, name, p, 0, err);
        }
        free(p);
    }
    closedir(d);
    return rc;
}

/* the newest snapshot of a hub entry that has index.json, malloc'd, or NULL */
static char *newest_snapshot(const char *repo_dir)
{
    char *snaps = lq_vx_join(repo_dir, "snapshots");
    DIR *d = snaps ? opendir(snaps) : NULL;
    char *best = NULL;
    struct timespec bt = {0, 0};
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *p = lq_vx_join(snaps, e->d_name);
        struct stat st;
        if (p && stat(p, &st) == 0 && S_ISDIR(st.st_mode) && has_index(p) &&
            (!best || st.st_mtim.tv_sec > bt.tv_sec ||
             (st.st_mtim.tv_sec == bt.tv_sec && st.st_mtim.tv_nsec > bt.tv_nsec))) {
            free(best);
            best = p;
            bt = st.st_mtim;
            p = NULL;
        }
        free(p);
    }
    if (d)
        closedir(d);
    free(snaps);
    return best;
}

static int scan_hub(const char *hub, ent_vec *ev, lq_err *err)
{
    DIR *d = opendir(hub);
    if (!d)
        return LQ_OK;
    int rc = LQ_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        const char *rest = !strncmp(e->d_name, "models--", 8) ? e->d_name + 8
                           : !strncmp(e->d_name, "datasets--", 10) ? e->d_name + 10 : NULL;
        const char *sep = rest ? strstr(rest, "--") : NULL;
        if (!sep)
            continue;
        char *rd = lq_vx_join(hub, e->d_name), *snap = rd ? newest_snapshot(rd) : NULL;
        if (snap) {
            char repo[NAME_MAX + 2];
            snprintf(repo, sizeof repo, "%.*s/%s", (int)(sep - rest), rest, sep + 2);
            rc = push(ev, repo, snap, 1, err);
        }
        free(snap);
        free(rd);
    }
    closedir(d);
    return rc;
}

static int cmp_ent(const void *a, const void *b)
{
    const lq_registry_entry *x = a, *y = b;
    if (x->hub != y->hub) /* LARQL's order: the hub's entries, then the local ones */
        return y->hub - x->hub;
    return strcmp(x->repo, y->repo);
}

int lq_registry_scan(lq_registry_entry **out, size_t *n, lq_err *err)
{
    *out = NULL;
    *n = 0;
    char *local = lq_registry_local_dir(err), *hub = local ? lq_registry_hub_dir(err) : NULL;
    if (!local || !hub) {
        free(local);
        return err && err->code ? err->code : LQ_ENOMEM;
    }
    ent_vec ev = {0};
    int rc = scan_hub(hub, &ev, err);
    if (!rc)
        rc = scan_local(local, &ev, err);
    free(local);
    free(hub);
    if (rc) {
        lq_registry_free(ev.v, ev.n);
        return rc;
    }
    if (ev.n)
        qsort(ev.v, ev.n, sizeof *ev.v, cmp_ent);
    *out = ev.v;
    *n = ev.n;
    return LQ_OK;
}

void lq_registry_free(lq_registry_entry *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++) {
        free(e[i].repo);
        free(e[i].path);
    }
    free(e);
}

static const char *short_key(const char *repo)
{
    const char *s = strrchr(repo, '/');
    return s ? s + 1 : repo;
}

int lq_registry_find(const char *model, lq_registry_entry *out, lq_err *err)
{
    memset(out, 0, sizeof *out);
    const char *key = !strncmp(model, "hf://", 5) ? model + 5 : model;
    lq_registry_entry *v = NULL;
    size_t n = 0;
    int rc = lq_registry_scan(&v, &n, err);
    if (rc)
        return rc;
    size_t hit = n, count = 0;
    for (size_t i = 0; i < n; i++)
        if (strchr(key, '/') ? !strcmp(v[i].repo, key) : !strcmp(short_key(v[i].repo), key)) {
            if (!count++)
                hit = i;
        }
    if (count == 1) {
        *out = v[hit];
        v[hit].repo = v[hit].path = NULL;
    } else if (!count) {
        rc = lq_err_set(err, LQ_ENOTFOUND, "not cached: %s (larql list shows the registry; larql link DIR adds one)",
                        key);
    } else {
        char list[768] = "";
        size_t off = 0;
        for (size_t i = 0; i < n && off < sizeof list - 1; i++)
            if (!strcmp(short_key(v[i].repo), key) || !strcmp(v[i].repo, key))
                off += (size_t)snprintf(list + off, sizeof list - off, "\n  - %s [%s]", v[i].repo,
                                        v[i].hub ? "hf" : "local");
        rc = lq_err_set(err, LQ_EINVAL, "shorthand `%s` is ambiguous, it matches:%s\nUse the full owner/name.", key,
                        list);
    }
    lq_registry_free(v, n);
    return rc;
}

int lq_registry_resolve(const char *model, char **dir, lq_err *err)
{
    *dir = NULL;
    struct stat st;
    if (strncmp(model, "hf://", 5) && stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (!(*dir = strdup(model)))
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        return LQ_OK;
    }
    /* a path (absolute, relative with ./ or ../, or of several segments) is no hub name */
    const char *sl = strchr(model, '/');
    if (strncmp(model, "hf://", 5) && (model[0] == '/' || model[0] == '.' || (sl && strchr(sl + 1, '/'))))
        return lq_err_set(err, LQ_ENOTFOUND, "no such vindex directory: %s", model);
    lq_registry_entry e;
    int rc = lq_registry_find(model, &e, err);
    if (rc == LQ_ENOTFOUND && (strchr(model, '/') || !strncmp(model, "hf://", 5)))
        return lq_err_set(err, LQ_EUNSUPPORTED, "%s is neither a directory nor cached, and downloading it from the "
                                                "Hugging Face hub needs the network, which this larql does not use",
                          model);
    if (rc)
        return rc;
    *dir = e.path;
    free(e.repo);
    return LQ_OK;
}

static int remove_all(const char *dir, int depth);

static int valid_name(const char *name, lq_err *err)
{
    if (!*name)
        return lq_err_set(err, LQ_EINVAL, "name cannot be empty");
    if (strchr(name, '/'))
        return lq_err_set(err, LQ_EINVAL, "name `%s` contains a path separator: use --as with a plain name", name);
    if (name[0] == '.')
        return lq_err_set(err, LQ_EINVAL, "name `%s` cannot start with `.`", name);
    if (strlen(name) > NAME_MAX - 7)
        return lq_err_set(err, LQ_EINVAL, "name `%.32s...` is too long", name);
    return LQ_OK;
}

/* mkdir -p of the registry directory */
static int make_dirs(char *p, lq_err *err)
{
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        int bad = mkdir(p, 0755) != 0 && errno != EEXIST;
        *s = '/';
        if (bad)
            return lq_err_set(err, LQ_EIO, "cannot create %s: %s", p, strerror(errno));
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return lq_err_set(err, LQ_EIO, "cannot create %s: %s", p, strerror(errno));
    return LQ_OK;
}

int lq_registry_link(const char *path, const char *as_name, int force, char **link_out, char **target_out,
                     lq_err *err)
{
    *link_out = *target_out = NULL;
    char *target = realpath(path, NULL);
    if (!target)
        return lq_err_set(err, LQ_ENOTFOUND, "could not resolve path `%s`: %s", path, strerror(errno));
    struct stat st;
    int rc = LQ_OK;
    if (stat(target, &st) != 0 || !S_ISDIR(st.st_mode))
        rc = lq_err_set(err, LQ_EINVAL, "not a directory: %s", target);
    else if (!has_index(target))
        rc = lq_err_set(err, LQ_EINVAL, "not a vindex: %s (no index.json)", target);
    char name[NAME_MAX + 1];
    if (!rc) {
        const char *base = as_name ? as_name : strrchr(target, '/') ? strrchr(target, '/') + 1 : target;
        snprintf(name, sizeof name, "%s", base);
        size_t n = strlen(name);
        if (!as_name && n > 7 && !strcmp(name + n - 7, ".vindex"))
            name[n - 7] = 0;
        rc = valid_name(name, err);
    }
    char *local = rc ? NULL : lq_registry_local_dir(err), *link = NULL;
    if (!rc && !local)
        rc = err && err->code ? err->code : LQ_ENOMEM;
    if (!rc)
        rc = make_dirs(local, err);
    if (!rc) {
        size_t n = strlen(local) + strlen(name) + 16;
        if (!(link = malloc(n)))
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        else
            snprintf(link, n, "%s/%s.vindex", local, name);
    }
    struct stat lst;
    if (!rc && lstat(link, &lst) == 0) {
        if (!force)
            rc = lq_err_set(err, LQ_EINVAL, "link already exists: %s (re-run with --force to replace)", link);
        else if (S_ISLNK(lst.st_mode) ? unlink(link) != 0 : remove_all(link, 0) != 0)
            rc = lq_err_set(err, LQ_EIO, "cannot replace %s: %s", link, strerror(errno));
    }
    if (!rc && symlink(target, link) != 0)
        rc = lq_err_set(err, LQ_EIO, "cannot create the link %s: %s", link, strerror(errno));
    free(local);
    if (rc) {
        free(link);
        free(target);
        return rc;
    }
    *link_out = link;
    *target_out = target;
    return LQ_OK;
}

/* everything under dir, then dir (links removed, never followed) */
static int remove_all(const char *dir, int depth)
{
    DIR *d = depth < 32 ? opendir(dir) : NULL;
    if (!d)
        return -1;
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *p = lq_vx_join(dir, e->d_name);
        struct stat st;
        if (!p || lstat(p, &st) != 0)
            bad = 1;
        else if (S_ISDIR(st.st_mode))
            bad |= remove_all(p, depth + 1) != 0;
        else
            bad |= unlink(p) != 0;
        free(p);
    }
    closedir(d);
    return bad || rmdir(dir) != 0 ? -1 : 0;
}

int lq_registry_remove(const lq_registry_entry *e, lq_err *err)
{
    if (!e->hub) {
        struct stat st;
        if (lstat(e->path, &st) != 0)
            return lq_err_set(err, LQ_ENOTFOUND, "not cached: %s", e->path);
        if (S_ISLNK(st.st_mode)) /* a link: the vindex it names stays */
            return unlink(e->path) ? lq_err_set(err, LQ_EIO, "cannot remove %s: %s", e->path, strerror(errno))
                                   : LQ_OK;
        return remove_all(e->path, 0) ? lq_err_set(err, LQ_EIO, "cannot remove all of %s", e->path) : LQ_OK;
    }
    /* a hub entry: its whole repository directory (<hub>/models--o--n), two levels above the snapshot */
    char *repo = strdup(e->path);
    if (!repo)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int up = 0; up < 2; up++) {
        char *s = strrchr(repo, '/');
        if (s)
            *s = 0;
    }
    int rc = strstr(repo, "--") ? (remove_all(repo, 0) ? lq_err_set(err, LQ_EIO, "cannot remove all of %s", repo) : 0)
                                : lq_err_set(err, LQ_EINVAL, "unexpected hub cache path: %s", e->path);
    free(repo);
    return rc;
}
