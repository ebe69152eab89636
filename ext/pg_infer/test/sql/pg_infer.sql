-- pg_infer: extension objects, GUCs, the registry and every local query on a vindex with
-- planted facts (France>Paris at layer 1, Germany>Berlin at 2, Japan>Tokyo at 3,
-- " France">Paris at layer 0 for walk's last token).
\getenv fixdir PGI_FIXDIR
\getenv top PGI_TOP
CREATE EXTENSION pg_infer;
-- GUCs: pg_infer's names and defaults, the prefix reserved
SELECT name, setting, context FROM pg_settings WHERE name LIKE 'infer.%' ORDER BY name;
SET infer.no_such_setting = 1;
-- the registry is empty and dumped by pg_dump
SELECT * FROM infer_models();
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'pg_infer';
SET infer.data_directory = :'fixdir';
SELECT infer_create_model('tiny', 'v');
SELECT infer_create_model('tiny2', :'fixdir' || '/v2', 'browse');
SELECT infer_create_model('kq', 'kq');
SELECT model_name, replace(vindex_path, :'fixdir', '@FIX@') AS vindex_path,
       replace(source, :'fixdir', '@FIX@') AS source, extract_level, num_layers, hidden_size, vocab_size,
       registered_at <= now() AS registered
  FROM infer_models() ORDER BY model_name;
SET infer.default_model = 'tiny';
-- describe finds the planted edges
SELECT relation, target, round(confidence::numeric, 1) AS confidence, layer FROM describe('France');
SELECT relation, target, round(confidence::numeric, 1) AS confidence, layer FROM describe('Germany', 'tiny');
SELECT target, layer FROM describe('Japan', threshold => 12);
SELECT target, layer FROM describe('Japan', threshold => 16);
SET infer.gate_threshold = 0;  -- adaptive: 0.1 x the best score
SELECT count(*) > 0 AS some_edges, bool_and(target <> '') FROM describe('France');
RESET infer.gate_threshold;
-- describe_many: one row set for many entities, equal to describe per entity
SELECT entity, relation, target, round(confidence::numeric, 1) AS confidence, layer
  FROM describe_many(ARRAY['France', 'Germany', NULL, '', 'Japan']);
SELECT count(*) AS differences FROM (
  (SELECT e, d.* FROM unnest(ARRAY['France','Germany','Japan']) e, describe(e) d
   EXCEPT SELECT * FROM describe_many(ARRAY['France','Germany','Japan']))
  UNION ALL
  (SELECT * FROM describe_many(ARRAY['France','Germany','Japan'])
   EXCEPT SELECT e, d.* FROM unnest(ARRAY['France','Germany','Japan']) e, describe(e) d)) x;
-- describe_layers: unmerged hits with the feature
SELECT layer, feature, target, round(gate_score::numeric, 1) AS gate_score FROM describe_layers('France');
-- walk traces the planted feature of the last token
SELECT layer, feature, round(activation::numeric, 1) AS activation, concept
  FROM walk('The capital of France', 1) WHERE layer = 0;
SELECT count(*) AS rows, count(DISTINCT layer) AS layers FROM walk('The capital of France');
SELECT count(*) AS all_features FROM walk('The capital of France', 0);
SELECT layer, band, feature, token FROM infer_explain_walk('The capital of France', 1) WHERE layer = 0;
-- walk_embed_mode other than 'last': the mean of the tokens' embeddings (as describe's query)
SET infer.walk_embed_mode = 'mean';
SELECT layer, feature, concept FROM walk('France', 1) WHERE layer = 1;
SELECT count(*) AS rows FROM walk('France', 3);
RESET infer.walk_embed_mode;
-- nearest_to
SELECT feature, token FROM nearest_to('France', 1, 1);
-- similarity and the operators
SELECT similar_to('France', 'France') > similar_to('France', 'Tokyo') AS self_closest;
SELECT similar_to('France', 'Germany') = similar_to('Germany', 'France') AS symmetric;
SELECT array_length(s, 1), s[2] IS NULL AS null_kept, s[1] = similar_to('France', 'France') AS same
  FROM similar_to_many(ARRAY['France', NULL, 'Germany'], 'France') s;
SELECT implies('France', 'Paris') AS yes, implies('France', 'paris') AS any_case, implies('France', 'Berlin') AS no;
SELECT 'Germany'::text @> 'Berlin'::text AS op_implies;
SELECT t FROM (VALUES ('Tokyo'), ('France'), ('Germany')) v(t) ORDER BY t <~> 'France' LIMIT 1;
SELECT ('France' <~ 'France') = similar_to('France', 'France') AS similarity_op;
SELECT infer_distance('France', 'France') = 1 / (1 + similar_to('France', 'France')) AS distance;
SELECT infer_distance(NULL, 'France') IS NULL AS strict_null;
-- PARALLEL SAFE is true: the functions run in a parallel worker (its own mapping)
SET force_parallel_mode = on;
SET parallel_setup_cost = 0;
EXPLAIN (COSTS OFF) SELECT target FROM describe('France');
SELECT target, layer FROM describe('France');
SELECT layer, feature, concept FROM walk('The capital of France', 1) WHERE layer = 0;
RESET force_parallel_mode;
RESET parallel_setup_cost;
-- JOIN LATERAL
SELECT e.name, d.target, d.layer
  FROM (VALUES ('France'), ('Germany'), ('Japan')) e(name)
  CROSS JOIN LATERAL describe(e.name) d ORDER BY e.name;
-- infer: the model's predictions, as `larql infer` gives them (the tokens as decoded text, as
-- `larql serve` answers; remote.sql compares them)
SELECT array_agg(round(probability::numeric, 4) ORDER BY rank) = string_to_array(:'top', ',')::numeric[] AS same_predictions
  FROM infer('The capital of France is', 3, 'kq');
SELECT count(*), bool_and(probability > 0 AND probability <= 1) FROM infer('The capital of France is', model => 'kq');
-- no thread was started inside this backend (describe, walk, similar_to, infer all ran on it)
SELECT count(*) AS threads FROM pg_ls_dir('/proc/' || pg_backend_pid() || '/task');
-- the show functions
SELECT * FROM infer_show_layers();
SELECT feature, token FROM infer_show_features(1, top => 5) WHERE token ~ '^[A-Za-z]{3,}$';
SELECT count(*) > 0 AS has_relations FROM infer_show_relations();
SELECT layer, feature, target FROM infer_select(entity => 'paris', order_by => 'layer') WHERE feature IN (17, 42);
-- infer_diff: the second model has Germany>Tokyo at layer 2, feature 100, and no Japan fact
SELECT layer, feature, token_a, token_b, status FROM infer_diff('tiny', 'tiny2', 2, 1000) WHERE feature = 100;
SELECT cache_hits > 0 AS hits, loaded_models AS loaded, total_queries > 0 AS counted, memory_mb > 0 AS mapped FROM infer_stats();
SELECT infer_warmup('tiny', ARRAY['France', 'Germany']);
SELECT * FROM infer_server_stats('tiny');
SELECT infer_detect_server() IS NULL OR infer_detect_server() LIKE 'uds://%' AS detect;
SELECT infer_drop_model('tiny2');
SELECT infer_drop_model('tiny2');
SELECT model_name FROM infer_models() ORDER BY 1;
