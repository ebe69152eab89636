/* The LQL executor through the public API (larql/lql.h) on a generated BitNet fixture with
 * a planted fact: statuses and outputs of read statements, an INSERT seen by INFER and
 * DESCRIBE, errors that leave the session usable; and a sweep of mangled statements through
 * the parser (truncations and token soup: an error or a statement, never a crash). */
#include "harness.h"

#include "larql/fixture.h"
#include "larql/lql.h"
#include "larql/vindex.h"
#include "lql/lql_internal.h"

static char dir[4200];
static int have_fixture;

static void make_fixture(void)
{
    char gguf[4200];
    const char *tmp = harness_tmpdir();
    snprintf(gguf, sizeof gguf, "%s/f.gguf", tmp);
    snprintf(dir, sizeof dir, "%s/v", tmp);
    lq_fixture_opts o;
    lq_err err = {0};
    if (lq_fixture_preset(&o, "demo", &err) || lq_fixture_write(&o, gguf, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    lq_fact f = {" France", "Paris", 1, 5};
    if (lq_fixture_plant(gguf, &f, 1, &err)) {
        CHECK_MSG(0, "plant: %s", err.msg);
        return;
    }
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.level = LQ_VLEVEL_INFERENCE;
    bo.keep_quant = 1;
    bo.n_threads = 2;
    if (lq_vindex_build(gguf, dir, &bo, &err)) {
        CHECK_MSG(0, "build: %s", err.msg);
        return;
    }
    have_fixture = 1;
}

/* Runs one statement; returns its status, *out the output ("" when none). */
static int run(lq_lql *q, const char *stmt, char **out, lq_err *err)
{
    *out = NULL;
    int rc = lq_lql_exec(q, stmt, strlen(stmt), 1, 1, out, err);
    if (!*out)
        *out = strdup("");
    return rc;
}

/* A session that has USE'd the fixture (checking USE's output), or NULL. */
static lq_lql *session_on_fixture(void)
{
    lq_lql *q = NULL;
    lq_err err = {0};
    lq_lql_opts o = {.n_threads = 2};
    char use[4300], *out;
    if (lq_lql_create(&o, &q, &err)) {
        CHECK_MSG(0, "create: %s", err.msg);
        return NULL;
    }
    snprintf(use, sizeof use, "USE \"%s\";", dir);
    CHECK_EQ_INT(run(q, use, &out, &err), 0);
    CHECK_STR_CONTAINS(out, "(4 layers, 2.0K features, model: larql-demo)\n");
    free(out);
    return q;
}

static void test_no_backend(void)
{
    lq_lql *q = NULL;
    lq_err err = {0};
    CHECK_EQ_INT(lq_lql_create(NULL, &q, &err), 0);
    char *out;
    CHECK_EQ_INT(run(q, "DESCRIBE \"x\";", &out, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "No backend loaded");
    free(out);
    CHECK_EQ_INT(run(q, "USE \"/nonexistent/dir\"", &out, &err) < 0, 1);
    free(out);
    CHECK_EQ_INT(run(q, "SHOW PATCHES", &out, &err), LQ_EINVAL); /* still no backend */
    free(out);
    CHECK_EQ_INT(lq_lql_exec(q, "STATS", 5, 1, 1, NULL, &err), LQ_EINVAL); /* out may be NULL */
    lq_lql_free(q);
    lq_lql_free(NULL);
}

static void test_read_statements(void)
{
    if (!have_fixture)
        SKIP("no fixture");
    lq_err err = {0};
    char *out;
    lq_lql *q = session_on_fixture();
    if (!q)
        return;
    CHECK_EQ_INT(run(q, "DESCRIBE \" France\" VERBOSE", &out, &err), 0);
    CHECK_STR_CONTAINS(out, " France\n  signal: clean (");
    CHECK_STR_CONTAINS(out, "\xe2\x86\x92 Paris ");
    free(out);
    CHECK_EQ_INT(run(q, "INFER \"The capital of France is\" TOP 2", &out, &err), 0);
    CHECK_STR_CONTAINS(out, "Predictions (walk FFN):\n   1. ");
    CHECK(!strstr(out, "   3. "));
    free(out);
    /* an error leaves the session usable */
    CHECK_EQ_INT(run(q, "SHOW FEATURES 99", &out, &err), LQ_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "layer 99 is outside the model (layers 0-3)");
    free(out);
    CHECK_EQ_INT(run(q, "SELECT * FROM EDGES WHERE layer = 1 AND feature = 5", &out, &err), 0);
    CHECK_STR_CONTAINS(out, "L1     F5       Paris ");
    free(out);
    /* a pipe joins the outputs; the first failing statement stops the chain */
    CHECK_EQ_INT(run(q, "SHOW LAYERS |> SHOW FEATURES 99", &out, &err), LQ_ERANGE);
    CHECK_STR_CONTAINS(out, "L3 ");
    free(out);
    lq_lql_free(q);
}

static void test_insert_infer_delete(void)
{
    if (!have_fixture)
        SKIP("no fixture");
    lq_err err = {0};
    char *out, *before;
    lq_lql *q = session_on_fixture();
    if (!q)
        return;
    const char *inf = "INFER \"The capital of Atlantis is\" TOP 3";
    CHECK_EQ_INT(run(q, inf, &before, &err), 0);
    CHECK_EQ_INT(run(q, "INSERT INTO EDGES (entity, relation, target) VALUES (\"Atlantis\", \"capital\", \"Paris\") MODE KNN",
                     &out, &err), 0);
    CHECK_STR_CONTAINS(out, "Inserted: Atlantis \xe2\x80\x94[capital]\xe2\x86\x92 Paris at L");
    free(out);
    CHECK_EQ_INT(run(q, inf, &out, &err), 0);
    CHECK_STR_CONTAINS(out, "   1. Paris                (100.00%, source=knn_override/post_logits, cos=");
    free(out);
    CHECK_EQ_INT(run(q, "DELETE FROM EDGES WHERE entity = \"Atlantis\"", &out, &err), 0);
    CHECK_STR_CONTAINS(out, "Deleted 1 features (patch overlay)");
    free(out);
    CHECK_EQ_INT(run(q, inf, &out, &err), 0);
    /* the same rows as before the insert (the timing line aside) */
    char *a = strstr(before, "   1. "), *b = strstr(out, "   1. ");
    char *ae = a ? strstr(a, "ms\n") : NULL, *be = b ? strstr(b, "ms\n") : NULL;
    while (ae && ae > a && ae[-1] != '\n')
        ae--;
    while (be && be > b && be[-1] != '\n')
        be--;
    CHECK(a && b && ae && be && ae - a == be - b && !memcmp(a, b, (size_t)(ae - a)));
    free(out);
    free(before);
    CHECK_EQ_INT(run(q, "SAVE PATCH", &out, &err), LQ_EINVAL); /* anonymous: no file */
    CHECK_STR_CONTAINS(err.msg, "BEGIN PATCH");
    free(out);
    lq_lql_free(q);
}

/* Every prefix of a set of statements, and random soups of LQL tokens: each parses or
 * fails with LQ_EINVAL and a positioned message. */
static void test_parser_never_crashes(void)
{
    static const char *const stmts[] = {
        "INSERT INTO EDGES (entity, relation, target) VALUES (\"a\", 'b', \"c\") AT LAYER 2 CONFIDENCE 0.5 ALPHA -1.5 MODE = COMPOSE;",
        "SELECT a, b FROM EDGES NEAREST TO \"x\" AT LAYER 3 WHERE layer IN (1, 2) AND x LIKE '%y%' ORDER BY layer ASC LIMIT 4;",
        "UPDATE EDGES SET target = \"t\", confidence = 0.2 WHERE entity != 'e' AND feature <= 3 AND layer >= 1;",
        "DESCRIBE \"e\\\"q\" ALL LAYERS AT LAYER 1 RELATIONS ONLY RAW |> WALK 'p' LAYERS 0-3 TOP 3 MODE DENSE COMPARE;",
        "EXPLAIN INFER \"p\" LAYERS 1-2 VERBOSE TOP 3 OUTPUT RELATIONS ONLY WITH ATTENTION; -- tail",
        "SHOW FEATURES 3 WHERE token = 'x' AND confidence > 0.1 LIMIT 3 |> COMPILE CURRENT INTO VINDEX \"o\" ON CONFLICT FAIL",
    };
    lq_err err = {0};
    int ok = 0, bad = 0;
    for (size_t k = 0; k < sizeof stmts / sizeof stmts[0]; k++) {
        size_t n = strlen(stmts[k]);
        for (size_t cut = 0; cut <= n; cut++) {
            lq_lql_stmt *s = NULL;
            int rc = lq_lql_parse(stmts[k], cut, 1, 1, &s, &err);
            if (rc == 0)
                ok++;
            else if (rc == LQ_EINVAL && strstr(err.msg, "Parse error at line 1, column "))
                bad++;
            else
                CHECK_MSG(0, "cut %zu of stmt %zu: rc %d %s", cut, k, rc, err.msg);
            lq_lql_stmt_free(s);
        }
    }
    CHECK(ok > 0 && bad > 0);
    static const char *const words[] = {
        "SELECT", "FROM", "EDGES", "WHERE", "AND", "OR", "=", "!=", ">=", "(", ")", ",", ";", "|>", "-", "3",
        "1.5", "\"s\"", "'t'", "x", "LAYER", "LAYERS", "AT", "TOP", "INSERT", "INTO", "VALUES", "DESCRIBE",
        "WALK", "INFER", "SHOW", "PATCH", "MODE", "KNN", "*", ".", "--c\n", "IN", "LIKE", "ALL", "SET"};
    unsigned seed = 12345;
    char buf[512];
    for (int it = 0; it < 3000; it++) {
        size_t len = 0;
        int nw = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 12;
        for (int w = 0; w < nw; w++) {
            const char *t = words[((seed = seed * 1103515245u + 12345u) >> 16) % (sizeof words / sizeof words[0])];
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s ", t);
        }
        lq_lql_stmt *s = NULL;
        int rc = lq_lql_parse(buf, len, 1, 1, &s, &err);
        CHECK_MSG(rc == 0 || (rc == LQ_EINVAL && strstr(err.msg, "Parse error at line")), "%s: %d %s", buf, rc, err.msg);
        lq_lql_stmt_free(s);
    }
}

int main(void)
{
    make_fixture();
    RUN(test_no_backend);
    RUN(test_read_statements);
    RUN(test_insert_infer_delete);
    RUN(test_parser_never_crashes);
    return harness_done();
}
