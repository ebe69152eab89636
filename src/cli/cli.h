/* The larql command: each subcommand lives in its own src/cli/cmd_<name>.c and is a thin
 * front end over liblarql. Subcommands print results to stdout, one clear error line to
 * stderr ("larql <cmd>: ...") and return the process exit status (0 ok, 1 error, 2 usage). */
#ifndef LQ_CLI_H
#define LQ_CLI_H

#include <stddef.h>
#include <stdint.h>

typedef int (*lq_cli_fn)(int argc, char **argv);

int lq_cli_info(int argc, char **argv);
int lq_cli_logits(int argc, char **argv);
int lq_cli_run(int argc, char **argv);
int lq_cli_chat(int argc, char **argv);
int lq_cli_tokenize(int argc, char **argv);
int lq_cli_detokenize(int argc, char **argv);
int lq_cli_make_model(int argc, char **argv);

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

#endif
