/* Building a vindex from a model (larql convert), the local registry of vindexes (larql
 * list/link/rm) and slices of a vindex (larql slice). Part of larql/vindex.h. */
#ifndef LARQL_VINDEX_BUILD_H
#define LARQL_VINDEX_BUILD_H

#include "larql/vindex.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- building ---- */

typedef void (*lq_vindex_progress_fn)(void *ctx, const char *stage, uint64_t done, uint64_t total);

typedef struct lq_vindex_build_opts {
    int level;              /* lq_vindex_level; default browse */
    int keep_quant;         /* write bitnet/ artifacts (BitNet GGUF only; ignored otherwise) */
    int dense_only;         /* only with effective keep_quant: no gates, no down_meta */
    int f16;                /* every float file in f16 (LARQL's truncating conversion) */
    int down_top_k;         /* default 10 */
    int n_threads;          /* 0 = cores */
    int dm_exact;           /* 1: down_meta by the all-f32 scan (slow reference) instead of the
                               int8 VNNI candidate pass + exact f32 re-scoring */
    int no_clusters;        /* 1: skip relation_clusters.json / feature_clusters.jsonl (LARQL
                               writes them for models with a knowledge band, >= 8 layers; the
                               k-means over the band's features is the slowest stage there) */
    int clusters_any_depth; /* 1: a model below 8 layers gets them too, over its layers between
                               the first and the last (LARQL writes none: it has no knowledge
                               band; on the shipped 4-layer model the names are noise, e.g.
                               France -> Paris "prefix", hence off by default) */
    const char *tokenizer_json; /* NULL = <side dir>/tokenizer.json if present, else from GGUF */
    const char *side_dir;   /* where tokenizer.json, tokenizer_config.json ... are looked for;
                               NULL = the GGUF's directory (a converted Hugging Face folder
                               passes the folder) */
    lq_vindex_progress_fn progress;
    void *progress_ctx;
    const char *extracted_at;   /* NULL = now (ISO 8601 UTC); tests pass a fixed value */
    /* Out: set when keep_quant was requested on a non-BitNet GGUF (LARQL prints "ignored"). */
    int keep_quant_ignored;
} lq_vindex_build_opts;
void lq_vindex_build_opts_init(lq_vindex_build_opts *o);

/* Builds out_dir from a GGUF. Written to a temporary sibling directory, every file
 * fsync'd, then renamed into place: an interrupted build leaves no out_dir. out_dir must not
 * exist (or be an empty directory). Memory is bounded by one layer's tensors. */
int lq_vindex_build(const char *gguf_path, const char *out_dir, lq_vindex_build_opts *opts,
                    lq_err *err);

/* ---- the local registry: LARQL's caches (src/vindex/registry.c), never the network ---- */
typedef struct lq_registry_entry {
    char *repo;          /* local: the name (without .vindex); hub: owner/name */
    char *path;          /* local: the entry in the registry (a link or a directory); hub: the
                            newest snapshot with index.json */
    int hub;             /* 1: the Hugging Face hub cache, 0: the local registry */
    uint64_t size_bytes; /* regular files under path */
    int num_layers, hidden_size; /* index.json's (0 when it does not say) */
} lq_registry_entry;
/* $LARQL_HOME/local, else $HOME/.cache/larql/local / $HF_HOME/hub, else
 * $HOME/.cache/huggingface/hub (malloc'd; NULL with err set when there is no HOME). */
char *lq_registry_local_dir(lq_err *err);
char *lq_registry_hub_dir(lq_err *err);
/* Every cached vindex (hub entries first, each group by repo, as LARQL lists them). */
int lq_registry_scan(lq_registry_entry **out, size_t *n, lq_err *err);
void lq_registry_free(lq_registry_entry *e, size_t n);
/* The entry model names (owner/name, or a plain name matching one entry's name or name half;
 * "hf://" stripped): LQ_ENOTFOUND, or LQ_EINVAL listing the matches when ambiguous. *out's
 * strings are the caller's (free them). */
int lq_registry_find(const char *model, lq_registry_entry *out, lq_err *err);
/* The directory model names: itself when it is one, else its cache entry; a hub name that is
 * not cached -> LQ_EUNSUPPORTED (downloading needs the network). *dir malloc'd. */
int lq_registry_resolve(const char *model, char **dir, lq_err *err);
/* larql link: <local>/<name>.vindex -> realpath(path) (a vindex directory); name = as_name
 * or path's last segment without .vindex (no '/', no leading '.'); an existing entry ->
 * LQ_EINVAL unless force. *link_out, *target_out malloc'd. */
int lq_registry_link(const char *path, const char *as_name, int force, char **link_out, char **target_out,
                     lq_err *err);
/* larql rm: a local link is unlinked (its vindex stays), a local directory or a hub entry's
 * repository directory removed. */
int lq_registry_remove(const lq_registry_entry *e, lq_err *err);

/* ---- larql slice: a vindex of some parts of another (src/vindex/slice.c) ---- */
enum {
    LQ_SLICE_EMBED = 1, LQ_SLICE_NORMS = 2, LQ_SLICE_ATTN = 4, LQ_SLICE_GATE = 8, LQ_SLICE_DOWN_META = 16,
    LQ_SLICE_FFN = 32, LQ_SLICE_EXPERT_LAYERS = 64, LQ_SLICE_LM_HEAD = 128, LQ_SLICE_ROUTER = 256,
    LQ_SLICE_TOKENIZER = 512, LQ_SLICE_MANIFEST = 1024, LQ_SLICE_LABELS = 2048, LQ_SLICE_README = 4096,
};
/* LARQL's part names ("embed,norms,attn", aliases as LARQL's) / presets (client, attn, embed,
 * server, browse, router, expert-server, all) added to *mask; an unknown one -> LQ_EINVAL. */
int lq_vindex_slice_parts(const char *list, unsigned *mask, lq_err *err);
int lq_vindex_slice_preset(const char *preset, unsigned *mask, lq_err *err);
typedef struct lq_vindex_slice_file {
    char *name;       /* relative ("bitnet/x.i2s") */
    uint64_t size;
} lq_vindex_slice_file;
typedef struct lq_vindex_slice_result {
    unsigned parts;
    lq_vindex_slice_file *copied;   /* sorted by name; index.json always */
    size_t n_copied, cap_copied;
    char **skipped;
    size_t n_skipped;
    uint64_t total_bytes;
    int source_level, new_level;    /* 0 browse, 1 attention, 2 inference, 3 all */
    int new_has_weights;
} lq_vindex_slice_result;
/* Copies the parts of src to dst (which must not exist, unless force and it is a vindex or an
 * empty directory) with index.json's extract_level, has_model_weights and checksums rewritten
 * for what was copied; dry_run only fills r. On error nothing is left at dst. */
int lq_vindex_slice(const char *src, const char *dst, unsigned parts, int force, int dry_run,
                    lq_vindex_slice_result *r, lq_err *err);
void lq_vindex_slice_result_free(lq_vindex_slice_result *r);
const char *lq_vindex_level_name(int level); /* 0..3 -> "browse" ... "all" */

/* Removes a vindex directory (its files, bitnet/, then the directory); what is not a
 * vindex's layout stays. */
void lq_vindex_remove_dir(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
