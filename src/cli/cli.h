/* The larql command: each subcommand lives in its own src/cli/cmd_<name>.c and is a thin
 * front end over liblarql. Subcommands print results to stdout, one clear error line to
 * stderr ("larql <cmd>: ...") and return the process exit status (0 ok, 1 error, 2 usage). */
#ifndef LQ_CLI_H
#define LQ_CLI_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef int (*lq_cli_fn)(int argc, char **argv);

int lq_cli_info(int argc, char **argv);
int lq_cli_logits(int argc, char **argv);
int lq_cli_perplexity(int argc, char **argv);
int lq_cli_run(int argc, char **argv);
int lq_cli_chat(int argc, char **argv);
int lq_cli_tokenize(int argc, char **argv);
int lq_cli_detokenize(int argc, char **argv);
int lq_cli_make_model(int argc, char **argv);
/* vindex commands (src/cli/cmd_vindex*.c) */
int lq_cli_convert(int argc, char **argv);   /* convert gguf-to-vindex IN --output DIR ... (cmd_convert.c) */
int lq_cli_extract_index(int argc, char **argv); /* LARQL's extract-index HF_DIR -o DIR */
int lq_cli_describe(int argc, char **argv);
int lq_cli_walk(int argc, char **argv);
int lq_cli_select(int argc, char **argv);
int lq_cli_relations(int argc, char **argv);
int lq_cli_nearest(int argc, char **argv);
int lq_cli_similar(int argc, char **argv);
int lq_cli_stats(int argc, char **argv);
int lq_cli_show(int argc, char **argv);
int lq_cli_infer(int argc, char **argv);
int lq_cli_eval_edits(int argc, char **argv); /* src/cli/cmd_eval_edits.c */
/* LQL shell and batch runs (src/cli/cmd_lql.c) */
int lq_cli_lql(int argc, char **argv);
int lq_cli_repl(int argc, char **argv);
int lq_cli_verify(int argc, char **argv);
/* the local registry and slice (cmd_registry.c, cmd_slice.c), the engine diagnostic (cmd_diag.c) */
int lq_cli_list(int argc, char **argv);
int lq_cli_link(int argc, char **argv);
int lq_cli_rm(int argc, char **argv);
int lq_cli_hf(int argc, char **argv);
int lq_cli_pull(int argc, char **argv);
int lq_cli_publish(int argc, char **argv);
int lq_cli_slice(int argc, char **argv);
int lq_cli_diag(int argc, char **argv);
/* edit journals (src/cli/cmd_journal.c) */
int lq_cli_journal(int argc, char **argv);
/* server (src/cli/cmd_serve.c) */
int lq_cli_serve(int argc, char **argv);
/* chat template rendering (src/cli/cmd_template.c) */
int lq_cli_chat_template(int argc, char **argv);

/* Helpers shared by the subcommands (args.c). */

/* Prints "larql <cmd>: <msg>" to stderr; returns 1. */
int lq_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "larql <cmd>: <msg>\n<usage>" to stderr; returns 2. */
int lq_cli_usage(const char *cmd, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Strict number parsing: the whole string must be a number within [lo, hi]. 0 ok, -1 bad. */
int lq_parse_long(const char *s, long lo, long hi, long *out);
int lq_parse_double(const char *s, double lo, double hi, double *out);
/* "1,2,3" -> malloc'd ids. Empty list, non-numbers, negatives -> -1. */
int lq_parse_ids(const char *s, int32_t **ids, size_t *n);
/* Reads all of stdin or a file into a malloc'd NUL-terminated buffer. */
int lq_read_file(const char *path, char **out, size_t *len);


/* --chat-template NAME|FILE (common.c): a built-in name ("plain", "llama3", "bitnet") as is,
 * else the text of FILE, in *spec (malloc'd; NULL when arg is NULL). Prints the error and
 * returns 1 when FILE cannot be read or holds a NUL byte. */
int lq_cli_chat_template_arg(const char *cmd, const char *arg, char **spec);
struct lq_chat_format;
struct lq_model;
/* The chat format for run --chat and chat: arg as above, NULL for the model's own template.
 * Prints the error (a template that does not parse names its line) and returns 1. */
int lq_cli_chat_format(const char *cmd, const struct lq_model *m, const char *arg, struct lq_chat_format **out);

/* --draft ngram|none (common.c) -> lq_draft_mode in *mode; prints the usage error and returns
 * -1 for anything else. */
int lq_cli_parse_draft(const char *cmd, const char *usage, const char *v, int *mode);

/* Options every model-loading command shares (common.c). */
struct lq_model;
typedef struct lq_cli_model_args {
    int threads;         /* --threads N (0 = cores) */
    int act;             /* --act ms|float -> lq_act_mode */
    const char *kernels; /* --kernels scalar|avx2|avx512 */
    int lm_head_q8;      /* --lm-head q8 (default f16: as stored) */
    int lm_head_mode;    /* lq_lm_head_mode: --lm-head exact|bounded (0: the library's default,
                            bounded for generation; commands that only compute logits set
                            exact so that no copy is built) */
    int kv_type;         /* --kv f32|f16|q8 (lq_kv_type, default f32) */
    int hugepages;       /* --weights copy|mmap|auto -> 1 / -1 / 0 (lq_model_opts.hugepages) */
    int ctx;             /* --ctx N (0 = model default) */
    const char *ffn_url; /* --ffn URL: each layer's FFN on that larql serve (lq_model_opts.ffn_url) */
    int ffn_timeout_ms;  /* --ffn-timeout MS (0 = the library's 60 s) */
    int no_carried;      /* --no-carried-edits: a compiled GGUF's edits are not applied */
    struct lq_resid_hook *hook; /* out (lq_cli_open_model_edited): the file's carried edits */
    struct lq_edit_set *edits;  /* out: the same edits as a set (lq_infer_params.edits) */
} lq_cli_model_args;

void lq_cli_model_args_init(lq_cli_model_args *a);
/* If argv[*i] is one of the shared options, consumes it (and its value, advancing *i) and
 * returns 1; returns 0 if it is not; returns -1 after printing a usage error. */
int lq_cli_model_opt(const char *cmd, const char *usage, int argc, char **argv, int *i,
                     lq_cli_model_args *a);
/* The lq_model_opts those options mean. */
struct lq_model_opts;
void lq_cli_model_opts(const lq_cli_model_args *a, struct lq_model_opts *o);
/* Opens a model, printing "larql <cmd>: <error>" on failure. Returns 0 or 1. */
int lq_cli_open_model(const char *cmd, const char *path, const lq_cli_model_args *a,
                      struct lq_model **m);
/* lq_cli_open_model for the commands that run the model: a GGUF written by COMPILE ... INTO
 * MODEL brings the edits it carries as a->hook (lq_model_open_edited; a note on stderr says so),
 * unless --no-carried-edits. Close with lq_cli_close_model. */
int lq_cli_open_model_edited(const char *cmd, const char *path, lq_cli_model_args *a, struct lq_model **m);
void lq_cli_close_model(struct lq_model *m, lq_cli_model_args *a);
/* Table-driven option parsing for the subcommands. */
typedef enum lq_opt_kind {
    LQ_OPT_FLAG,   /* int* set to 1 */
    LQ_OPT_STR,    /* const char** */
    LQ_OPT_INT,    /* int*, within [lo, hi] */
    LQ_OPT_NUM,    /* double*, within [lo, hi] */
    LQ_OPT_CHOICE, /* const char**, one of the '|'-separated words in choices */
} lq_opt_kind;

typedef struct lq_opt {
    const char *name; /* "--limit" */
    lq_opt_kind kind;
    void *out;
    double lo, hi;
    const char *choices;
    int *seen; /* optional: set to 1 when the option is given */
} lq_opt;

/* Table entries (designated initializers keep -Wextra quiet about the unused fields). */
#define LQ_FLAG(n, p) {.name = (n), .kind = LQ_OPT_FLAG, .out = (p)}
#define LQ_STR(n, p) {.name = (n), .kind = LQ_OPT_STR, .out = (p)}
#define LQ_INT(n, p, l, h) {.name = (n), .kind = LQ_OPT_INT, .out = (p), .lo = (l), .hi = (h)}
#define LQ_INT_SEEN(n, p, l, h, s) {.name = (n), .kind = LQ_OPT_INT, .out = (p), .lo = (l), .hi = (h), .seen = (s)}
#define LQ_NUM(n, p, l, h) {.name = (n), .kind = LQ_OPT_NUM, .out = (p), .lo = (l), .hi = (h)}
#define LQ_CHOICE(n, p, c) {.name = (n), .kind = LQ_OPT_CHOICE, .out = (p), .choices = (c)}
#define LQ_OPT_END {.name = NULL}

#define LQ_CLI_HELP (-1)
/* Parses argv[first..argc): options from opts (a {NULL} entry ends the table), the shared
 * model options when ma is non-NULL, and up to max_pos positionals into pos (count in
 * *n_pos). Returns 0, LQ_CLI_HELP after printing the usage to stdout (exit 0), or 2 after a
 * usage error on stderr. */
int lq_cli_parse(const char *cmd, const char *usage, int argc, char **argv, int first,
                 const lq_opt *opts, lq_cli_model_args *ma, const char **pos, int max_pos,
                 int *n_pos);

/* Writes s as a JSON string literal (quotes included) to f. */
void lq_cli_json_str(FILE *f, const char *s, size_t len);

#endif
