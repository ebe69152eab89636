/* GET /v1/shard/{model_id}/{start}-{end}: LARQL's grid hand-off ("Mode B"). A donor streams
 * its vindex directory as a tar (application/x-tar) so that a new node can mirror it and
 * serve the layer range it was assigned with `larql serve DIR --ffn-only --layers A-B`. As
 * LARQL's donor, the whole directory is sent whatever the range (the receiver maps only its
 * layers); the range is checked for shape only: 400 for one that is not START-END or has
 * START > END, 404 for a model this server does not serve, 500 when the model is not a
 * vindex directory (a GGUF file has no shard to hand over).
 *
 * The tar is POSIX ustar, built while it is sent: the file list (names, sizes) is taken
 * when the request arrives, so Content-Length is known; each file is opened when its turn
 * comes. A file that changed size meanwhile ends the stream with an error (the receiver sees
 * a short body, never a tar whose header lies). Symbolic links to files are followed (as
 * LARQL's follow_symlinks); links to directories are not entered (no cycles); other entries
 * (sockets, devices) are skipped. Names up to 255 bytes (ustar's prefix + name). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/internal.h"

#define SHARD_MAX_ENTRIES 100000
#define SHARD_MAX_DEPTH 8

typedef struct tar_ent {
    char *rel;          /* path inside the directory ("bitnet/x.i2s"; dirs end without '/') */
    int is_dir;
    uint64_t size;
    long mtime;
} tar_ent;

typedef struct tar_job {
    char *root;
    tar_ent *e;
    size_t n, cap;
    size_t cur;         /* entry being sent */
    uint64_t off;       /* bytes of the current entry's record sent (header + data + padding) */
    int fd;             /* the current file, -1 */
    lq_server *srv;
} tar_job;

static void job_free(void *cls)
{
    tar_job *j = cls;
    if (!j)
        return;
    if (j->fd >= 0)
        close(j->fd);
    for (size_t i = 0; i < j->n; i++)
        free(j->e[i].rel);
    free(j->e);
    free(j->root);
    if (j->srv)
        __atomic_sub_fetch(&j->srv->m.active_streams, 1, __ATOMIC_RELAXED);
    free(j);
}

static int add_ent(tar_job *j, const char *rel, int is_dir, const struct stat *st)
{
    if (j->n >= SHARD_MAX_ENTRIES)
        return -1;
    if (j->n == j->cap) {
        size_t c = j->cap ? 2 * j->cap : 64;
        tar_ent *ne = realloc(j->e, c * sizeof *ne);
        if (!ne)
            return -1;
        j->e = ne;
        j->cap = c;
    }
    tar_ent *e = &j->e[j->n];
    if (!(e->rel = strdup(rel)))
        return -1;
    e->is_dir = is_dir;
    e->size = is_dir ? 0 : (uint64_t)st->st_size;
    e->mtime = (long)st->st_mtime;
    j->n++;
    return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* ustar holds a name of <= 100 bytes, or one split at a '/' into <= 155 + <= 100 */
static size_t ustar_cut(const char *nm, size_t len)
{
    if (len <= 100)
        return 0;
    for (size_t cut = len - 101; cut < len && cut <= 155; cut++)
        if (nm[cut] == '/')
            return cut;
    return (size_t)-1;
}

/* the directory's entries, sorted, depth first; -1 on a limit or allocation failure */
static int walk(tar_job *j, const char *rel, int depth)
{
    if (depth > SHARD_MAX_DEPTH)
        return 0;
    char dir[4096];
    if ((size_t)snprintf(dir, sizeof dir, "%s%s%s", j->root, *rel ? "/" : "", rel) >= sizeof dir)
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                rc = -1;
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name)))
            rc = -1;
        else
            n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_name);
    for (size_t i = 0; !rc && i < n; i++) {
        char child[4096], path[4096];
        int cl = snprintf(child, sizeof child, "%s%s%s", rel, *rel ? "/" : "", names[i]);
        if (cl < 0 || cl >= 255 || ustar_cut(child, (size_t)cl + 1) == (size_t)-1 ||
            (size_t)snprintf(path, sizeof path, "%s/%s", j->root, child) >= sizeof path) {
            rc = -1;
            break;
        }
        struct stat lst, st;
        if (lstat(path, &lst) != 0 || stat(path, &st) != 0)
            continue; /* a dangling link */
        if (S_ISDIR(lst.st_mode)) {
            rc = add_ent(j, child, 1, &st);
            if (!rc)
                rc = walk(j, child, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            rc = add_ent(j, child, 0, &st);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

static uint64_t rec_size(const tar_ent *e) { return 512 + (e->size + 511) / 512 * 512; }

/* a ustar header for e (the name split into prefix/name when longer than 100 bytes) */
static void header(const tar_ent *e, char h[512])
{
    memset(h, 0, 512);
    char nm[260];
    snprintf(nm, sizeof nm, "%s%s", e->rel, e->is_dir ? "/" : "");
    size_t len = strlen(nm);
    size_t cut = ustar_cut(nm, len); /* checked when the entry was listed */
    if (!cut) {
        memcpy(h, nm, len);
    } else {
        memcpy(h + 345, nm, cut);
        memcpy(h, nm + cut + 1, len - cut - 1);
    }
    snprintf(h + 100, 8, "%07o", e->is_dir ? 0755 : 0644);
    snprintf(h + 108, 8, "%07o", 0);
    snprintf(h + 116, 8, "%07o", 0);
    unsigned long long mt = e->mtime > 0 ? (unsigned long long)e->mtime & 077777777777ULL : 0;
    if (e->size <= 077777777777ULL) {
        snprintf(h + 124, 12, "%011llo", (unsigned long long)e->size);
    } else { /* 8 GiB or more: GNU's base-256 form (0x80, then the size big-endian) */
        h[124] = (char)0x80;
        for (int i = 0; i < 8; i++)
            h[135 - i] = (char)((e->size >> (8 * i)) & 0xff);
    }
    snprintf(h + 136, 12, "%011llo", mt);
    h[156] = e->is_dir ? '5' : '0';
    memcpy(h + 257, "ustar", 6); /* magic "ustar\0", version "00" */
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    tar_job *j = cls;
    size_t out = 0;
    while (out < max) {
        if (j->cur == j->n) { /* two zero blocks end the archive */
            uint64_t end = 1024 - j->off;
            if (!end)
                break;
            size_t k = end < max - out ? (size_t)end : max - out;
            memset(buf + out, 0, k);
            out += k;
            j->off += k;
            continue;
        }
        const tar_ent *e = &j->e[j->cur];
        if (j->off < 512) {
            char h[512];
            header(e, h);
            size_t k = 512 - (size_t)j->off < max - out ? 512 - (size_t)j->off : max - out;
            memcpy(buf + out, h + j->off, k);
            out += k;
            j->off += k;
            continue;
        }
        uint64_t d = j->off - 512;
        if (d < e->size) {
            if (j->fd < 0) {
                char path[4096];
                snprintf(path, sizeof path, "%s/%s", j->root, e->rel);
                if ((j->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
                    return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            size_t want = e->size - d < max - out ? (size_t)(e->size - d) : max - out;
            ssize_t got = pread(j->fd, buf + out, want, (off_t)d);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                return MHD_CONTENT_READER_END_WITH_ERROR; /* shrank since the listing */
            out += (size_t)got;
            j->off += (uint64_t)got;
            continue;
        }
        uint64_t rs = rec_size(e);
        if (j->off < rs) { /* padding to the block */
            size_t k = rs - j->off < max - out ? (size_t)(rs - j->off) : max - out;
            memset(buf + out, 0, k);
            out += k;
            j->off += k;
            continue;
        }
        if (j->fd >= 0) {
            struct stat st;
            int grew = fstat(j->fd, &st) == 0 && (uint64_t)st.st_size != e->size;
            close(j->fd);
            j->fd = -1;
            if (grew)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        j->cur++;
        j->off = 0;
    }
    return out ? (ssize_t)out : MHD_CONTENT_READER_END_OF_STREAM;
}

/* "START-END": decimal layers, START <= END checked by the caller */
static int parse_range(const char *s, long *a, long *b)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    *a = strtol(s, &end, 10);
    if (errno || *end != '-' || end[1] < '0' || end[1] > '9')
        return -1;
    *b = strtol(end + 1, &end, 10);
    return errno || *end || *a > 0xFFFFFFFFL || *b > 0xFFFFFFFFL ? -1 : 0;
}

void route_shard(lq_server *s, req *q, reply *r)
{
    const char *arg = q->path_arg, *slash = strchr(arg, '/');
    if (q->path_arg_long || !slash) {
        reply_larql_err(r, 400, "expected /v1/shard/{model_id}/{start}-{end}");
        return;
    }
    const char *range = slash + 1;
    long a, b;
    if (parse_range(range, &a, &b)) {
        reply_larql_err(r, 400, "invalid layer range '%.64s': expected 'START-END'", range);
        return;
    }
    if (a > b) {
        reply_larql_err(r, 400, "layer range '%.64s': start (%ld) must be <= end (%ld)", range, a, b);
        return;
    }
    lq_server *front = s->front ? s->front : s, *m = NULL;
    size_t idl = (size_t)(slash - arg);
    for (int k = 0; k < front->n_models; k++)
        if (strlen(front->models[k]->model_id) == idl && !memcmp(front->models[k]->model_id, arg, idl))
            m = front->models[k];
    if (!m) {
        reply_larql_err(r, 404, "model '%.*s' not loaded on this server", (int)(idl > 128 ? 128 : idl), arg);
        return;
    }
    struct stat st;
    if (stat(m->model_path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        reply_larql_err(r, 500, "vindex path is not a directory: model '%s' is served from a file", m->model_id);
        return;
    }
    tar_job *j = calloc(1, sizeof *j);
    if (!j || !(j->root = strdup(m->model_path))) {
        free(j);
        reply_larql_err(r, 500, "out of memory");
        return;
    }
    j->fd = -1;
    if (walk(j, "", 0)) {
        job_free(j);
        reply_larql_err(r, 500, "cannot list the vindex directory (a name past 255 bytes, more than %d entries, "
                                "or an unreadable directory)", SHARD_MAX_ENTRIES);
        return;
    }
    uint64_t total = 1024;
    for (size_t i = 0; i < j->n; i++)
        total += rec_size(&j->e[i]);
    r->stream = MHD_create_response_from_callback(total, 64 * 1024, reader, j, job_free);
    if (!r->stream) {
        job_free(j);
        reply_larql_err(r, 500, "cannot create the stream response");
        return;
    }
    j->srv = s;
    __atomic_add_fetch(&s->m.active_streams, 1, __ATOMIC_RELAXED);
    r->status = 200;
    r->ctype = "application/x-tar";
    srv_log(s, "shard %s layers %ld-%ld: streaming %zu entries (%llu bytes)", m->model_id, a, b, j->n,
            (unsigned long long)total);
}
