/* LQL lexer, parser and statement splitting: every token kind, string escapes, numbers,
 * each statement form with its clauses in any order, and errors with line, column and a
 * caret under the offending token. */
#include "harness.h"

#include "lql/lql_internal.h"

static lq_ltoks lex(const char *s, int *rc, lq_err *err)
{
    lq_ltoks t = {0};
    *rc = lq_lql_lex(s, strlen(s), 1, 1, &t, err);
    return t;
}

static void test_lex_kinds(void)
{
    lq_err err = {0};
    int rc;
    lq_ltoks t = lex("select Foo_1 \"s\" 'q' 42 1.5 * , ; ( ) . |> = != > < >= <= -", &rc, &err);
    CHECK_EQ_INT(rc, 0);
    static const int want[] = {LQ_LT_KEYWORD, LQ_LT_IDENT, LQ_LT_STRING, LQ_LT_STRING, LQ_LT_INT,
                               LQ_LT_NUMBER, LQ_LT_STAR, LQ_LT_COMMA, LQ_LT_SEMI, LQ_LT_LPAREN,
                               LQ_LT_RPAREN, LQ_LT_DOT, LQ_LT_PIPE, LQ_LT_EQ, LQ_LT_NEQ, LQ_LT_GT,
                               LQ_LT_LT, LQ_LT_GTE, LQ_LT_LTE, LQ_LT_DASH, LQ_LT_EOF};
    CHECK_EQ_INT(t.n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < t.n && i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(t.t[i].kind == want[i], "token %zu: kind %d, want %d", i, t.t[i].kind, want[i]);
    if (t.n == sizeof want / sizeof want[0]) {
        CHECK(!strcmp(t.t[0].text, "SELECT"));   /* keywords in upper case */
        CHECK(!strcmp(t.t[1].text, "Foo_1"));    /* identifiers as written */
        CHECK(!strcmp(t.t[2].text, "s"));
        CHECK(!strcmp(t.t[3].text, "q"));
        CHECK_EQ_INT(t.t[4].ival, 42);
        CHECK_NEAR(t.t[5].num, 1.5, 1e-12);
        CHECK_EQ_INT(t.t[1].col, 8);
        CHECK_EQ_INT(t.t[1].len, 5);
    }
    lq_lql_toks_free(&t);
}

static void test_lex_strings_numbers_comments(void)
{
    lq_err err = {0};
    int rc;
    lq_ltoks t = lex("\"a\\\"b\\\\c\\n\\t\\r\\x\" 'it\\'s' \"\"", &rc, &err);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(t.n, 4);
    if (t.n == 4) {
        CHECK(!strcmp(t.t[0].text, "a\"b\\c\n\t\rx")); /* unknown escape: the character */
        CHECK(!strcmp(t.t[1].text, "it's"));
        CHECK(t.t[2].kind == LQ_LT_STRING && !strcmp(t.t[2].text, ""));
    }
    lq_lql_toks_free(&t);
    /* '.' only belongs to a number when a digit follows; '-' is always a dash */
    t = lex("3. 0-33 -- a comment ; \"x\"\n7", &rc, &err);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(t.n, 7);
    if (t.n == 7) {
        CHECK(t.t[0].kind == LQ_LT_INT && t.t[1].kind == LQ_LT_DOT);
        CHECK(t.t[2].kind == LQ_LT_INT && t.t[3].kind == LQ_LT_DASH && t.t[4].kind == LQ_LT_INT);
        CHECK_EQ_INT(t.t[4].ival, 33);
        CHECK(t.t[5].kind == LQ_LT_INT && t.t[5].line == 2 && t.t[5].col == 1);
    }
    lq_lql_toks_free(&t);
    /* keywords are case-insensitive */
    t = lex("dEsCrIbE infer", &rc, &err);
    CHECK(rc == 0 && t.n == 3 && t.t[0].kind == LQ_LT_KEYWORD && !strcmp(t.t[1].text, "INFER"));
    lq_lql_toks_free(&t);
}

static void test_lex_errors(void)
{
    lq_err err = {0};
    int rc;
    lq_ltoks t = lex("WALK \"abc", &rc, &err);
    CHECK_EQ_INT(rc, LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "line 1, column 6: unterminated string");
    CHECK_STR_CONTAINS(err.msg, "\n  WALK \"abc\n       ^");
    CHECK_EQ_INT(t.n, 0);
    t = lex("SHOW\n  LAYERS # x", &rc, &err);
    CHECK_EQ_INT(rc, LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "line 2, column 10: unexpected character '#'");
    CHECK_STR_CONTAINS(err.msg, "\n    LAYERS # x\n           ^");
    t = lex("a | b", &rc, &err);
    CHECK_STR_CONTAINS(err.msg, "column 3: expected '>' after '|'");
    t = lex("a ! b", &rc, &err);
    CHECK_STR_CONTAINS(err.msg, "column 3: expected '=' after '!'");
    t = lex("LIMIT 99999999999999999999999", &rc, &err);
    CHECK_STR_CONTAINS(err.msg, "too large");
    t = lex("x \x01", &rc, &err);
    CHECK_STR_CONTAINS(err.msg, "unexpected byte 0x01");
    /* a long line is clipped around the error, the caret still under it */
    char longl[600];
    memset(longl, ' ', sizeof longl);
    memcpy(longl + 500, "@", 1);
    longl[599] = 0;
    t = lex(longl, &rc, &err);
    CHECK_STR_CONTAINS(err.msg, "column 501");
    const char *sh = strchr(err.msg, '\n'), *ca = sh ? strchr(sh + 1, '\n') : NULL;
    CHECK(sh && ca && strchr(sh + 1, '@') - (sh + 1) == strchr(ca + 1, '^') - (ca + 1));
}

static lq_lql_stmt *parse(const char *s, lq_err *err)
{
    lq_lql_stmt *st = NULL;
    int rc = lq_lql_parse(s, strlen(s), 1, 1, &st, err);
    if (rc) {
        CHECK_MSG(0, "parse \"%s\": %s", s, err->msg);
        return NULL;
    }
    return st;
}

static void test_parse_read_statements(void)
{
    lq_err err = {0};
    lq_lql_stmt *s = parse("USE \"a/b.vindex\";", &err);
    CHECK(s && s->kind == LQ_LS_USE && !strcmp(s->str, "a/b.vindex"));
    lq_lql_stmt_free(s);
    s = parse("STATS", &err);
    CHECK(s && s->kind == LQ_LS_STATS && !s->str);
    lq_lql_stmt_free(s);
    /* clauses in any order; last wins */
    s = parse("DESCRIBE 'France' VERBOSE KNOWLEDGE RELATIONS ONLY AT LAYER 3 SYNTAX;", &err);
    CHECK(s && s->kind == LQ_LS_DESCRIBE && !strcmp(s->str, "France") && s->dmode == LQ_LD_VERBOSE &&
          s->band == LQ_LB_SYNTAX && s->relations_only && s->layer == 3);
    lq_lql_stmt_free(s);
    s = parse("describe \"x\" all layers raw", &err);
    CHECK(s && s->band == LQ_LB_ALL && s->dmode == LQ_LD_RAW);
    lq_lql_stmt_free(s);
    s = parse("WALK \"The capital\" LAYERS 2-5 TOP 7 MODE PURE COMPARE", &err);
    CHECK(s && s->kind == LQ_LS_WALK && s->top == 7 && s->has_range && s->range_lo == 2 &&
          s->range_hi == 5 && s->wmode == LQ_LW_PURE && s->compare);
    lq_lql_stmt_free(s);
    s = parse("WALK \"p\" LAYERS ALL", &err);
    CHECK(s && s->all_layers && !s->has_range && s->top == -1);
    lq_lql_stmt_free(s);
    s = parse("INFER \"p\" COMPARE TOP 3;", &err);
    CHECK(s && s->kind == LQ_LS_INFER && s->top == 3 && s->compare);
    lq_lql_stmt_free(s);
    s = parse("EXPLAIN WALK \"p\" VERBOSE LAYERS 1-2 TOP 4", &err);
    CHECK(s && s->kind == LQ_LS_EXPLAIN_WALK && s->verbose && s->top == 4 && s->range_hi == 2);
    lq_lql_stmt_free(s);
    s = parse("EXPLAIN INFER \"p\" KNOWLEDGE WITH ATTENTION RELATIONS ONLY", &err);
    CHECK(s && s->kind == LQ_LS_EXPLAIN_INFER && s->band == LQ_LB_KNOWLEDGE && s->with_attention &&
          s->relations_only);
    lq_lql_stmt_free(s);
    s = parse("SELECT entity, target FROM EDGES LIMIT 5 WHERE entity LIKE \"%par%\" AND layer = 3 AND "
              "confidence >= -0.5 ORDER BY confidence ASC", &err);
    CHECK(s && s->kind == LQ_LS_SELECT && s->n_cols == 2 && !strcmp(s->cols[1], "target") &&
          s->from == LQ_LF_EDGES && s->limit == 5 && s->n_where == 3 && s->order_by &&
          !strcmp(s->order_by, "confidence") && s->order_desc == 0);
    if (s && s->n_where == 3) {
        CHECK(!strcmp(s->where[0].field, "entity") && s->where[0].op == LQ_LO_LIKE &&
              !strcmp(s->where[0].v.s, "%par%"));
        CHECK(!strcmp(s->where[1].field, "layer") && s->where[1].v.kind == LQ_LV_INT && s->where[1].v.num == 3);
        CHECK(s->where[2].op == LQ_LO_GTE && s->where[2].v.kind == LQ_LV_NUMBER && s->where[2].v.num == -0.5);
    }
    lq_lql_stmt_free(s);
    s = parse("SELECT * FROM EDGES NEAREST TO \"France\" AT LAYER 26 LIMIT 5", &err);
    CHECK(s && !s->n_cols && s->nearest && !strcmp(s->nearest, "France") && s->layer == 26 && s->limit == 5);
    lq_lql_stmt_free(s);
    s = parse("SELECT * FROM FEATURES WHERE layer IN (1, 2, 3) AND token != 'x'", &err);
    CHECK(s && s->from == LQ_LF_FEATURES && s->n_where == 2 && s->where[0].op == LQ_LO_IN &&
          s->where[0].n_list == 3 && s->where[1].op == LQ_LO_NEQ);
    lq_lql_stmt_free(s);
    s = parse("SELECT * FROM ENTITIES", &err);
    CHECK(s && s->from == LQ_LF_ENTITIES);
    lq_lql_stmt_free(s);
}

static void test_parse_show_and_patches(void)
{
    lq_err err = {0};
    static const struct {
        const char *src;
        int kind;
    } cases[] = {
        {"SHOW RELATIONS WITH EXAMPLES VERBOSE", LQ_LS_SHOW_RELATIONS},
        {"SHOW LAYERS RANGE 0-3", LQ_LS_SHOW_LAYERS},
        {"SHOW LAYERS 2-4", LQ_LS_SHOW_LAYERS},
        {"SHOW FEATURES 3 WHERE token = \"x\" LIMIT 4", LQ_LS_SHOW_FEATURES},
        {"SHOW ENTITIES AT LAYER 2 LIMIT 9", LQ_LS_SHOW_ENTITIES},
        {"SHOW MODELS", LQ_LS_SHOW_MODELS},
        {"SHOW PATCHES", LQ_LS_SHOW_PATCHES},
        {"BEGIN PATCH \"p.vlp\"", LQ_LS_BEGIN_PATCH},
        {"SAVE PATCH", LQ_LS_SAVE_PATCH},
        {"APPLY PATCH 'p.vlp'", LQ_LS_APPLY_PATCH},
        {"REMOVE PATCH \"p.vlp\"", LQ_LS_REMOVE_PATCH},
        {"COMPILE CURRENT INTO VINDEX \"out\" ON CONFLICT LAST_WINS", LQ_LS_COMPILE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lq_lql_stmt *s = parse(cases[i].src, &err);
        CHECK_MSG(s && s->kind == cases[i].kind, "%s", cases[i].src);
        if (s && s->kind == LQ_LS_SHOW_FEATURES)
            CHECK(s->layer == 3 && s->limit == 4 && s->n_where == 1);
        if (s && s->kind == LQ_LS_SHOW_ENTITIES)
            CHECK(s->layer == 2 && s->limit == 9);
        if (s && s->kind == LQ_LS_SHOW_LAYERS)
            CHECK(s->has_range && s->range_hi >= 3);
        if (s && s->kind == LQ_LS_COMPILE)
            CHECK(s->compile_current && !strcmp(s->str, "out"));
        lq_lql_stmt_free(s);
    }
}

static void test_parse_mutations(void)
{
    lq_err err = {0};
    lq_lql_stmt *s = parse("INSERT INTO EDGES (entity, relation, target) VALUES (\"Atlantis\", \"capital\", "
                           "\"Poseidonia\") MODE = COMPOSE CONFIDENCE 0.8 AT LAYER 2 ALPHA 0.3;", &err);
    CHECK(s && s->kind == LQ_LS_INSERT && !strcmp(s->entity, "Atlantis") && !strcmp(s->relation, "capital") &&
          !strcmp(s->target, "Poseidonia") && s->insert_mode == 1 && s->layer == 2);
    if (s)
        CHECK(fabs(s->confidence - 0.8) < 1e-12 && fabs(s->alpha - 0.3) < 1e-12);
    lq_lql_stmt_free(s);
    s = parse("insert into edges (entity, relation, target) values ('a', 'b', 'c') mode knn", &err);
    CHECK(s && s->insert_mode == 0 && s->layer == -1 && isnan(s->confidence));
    lq_lql_stmt_free(s);
    s = parse("DELETE FROM EDGES WHERE entity = \"Atlantis\" AND layer = 2", &err);
    CHECK(s && s->kind == LQ_LS_DELETE && s->n_where == 2);
    lq_lql_stmt_free(s);
    s = parse("UPDATE EDGES SET target = \"x\", confidence = 0.5 WHERE layer = 1 AND feature = 7", &err);
    CHECK(s && s->kind == LQ_LS_UPDATE && s->n_set == 2 && !strcmp(s->set[0].field, "target") &&
          s->set[1].v.num == 0.5 && s->n_where == 2);
    lq_lql_stmt_free(s);
    /* pipe: two statements in one */
    s = parse("STATS |> SHOW LAYERS;", &err);
    CHECK(s && s->kind == LQ_LS_STATS && s->next && s->next->kind == LQ_LS_SHOW_LAYERS);
    lq_lql_stmt_free(s);
    /* LARQL's statements beyond the query core */
    s = parse("SELECT entity, * FROM EDGES WHERE relation IN () AND layer >= 2", &err);
    CHECK(s && s->n_cols == 0 && s->n_where == 2 && s->where[0].op == LQ_LO_IN && s->where[0].n_list == 0 &&
          s->where[1].op == LQ_LO_GTE);
    lq_lql_stmt_free(s);
    s = parse("DIFF CURRENT \"b.vindex\" RELATIONS \"x\" LAYER 2 LIMIT 5 INTO PATCH \"p.vlp\"", &err);
    CHECK(s && s->kind == LQ_LS_DIFF && s->current_a && !s->str && !strcmp(s->str2, "b.vindex") &&
          !strcmp(s->relation, "x") && s->layer == 2 && s->limit == 5 && !strcmp(s->into_patch, "p.vlp"));
    lq_lql_stmt_free(s);
    s = parse("MERGE \"a.vlp\" INTO \"b.vindex\" ON CONFLICT KEEP_TARGET", &err);
    CHECK(s && s->kind == LQ_LS_MERGE && !strcmp(s->str, "a.vlp") && !strcmp(s->str2, "b.vindex") &&
          s->conflict == LQ_LC_KEEP_TARGET);
    lq_lql_stmt_free(s);
    s = parse("EXTRACT MODEL \"m.gguf\" INTO \"o\" COMPONENTS FFN_GATE, attn_ov LAYERS 0-5 WITH ALL", &err);
    CHECK(s && s->kind == LQ_LS_EXTRACT && s->extract_level == 2 && s->components == (1u | 16u) && s->has_range);
    lq_lql_stmt_free(s);
    s = parse("TRACE \"p\" FOR \"Paris\" DECOMPOSE LAYERS 1-2 POSITIONS ALL SAVE \"t.trace\"", &err);
    CHECK(s && s->kind == LQ_LS_TRACE && !strcmp(s->target, "Paris") && s->decompose && s->positions_all &&
          s->range_lo == 1 && s->range_hi == 2 && !strcmp(s->str2, "t.trace"));
    lq_lql_stmt_free(s);
    s = parse("COMPACT MAJOR FULL WITH LAMBDA = 0.5", &err);
    CHECK(s && s->kind == LQ_LS_COMPACT && s->compact_major && s->compact_full && s->lambda == 0.5);
    lq_lql_stmt_free(s);
    s = parse("REBALANCE UNTIL CONVERGED MAX 16 FLOOR = 0.25 CEILING 0.95", &err);
    CHECK(s && s->kind == LQ_LS_REBALANCE && s->max_iters == 16 && s->floor_p == 0.25 && s->ceiling_p == 0.95);
    lq_lql_stmt_free(s);
    s = parse("INFER \"x\" ROUTE VERIFY FALLBACK TOPK 8 EXIT TOP 3", &err);
    CHECK(s && s->kind == LQ_LS_INFER && s->route && s->route_fallback && s->route_topk == 8 && s->route_exit &&
          s->top == 3);
    lq_lql_stmt_free(s);
    s = parse("COMPILE \"s.vindex\" INTO VINDEX \"o\" ON CONFLICT HIGHEST_CONFIDENCE", &err);
    CHECK(s && s->kind == LQ_LS_COMPILE && !s->compile_model && s->conflict == LQ_LC_HIGHEST_CONFIDENCE);
    lq_lql_stmt_free(s);
    s = parse("COMPILE CURRENT INTO MODEL \"o.gguf\" FORMAT GGUF", &err);
    CHECK(s && s->kind == LQ_LS_COMPILE && s->compile_model && s->format == 2);
    lq_lql_stmt_free(s);
    s = parse("USE MODEL \"m.gguf\" AUTO_EXTRACT", &err);
    CHECK(s && s->kind == LQ_LS_USE_MODEL && s->auto_extract);
    lq_lql_stmt_free(s);
    s = parse("SHOW COMPACT STATUS", &err);
    CHECK(s && s->kind == LQ_LS_SHOW_COMPACT_STATUS);
    lq_lql_stmt_free(s);
}

/* A parse error: status, message and the caret line. */
static void perr(const char *src, const char *want_msg, const char *want_caret)
{
    lq_err err = {0};
    lq_lql_stmt *s = NULL;
    int rc = lq_lql_parse(src, strlen(src), 1, 1, &s, &err);
    CHECK_MSG(rc == LQ_EINVAL && !s, "%s parsed", src);
    CHECK_STR_CONTAINS(err.msg, want_msg);
    if (want_caret)
        CHECK_STR_CONTAINS(err.msg, want_caret);
    lq_lql_stmt_free(s);
}

static void test_parse_errors(void)
{
    perr("DESCRIBE ;", "Parse error at line 1, column 10: expected a string (the entity), found ';'",
         "\n  DESCRIBE ;\n           ^");
    perr("WALK \"p\" TOP x", "column 14: expected a non-negative integer (TOP count), found identifier 'x'", NULL);
    perr("WALK \"p\" LAYERS 5-2", "column 17: range start 5 is greater than its end 2", NULL);
    perr("SELECT * FROM EDGES\nWHERE layer = 1 OR layer = 2", "line 2, column 17: only AND is supported",
         "\n  WHERE layer = 1 OR layer = 2\n                  ^");
    perr("SELECT * FROM TABLES", "expected EDGES, FEATURES or ENTITIES after FROM, found identifier 'TABLES'", NULL);
    perr("INSERT INTO EDGES (entity, target, relation) VALUES ('a','b','c')",
         "column 28: the column list must be (entity, relation, target); expected 'relation'", NULL);
    perr("INSERT INTO EDGES (entity, relation, target) VALUES ('a','b')", "expected ','", NULL);
    perr("DELETE FROM EDGES", "DELETE needs a WHERE clause", NULL);
    perr("UPDATE EDGES SET target = 'x'", "UPDATE needs a WHERE clause", NULL);
    perr("STATS; SHOW LAYERS", "column 8: unexpected trailing token", NULL);
    perr("", "column 1: expected a statement, found end of input", NULL);
    perr("FROB 1", "expected a statement (USE, DESCRIBE", NULL);
    perr("MERGE \"a\" ON CONFLICT FAIL", "expected KEEP_SOURCE, KEEP_TARGET or HIGHEST_CONFIDENCE", NULL);
    perr("SELECT", "column 7: expected a field name, found end of input", NULL);
    perr("ORDER BY x", "column 1: expected a statement (USE, DESCRIBE, WALK, INFER, SELECT", NULL);
    perr("USE MODEL 3", "expected a string (the model file)", NULL);
    perr("COMPILE CURRENT INTO MODEL \"x\" ON CONFLICT FAIL", "ON CONFLICT is only valid for COMPILE INTO VINDEX", NULL);
    perr("COMPILE CURRENT INTO VINDEX \"x\" FORMAT GGUF", "FORMAT is only valid for COMPILE INTO MODEL", NULL);
    perr("COMPILE CURRENT INTO \"x\"", "expected MODEL or VINDEX after INTO", NULL);
    perr("SHOW TABLES", "expected RELATIONS, LAYERS, FEATURES, ENTITIES, MODELS, PATCHES or COMPACT STATUS", NULL);
    perr("SHOW COMPACT", "expected STATUS", NULL);
    perr("COMPACT", "expected MINOR or MAJOR after COMPACT", NULL);
    perr("COMPACT MAJOR WITH LAMBDA 0.1", "expected '=' after LAMBDA", NULL);
    perr("EXTRACT MODEL \"m\" INTO \"o\" COMPONENTS not_a_component", "expected a component", NULL);
    perr("EXTRACT MODEL \"m\" INTO \"o\" WITH WALK", "expected INFERENCE, ALL or WEIGHTS", NULL);
    perr("DIFF \"a\"", "expected a string (a vindex path or CURRENT)", NULL);
    perr("DIFF \"a\" \"b\" INTO \"c\"", "expected PATCH or REPORT after INTO", NULL);
    perr("INFER \"x\" ROUTE FALLBACK", "expected VERIFY", NULL);
    perr("TRACE \"x\" LAYERS 5-2", "range start 5 is greater than its end 2", NULL);
    perr("REBALANCE FLOOR", "expected a number (FLOOR)", NULL);
    perr("SELECT * FROM EDGES WHERE a IN (1,)", "expected a value after ','", NULL);
    perr("SELECT entity, 7 FROM EDGES", "expected a field name", NULL);
    perr("INFER \"p\" MODE PURE", "unexpected token in INFER, found keyword MODE", NULL);
    perr("SELECT * FROM EDGES NEAREST TO \"x\" LIMIT 3", "expected AT LAYER n after NEAREST TO", NULL);
    perr("INSERT INTO EDGES (entity, relation, target) VALUES ('a','b','c') MODE FAST", "expected KNN, COMPOSE or SUBJECT", NULL);
    /* positions are the script's: the statement started at line 3, column 5 */
    lq_err err = {0};
    lq_lql_stmt *s = NULL;
    CHECK_EQ_INT(lq_lql_parse("WALK 3", 6, 3, 5, &s, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "line 3, column 10:");
}

static void test_split_and_complete(void)
{
    const char *src = "STATS;  -- a comment; with a semicolon\n"
                      "DESCRIBE \"a;b\"\n  VERBOSE;\n\n  -- only a comment\nWALK 'x;y'";
    lq_lql_span *sp = NULL;
    size_t n = 0;
    lq_err err = {0};
    CHECK_EQ_INT(lq_lql_split(src, strlen(src), &sp, &n, &err), 0);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK(sp[0].off == 0 && sp[0].len == 6 && sp[0].line == 1 && sp[0].col == 1);
        CHECK(!strncmp(src + sp[1].off, "DESCRIBE \"a;b\"\n  VERBOSE;", sp[1].len) && sp[1].line == 2 &&
              sp[1].col == 1);
        CHECK(!strncmp(src + sp[2].off, "WALK 'x;y'", sp[2].len) && sp[2].line == 6);
        /* every span parses on its own with script positions */
        for (size_t i = 0; i < n; i++) {
            lq_lql_stmt *s = NULL;
            CHECK(lq_lql_parse(src + sp[i].off, sp[i].len, sp[i].line, sp[i].col, &s, &err) == 0);
            lq_lql_stmt_free(s);
        }
    }
    free(sp);
    CHECK_EQ_INT(lq_lql_split("  -- nothing\n ; ;", 17, &sp, &n, &err), 0);
    CHECK_EQ_INT(n, 0); /* empty statements are skipped */
    free(sp);
    CHECK(lq_lql_complete("STATS;", 6));
    CHECK(lq_lql_complete("STATS; -- done\n", 15));
    CHECK(!lq_lql_complete("STATS", 5));
    CHECK(!lq_lql_complete("DESCRIBE \"a;", 12));
    CHECK(!lq_lql_complete("STATS; DESCRIBE", 15));
    CHECK(!lq_lql_complete("STATS -- ;", 10));
    CHECK(lq_lql_complete("DESCRIBE 'it\\'s';", 17));
}

int main(void)
{
    RUN(test_lex_kinds);
    RUN(test_lex_strings_numbers_comments);
    RUN(test_lex_errors);
    RUN(test_parse_read_statements);
    RUN(test_parse_show_and_patches);
    RUN(test_parse_mutations);
    RUN(test_parse_errors);
    RUN(test_split_and_complete);
    return harness_done();
}
