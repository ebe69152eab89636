/* larql tokenize / detokenize: thin front ends over the tokenizer module.
 *
 *   larql tokenize SOURCE TEXT [--special] [--bos|--no-bos]
 *       -> {"ids":[...],"tokens":["piece",...],"count":N}
 *   larql detokenize SOURCE 1,2,3 [--skip-special]
 *       -> {"text":"..."}
 *
 * SOURCE is a GGUF file (recognised by its magic) or a HuggingFace tokenizer.json. */
#include <errno.h>
#include <jansson.h>

#include "core/json_obj.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "larql/gguf.h"
#include "larql/tokenizer.h"

static const char TOK_USAGE[] = "larql tokenize SOURCE TEXT [--special] [--bos|--no-bos]\n"
                                "  SOURCE: a .gguf file, a tokenizer.json or a vindex directory\n"
                                "  --special  match special-token text such as <|eot_id|>\n"
                                "  --bos / --no-bos  override the tokenizer's add-BOS default";
static const char DETOK_USAGE[] = "larql detokenize SOURCE 1,2,3 [--skip-special]\n"
                                  "  SOURCE: a .gguf file, a tokenizer.json or a vindex directory";

/* Loads a tokenizer from a GGUF or tokenizer.json; prints the error and returns NULL. */
static lq_tokenizer *load_source(const char *cmd, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        lq_cli_error(cmd, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    char vindex_tok[4096];
    if (S_ISDIR(st.st_mode)) {
        /* a vindex directory: its tokenizer.json */
        snprintf(vindex_tok, sizeof vindex_tok, "%s/tokenizer.json", path);
        if (stat(vindex_tok, &st) != 0) {
            lq_cli_error(cmd, "'%s' is a directory without tokenizer.json (not a vindex?)", path);
            return NULL;
        }
        path = vindex_tok;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        lq_cli_error(cmd, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    unsigned char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    lq_tokenizer *t = NULL;
    lq_err err = {0};
    int rc;
    if (got == 4 && !memcmp(magic, "GGUF", 4)) {
        lq_gguf *g = NULL;
        rc = lq_gguf_open(path, &g, &err);
        if (rc == 0) {
            rc = lq_tokenizer_from_gguf(g, &t, &err);
            lq_gguf_close(g);
        }
    } else {
        rc = lq_tokenizer_from_json_file(path, &t, &err);
    }
    if (rc) {
        lq_cli_error(cmd, "%s", err.msg[0] ? err.msg : lq_status_str(rc));
        return NULL;
    }
    return t;
}

/* JSON strings must be UTF-8: a copy of s with invalid bytes replaced by U+FFFD. */
static json_t *json_text(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j)
        return j;
    char *buf = malloc(n * 3 + 1);
    if (!buf)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        /* accept one well-formed sequence at a time; jansson validates the result */
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                  : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        int ok = k && i + k <= n;
        for (size_t m = 1; ok && m < k; m++)
            ok = ((unsigned char)s[i + m] & 0xC0) == 0x80;
        if (ok && k > 1) {
            json_t *probe = json_stringn(s + i, k); /* rejects overlongs and surrogates */
            ok = probe != NULL;
            json_decref(probe);
        }
        if (ok) {
            memcpy(buf + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

static int print_json(json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    if (!s)
        return -1;
    puts(s);
    free(s);
    return 0;
}

int lq_cli_tokenize(int argc, char **argv)
{
    const char *cmd = "tokenize";
    const char *pos[2] = {NULL, NULL};
    int npos = 0, special = 0, bos = -1; /* -1: the tokenizer's default */
    int opts = 1;                        /* cleared by "--", so TEXT may start with "--" */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!opts) {
            if (npos >= 2)
                return lq_cli_usage(cmd, TOK_USAGE, "unexpected argument '%s'", a);
            pos[npos++] = a;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: %s\n", TOK_USAGE);
            return 0;
        } else if (!strcmp(a, "--special"))
            special = 1;
        else if (!strcmp(a, "--bos"))
            bos = 1;
        else if (!strcmp(a, "--no-bos"))
            bos = 0;
        else if (!strcmp(a, "--"))
            opts = 0;
        else if (a[0] == '-' && a[1] == '-')
            return lq_cli_usage(cmd, TOK_USAGE, "unknown option '%s'", a);
        else if (npos < 2)
            pos[npos++] = a;
        else
            return lq_cli_usage(cmd, TOK_USAGE, "unexpected argument '%s'", a);
    }
    if (npos < 2)
        return lq_cli_usage(cmd, TOK_USAGE, "%s", npos ? "missing TEXT" : "missing SOURCE and TEXT");
    lq_tokenizer *t = load_source(cmd, pos[0]);
    if (!t)
        return 1;
    unsigned flags = special ? LQ_TOK_PARSE_SPECIAL : 0;
    if (bos < 0 ? lq_tokenizer_add_bos(t) : bos)
        flags |= LQ_TOK_ADD_BOS;
    int32_t *ids = NULL;
    size_t n = 0;
    lq_err err = {0};
    int rc = lq_tokenizer_encode(t, pos[1], strlen(pos[1]), flags, &ids, &n, &err);
    if (rc) {
        lq_tokenizer_free(t);
        return lq_cli_error(cmd, "%s", err.msg);
    }
    json_t *jids = json_array(), *jtok = json_array();
    for (size_t i = 0; i < n; i++) {
        size_t pl = 0;
        const char *p = lq_tokenizer_piece(t, ids[i], &pl);
        json_array_append_new(jids, json_integer(ids[i]));
        json_array_append_new(jtok, json_text(p, pl));
    }
    json_t *obj = lq_json_object();
    json_object_set_new(obj, "ids", jids);
    json_object_set_new(obj, "tokens", jtok);
    json_object_set_new(obj, "count", json_integer((json_int_t)n));
    free(ids);
    lq_tokenizer_free(t);
    if (print_json(obj))
        return lq_cli_error(cmd, "out of memory writing JSON");
    return 0;
}

int lq_cli_detokenize(int argc, char **argv)
{
    const char *cmd = "detokenize";
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    unsigned flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: %s\n", DETOK_USAGE);
            return 0;
        } else if (!strcmp(a, "--skip-special"))
            flags |= LQ_DETOK_SKIP_SPECIAL;
        else if (a[0] == '-' && a[1] == '-')
            return lq_cli_usage(cmd, DETOK_USAGE, "unknown option '%s'", a);
        else if (npos < 2)
            pos[npos++] = a;
        else
            return lq_cli_usage(cmd, DETOK_USAGE, "unexpected argument '%s'", a);
    }
    if (npos < 2)
        return lq_cli_usage(cmd, DETOK_USAGE, "%s", npos ? "missing ids" : "missing SOURCE and ids");
    int32_t *ids = NULL;
    size_t n = 0;
    if (lq_parse_ids(pos[1], &ids, &n))
        return lq_cli_usage(cmd, DETOK_USAGE, "ids must be comma-separated non-negative integers, got '%s'",
                            pos[1]);
    lq_tokenizer *t = load_source(cmd, pos[0]);
    if (!t) {
        free(ids);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    lq_err err = {0};
    int rc = lq_tokenizer_decode(t, ids, n, flags, &text, &len, &err);
    free(ids);
    lq_tokenizer_free(t);
    if (rc)
        return lq_cli_error(cmd, "%s", err.msg);
    json_t *obj = lq_json_object();
    json_object_set_new(obj, "text", json_text(text, len));
    free(text);
    if (print_json(obj))
        return lq_cli_error(cmd, "out of memory writing JSON");
    return 0;
}
