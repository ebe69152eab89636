/* A whole-request deadline for headers (slowloris).
 *
 * libmicrohttpd's connection timeout is idle-based: a client that sends one header line every
 * few seconds keeps a connection (and, in thread-per-connection mode, a thread) for as long as
 * it likes. Here every connection that is waiting for a request's headers carries the time the
 * wait began: its accept for the first request, the request line (libmicrohttpd's URI log
 * callback) for later ones on a keep-alive connection. A watchdog thread shuts the socket down
 * once the headers are not complete within the deadline; libmicrohttpd then sees the peer gone
 * and closes the connection on its own thread. A connection idle between requests is not
 * waiting for headers, so keep-alive clients are bounded only by the idle timeout. */
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "core/clock.h"
#include "server/internal.h"

typedef struct conn_entry {
    struct conn_entry *prev, *next;
    MHD_socket fd;
    double since;             /* monotonic seconds the wait for headers began */
    int waiting;              /* 1 while a request's headers are incomplete */
    int cut;                  /* the watchdog shut it down (counted once) */
} conn_entry;

struct srv_deadline {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int running, stop;
    double seconds;
    conn_entry head;          /* circular list of open connections */
    uint64_t cut_total;
};

static void *watchdog(void *arg)
{
    srv_deadline *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        double now = lq_now();
        for (conn_entry *e = d->head.next; e != &d->head; e = e->next)
            if (e->waiting && !e->cut && now - e->since >= d->seconds) {
                /* under the lock: the entry leaves the list (NOTIFY_CLOSED) before
                 * libmicrohttpd closes the descriptor, so fd is still this connection's */
                shutdown(e->fd, SHUT_RDWR);
                e->cut = 1;
                d->cut_total++;
            }
        struct timespec ts = lq_time_in(CLOCK_MONOTONIC, 250);
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

srv_deadline *srv_deadline_start(double seconds)
{
    srv_deadline *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->seconds = seconds;
    d->head.next = d->head.prev = &d->head;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (seconds > 0) {
        if (pthread_create(&d->thread, NULL, watchdog, d) != 0) {
            srv_deadline_free(d);
            return NULL;
        }
        d->running = 1;
    }
    return d;
}

void srv_deadline_free(srv_deadline *d)
{
    if (!d)
        return;
    if (d->running) {
        pthread_mutex_lock(&d->mu);
        d->stop = 1;
        pthread_cond_signal(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
    }
    /* the daemon has stopped: every connection was notified closed */
    for (conn_entry *e = d->head.next, *n; e != &d->head; e = n) {
        n = e->next;
        free(e);
    }
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

uint64_t srv_deadline_cut(srv_deadline *d)
{
    if (!d)
        return 0;
    pthread_mutex_lock(&d->mu);
    uint64_t n = d->cut_total;
    pthread_mutex_unlock(&d->mu);
    return n;
}

void srv_deadline_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                                enum MHD_ConnectionNotificationCode code)
{
    srv_deadline *d = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_entry *e = ci ? calloc(1, sizeof *e) : NULL;
        *socket_context = e;
        if (!e)
            return; /* not tracked: the idle timeout still applies */
        e->fd = ci->connect_fd;
        e->since = lq_now();
        e->waiting = 1;
        pthread_mutex_lock(&d->mu);
        e->next = d->head.next;
        e->prev = &d->head;
        d->head.next->prev = e;
        d->head.next = e;
        pthread_mutex_unlock(&d->mu);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_entry *e = *socket_context;
        if (!e)
            return;
        pthread_mutex_lock(&d->mu);
        e->prev->next = e->next;
        e->next->prev = e->prev;
        pthread_mutex_unlock(&d->mu);
        free(e);
        *socket_context = NULL;
    }
}

static conn_entry *entry_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void set_waiting(srv_deadline *d, struct MHD_Connection *c, int waiting)
{
    conn_entry *e = entry_of(c);
    if (!e)
        return;
    pthread_mutex_lock(&d->mu);
    if (waiting && !e->waiting)
        e->since = lq_now(); /* a later request on a keep-alive connection: from its request line */
    e->waiting = waiting;
    pthread_mutex_unlock(&d->mu);
}

void *srv_deadline_on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)uri;
    set_waiting(cls, c, 1);
    return NULL; /* the request's con_cls starts NULL, as without this callback */
}

void srv_deadline_headers_done(srv_deadline *d, struct MHD_Connection *c)
{
    if (d)
        set_waiting(d, c, 0);
}
