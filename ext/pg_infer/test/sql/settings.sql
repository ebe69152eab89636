-- pg_infer: the 22 infer.* settings. Those without effect in this build stay accepted (scripts
-- written for pg_infer keep working) but setting one away from its default draws a NOTICE
-- naming what to use instead; similarity_max_layers samples layers; top = 2147483647 is
-- capped at the layer's width (nearest_to, walk) instead of sizing a buffer for it.
\getenv fixdir PGI_FIXDIR
CREATE EXTENSION pg_infer;
SET infer.data_directory = :'fixdir';
SELECT infer_create_model('tiny', 'v') IS NOT NULL AS registered;
SET infer.default_model = 'tiny';
SELECT count(*) AS settings FROM pg_settings WHERE name LIKE 'infer.%';
-- no effect: a NOTICE each (the default value is quiet)
SET infer.use_hnsw = on;
SET infer.use_hnsw = off;
SET infer.hnsw_ef_search = 100;
SET infer.warmup_on_load = on;
SET infer.build_hnsw_on_load = on;
SET infer.parallel_similarity = on;
SET infer.gate_cache_max_layers = 8;
SET infer.default_backend = 'remote';
SET infer.am_hnsw_ef_search = 128;
SET infer.rerank_oversampling = 8;
SET infer.log_level = 'debug';
SET infer.grid_poll_interval = 60;
SET infer.max_memory = 1024;
ALTER DATABASE pgi_settings SET infer.use_hnsw = on;
ALTER DATABASE pgi_settings RESET infer.use_hnsw;
RESET ALL;
SET infer.data_directory = :'fixdir';
SET infer.default_model = 'tiny';
-- similarity_max_layers: 0 = every layer; 1 = layer 0 alone; 2 = layers 0 and 2
SELECT round(similar_to('France', 'France')::numeric, 3) AS all_layers;
SET infer.similarity_max_layers = 1;
SELECT round(similar_to('France', 'France')::numeric, 3) AS layer_0;
SET infer.similarity_max_layers = 2;
SELECT round(similar_to('France', 'France')::numeric, 3) AS layers_0_2;
SET infer.similarity_max_layers = 4;
SELECT round(similar_to('France', 'France')::numeric, 3) AS all_4;
RESET infer.similarity_max_layers;
-- top = 2147483647: every feature of the layer, as top <= 0 gives
SELECT (SELECT count(*) FROM nearest_to('France', 1, 2147483647)) = (SELECT count(*) FROM nearest_to('France', 1, 0)) AS nearest_capped;
SELECT (SELECT count(*) FROM walk('France', 2147483647)) = (SELECT count(*) FROM walk('France', 0)) AS walk_capped;
SET infer.walk_embed_mode = 'mean';
SELECT (SELECT count(*) FROM walk('France', 2147483647)) = (SELECT count(*) FROM walk('France', 0)) AS walk_mean_capped;
