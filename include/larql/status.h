/* Status codes and error messages shared by every liblarql module.
 *
 * Fallible functions return an int: LQ_OK (0) or a negative LQ_E* code. They take an
 * optional caller-owned lq_err; when non-NULL it receives one human-readable line naming
 * the file, field, value and limit involved. The library never prints and never exits. */
#ifndef LARQL_STATUS_H
#define LARQL_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    LQ_OK = 0,
    LQ_EINVAL = -1,       /* bad argument or request value */
    LQ_EIO = -2,          /* open/read/write/mmap failed */
    LQ_ENOMEM = -3,       /* allocation failed */
    LQ_EFORMAT = -4,      /* malformed file or data */
    LQ_EUNSUPPORTED = -5, /* valid but not supported (type, architecture, option) */
    LQ_ERANGE = -6,       /* value outside its allowed range (token id, dimension, ...) */
    LQ_ENOTFOUND = -7,    /* key, tensor, token or file absent */
    LQ_ECONTEXT = -8,     /* request exceeds the session's context length */
    LQ_EBUSY = -9,        /* resource busy (capacity reached) */
    LQ_ECANCELED = -10,   /* stopped by the caller */
    LQ_EREFUSED = -11,    /* valid, but the result would not meet its goal (an edit that does
                           * not take); nothing was changed */
};

#define LQ_ERR_MSG_MAX 512

typedef struct lq_err {
    int code;
    char msg[LQ_ERR_MSG_MAX];
} lq_err;

/* Records code and a printf-style message in err (if non-NULL); returns code so that
 * callers can write `return lq_err_set(err, LQ_EFORMAT, "...")`. */
int lq_err_set(lq_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message (adds context on the way up). */
int lq_err_prefix(lq_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));


/* Short name of a status code ("invalid argument", "format error", ...). */
const char *lq_status_str(int code);

#ifdef __cplusplus
}
#endif
#endif
