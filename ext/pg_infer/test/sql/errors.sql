-- pg_infer: bad input gives a clean ERROR, never a crashed backend.
\getenv fixdir PGI_FIXDIR
\set VERBOSITY default
CREATE EXTENSION IF NOT EXISTS pg_infer;
SET infer.data_directory = :'fixdir';
SELECT infer_create_model('tiny', 'v');
-- no model
SELECT * FROM describe('France');
SELECT 'France'::text <~> 'Paris'::text;
SELECT * FROM describe('France', 'nope');
SET infer.default_model = 'tiny';
-- NULL and empty input
SELECT * FROM describe(NULL);
SELECT * FROM describe('');
SELECT * FROM walk('');
SELECT * FROM walk(NULL, 3);
SELECT * FROM describe_many(NULL);
SELECT similar_to('', 'France');
SELECT * FROM nearest_to('France', NULL);
-- out of range
SELECT * FROM nearest_to('France', 4);
SELECT * FROM nearest_to('France', -1);
SELECT * FROM infer_show_features(7);
SELECT * FROM infer_diff('tiny', 'tiny', 9);
SELECT * FROM infer('hello', -1);
-- infer on a browse vindex: no weights
SELECT * FROM infer('The capital of France is');
-- registration errors
SELECT infer_create_model('x', 'missing');
SELECT infer_create_model('x', '/');
SELECT infer_create_model('x', 'hf://org/model');
SELECT infer_create_model('', 'v');
SELECT infer_create_model('x', NULL);
SELECT infer_create_model('bad', 'bad');
SELECT infer_create_model('gguf', 'm.gguf');
-- a registry row whose files went bad, and an unknown backend
INSERT INTO infer.models (model_name, vindex_path, source) VALUES ('broken', :'fixdir' || '/bad', 'bad');
SELECT * FROM describe('France', 'broken');
INSERT INTO infer.models (model_name, vindex_path, source, backend) VALUES ('grid1', '', 'x', 'grid');
SELECT * FROM walk('France', 1, 'grid1');
-- the grid backend is not implemented
SELECT infer_create_model_grid('g');
SET infer.grid_url = 'http://127.0.0.1:1';
SELECT infer_create_model_grid('g', 'm');
RESET infer.grid_url;
-- unknown remote URL scheme
SELECT infer_create_model_remote('r', 'ftp://example');
-- SQLSTATEs
\set VERBOSITY sqlstate
SELECT * FROM describe('France', 'nope');
SELECT * FROM describe('');
SELECT * FROM describe(NULL);
SELECT * FROM nearest_to('France', 4);
SELECT infer_create_model('bad', 'bad');
SELECT infer_create_model('x', 'missing');
SELECT infer_create_model('x', '/');
SELECT * FROM infer('The capital of France is');
\set VERBOSITY default
-- a statement timeout stops a long local scan (describe_many of 4000 entities in one pass);
-- the backend stays usable
SET statement_timeout = '20ms';
SELECT count(*) FROM describe_many((SELECT array_agg(w) FROM generate_series(1, 4000) i,
    LATERAL (VALUES ((ARRAY['France', 'Germany', 'Japan', 'capital'])[1 + i % 4])) v(w)));
RESET statement_timeout;
-- the backend is still fine
SELECT target FROM describe('France');
