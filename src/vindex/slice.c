/* larql slice: a new vindex of some parts of another (LARQL's slice: parts, not layers; a
 * layer range is what `larql serve --ffn-only --layers A-B` maps of a whole vindex).
 *
 * Files are copied by part (LARQL's names and presets); index.json always, rewritten with
 * extract_level and has_model_weights for what was copied (LARQL's rules: inference needs
 * attn + norms + ffn, all adds lm_head, never above the source) and, ours, its checksums
 * limited to the files copied, so that `larql verify` passes on the slice. Ours too: the
 * BitNet projections (bitnet/, one file per tensor) follow their part — self_attn files with
 * attn, mlp files with ffn, scales.f32 with either — where LARQL copies flat files only. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json_obj.h"
#include "vindex/vindex_internal.h"

static const struct {
    const char *names; /* "name|alias|..." */
    unsigned bit;
} PARTS[] = {
    {"embed|embeddings", LQ_SLICE_EMBED},
    {"norms|norm", LQ_SLICE_NORMS},
    {"attn|attention", LQ_SLICE_ATTN},
    {"gate|gate_vectors|gates", LQ_SLICE_GATE},
    {"down_meta|meta", LQ_SLICE_DOWN_META},
    {"ffn|interleaved|up_down", LQ_SLICE_FFN},
    {"expert_layers|expert-layers|layers|expert_weights", LQ_SLICE_EXPERT_LAYERS},
    {"lm_head|lmhead", LQ_SLICE_LM_HEAD},
    {"router|router_weights", LQ_SLICE_ROUTER},
    {"tokenizer|tok", LQ_SLICE_TOKENIZER},
    {"manifest|weight_manifest", LQ_SLICE_MANIFEST},
    {"labels|clusters", LQ_SLICE_LABELS},
    {"readme", LQ_SLICE_README},
};

static int name_in(const char *list, const char *s, size_t n)
{
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && !strncasecmp(p, s, n))
            return 1;
        p += l + (bar != NULL);
    }
    return 0;
}

int lq_vindex_slice_parts(const char *list, unsigned *mask, lq_err *err)
{
    for (const char *p = list; *p;) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        while (n && (*p == ' ' || *p == '\t'))
            p++, n--;
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        size_t i = 0;
        while (i < sizeof PARTS / sizeof PARTS[0] && !name_in(PARTS[i].names, p, n))
            i++;
        if (i == sizeof PARTS / sizeof PARTS[0])
            return lq_err_set(err, LQ_EINVAL, "unknown part '%.*s' (embed, norms, attn, gate, down_meta, ffn, "
                                              "expert_layers, lm_head, router, tokenizer, manifest, labels, readme)",
                              (int)(n > 64 ? 64 : n), p);
        *mask |= PARTS[i].bit;
        p = c ? c + 1 : p + n;
        if (!c)
            break;
    }
    return LQ_OK;
}

int lq_vindex_slice_preset(const char *preset, unsigned *mask, lq_err *err)
{
    enum { E = LQ_SLICE_EMBED, N = LQ_SLICE_NORMS, A = LQ_SLICE_ATTN, G = LQ_SLICE_GATE, D = LQ_SLICE_DOWN_META,
           F = LQ_SLICE_FFN, X = LQ_SLICE_EXPERT_LAYERS, H = LQ_SLICE_LM_HEAD, R = LQ_SLICE_ROUTER,
           T = LQ_SLICE_TOKENIZER, M = LQ_SLICE_MANIFEST, L = LQ_SLICE_LABELS, Q = LQ_SLICE_README };
    static const struct {
        const char *names;
        unsigned parts;
    } P[] = {
        {"client", E | N | A | T | M | L},
        {"attn|attention", N | A | M | L},
        {"embed|embed-server", E | T | L},
        {"server|ffn|ffn-service", E | N | G | D | F | T | M | L},
        {"browse", E | G | D | T | L | Q},
        {"router", R | T | M | L | Q},
        {"expert-server|expert_server|moe-server", E | N | F | X | T | M},
        {"all", E | N | A | G | D | F | X | H | R | T | M | L | Q},
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++)
        if (name_in(P[i].names, preset, strlen(preset))) {
            *mask |= P[i].parts;
            return LQ_OK;
        }
    return lq_err_set(err, LQ_EINVAL, "unknown preset '%.64s'. Expected: client, attn, embed, server, browse, router, "
                                      "expert-server, all", preset);
}

static int is_backup(const char *f)
{
    size_t n = strlen(f);
    return (n > 4 && (!strcmp(f + n - 4, ".bak") || !strcmp(f + n - 4, ".tmp"))) ||
           (n > 5 && !strcmp(f + n - 5, ".orig"));
}

/* the part a top-level file belongs to (0: none) */
static unsigned file_part(const char *f)
{
    if (!strcmp(f, "embeddings.bin")) return LQ_SLICE_EMBED;
    if (!strcmp(f, "norms.bin")) return LQ_SLICE_NORMS;
    if (!strncmp(f, "attn_weights", 12)) return LQ_SLICE_ATTN;
    if (!strcmp(f, "gate_vectors.bin") || !strncmp(f, "gate_vectors_", 13)) return LQ_SLICE_GATE;
    if (!strcmp(f, "down_meta.bin") || !strcmp(f, "down_meta.jsonl")) return LQ_SLICE_DOWN_META;
    if ((!strncmp(f, "interleaved", 11) && !is_backup(f)) || !strcmp(f, "up_weights.bin") ||
        !strcmp(f, "down_weights.bin") || !strcmp(f, "up_features.bin") || !strcmp(f, "down_features.bin"))
        return LQ_SLICE_FFN;
    if (!strncmp(f, "lm_head", 7)) return LQ_SLICE_LM_HEAD;
    if (!strcmp(f, "router_weights.bin")) return LQ_SLICE_ROUTER;
    if (!strcmp(f, "tokenizer.json")) return LQ_SLICE_TOKENIZER;
    /* the BitNet layout names the projections' files as the manifest names the others */
    if (!strcmp(f, "weight_manifest.json") || !strcmp(f, "bitnet_layout.json")) return LQ_SLICE_MANIFEST;
    if (!strcmp(f, "feature_labels.json") || !strcmp(f, "feature_clusters.jsonl") ||
        !strcmp(f, "relation_clusters.json"))
        return LQ_SLICE_LABELS;
    if (!strcmp(f, "README.md")) return LQ_SLICE_README;
    return 0;
}

/* a file of bitnet/: attention or FFN projections, or the scales both need */
static unsigned bitnet_part(const char *f)
{
    if (!strcmp(f, "scales.f32")) return LQ_SLICE_ATTN | LQ_SLICE_FFN;
    if (strstr(f, ".self_attn.")) return LQ_SLICE_ATTN;
    if (strstr(f, ".mlp.")) return LQ_SLICE_FFN;
    return 0;
}

typedef struct slice_ctx {
    lq_vindex_slice_result *r;
    int dry;
    const char *src, *dst;
    json_t *sums;     /* index.json's checksums kept */
    const json_t *src_sums;
    lq_err *err;
} slice_ctx;

static int add_copied(slice_ctx *c, const char *rel, uint64_t size)
{
    lq_vindex_slice_result *r = c->r;
    if (r->n_copied == r->cap_copied) {
        size_t nc = r->cap_copied ? 2 * r->cap_copied : 32;
        lq_vindex_slice_file *nf = realloc(r->copied, nc * sizeof *nf);
        if (!nf)
            return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
        r->copied = nf;
        r->cap_copied = nc;
    }
    char *s = strdup(rel);
    if (!s)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    r->copied[r->n_copied++] = (lq_vindex_slice_file){s, size};
    r->total_bytes += size;
    const json_t *h = json_object_get(c->src_sums, rel);
    if (h && c->sums)
        json_object_set(c->sums, rel, (json_t *)h);
    return LQ_OK;
}

static int add_skipped(slice_ctx *c, const char *rel)
{
    lq_vindex_slice_result *r = c->r;
    char **ns = realloc(r->skipped, (r->n_skipped + 1) * sizeof *ns);
    if (!ns)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    r->skipped = ns;
    if (!(ns[r->n_skipped] = strdup(rel)))
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    r->n_skipped++;
    return LQ_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* the sorted names of dir's entries (NULL-terminated, malloc'd) */
static char **list_dir(const char *dir, lq_err *err)
{
    DIR *d = opendir(dir);
    if (!d) {
        lq_err_set(err, LQ_EIO, "%s: cannot list: %s", dir, strerror(errno));
        return NULL;
    }
    char **v = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char **nv = realloc(v, (n + 2) * sizeof *nv);
        if (!nv || !(nv[n] = strdup(e->d_name))) {
            free(nv ? nv : v);
            closedir(d);
            lq_err_set(err, LQ_ENOMEM, "out of memory");
            return NULL; /* (names so far leak only on out-of-memory) */
        }
        v = nv;
        v[++n] = NULL;
    }
    closedir(d);
    if (!v && !(v = calloc(1, sizeof *v)))
        lq_err_set(err, LQ_ENOMEM, "out of memory");
    else if (n)
        qsort(v, n, sizeof *v, cmp_str);
    return v;
}

static void free_list(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* one subdirectory (bitnet/ by tensor, layers/ whole with expert_layers) */
static int slice_sub(slice_ctx *c, const char *sub, unsigned parts)
{
    char *sd = lq_vx_join(c->src, sub), *dd = lq_vx_join(c->dst, sub);
    char **names = sd && dd ? list_dir(sd, c->err) : NULL;
    int rc = names ? LQ_OK : sd && dd ? LQ_EIO : lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    int made = 0;
    for (size_t i = 0; !rc && names[i]; i++) {
        char rel[1024];
        snprintf(rel, sizeof rel, "%s/%s", sub, names[i]);
        char *p = lq_vx_join(sd, names[i]);
        struct stat st;
        int reg = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
        free(p);
        if (!reg)
            continue;
        unsigned want = !strcmp(sub, "bitnet") ? bitnet_part(names[i]) : LQ_SLICE_EXPERT_LAYERS;
        if (!(want & parts)) {
            rc = add_skipped(c, rel);
            continue;
        }
        if (!c->dry && !made) {
            if (mkdir(dd, 0755) && errno != EEXIST)
                rc = lq_err_set(c->err, LQ_EIO, "%s: cannot create: %s", dd, strerror(errno));
            made = 1;
        }
        if (!rc && !c->dry)
            rc = lq_vx_copy_file(sd, dd, names[i], c->err);
        if (!rc)
            rc = add_copied(c, rel, (uint64_t)st.st_size);
    }
    free_list(names);
    free(sd);
    free(dd);
    return rc;
}

static int level_rank(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (s && !strcmp(s, lq_vindex_level_name(i)))
            return i;
    return 0;
}

static int write_index(slice_ctx *c, const json_t *src_ix)
{
    json_t *ix = json_deep_copy(src_ix);
    if (!ix)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    json_object_set_new(ix, "extract_level", json_string(lq_vindex_level_name(c->r->new_level)));
    json_object_set_new(ix, "has_model_weights", json_boolean(c->r->new_has_weights));
    if (c->sums)
        json_object_set(ix, "checksums", c->sums);
    lq_sb b = {0};
    lq_sb_json_pretty(&b, ix, 0);
    json_decref(ix);
    char *text = NULL;
    int rc = lq_sb_finish(&b, &text, c->err);
    if (!rc)
        rc = lq_vx_write_file(c->dst, "index.json", text, strlen(text), c->err);
    free(text);
    return rc;
}

int lq_vindex_slice(const char *src, const char *dst, unsigned parts, int force, int dry_run,
                    lq_vindex_slice_result *r, lq_err *err)
{
    memset(r, 0, sizeof *r);
    struct stat st, dt;
    if (!parts)
        return lq_err_set(err, LQ_EINVAL, "no parts selected. Pass --parts a,b,c or --preset client|server|browse|router");
    if (stat(src, &st) != 0 || !S_ISDIR(st.st_mode))
        return lq_err_set(err, LQ_ENOTFOUND, "source vindex not a directory: %s", src);
    int exists = stat(dst, &dt) == 0;
    if (exists && dt.st_dev == st.st_dev && dt.st_ino == st.st_ino)
        return lq_err_set(err, LQ_EINVAL, "--output must differ from the source vindex");
    if (exists && !force)
        return lq_err_set(err, LQ_EINVAL, "output path exists: %s (pass --force to overwrite)", dst);
    if (exists) { /* --force replaces a vindex or an empty directory, nothing else */
        char *ip = lq_vx_join(dst, "index.json");
        struct stat is;
        int vx = ip && stat(ip, &is) == 0;
        free(ip);
        DIR *d = S_ISDIR(dt.st_mode) ? opendir(dst) : NULL;
        int empty = 0;
        if (d) {
            struct dirent *e;
            empty = 1;
            while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                    empty = 0;
            closedir(d);
        }
        if (!vx && !empty)
            return lq_err_set(err, LQ_EINVAL, "output path exists and is not a vindex: %s (--force replaces only a "
                                              "vindex or an empty directory)", dst);
    }
    char *ixp = lq_vx_join(src, "index.json");
    json_error_t je;
    json_t *ix = ixp ? json_load_file(ixp, 0, &je) : NULL;
    free(ixp);
    if (!json_is_object(ix)) {
        json_decref(ix);
        return lq_err_set(err, LQ_ENOTFOUND, "source vindex missing or unreadable index.json: %s", src);
    }
    slice_ctx c = {.r = r, .dry = dry_run, .src = src, .dst = dst, .err = err,
                   .src_sums = json_object_get(ix, "checksums")};
    if (json_is_object(c.src_sums))
        c.sums = lq_json_object();
    r->parts = parts;
    r->source_level = level_rank(json_string_value(json_object_get(ix, "extract_level")));
    int have_attn = (parts & LQ_SLICE_ATTN) && (parts & LQ_SLICE_NORMS), have_ffn = (parts & LQ_SLICE_FFN) != 0;
    int lvl = have_attn && have_ffn && (parts & LQ_SLICE_LM_HEAD) ? 3 : have_attn && have_ffn ? 2 : have_attn ? 1 : 0;
    r->new_level = lvl < r->source_level ? lvl : r->source_level;
    r->new_has_weights = (parts & (LQ_SLICE_ATTN | LQ_SLICE_FFN)) != 0;
    int rc = LQ_OK;
    if (!dry_run) {
        if (exists)
            lq_vindex_remove_dir(dst);
        rmdir(dst);
        if (mkdir(dst, 0755))
            rc = lq_err_set(err, LQ_EIO, "%s: cannot create: %s", dst, strerror(errno));
    }
    char **names = rc ? NULL : list_dir(src, err);
    if (!rc && !names)
        rc = LQ_EIO;
    for (size_t i = 0; !rc && names[i]; i++) {
        const char *f = names[i];
        char *p = lq_vx_join(src, f);
        int ok = p && stat(p, &st) == 0;
        free(p);
        if (!ok)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (!strcmp(f, "bitnet") || (!strcmp(f, "layers") && (parts & LQ_SLICE_EXPERT_LAYERS)))
                rc = slice_sub(&c, f, parts);
            continue;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        if (!strcmp(f, "index.json")) {
            rc = add_copied(&c, f, (uint64_t)st.st_size);
            continue;
        }
        if (!(file_part(f) & parts)) {
            rc = add_skipped(&c, f);
            continue;
        }
        if (!dry_run)
            rc = lq_vx_copy_file(src, dst, f, err);
        if (!rc)
            rc = add_copied(&c, f, (uint64_t)st.st_size);
    }
    free_list(names);
    if (!rc && !dry_run)
        rc = write_index(&c, ix);
    json_decref(c.sums);
    json_decref(ix);
    if (rc && !dry_run) {
        lq_vindex_remove_dir(dst);
        rmdir(dst);
    }
    return rc;
}

void lq_vindex_slice_result_free(lq_vindex_slice_result *r)
{
    for (size_t i = 0; i < r->n_copied; i++)
        free(r->copied[i].name);
    for (size_t i = 0; i < r->n_skipped; i++)
        free(r->skipped[i]);
    free(r->copied);
    free(r->skipped);
    memset(r, 0, sizeof *r);
}

const char *lq_vindex_level_name(int level)
{
    static const char *const L[] = {"browse", "attention", "inference", "all"};
    return level >= 0 && level < 4 ? L[level] : "browse";
}
