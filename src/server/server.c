/* A server's life: options, opening one model (or every vindex under --dir, LARQL's
 * multi-model serving), listening (one thread per connection: a slow client blocks only its
 * own thread), and a graceful stop. Requests go to http.c; the model to models.c. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "larql/chat.h"
#include "server/internal.h"

void lq_server_opts_init(lq_server_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_concurrent = 64;
    o->max_body = 2u << 20;
    o->request_timeout_s = 30;
    o->header_timeout_s = 10;
    o->shutdown_grace_s = 5;
    o->max_sessions = 64;
    o->max_connections = 1000;
    o->max_stream_buffer = (size_t)8 << 20;
    o->cache_ram = (uint64_t)1 << 30;
    o->session_ttl_s = 3600;
}

static char *dupz(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void model_id_from_path(const char *path, char *out, size_t cap)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    size_t len = n - b;
    if (len > 5 && !memcmp(path + n - 5, ".gguf", 5))
        len -= 5;
    if (len >= cap)
        len = cap - 1;
    memcpy(out, path + b, len);
    out[len] = 0;
}

static void server_free(lq_server *s)
{
    if (!s)
        return;
    if (s->pool_free) {
        for (int i = 0; i < s->n_free; i++)
            lq_session_free(s->pool_free[i]);
        free(s->pool_free);
    }
    /* after the daemon stopped: every stream has released its scheduler handle */
    lq_scheduler_free(s->sched);
    lq_model_close(s->model);
    if (s->knowledge_ready)
        srv_knowledge_free(s);
    lq_vindex_close(s->vx);
    srv_ratelimit_free(s->rl);
    srv_deadline_free(s->deadline); /* after the daemon (its callbacks use it) */
    if (s->stop_pipe[0] > 0)
        close(s->stop_pipe[0]);
    if (s->stop_pipe[1] > 0)
        close(s->stop_pipe[1]);
    pthread_mutex_destroy(&s->load_mu);
    pthread_mutex_destroy(&s->pool_mu);
    free(s->host);
    free(s->api_key);
    free(s->model_path);
    free(s->kernels);
    free(s->state_dir);
    free(s->state_db);
    free(s->state_model);
    free(s->patch_dir);
    free(s->slot_dir);
    free(s->chat_template);
    free(s->ffn_url);
    lq_edit_set_unref(s->carried);
    free(s->models);
    free(s);
}

/* Opens one model's server (validated options, the model or vindex, its knowledge state)
 * without listening: lq_server_start listens on the first one opened. */
static int srv_open(const lq_server_opts *o, lq_server **out, lq_err *err)
{
    *out = NULL;
    if (!o || !o->model_path || !*o->model_path)
        return lq_err_set(err, LQ_EINVAL, "server: a model path is required");
    if (o->port < 0 || o->port > 65535)
        return lq_err_set(err, LQ_EINVAL, "server: port %d is outside 0..65535", o->port);
    if (o->max_sessions < 1 || o->max_sessions > 100000 || o->session_ttl_s < 1)
        return lq_err_set(err, LQ_EINVAL, "server: max_sessions %d (1..100000) / session_ttl %d s (>= 1)",
                          o->max_sessions, o->session_ttl_s);
    if (o->max_stream_buffer < 4096 || o->max_stream_buffer > ((size_t)1 << 30))
        return lq_err_set(err, LQ_EINVAL, "server: max_stream_buffer %zu is outside 4 KiB..1 GiB", o->max_stream_buffer);
    if (o->max_connections < 1 || o->max_connections > 100000)
        return lq_err_set(err, LQ_EINVAL, "server: max_connections %d is outside 1..100000", o->max_connections);
    if (o->max_concurrent < 1 || o->max_concurrent > 4096)
        return lq_err_set(err, LQ_EINVAL, "server: max_concurrent %d is outside 1..4096", o->max_concurrent);
    if (o->max_body < 1024 || o->max_body > ((size_t)1 << 30))
        return lq_err_set(err, LQ_EINVAL, "server: max_body %zu is outside 1 KiB..1 GiB", o->max_body);
    if (o->header_timeout_s < 0 || o->header_timeout_s > 86400)
        return lq_err_set(err, LQ_EINVAL, "server: header timeout %d s is outside 0..86400", o->header_timeout_s);
    if (o->request_timeout_s < 1 || o->request_timeout_s > 86400)
        return lq_err_set(err, LQ_EINVAL, "server: request timeout %d s is outside 1..86400", o->request_timeout_s);
    if (o->n_ctx < 0)
        return lq_err_set(err, LQ_EINVAL, "server: ctx %d is negative", o->n_ctx);
    if (o->layers_set && (o->layer_first < 0 || o->layer_last < o->layer_first))
        return lq_err_set(err, LQ_EINVAL, "server: --layers %d-%d is not a range A-B with 0 <= A <= B",
                          o->layer_first, o->layer_last);
    if (o->state_db && o->state_dir)
        return lq_err_set(err, LQ_EINVAL, "server: --state-db and --state-dir keep the same edits in two places: "
                                          "give one (sessions are in memory with --state-db)");

    struct stat st;
    if (o->slot_save_path && (stat(o->slot_save_path, &st) || !S_ISDIR(st.st_mode)))
        return lq_err_set(err, LQ_ENOTFOUND, "server: --slot-save-path '%s' is not a directory", o->slot_save_path);
    if (stat(o->model_path, &st))
        return lq_err_set(err, LQ_EIO, "cannot open model '%s': %s", o->model_path, strerror(errno));
    uint64_t limit = o->memory_limit ? o->memory_limit : srv_cgroup_memory_max();
    if (limit && !S_ISDIR(st.st_mode)) {
        /* the mapped weights are resident once touched; leave 1/8 for KV caches and the rest */
        uint64_t need = (uint64_t)st.st_size + (uint64_t)st.st_size / 8;
        if (need > limit)
            return lq_err_set(err, LQ_ENOMEM,
                              "model '%s' needs about %llu MiB (file %llu MiB + 1/8 headroom) but the memory "
                              "limit is %llu MiB",
                              o->model_path, (unsigned long long)(need >> 20),
                              (unsigned long long)((uint64_t)st.st_size >> 20),
                              (unsigned long long)(limit >> 20));
    }

    lq_server *s = calloc(1, sizeof *s);
    if (!s)
        return lq_err_set(err, LQ_ENOMEM, "server: out of memory");
    s->o = *o;
    s->routes = srv_routes(&s->n_routes);
    s->mem_limit = limit;
    s->host = dupz(o->host && *o->host ? o->host : "127.0.0.1");
    s->api_key = o->api_key && *o->api_key ? dupz(o->api_key) : NULL;
    s->model_path = dupz(o->model_path);
    s->kernels = dupz(o->model.kernels);
    s->state_dir = dupz(o->state_dir);
    s->patch_dir = dupz(o->patch_dir);
    s->slot_dir = dupz(o->slot_save_path);
    s->state_db = dupz(o->state_db);
    s->state_model = dupz(o->state_model);
    s->o.state_dir = s->state_dir;
    s->o.state_db = s->state_db;
    s->o.state_model = s->state_model;
    s->o.patch_dir = s->patch_dir;
    s->chat_template = dupz(o->chat_template);
    s->o.chat_template = s->chat_template;
    s->o.host = s->host;
    s->o.api_key = s->api_key;
    s->o.model_path = s->model_path;
    s->o.model.kernels = s->kernels;
    s->ffn_url = dupz(o->model.ffn_url); /* the model may load lazily, after the caller's string is gone */
    s->o.model.ffn_url = s->ffn_url;
    if (s->o.ffn_only) /* LARQL's infer_disabled = --no-infer || --ffn-only */
        s->o.no_infer = 1;
    if (s->o.shutdown_grace_s < 0)
        s->o.shutdown_grace_s = 0;
    pthread_mutex_init(&s->load_mu, NULL);
    pthread_mutex_init(&s->pool_mu, NULL);
    s->stop_pipe[0] = s->stop_pipe[1] = -1;
    s->pool_free = calloc((size_t)s->o.max_concurrent, sizeof *s->pool_free);
    model_id_from_path(s->model_path, s->model_id, sizeof s->model_id);
    s->t_boot = lq_now();
    s->created_unix = (long)time(NULL);
    if (!s->pool_free || !s->host || !s->model_path || (o->model.kernels && !s->kernels) ||
        (o->state_dir && !s->state_dir) || (o->patch_dir && !s->patch_dir) ||
        (o->slot_save_path && !s->slot_dir) || (o->state_db && !s->state_db) ||
        (o->state_model && !s->state_model) || (o->model.ffn_url && !s->ffn_url) ||
        (o->chat_template && !s->chat_template) || pipe2(s->stop_pipe, O_CLOEXEC)) {
        server_free(s);
        return lq_err_set(err, LQ_ENOMEM, "server: out of memory or pipes");
    }
    if (o->chat_template) { /* a bad --chat-template fails the start, not every chat request */
        lq_chat_format *f = NULL;
        int rc = lq_chat_format_open(NULL, o->chat_template, &f, err);
        lq_chat_format_free(f);
        if (rc) {
            server_free(s);
            return rc;
        }
    }
    s->is_dir = S_ISDIR(st.st_mode);
    if (s->is_dir) {
        /* a vindex: mapped read-only, cheap to open, so never lazy */
        lq_vindex_open_opts vo = {.n_threads = s->o.model.n_threads, .verify_checksums = 0};
        int rc = lq_vindex_open(s->model_path, &vo, &s->vx, err);
        if (rc) {
            server_free(s);
            return rc;
        }
        const lq_vindex_info *vi = lq_vindex_get_info(s->vx);
        snprintf(s->model_id, sizeof s->model_id, "%s", vi->model_id && *vi->model_id ? vi->model_id : "vindex");
        srv_log(s, "opened vindex %s (%s, %d layers, %llu features)", s->model_path, vi->model ? vi->model : "",
                vi->num_layers, (unsigned long long)vi->total_features);
        /* what the model knows: the overlay every edit and query goes through */
        rc = srv_knowledge_init(s, err);
        s->knowledge_ready = 1;
        if (rc) {
            lq_err_prefix(err, "state");
            server_free(s);
            return rc;
        }
        /* the engine loads GGUF files; a vindex's weights serve inference once it reads them */
        lq_err merr = {0};
        if (!s->o.lazy_weights && srv_model_load(s, &merr)) {
            s->load_failed = 1;
            s->load_err = merr;
            srv_log(s, "inference routes unavailable: %s", merr.msg);
        }
    } else {
        srv_knowledge_init(s, err); /* locks only: a GGUF has nothing to edit */
        s->knowledge_ready = 1;
    }
    if (!s->is_dir && !s->o.lazy_weights) {
        int rc = srv_model_load(s, err);
        if (rc) {
            lq_err_prefix(err, "failed to load weights (pass --lazy-weights to defer until first request)");
            server_free(s);
            return rc;
        }
    }
    s->models = malloc(sizeof *s->models);
    if (!s->models) {
        server_free(s);
        return lq_err_set(err, LQ_ENOMEM, "server: out of memory");
    }
    s->models[0] = s;
    s->n_models = 1;
    s->front = s;
    *out = s;
    return 0;
}

/* A PEM file, whole and NUL-terminated (libmicrohttpd takes the text). At most 1 MiB: a
 * certificate chain is a few KiB. */
static int read_pem(const char *what, const char *path, char **out, lq_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lq_err_set(err, LQ_EIO, "server: %s '%s': %s", what, path, strerror(errno));
    size_t cap = 1u << 20, n = 0;
    char *b = malloc(cap + 1);
    ssize_t r = 1;
    while (b && n < cap && (r = read(fd, b + n, cap - n)) > 0)
        n += (size_t)r;
    char extra;
    int too_big = b && n == cap && read(fd, &extra, 1) > 0;
    close(fd);
    if (!b)
        return lq_err_set(err, LQ_ENOMEM, "server: out of memory");
    if (r < 0 || too_big || !n || memchr(b, 0, n)) {
        free(b);
        return lq_err_set(err, LQ_EINVAL, "server: %s '%s' %s", what, path,
                          r < 0 ? "cannot be read" : too_big ? "is over 1 MiB" : "is not a PEM text file");
    }
    b[n] = 0;
    *out = b;
    return 0;
}

static int srv_listen(lq_server *s, lq_err *err)
{
    const lq_server_opts *o = &s->o;
    int tls = o->tls_cert || o->tls_key;
    char *cert = NULL, *key = NULL;
    if (tls) {
        if (!o->tls_cert || !o->tls_key)
            return lq_err_set(err, LQ_EINVAL, "server: HTTPS needs both --tls-cert and --tls-key");
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
            return lq_err_set(err, LQ_EINVAL, "server: this libmicrohttpd was built without TLS; terminate HTTPS "
                                              "in a proxy in front (README)");
        int rc = read_pem("--tls-cert", o->tls_cert, &cert, err);
        if (rc || (rc = read_pem("--tls-key", o->tls_key, &key, err))) {
            free(cert);
            return rc;
        }
    }
    struct MHD_OptionItem tls_opts[] = {
        {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, key},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, cert},
        {MHD_OPTION_END, 0, NULL},
    };

    struct sockaddr_in sa4;
    struct sockaddr_in6 sa6;
    struct sockaddr *sa;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_ALLOW_UPGRADE | (tls ? MHD_USE_TLS : 0);
    memset(&sa4, 0, sizeof sa4);
    memset(&sa6, 0, sizeof sa6);
    if (inet_pton(AF_INET, s->host, &sa4.sin_addr) == 1) {
        sa4.sin_family = AF_INET;
        sa4.sin_port = htons((uint16_t)o->port);
        sa = (struct sockaddr *)&sa4;
    } else if (inet_pton(AF_INET6, s->host, &sa6.sin6_addr) == 1) {
        sa6.sin6_family = AF_INET6;
        sa6.sin6_port = htons((uint16_t)o->port);
        sa = (struct sockaddr *)&sa6;
        flags |= MHD_USE_IPv6;
    } else {
        free(cert);
        free(key);
        return lq_err_set(err, LQ_EINVAL, "server: host '%s' is not an IPv4 or IPv6 address", o->host);
    }
    if (!(s->deadline = srv_deadline_start(o->header_timeout_s))) {
        free(cert);
        free(key);
        return lq_err_set(err, LQ_ENOMEM, "server: cannot start the header deadline's thread");
    }
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, srv_http_on_request, s,
                            MHD_OPTION_SOCK_ADDR, sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.request_timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(o->max_conns_per_ip > 0 ? o->max_conns_per_ip : 0),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)512,
                            MHD_OPTION_NOTIFY_COMPLETED, srv_http_on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, srv_deadline_on_connection, s->deadline,
                            MHD_OPTION_URI_LOG_CALLBACK, srv_deadline_on_uri, s->deadline,
                            MHD_OPTION_UNESCAPE_CALLBACK, srv_http_unescape, NULL,
                            MHD_OPTION_ARRAY, tls_opts,
                            MHD_OPTION_END);
    int e = errno;
    /* libmicrohttpd keeps its own copies of the key and certificate (GnuTLS credentials) */
    if (key)
        memset(key, 0, strlen(key));
    free(key);
    free(cert);
    if (!s->d) {
        if (tls)
            return lq_err_set(err, LQ_EINVAL, "server: cannot start HTTPS on %s:%d: check that --tls-cert and "
                                              "--tls-key are a PEM certificate and its private key (%s)",
                              s->host, o->port, e ? strerror(e) : "libmicrohttpd refused them");
        return lq_err_set(err, LQ_EIO, "server: cannot listen on %s:%d: %s", o->host ? o->host : "127.0.0.1",
                          o->port, e ? strerror(e) : "libmicrohttpd refused to start");
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    srv_log(s, "listening on %s://%s:%d (%s '%s'%s, max %d concurrent, body limit %zu bytes%s%s)",
            tls ? "https" : "http", s->host, s->port, s->n_models > 1 ? "models" : "model", s->model_id,
            s->n_models > 1 ? " and more: see /v1/models" : "", s->o.max_concurrent, s->o.max_body,
            s->api_key ? ", api key required" : "", s->o.cors ? ", CORS on" : "");
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* LARQL's discover_vindexes: every subdirectory of dir that holds an index.json, in name
 * order. *names is malloc'd (each name too). */
/* 1 when entry (a name in dir) is a symbolic link whose target lies outside dir: a link
 * planted in the models directory must not serve a vindex from anywhere on the machine. */
static int links_outside(const char *dir, const char *entry)
{
    char p[4096], real_dir[4096], real_p[4096];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, entry) >= sizeof p || lstat(p, &st) || !S_ISLNK(st.st_mode))
        return 0;
    if (!realpath(dir, real_dir) || !realpath(p, real_p))
        return 1;
    size_t dl = strlen(real_dir);
    return strncmp(real_p, real_dir, dl) || real_p[dl] != '/';
}

static int discover_vindexes(const lq_server_opts *o, const char *dir, int follow_symlinks, char ***names, int *n,
                             lq_err *err)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return lq_err_set(err, LQ_EIO, "--dir %s: cannot open: %s", dir, strerror(errno));
    struct dirent *e;
    int cap = 0, rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4096];
        struct stat st;
        if ((size_t)snprintf(p, sizeof p, "%s/%s/index.json", dir, e->d_name) >= sizeof p || stat(p, &st) ||
            !S_ISREG(st.st_mode))
            continue;
        if (!follow_symlinks && links_outside(dir, e->d_name)) {
            if (o->log) {
                char line[512];
                snprintf(line, sizeof line, "--dir: skipping '%.255s', a symbolic link that leads outside the directory "
                                            "(--follow-symlinks serves it)", e->d_name);
                o->log(o->log_user, line);
            }
            continue;
        }
        if (*n == LQ_SERVER_MAX_MODELS) {
            rc = lq_err_set(err, LQ_ERANGE, "--dir %s: more than %d vindexes", dir, LQ_SERVER_MAX_MODELS);
            break;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            char **nn = realloc(*names, (size_t)cap * sizeof *nn);
            if (!nn) {
                rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
                break;
            }
            *names = nn;
        }
        if (!((*names)[*n] = strdup(e->d_name)))
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        else
            (*n)++;
    }
    closedir(d);
    if (!rc && *n == 0)
        rc = lq_err_set(err, LQ_EINVAL, "--dir %s: no subdirectory holds an index.json (a vindex)", dir);
    if (!rc)
        qsort(*names, (size_t)*n, sizeof **names, by_name);
    return rc;
}

static void free_models(lq_server *front)
{
    for (int k = 1; k < front->n_models; k++)
        server_free(front->models[k]);
    front->n_models = 1;
}

/* --dir: one server per vindex, the first one listens; each keeps its own knowledge state
 * (and its own journal under state_dir/NAME when --state-dir is given). */
static int open_models(const lq_server_opts *o, lq_server **out, lq_err *err)
{
    char **names = NULL;
    int n = 0, rc = discover_vindexes(o, o->models_dir, o->follow_symlinks, &names, &n, err);
    lq_server **ms = rc ? NULL : calloc((size_t)n, sizeof *ms);
    if (!rc && !ms)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    int opened = 0;
    for (int k = 0; !rc && k < n; k++) {
        char path[4096], state[4096];
        lq_server_opts so = *o;
        snprintf(path, sizeof path, "%s/%s", o->models_dir, names[k]);
        so.model_path = path;
        so.models_dir = NULL;
        so.state_model = NULL; /* --dir: each model's rows under its own id */
        if (o->state_dir) {
            snprintf(state, sizeof state, "%s/%s", o->state_dir, names[k]);
            if (mkdir(state, 0755) && errno != EEXIST) {
                rc = lq_err_set(err, LQ_EIO, "--state-dir %s: cannot create: %s", state, strerror(errno));
                break;
            }
            so.state_dir = state;
        }
        if ((rc = srv_open(&so, &ms[k], err))) {
            lq_err_prefix(err, "%s", names[k]);
            break;
        }
        opened++;
        for (int j = 0; j < k; j++)
            if (!strcmp(ms[j]->model_id, ms[k]->model_id))
                rc = lq_err_set(err, LQ_EINVAL, "--dir: %s and %s are both model '%s' (ids must differ)",
                                ms[j]->model_path, ms[k]->model_path, ms[k]->model_id);
    }
    for (int k = 0; k < n; k++)
        free(names[k]);
    free(names);
    if (rc) {
        for (int k = 0; k < opened; k++)
            server_free(ms[k]);
        free(ms);
        return rc;
    }
    lq_server *front = ms[0];
    free(front->models);
    front->models = ms;
    front->n_models = n;
    for (int k = 0; k < n; k++)
        ms[k]->front = front;
    *out = front;
    return 0;
}

int lq_server_start(const lq_server_opts *o, lq_server **out, lq_err *err)
{
    *out = NULL;
    if (!o)
        return lq_err_set(err, LQ_EINVAL, "server: no options");
    if (o->models_dir && o->model_path && *o->model_path)
        return lq_err_set(err, LQ_EINVAL, "server: give a model path or a models directory (--dir), not both");
    double rl_cap = 0, rl_per_s = 0;
    if (o->rate_limit && srv_ratelimit_parse(o->rate_limit, &rl_cap, &rl_per_s))
        return lq_err_set(err, LQ_EINVAL, "server: --rate-limit '%s' is not N/unit (unit s, sec, second, m, min, "
                                          "minute, h or hour; N a whole number from 1)", o->rate_limit);
    lq_server *s = NULL;
    int rc = o->models_dir ? open_models(o, &s, err) : srv_open(o, &s, err);
    if (rc)
        return rc;
    if (o->rate_limit && !(s->rl = srv_ratelimit_new(rl_cap, rl_per_s)))
        rc = lq_err_set(err, LQ_ENOMEM, "server: out of memory");
    if (rc || (rc = srv_listen(s, err))) {
        free_models(s);
        server_free(s);
        return rc;
    }
    *out = s;
    return 0;
}


int lq_server_port(const lq_server *s)
{
    return s ? s->port : 0;
}

void lq_server_request_stop(lq_server *s)
{
    if (!s)
        return;
    char c = 1;
    ssize_t w = write(s->stop_pipe[1], &c, 1); /* async-signal-safe */
    (void)w;
}

int lq_server_wait(lq_server *s)
{
    char c;
    for (;;) {
        ssize_t n = read(s->stop_pipe[0], &c, 1);
        if (n == 1 || (n < 0 && errno != EINTR) || n == 0)
            return 0;
    }
}

/* until *count is 0 or seconds pass */
static void wait_zero(const int64_t *count, double seconds)
{
    double end = lq_now() + seconds;
    while (__atomic_load_n(count, __ATOMIC_ACQUIRE) > 0 && lq_now() < end) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void lq_server_stop(lq_server *s)
{
    if (!s)
        return;
    for (int k = 0; k < s->n_models; k++)
        __atomic_store_n(&s->models[k]->stopping, 1, __ATOMIC_RELEASE);
    if (s->d) {
        MHD_socket ls = MHD_quiesce_daemon(s->d); /* stop accepting; in-flight go on */
        if (ls != MHD_INVALID_SOCKET)
            close(ls);
        wait_zero(&s->m.active_requests, s->o.shutdown_grace_s);
        long left = __atomic_load_n(&s->m.active_requests, __ATOMIC_ACQUIRE);
        if (left > 0) {
            srv_log(s, "cancelling %ld in-flight request(s)", left);
            for (int k = 0; k < s->n_models; k++)
                __atomic_store_n(&s->models[k]->cancel_all, 1, __ATOMIC_RELEASE);
            wait_zero(&s->m.active_requests, 10.0);
        }
        /* WebSocket sessions over TLS run on their own threads and need the daemon to relay
         * their close frames: they see stopping, close and end before it stops */
        wait_zero(&s->ws_pending, 2.0); /* an upgrade the client already holds starts first */
        wait_zero(&s->ws_threads, s->o.shutdown_grace_s + 12.0);
        MHD_stop_daemon(s->d);
        s->d = NULL;
    }

    srv_log(s, "stopped after %llu requests", (unsigned long long)s->m.requests_total);
    free_models(s);
    server_free(s);
}

