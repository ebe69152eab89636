/* larql lql: the LQL shell (interactive, line editing and history by libedit) and batch
 * runs of statements (-c TEXT, -f FILE). A thin front end: parsing and execution are the
 * library's (include/larql/lql.h); this file reads lines, prints outputs to stdout and
 * errors as "Error: ..." to stderr. */
#include <editline/readline.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "larql/lql.h"

static const char *USAGE =
    "larql lql [DIR] ['STATEMENTS' | -c STATEMENTS | -f FILE] [--continue-on-error] [--threads N]\n"
    "  DIR: a vindex to USE first (a positional that is not a directory is the statements:\n"
    "  larql lql 'USE \"x.vindex\"; STATS;'). Without statements an interactive shell (prompt\n"
    "  'larql> ', statements end with ';', history in ~/.larql_history; also 'larql repl').\n"
    "  A batch runs the statements in order ('--' comments allowed); an error prints\n"
    "  'Error: ...' on stderr and the run goes on; the exit status is 1 if any statement\n"
    "  failed. --continue-on-error: LARQL's batch behaviour, errors on stdout and exit 0.";

static const char *REPL_USAGE =
    "larql repl [DIR] [--threads N]\n"
    "  The LQL shell (as 'larql lql' without statements); DIR: a vindex to USE first.";

/* --continue-on-error: errors go to stdout with the outputs and do not fail the run */
static int g_errors_to_stdout;

static const char *HELP =
    "Statements end with ';'. Examples:\n"
    "  USE \"model.vindex\";                 STATS;   SHOW LAYERS;   SHOW RELATIONS;\n"
    "  DESCRIBE \"France\" [VERBOSE];        WALK \"The capital of France is\" TOP 5;\n"
    "  INFER \"The capital of France is\" [TOP 5] [COMPARE];   EXPLAIN INFER \"...\";\n"
    "  SELECT * FROM EDGES WHERE entity = \"Paris\" ORDER BY confidence LIMIT 10;\n"
    "  SELECT * FROM EDGES NEAREST TO \"France\" AT LAYER 2;   SHOW FEATURES 3 LIMIT 20;\n"
    "  INSERT INTO EDGES (entity, relation, target) VALUES (\"Atlantis\", \"capital\", \"Paris\");\n"
    "  DELETE FROM EDGES WHERE entity = \"Atlantis\";   UPDATE EDGES SET target = \"x\" WHERE ...;\n"
    "  BEGIN PATCH \"p.vlp\"; ... SAVE PATCH;   APPLY PATCH \"p.vlp\";   REMOVE PATCH \"p.vlp\";\n"
    "  SHOW PATCHES;   COMPILE CURRENT INTO VINDEX \"out.vindex\" [ON CONFLICT FAIL];\n"
    "  TRACE \"The capital of France is\" [FOR \"Paris\"] [DECOMPOSE];   DIFF \"a.vindex\" CURRENT;\n"
    "  MERGE \"p.vlp\" ON CONFLICT KEEP_TARGET;   COMPACT MINOR;   SHOW COMPACT STATUS;   REBALANCE;\n"
    "  EXTRACT MODEL \"m.gguf\" INTO \"m.vindex\" WITH INFERENCE;   USE MODEL \"m.gguf\";\n"
    "Shell: help, exit (or quit, \\q, Ctrl-D).\n";

/* Runs one statement; returns 1 if it failed. */
static int run_one(lq_lql *q, const char *text, size_t len, int line, int col)
{
    char *out = NULL;
    lq_err err = {0};
    int rc = lq_lql_exec(q, text, len, line, col, &out, &err);
    if (out) {
        fputs(out, stdout);
        free(out);
    }
    fflush(stdout);
    if (rc) {
        FILE *f = g_errors_to_stdout ? stdout : stderr;
        fprintf(f, "Error: %s\n", err.msg);
        fflush(f);
    }
    return rc != 0 && !g_errors_to_stdout;
}

/* Every statement of text; returns how many failed. */
static int run_script(lq_lql *q, const char *text, size_t len)
{
    lq_lql_span *sp = NULL;
    size_t n = 0;
    lq_err err = {0};
    if (lq_lql_split(text, len, &sp, &n, &err)) {
        fprintf(stderr, "Error: %s\n", err.msg);
        return 1;
    }
    int failed = 0;
    for (size_t i = 0; i < n; i++)
        failed += run_one(q, text + sp[i].off, sp[i].len, sp[i].line, sp[i].col);
    free(sp);
    return failed;
}

/* USE "dir" with the path quoted for the lexer. */
static int use_dir(lq_lql *q, const char *dir, int show)
{
    size_t n = strlen(dir);
    char *s = malloc(2 * n + 8);
    if (!s)
        return 1;
    size_t k = 0;
    memcpy(s, "USE \"", 5);
    k = 5;
    for (size_t i = 0; i < n; i++) {
        if (dir[i] == '"' || dir[i] == '\\')
            s[k++] = '\\';
        s[k++] = dir[i];
    }
    s[k++] = '"';
    s[k] = 0;
    char *out = NULL;
    lq_err err = {0};
    int rc = lq_lql_exec(q, s, k, 1, 1, &out, &err);
    if (out && show)
        fputs(out, stdout);
    free(out);
    free(s);
    if (rc)
        fprintf(stderr, "Error: %s\n", err.msg);
    return rc != 0;
}

static int blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
            return 0;
    return 1;
}

/* Ctrl-C in the shell cancels the statement being typed (LARQL: "(cancelled)") instead of
 * ending the process: the handler only raises a flag; libedit's read is interrupted and
 * readline() returns NULL, which the flag tells apart from the end of input. */
static volatile sig_atomic_t g_sigint;

static void on_sigint(int sig)
{
    (void)sig;
    g_sigint = 1;
}

/* The shell. Lines gather in a buffer until it ends a statement (';' outside quotes and
 * comments); then every statement in it runs. With a terminal, libedit edits the line and
 * keeps the history; from a pipe, lines are read as they come, without prompts. */
static int shell(lq_lql *q)
{
    int tty = isatty(0) && isatty(1);
    char hist[4096] = "";
    const char *home = getenv("HOME");
    if (tty) {
        if (home && *home) {
            snprintf(hist, sizeof hist, "%s/.larql_history", home);
            using_history();
            read_history(hist);
        }
        stifle_history(1000);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint; /* no SA_RESTART: the read must see EINTR */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        rl_catch_signals = 0; /* ours, not libedit's: it would re-raise SIGINT and exit */
        printf("larql LQL shell: statements end with ';' (help, exit)\n");
    }
    char *buf = NULL;
    size_t blen = 0;
    int failed = 0;
    for (;;) {
        char *line = NULL;
        if (tty) {
            line = readline(blen ? "   ... " : "larql> ");
        } else {
            size_t cap = 0;
            ssize_t r = getline(&line, &cap, stdin);
            if (r < 0) {
                free(line);
                line = NULL;
            } else if (r > 0 && line[r - 1] == '\n') {
                line[r - 1] = 0;
            }
        }
        if (g_sigint) {
            g_sigint = 0;
            free(line);
            blen = 0;
            if (buf)
                buf[0] = 0;
            printf("\n(cancelled)\n");
            continue;
        }
        if (!line)
            break;
        if (!blen) { /* meta-commands, only at the start of a statement */
            const char *w = line;
            while (*w == ' ' || *w == '\t')
                w++;
            if (!strcmp(w, "exit") || !strcmp(w, "quit") || !strcmp(w, "\\q")) {
                free(line);
                break;
            }
            if (!strcmp(w, "help") || !strcmp(w, "\\h") || !strcmp(w, "\\?")) {
                fputs(HELP, stdout);
                free(line);
                continue;
            }
            if (blank(w)) {
                free(line);
                continue;
            }
        }
        size_t ll = strlen(line);
        char *nb = realloc(buf, blen + ll + 2);
        if (!nb) {
            free(line);
            break;
        }
        buf = nb;
        memcpy(buf + blen, line, ll);
        blen += ll;
        buf[blen++] = '\n';
        buf[blen] = 0;
        free(line);
        if (!lq_lql_complete(buf, blen))
            continue;
        if (tty) { /* the statement as one history entry */
            char *h = strdup(buf);
            if (h) {
                for (char *c = h; *c; c++)
                    if (*c == '\n')
                        *c = ' ';
                size_t hl = strlen(h);
                while (hl && h[hl - 1] == ' ')
                    h[--hl] = 0;
                add_history(h);
                free(h);
            }
        }
        failed += run_script(q, buf, blen);
        blen = 0;
        buf[0] = 0;
    }
    if (blen && !blank(buf)) /* end of input inside a statement: run what there is */
        failed += run_script(q, buf, blen);
    free(buf);
    if (tty) {
        printf("Goodbye.\n");
        if (hist[0])
            write_history(hist);
    }
    return failed && !tty ? 1 : 0;
}

/* A positional names a vindex when it is a directory; anything else is statements. */
static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int lql_main(int argc, char **argv, int repl)
{
    const char *C = repl ? "repl" : "lql", *pos[2] = {0}, *cmd = NULL, *file = NULL, *dir = NULL;
    int threads = 0, np = 0, cont = 0;
    const lq_opt opts[] = {LQ_STR("-c", &cmd), LQ_STR("-f", &file), LQ_INT("--threads", &threads, 1, 256),
                           LQ_FLAG("--continue-on-error", &cont), LQ_OPT_END};
    const lq_opt ropts[] = {LQ_INT("--threads", &threads, 1, 256), LQ_OPT_END};
    const char *U = repl ? REPL_USAGE : USAGE;
    int r = lq_cli_parse(C, U, argc, argv, 1, repl ? ropts : opts, NULL, pos, repl ? 1 : 2, &np);
    if (r)
        return r == LQ_CLI_HELP ? 0 : r;
    if (np == 2) {
        dir = pos[0];
        if (cmd || file)
            return lq_cli_usage(C, U, "statements are given twice (positional and -c/-f)");
        cmd = pos[1];
    } else if (np == 1) {
        if (repl || is_dir(pos[0]) || cmd || file)
            dir = pos[0];
        else if (!strpbrk(pos[0], "; \t\n\"'")) /* one word: a mistyped vindex, not LQL */
            return lq_cli_error(C, "%s: no such vindex directory (statements end with ';')", pos[0]);
        else
            cmd = pos[0];
    }
    if (cmd && file)
        return lq_cli_usage(C, U, "-c and -f are exclusive");
    g_errors_to_stdout = cont;
    char *text = NULL;
    size_t len = 0;
    if (file && lq_read_file(file, &text, &len))
        return lq_cli_error(C, "cannot read '%s'", file);
    const char *author = getenv("USER"); /* the patches' author */
    if (!author || !*author)
        author = getenv("LOGNAME");
    lq_lql_opts o = {.n_threads = threads, .author = author};
    lq_lql *q = NULL;
    lq_err err = {0};
    if (lq_lql_create(&o, &q, &err)) {
        free(text);
        return lq_cli_error(C, "%s", err.msg);
    }
    int batch = cmd || file, rc = 0;
    if (dir && use_dir(q, dir, !batch)) {
        rc = 1;
    } else if (cmd) {
        rc = run_script(q, cmd, strlen(cmd)) ? 1 : 0;
    } else if (file) {
        rc = run_script(q, text, len) ? 1 : 0;
    } else {
        rc = shell(q);
    }
    free(text);
    lq_lql_free(q);
    return rc;
}

int lq_cli_lql(int argc, char **argv) { return lql_main(argc, argv, 0); }

int lq_cli_repl(int argc, char **argv) { return lql_main(argc, argv, 1); }
