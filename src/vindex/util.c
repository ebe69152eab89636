/* Vindex helpers: JSON text output matching serde_json, file writing with fsync, LARQL's
 * f16 conversion, token classification and the layer-band table. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vindex/vindex_internal.h"

/* Rust's ryu layout for a value with significant digits `dig` (no leading/trailing zeros)
 * and decimal point position kk (value = 0.dig * 10^kk). max_kk: 16 for f64, 13 for f32. */
static void ryu_layout(lq_sb *b, int neg, const char *dig, int kk, int max_kk)
{
    int len = (int)strlen(dig);
    if (neg)
        lq_sb_put(b, "-", 1);
    if (kk >= len && kk <= max_kk) { /* 1234e7 -> 12340000000.0 */
        lq_sb_put(b, dig, (size_t)len);
        for (int i = len; i < kk; i++)
            lq_sb_put(b, "0", 1);
        lq_sb_puts(b, ".0");
    } else if (kk > 0 && kk <= max_kk) { /* 12.34 */
        lq_sb_put(b, dig, (size_t)kk);
        lq_sb_put(b, ".", 1);
        lq_sb_put(b, dig + kk, (size_t)(len - kk));
    } else if (kk > -5 && kk <= 0) { /* 0.001234 */
        lq_sb_puts(b, "0.");
        for (int i = kk; i < 0; i++)
            lq_sb_put(b, "0", 1);
        lq_sb_put(b, dig, (size_t)len);
    } else { /* 1e30, 1.234e33, 1e-7 */
        lq_sb_put(b, dig, 1);
        if (len > 1) {
            lq_sb_put(b, ".", 1);
            lq_sb_put(b, dig + 1, (size_t)(len - 1));
        }
        lq_sb_printf(b, "e%d", kk - 1);
    }
}

static void fmt_shortest(lq_sb *b, double v, int is_f32)
{
    if (!isfinite(v)) { /* serde_json writes null for non-finite floats */
        lq_sb_puts(b, "null");
        return;
    }
    if (v == 0) {
        lq_sb_puts(b, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    char tmp[64];
    int maxp = is_f32 ? 9 : 17;
    for (int p = 1; p <= maxp; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, v);
        int ok = is_f32 ? (strtof(tmp, NULL) == (float)v) : (strtod(tmp, NULL) == v);
        if (ok)
            break;
    }
    /* tmp = [-]d[.ddd]e[+-]xx */
    const char *p = tmp;
    int neg = 0;
    if (*p == '-')
        neg = 1, p++;
    char dig[32];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < 30)
            dig[nd++] = *p;
    dig[nd] = 0;
    int e = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && dig[nd - 1] == '0')
        dig[--nd] = 0;
    ryu_layout(b, neg, dig, e + 1, is_f32 ? 13 : 16);
}

void lq_sb_f64(lq_sb *b, double v) { fmt_shortest(b, v, 0); }
void lq_sb_f32(lq_sb *b, float v) { fmt_shortest(b, (double)v, 1); }

static void indent_to(lq_sb *b, int n)
{
    for (int i = 0; i < n; i++)
        lq_sb_put(b, "  ", 2);
}

void lq_sb_json_pretty(lq_sb *b, const json_t *v, int ind)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (json_object_size(v) == 0) {
            lq_sb_puts(b, "{}");
            return;
        }
        lq_sb_puts(b, "{\n");
        const char *k;
        json_t *x;
        size_t i = 0, n = json_object_size(v);
        json_object_foreach((json_t *)v, k, x) {
            indent_to(b, ind + 1);
            lq_sb_json_str(b, k, strlen(k));
            lq_sb_puts(b, ": ");
            lq_sb_json_pretty(b, x, ind + 1);
            lq_sb_puts(b, ++i < n ? ",\n" : "\n");
        }
        indent_to(b, ind);
        lq_sb_puts(b, "}");
        return;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (n == 0) {
            lq_sb_puts(b, "[]");
            return;
        }
        lq_sb_puts(b, "[\n");
        for (size_t i = 0; i < n; i++) {
            indent_to(b, ind + 1);
            lq_sb_json_pretty(b, json_array_get(v, i), ind + 1);
            lq_sb_puts(b, i + 1 < n ? ",\n" : "\n");
        }
        indent_to(b, ind);
        lq_sb_puts(b, "]");
        return;
    }
    case JSON_STRING:
        lq_sb_json_str(b, json_string_value(v), json_string_length(v));
        return;
    case JSON_INTEGER:
        lq_sb_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return;
    case JSON_REAL:
        lq_sb_f64(b, json_real_value(v));
        return;
    case JSON_TRUE:
        lq_sb_puts(b, "true");
        return;
    case JSON_FALSE:
        lq_sb_puts(b, "false");
        return;
    default:
        lq_sb_puts(b, "null");
    }
}

float lq_round1_f32(float x) { return roundf(x * 10.0f) / 10.0f; }

/* ---- files ---- */

char *lq_vx_join(const char *dir, const char *name)
{
    if (!dir) /* name is a path of its own */
        return strdup(name);
    size_t a = strlen(dir), n = strlen(name);
    char *p = malloc(a + n + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, n + 1);
    return p;
}

int lq_vx_file_open(lq_vx_file *w, const char *dir, const char *name, int hash, lq_err *err)
{
    memset(w, 0, sizeof *w);
    w->path = lq_vx_join(dir, name);
    if (!w->path)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        int rc = lq_err_set(err, LQ_EIO, "%s: cannot create: %s", w->path, strerror(errno));
        free(w->path);
        w->path = NULL;
        return rc;
    }
    w->hash = hash;
    if (hash)
        lq_sha256_init(&w->sha);
    return LQ_OK;
}

int lq_vx_file_write(lq_vx_file *w, const void *data, size_t n, lq_err *err)
{
    if (n && fwrite(data, 1, n, w->f) != n)
        return lq_err_set(err, LQ_EIO, "%s: write failed: %s", w->path, strerror(errno));
    if (w->hash)
        lq_sha256_update(&w->sha, data, n);
    w->written += n;
    return LQ_OK;
}

int lq_vx_file_close(lq_vx_file *w, char hex[65], lq_err *err)
{
    int rc = LQ_OK;
    if (fflush(w->f) || fsync(fileno(w->f)))
        rc = lq_err_set(err, LQ_EIO, "%s: flush failed: %s", w->path, strerror(errno));
    if (fclose(w->f) && !rc)
        rc = lq_err_set(err, LQ_EIO, "%s: close failed: %s", w->path, strerror(errno));
    w->f = NULL;
    if (hex && w->hash) {
        uint8_t d[32];
        lq_sha256_final(&w->sha, d);
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", d[i]);
    }
    free(w->path);
    w->path = NULL;
    return rc;
}

void lq_vx_file_abort(lq_vx_file *w)
{
    if (w->f)
        fclose(w->f);
    w->f = NULL;
    free(w->path);
    w->path = NULL;
}

int lq_vx_write_file(const char *dir, const char *name, const void *data, size_t n, lq_err *err)
{
    lq_vx_file w;
    int rc = lq_vx_file_open(&w, dir, name, 0, err);
    if (rc)
        return rc;
    rc = lq_vx_file_write(&w, data, n, err);
    if (rc) {
        lq_vx_file_abort(&w);
        return rc;
    }
    return lq_vx_file_close(&w, NULL, err);
}

uint16_t lq_vx_f32_to_f16_trunc(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) /* NaN: keep a quiet NaN */
        return (uint16_t)(sign | 0x7e00);
    int32_t e = (int32_t)(absx >> 23) - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) /* below the f16 normal range: signed zero */
        return sign;
    return (uint16_t)(sign | (uint32_t)e << 10 | ((absx >> 13) & 0x3ff));
}

/* ---- token classification (LARQL's helpers, used by describe and relations) ---- */

static void trim_span(const char *s, const char **b, size_t *n)
{
    size_t len = strlen(s);
    while (len && isspace((unsigned char)*s))
        s++, len--;
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    *b = s;
    *n = len;
}

int lq_vx_blank(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n)
            return 0; /* invalid UTF-8 decodes to U+FFFD: text */
        if (len > 1) {
            c &= 0x3fu >> (len - 1);
            for (size_t k = 1; k < len; k++) {
                if ((p[i + k] & 0xc0) != 0x80)
                    return 0;
                c = c << 6 | (p[i + k] & 0x3f);
            }
        }
        /* Unicode White_Space, what Rust's str::trim removes */
        int ws = (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
                 (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
                 c == 0x3000;
        if (!ws)
            return 0;
        i += len;
    }
    return 1;
}

int lq_vx_is_readable(const char *s)
{
    const char *t;
    size_t n;
    trim_span(s, &t, &n);
    if (n == 0 || n > 30)
        return 0;
    size_t total = 0, ok = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if ((c & 0xc0) == 0x80)
            continue; /* count characters, not bytes */
        total++;
        if (isalnum(c) || c == ' ' || c == '-' || c == '\'' || c == '.' || c == ',')
            ok++;
    }
    return 2 * ok >= total;
}

static const char *const stop_words[] = {
    "the", "and", "for", "but", "not", "you", "all", "can", "her", "was", "one", "our", "out",
    "are", "has", "his", "how", "its", "may", "new", "now", "old", "see", "way", "who", "did",
    "get", "let", "say", "she", "too", "use", "from", "have", "been", "will", "with", "this",
    "that", "they", "were", "some", "them", "than", "when", "what", "your", "each", "make",
    "like", "just", "over", "such", "take", "also", "into", "only", "very", "more", "does",
    "most", "about", "which", "their", "would", "there", "could", "other", "after", "being",
    "where", "these", "those", "first", "should", "because", "through", "before", "par", "aux",
    "che", "del",
};

int lq_vx_is_content(const char *s)
{
    if (!lq_vx_is_readable(s))
        return 0;
    const char *t;
    size_t n;
    trim_span(s, &t, &n);
    size_t chars = 0, letters = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if ((c & 0xc0) != 0x80)
            chars++;
        if (isalpha(c) && c < 0x80)
            letters++;
        if (i + 1 < n && islower(c) && isupper((unsigned char)t[i + 1]))
            return 0; /* camelCase fragment */
    }
    if (chars < 3 || chars > 25 || letters == 0 || letters < (2 * chars) / 3)
        return 0;
    char low[32];
    if (n >= sizeof low)
        return 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)t[i]);
    low[n] = 0;
    for (size_t i = 0; i < sizeof stop_words / sizeof stop_words[0]; i++)
        if (!strcmp(low, stop_words[i]))
            return 0;
    return 1;
}

/* ---- bands (crates/larql-vindex/src/config/compliance.rs) ---- */

typedef struct band_row {
    const char *family;
    int layers, s1, k1; /* syntax 0..s1, knowledge s1+1..k1, output k1+1..L-1 */
} band_row;

static const band_row band_table[] = {
    {"gemma3", 34, 13, 27}, {"gemma3", 42, 16, 34}, {"gemma2", 26, 10, 20}, {"gemma2", 42, 16, 34},
    {"gemma2", 46, 18, 37}, {"gemma4", 30, 11, 23}, {"gemma4", 35, 13, 27}, {"gemma4", 36, 14, 28},
    {"gemma4", 60, 23, 47}, {"llama", 32, 12, 25},  {"llama", 40, 15, 32},  {"llama", 80, 31, 63},
    {"mistral", 32, 12, 25}, {"mixtral", 32, 12, 25}, {"qwen2", 28, 10, 22}, {"qwen2", 32, 12, 25},
    {"qwen2", 40, 15, 32},  {"qwen2", 64, 25, 51},  {"qwen2", 80, 31, 63},  {"phi", 32, 12, 25},
    {"phi", 40, 15, 32},    {"gpt2", 12, 4, 9},     {"gpt2", 24, 9, 19},    {"gpt2", 36, 14, 28},
    {"gpt2", 48, 19, 38},
};

int lq_vx_family_bands(const char *family, int L, lq_vindex_band bands[3])
{
    for (size_t i = 0; i < sizeof band_table / sizeof band_table[0]; i++) {
        const band_row *r = &band_table[i];
        if (family && !strcmp(family, r->family) && r->layers == L) {
            bands[0] = (lq_vindex_band){0, r->s1};
            bands[1] = (lq_vindex_band){r->s1 + 1, r->k1};
            bands[2] = (lq_vindex_band){r->k1 + 1, L - 1};
            return 1;
        }
    }
    if (L < 8)
        return 0;
    int s = (2 * L) / 5, k = (4 * L) / 5;
    bands[0] = (lq_vindex_band){0, s - 1};
    bands[1] = (lq_vindex_band){s, k - 1};
    bands[2] = (lq_vindex_band){k, L - 1};
    return 1;
}

int lq_vindex_parse_band(const char *band, int *idx, lq_err *err)
{
    static const char *names[4] = {"syntax", "knowledge", "output", "all"};
    for (int i = 0; band && i < 4; i++)
        if (!strcmp(band, names[i])) {
            *idx = i;
            return LQ_OK;
        }
    return lq_err_set(err, LQ_EINVAL, "unknown band '%s' (syntax, knowledge, output, all)",
                      band ? band : "(null)");
}
