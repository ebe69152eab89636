-- pg_infer remote backend: `larql serve` on the same (inference) vindex answers like the local backend;
-- a server that never answers is interrupted by statement_timeout and the backend stays usable.
\getenv fixdir PGI_FIXDIR
\getenv remote PGI_REMOTE
\getenv hang PGI_HANG
CREATE EXTENSION IF NOT EXISTS pg_infer;
SET infer.data_directory = :'fixdir';
SELECT infer_create_model('local', 'kq');
SELECT infer_create_model_remote('rem', :'remote');
SELECT model_name, replace(source, :'remote', '@REMOTE@') AS source, extract_level, num_layers, hidden_size
  FROM infer_models() ORDER BY 1;
SELECT relation, target, round(confidence::numeric, 1) AS confidence, layer FROM describe('France', 'rem');
SELECT count(*) AS differences FROM (
  (SELECT relation, target, round(confidence::numeric, 1), layer FROM describe('Germany', 'local')
   EXCEPT SELECT relation, target, round(confidence::numeric, 1), layer FROM describe('Germany', 'rem'))
  UNION ALL
  (SELECT relation, target, round(confidence::numeric, 1), layer FROM describe('Germany', 'rem')
   EXCEPT SELECT relation, target, round(confidence::numeric, 1), layer FROM describe('Germany', 'local'))) x;
SELECT count(*) AS differences FROM (
  (SELECT layer, feature, round(activation::numeric, 1), concept FROM walk('The capital of France', 3, 'local')
   EXCEPT SELECT layer, feature, round(activation::numeric, 1), concept FROM walk('The capital of France', 3, 'rem'))
  UNION ALL
  (SELECT layer, feature, round(activation::numeric, 1), concept FROM walk('The capital of France', 3, 'rem')
   EXCEPT SELECT layer, feature, round(activation::numeric, 1), concept FROM walk('The capital of France', 3, 'local'))) x;
SELECT implies('Japan', 'Tokyo', 'rem') AS implies_remote;
SELECT similar_to('France', 'France', 'rem') > 0 AS similar_remote;
-- similar_to_many walks concurrently and answers what similar_to answers per element
SELECT similar_to_many(ARRAY['France', NULL, 'Paris', 'Germany'], 'France', 'rem')
     = ARRAY[similar_to('France', 'France', 'rem'), NULL, similar_to('Paris', 'France', 'rem'),
             similar_to('Germany', 'France', 'rem')] AS many_matches_single;
SELECT similar_to_many(ARRAY[]::text[], 'France', 'rem') AS empty;
SELECT feature, token FROM nearest_to('France', 1, 1, 'rem');
SELECT count(*) > 0 AS relations FROM infer_show_relations('rem');
SELECT count(*) AS differences FROM (
  (SELECT layer, num_features FROM infer_show_layers('rem') EXCEPT SELECT layer, num_features FROM infer_show_layers('local'))
  UNION ALL
  (SELECT layer, num_features FROM infer_show_layers('local') EXCEPT SELECT layer, num_features FROM infer_show_layers('rem'))) x;
SELECT * FROM describe_layers('France', 'rem');
SELECT infer_warmup('rem', ARRAY['France']);
SELECT * FROM infer_server_stats('rem');
SELECT r.rank, r.token = l.token AS same_token, abs(r.probability - l.probability) < 1e-4 AS same_probability
  FROM infer('The capital of France is', 3, 'rem') r JOIN infer('The capital of France is', 3, 'local') l USING (rank);
-- a server that accepts and never answers: the statement timeout interrupts the wait
SELECT infer_create_models_remote(ARRAY['slow'], :'remote');
UPDATE infer.models SET server_url = :'hang' WHERE model_name = 'slow';
SET statement_timeout = '300ms';
SELECT * FROM describe('France', 'slow');
RESET statement_timeout;
SET infer.remote_timeout_ms = 200;
SELECT * FROM walk('France', 1, 'slow');
SELECT target FROM describe('France', 'rem');
