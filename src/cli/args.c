#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int lq_cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "larql %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int lq_cli_usage(const char *cmd, const char *usage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "larql %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nusage: %s\n", usage);
    va_end(ap);
    return 2;
}

int lq_parse_long(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int lq_parse_double(const char *s, double lo, double hi, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || isnan(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int lq_parse_ids(const char *s, int32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    if (!s || !*s)
        return -1;
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    size_t k = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        while (*p == ' ')
            p++;
        if (*p < '0' || *p > '9') {
            free(v);
            return -1;
        }
        long x = strtol(p, &end, 10);
        if (errno || x < 0 || x > INT32_MAX) {
            free(v);
            return -1;
        }
        v[k++] = (int32_t)x;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == 0)
            break;
        if (*p != ',') {
            free(v);
            return -1;
        }
        p++;
    }
    *ids = v;
    *n = k;
    return 0;
}

int lq_read_file(const char *path, char **out, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f)
        return -1;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    if (f != stdin)
        fclose(f);
    if (!buf || bad) {
        free(buf);
        return -1;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}
