#include "larql/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int lq_err_set(lq_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int lq_err_prefix(lq_err *err, const char *fmt, ...)
{
    if (!err)
        return 0;
    char prefix[LQ_ERR_MSG_MAX], old[LQ_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t np = strnlen(prefix, sizeof prefix - 3);
    memcpy(err->msg, prefix, np);
    memcpy(err->msg + np, ": ", 2);
    size_t rest = sizeof err->msg - np - 3;
    size_t no = strnlen(old, rest);
    memcpy(err->msg + np + 2, old, no);
    err->msg[np + 2 + no] = 0;
    return err->code;
}


const char *lq_status_str(int code)
{
    switch (code) {
    case LQ_OK: return "ok";
    case LQ_EINVAL: return "invalid argument";
    case LQ_EIO: return "I/O error";
    case LQ_ENOMEM: return "out of memory";
    case LQ_EFORMAT: return "format error";
    case LQ_EUNSUPPORTED: return "unsupported";
    case LQ_ERANGE: return "out of range";
    case LQ_ENOTFOUND: return "not found";
    case LQ_ECONTEXT: return "context length exceeded";
    case LQ_EBUSY: return "busy";
    case LQ_ECANCELED: return "canceled";
    case LQ_EREFUSED: return "refused";
    default: return "unknown error";
    }
}
