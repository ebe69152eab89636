/* LQL: LARQL's query language over a vindex — lexer, parser and executor.
 *
 * A session holds what LQL statements act on: the vindex selected by USE, the model run
 * from its weights (opened on the first statement that needs it: INFER, EXPLAIN INFER,
 * INSERT with weights), the overlay of edits (INSERT / UPDATE / DELETE, applied patches)
 * and the patch being recorded (BEGIN PATCH ... SAVE PATCH). Every read statement runs on
 * the patched view, so it sees the session's edits.
 *
 * Statements (LARQL's grammar, crates/larql-lql; clauses after the head in any order):
 *   USE "dir"; STATS; SHOW RELATIONS|LAYERS|FEATURES n|ENTITIES|MODELS|PATCHES;
 *   DESCRIBE "e" [ALL LAYERS|SYNTAX|KNOWLEDGE|OUTPUT] [AT LAYER n] [RELATIONS ONLY]
 *            [VERBOSE|BRIEF|RAW];
 *   WALK "p" [TOP n] [LAYERS a-b|ALL] [MODE HYBRID|PURE|DENSE] [COMPARE];
 *   INFER "p" [TOP n] [COMPARE]; EXPLAIN WALK|INFER "p" [TOP n] [LAYERS a-b] [VERBOSE];
 *   SELECT cols FROM EDGES|FEATURES|ENTITIES [NEAREST TO "e" AT LAYER n] [WHERE c AND c]
 *          [ORDER BY f [ASC|DESC]] [LIMIT n];
 *   INSERT INTO EDGES (entity, relation, target) VALUES ("e","r","t") [AT LAYER n]
 *          [CONFIDENCE x] [ALPHA x] [MODE [=] KNN|COMPOSE];
 *   DELETE FROM EDGES WHERE ...; UPDATE EDGES SET target = "t", confidence = x WHERE ...;
 *   BEGIN PATCH "p"; SAVE PATCH; APPLY PATCH "p"; REMOVE PATCH "p";
 *   COMPILE CURRENT INTO VINDEX "dir";   and  stmt |> stmt  (run both, outputs joined).
 *
 * Output is text in LARQL's formats (one string per statement, lines ending in '\n'); the
 * library never prints. Errors are an LQ_E* status with a one-line message; a parse error's
 * message names the line and column and is followed by the offending source line and a
 * caret under the token:
 *     Parse error at line 1, column 10: expected a string (the entity), found ';'
 *       DESCRIBE ;
 *                ^
 * A session is used by one thread at a time.
 *
 * Beyond the query core (LARQL's lifecycle statements, on the library's builders):
 *   TRACE "p" [FOR "tok"] [DECOMPOSE] [LAYERS a-b] [POSITIONS ALL|LAST] [SAVE "f.json"];
 *   DIFF a|CURRENT b|CURRENT [LAYER n] [RELATION "r"] [ENTITY "e"] [LIMIT n]
 *        [INTO PATCH "p.vlp" | INTO REPORT "f"];   MERGE "src.vindex|p.vlp" [INTO "dir"]
 *        [ON CONFLICT KEEP_SOURCE|KEEP_TARGET|HIGHEST_CONFIDENCE];
 *   EXTRACT MODEL "m.gguf" INTO "dir" [COMPONENTS ...] [LAYERS a-b] [WITH INFERENCE|ALL];
 *   USE MODEL "m.gguf"; USE REMOTE "http://host:port"; COMPACT MINOR | MAJOR [FULL] [WITH LAMBDA = x]; SHOW COMPACT STATUS;
 *   REBALANCE [UNTIL CONVERGED] [MAX n] [FLOOR x] [CEILING x];
 *   INFER "p" ROUTE VERIFY [FALLBACK] [TOPK n] [EXIT];
 *   COMPILE CURRENT|"dir" INTO VINDEX "out" [ON CONFLICT LAST_WINS|HIGHEST_CONFIDENCE|FAIL].
 * WHERE takes = != < <= > >= LIKE IN (...) on entity, relation, layer, feature, confidence.
 *
 * Where this differs from LARQL's executor: DESCRIBE runs the library's describe (the
 * server's filters: signed gate >= 5, K = 20 per layer) and prints LARQL's LQL layout; its
 * content-token and coherence filters are not applied. STATS and SHOW RELATIONS use the
 * vindex's own layer bands (LARQL hard-codes Gemma's L14-27). EXPLAIN INFER's trace is each
 * layer's gate KNN of that layer's input residual (captured by the library), not the walk
 * FFN's own trace. COMPACT folds the overlay into the USE'd directory (crash-safe) instead
 * of LARQL's KNN -> arch-A / MEMIT passes; EXTRACT and USE MODEL read a local GGUF. USE
 * REMOTE "http://host:port" sends STATS, DESCRIBE, WALK, INFER, SELECT ... FROM EDGES, SHOW
 * RELATIONS / PATCHES and INSERT to a larql serve (plain HTTP; other statements need a local
 * vindex). COMPILE ... INTO MODEL parses and answers LQ_EUNSUPPORTED. */
#ifndef LARQL_LQL_H
#define LARQL_LQL_H

#include <stddef.h>

#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_lql lq_lql;

typedef struct lq_lql_opts {
    int n_threads;          /* gate scans and the model; 0 = all cores */
    const char *author;     /* the "author" of the .vlp patches SAVE PATCH writes (NULL = none) */
} lq_lql_opts;

/* opts may be NULL. The session starts without a vindex (statements other than USE and
 * SHOW MODELS answer "No backend loaded. Run USE \"path.vindex\" first."). */
int lq_lql_create(const lq_lql_opts *opts, lq_lql **out, lq_err *err);
void lq_lql_free(lq_lql *q); /* NULL-safe */

/* Runs the statement(s) in text[0..len): one statement, optionally "|> statement", with an
 * optional trailing ';'. line/col: where text starts in the script it came from (1, 1 for
 * a lone statement), so that parse errors point into the whole script. *out (may be NULL)
 * receives the malloc'd output, also on error (the part produced before it); NULL if
 * nothing. */
int lq_lql_exec(lq_lql *q, const char *text, size_t len, int line, int col, char **out,
                lq_err *err);

/* A script cut into statements: on ';' outside quotes and outside "--" comments. Spans
 * that hold only blanks and comments are dropped. Each span includes its ';' (when there
 * is one) and gives the line/column of its first byte. */
typedef struct lq_lql_span {
    size_t off, len;
    int line, col;
} lq_lql_span;
/* *spans is malloc'd (caller frees). An unterminated quote ends the last span (the parser
 * then reports it with its position). */
int lq_lql_split(const char *text, size_t len, lq_lql_span **spans, size_t *n, lq_err *err);

/* 1 if text ends a statement: its last character outside comments is a ';' that is not
 * inside quotes (what an interactive shell waits for before running the buffer). */
int lq_lql_complete(const char *text, size_t len);

#ifdef __cplusplus
}
#endif
#endif
