-- pg_infer: the "infer" index access method answers ORDER BY col <~> 'query' with the
-- same rows and distances as a sort, from the same model (infer.default_model, the one the
-- operator uses): the planner only takes an index built for that model.
\getenv fixdir PGI_FIXDIR
CREATE EXTENSION pg_infer;
SELECT amname, amtype FROM pg_am WHERE amname = 'infer';
SELECT opcname, opcdefault FROM pg_opclass WHERE opcname = 'infer_text_ops';
SET infer.data_directory = :'fixdir';
SELECT infer_create_model('tiny', 'v') IS NOT NULL AS registered;
SELECT infer_create_model('tiny2', 'v2') IS NOT NULL AS registered;
CREATE TABLE words (id serial PRIMARY KEY, w text);
INSERT INTO words (w) VALUES ('France'), ('Germany'), ('Japan'), ('Paris'), ('Berlin'), ('Tokyo'),
    (NULL), ('capital'), ('model'), ('Italy'), ('the text');
-- bad index definitions
CREATE INDEX ON words USING infer (w);
CREATE INDEX ON words USING infer (w) WITH (model = 'nope');
CREATE INDEX ON words USING infer (w) WITH (modle = 'tiny');
CREATE INDEX ON words USING infer (lower(w)) WITH (model = 'tiny');
CREATE INDEX ON words USING infer (w, w) WITH (model = 'tiny');
CREATE INDEX words_infer ON words USING infer (w) WITH (model = 'tiny');
SELECT reloptions FROM pg_class WHERE relname = 'words_infer';
SET infer.default_model = 'tiny';
-- with the sort path switched off the planner takes the index
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT w FROM words ORDER BY w <~> 'France' LIMIT 3;
CREATE TEMP TABLE by_index AS
    SELECT row_number() OVER () AS n, w, w <~> 'France' AS d FROM (SELECT w FROM words ORDER BY w <~> 'France') s;
RESET enable_seqscan;
SET enable_indexscan = off;
EXPLAIN (COSTS OFF) SELECT w FROM words ORDER BY w <~> 'France' LIMIT 3;
CREATE TEMP TABLE by_sort AS
    SELECT row_number() OVER () AS n, w, w <~> 'France' AS d FROM (SELECT w FROM words ORDER BY w <~> 'France') s;
RESET enable_indexscan;
SELECT (SELECT w FROM by_index WHERE n = 1) AS first, count(*) AS rows,
       bool_and(d IS NULL) FILTER (WHERE w IS NULL) AS null_last_distance,
       (SELECT w IS NULL FROM by_index ORDER BY n DESC LIMIT 1) AS null_row_last
  FROM by_index;
SELECT count(*) AS differences FROM (
    (SELECT w, d FROM by_index EXCEPT ALL SELECT w, d FROM by_sort)
    UNION ALL (SELECT w, d FROM by_sort EXCEPT ALL SELECT w, d FROM by_index)) x;
SELECT bool_and(a.d <= b.d) AS nondecreasing
  FROM by_index a JOIN by_index b ON b.n = a.n + 1 WHERE b.d IS NOT NULL;
-- a NULL query: every distance is NULL, every row still comes back (a prepared statement
-- keeps the index path with the parameter)
SET enable_seqscan = off;
PREPARE q(text) AS SELECT count(*) FROM (SELECT w FROM words ORDER BY w <~> $1) s;
SET plan_cache_mode = force_generic_plan;
EXPLAIN (COSTS OFF) EXECUTE q(NULL);
EXECUTE q(NULL);
EXECUTE q('France');
RESET plan_cache_mode;
-- new rows are seen (nothing is stored per row)
INSERT INTO words (w) VALUES ('France');
SELECT count(*) AS france_first FROM (SELECT w FROM words ORDER BY w <~> 'France' LIMIT 2) s WHERE w = 'France';
-- an index built for tiny2 is not chosen while the default model is tiny, and is once it is
-- tiny2; either way the rows and distances are a sequential scan's
DROP INDEX words_infer;
CREATE INDEX words_infer2 ON words USING infer (w) WITH (model = 'tiny2');
RESET enable_seqscan;
EXPLAIN (COSTS OFF) SELECT w FROM words ORDER BY w <~> 'France' LIMIT 1;
SET infer.default_model = 'tiny2';
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT w FROM words ORDER BY w <~> 'Japan' LIMIT 3;
CREATE TEMP TABLE i2 AS SELECT w, w <~> 'Japan' AS d FROM (SELECT w FROM words ORDER BY w <~> 'Japan') s;
RESET enable_seqscan;
SET enable_indexscan = off;
CREATE TEMP TABLE s2 AS SELECT w, w <~> 'Japan' AS d FROM (SELECT w FROM words ORDER BY w <~> 'Japan') s;
RESET enable_indexscan;
SELECT count(*) AS differences_tiny2 FROM (
    (SELECT w, d FROM i2 EXCEPT ALL SELECT w, d FROM s2) UNION ALL (SELECT w, d FROM s2 EXCEPT ALL SELECT w, d FROM i2)) x;
-- a generic plan made for the index while the default was tiny2 answers with tiny once the
-- default is tiny, as a sequential scan does
SET enable_seqscan = off;
SET plan_cache_mode = force_generic_plan;
PREPARE q2(text) AS SELECT array_agg(d ORDER BY d) AS d FROM (SELECT w <~> $1 AS d FROM words ORDER BY w <~> $1) s;
EXPLAIN (COSTS OFF) EXECUTE q2('Japan');
CREATE TEMP TABLE c2 AS EXECUTE q2('Japan');
SET infer.default_model = 'tiny';
CREATE TEMP TABLE c1 AS EXECUTE q2('Japan');
RESET plan_cache_mode;
RESET enable_seqscan;
SET enable_indexscan = off;
SELECT (SELECT d FROM c1) = array_agg(d ORDER BY d) AS cached_plan_uses_tiny,
       (SELECT d FROM c2) = (SELECT array_agg(d ORDER BY d) FROM i2) AS earlier_run_used_tiny2,
       (SELECT d FROM c1) IS DISTINCT FROM (SELECT d FROM c2) AS the_models_differ
  FROM (SELECT w <~> 'Japan' AS d FROM words) s;
RESET enable_indexscan;
SELECT infer_drop_model('tiny2');
-- unlogged table (init fork) and VACUUM
CREATE UNLOGGED TABLE uw (w text);
INSERT INTO uw VALUES ('Japan'), ('Tokyo');
CREATE INDEX ON uw USING infer (w) WITH (model = 'tiny');
VACUUM words;
VACUUM uw;
SET enable_seqscan = off;
SELECT w FROM uw ORDER BY w <~> 'Japan' LIMIT 1;
