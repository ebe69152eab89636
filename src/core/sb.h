/* The library's one growable string buffer (JSON bodies, chat prompts, metrics text).
 * Errors are sticky: after a failed allocation every append is a no-op and oom is set;
 * lq_sb_finish then reports it. The text is always NUL-terminated once anything was put. */
#ifndef LQ_CORE_SB_H
#define LQ_CORE_SB_H

#include <stddef.h>

#include "larql/status.h"

typedef struct lq_sb {
    char *s;
    size_t n, cap;
    int oom;
} lq_sb;

void lq_sb_put(lq_sb *b, const char *s, size_t n);
void lq_sb_puts(lq_sb *b, const char *s);
void lq_sb_printf(lq_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands over the buffer (NUL-terminated, "" when nothing was put) or returns LQ_ENOMEM and
 * frees it. */
int lq_sb_finish(lq_sb *b, char **out, lq_err *err);
/* Frees the buffer without handing it over. */
void lq_sb_free(lq_sb *b);
/* s[0..n) as a JSON string, escaped as serde_json and Python's json.dumps(ensure_ascii=False)
 * both do: '"', '\\', \n \r \t \b \f by name, other bytes below 0x20 as \u00XX, the rest
 * (UTF-8 included) as is. */
void lq_sb_json_str(lq_sb *b, const char *s, size_t n);

#endif
