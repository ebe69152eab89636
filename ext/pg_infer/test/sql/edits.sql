-- Knowledge edits from SQL: rows of infer.edits, transactional, seen by every session after
-- COMMIT (a second session through dblink), gone after ROLLBACK.
\getenv fixdir PGI_FIXDIR
CREATE EXTENSION pg_infer;
CREATE EXTENSION dblink;
SET infer.data_directory = :'fixdir';
SELECT infer_create_model('kq', 'kq') IS NOT NULL AS registered;
SELECT infer_create_model('tiny', 'v') IS NOT NULL AS registered;
SET infer.default_model = 'kq';
SELECT dblink_connect('other', format('dbname=%s host=%s port=%s', current_database(),
       current_setting('unix_socket_directories'), current_setting('port')));
SELECT dblink_exec('other', 'SET infer.default_model = ''kq''');
-- before any edit
SELECT token FROM infer('The capital of Atlantis is', 1);
-- a KNN insert in a transaction: visible to it at once, to the other session after COMMIT
BEGIN;
SELECT infer_insert('Atlantis', 'capital', 'Tokyo', mode => 'knn') > 0 AS inserted;
SELECT token, probability FROM infer('The capital of Atlantis is', 1);
SELECT * FROM dblink('other', $$SELECT token FROM infer('The capital of Atlantis is', 1)$$) AS t(token text);
COMMIT;
SELECT * FROM dblink('other', $$SELECT token, probability FROM infer('The capital of Atlantis is', 1)$$)
    AS t(token text, probability float8);
-- ROLLBACK takes an edit away, in the writing session and everywhere else
BEGIN;
SELECT infer_insert('Lemuria', 'capital', 'Berlin', mode => 'knn') > 0 AS inserted;
SELECT token, probability FROM infer('The capital of Lemuria is', 1);
ROLLBACK;
SELECT token, probability = 1 AS overridden FROM infer('The capital of Lemuria is', 1);
SELECT * FROM dblink('other', $$SELECT probability = 1 FROM infer('The capital of Lemuria is', 1)$$) AS t(overridden bool);
-- an edit written by the other session is seen here after its COMMIT
SELECT id > 0 AS inserted FROM dblink('other', $$SELECT infer_insert('Lemuria', 'capital', 'Berlin', mode => 'knn')$$) AS t(id bigint);
SELECT token, probability FROM infer('The capital of Lemuria is', 1);
-- the default mode with weights is a subject edit
SELECT infer_insert('Atlantis', 'currency', 'Rome') > 0 AS inserted;
SELECT token FROM infer('The currency of Atlantis is', 1);
SELECT * FROM dblink('other', $$SELECT token FROM infer('The currency of Atlantis is', 1)$$) AS t(token text);
SELECT op, entity, relation, target, mode, layer IS NOT NULL AS has_layer, edit_id LIKE 'e%' AS has_edit_id,
       created_by = current_user AS by_me
  FROM infer_edits('kq');
-- a browse vindex (no weights): COMPOSE with the embedding key; describe reads the fold
SELECT infer_insert('Atlantis', 'capital', 'Paris', 'tiny') > 0 AS inserted;
SELECT target FROM describe('Atlantis', 'tiny') WHERE target = 'Paris';
SELECT * FROM dblink('other', $$SELECT target FROM describe('Atlantis', 'tiny') WHERE target = 'Paris'$$) AS t(target text);
SELECT mode FROM infer_edits('tiny');
-- UPDATE and DELETE as rows (WHERE entity as LQL's: features whose target or provenance names
-- it); infer_revert takes one away
SELECT target FROM describe('France', 'tiny');
SELECT infer_update('Paris', NULL, 'Lyon', 'tiny') > 0 AS updated;
SELECT target FROM describe('France', 'tiny');
SELECT infer_delete('Berlin', NULL, 'tiny') > 0 AS deleted;
SELECT count(*) FROM describe('Germany', 'tiny');
SELECT * FROM dblink('other', $$SELECT count(*) FROM describe('Germany', 'tiny')$$) AS t(n int8);
SELECT infer_delete('Nowhere-at-all', NULL, 'tiny') IS NULL AS nothing;
SELECT infer_revert(id) FROM infer_edits('tiny') WHERE op = 'delete';
SELECT target FROM describe('Germany', 'tiny');
SELECT infer_revert(-1);
SELECT op, entity, target FROM infer_edits('tiny');
-- a row that does not apply is skipped with a WARNING; the others still fold
INSERT INTO infer.edits (model, op, entity, vectors) VALUES ('kq', 'insert', 'Broken', '\x7b226f7065726174696f6e73223a377d');
SELECT token FROM infer('The capital of Atlantis is', 1);
DELETE FROM infer.edits WHERE entity = 'Broken';
-- bad input: clear errors, nothing written
SELECT infer_insert('', 'capital', 'x');
SELECT infer_insert('A', 'capital', NULL);
SELECT infer_insert('A', 'capital', 'x', mode => 'bogus');
SELECT infer_insert('A', 'capital', repeat('x', 300));
SELECT infer_insert('A', 'capital', 'x', layer => 99);
SELECT infer_insert('A', 'capital', 'x', 'nonexistent');
SELECT infer_insert('A', 'capital', 'x', 'tiny', mode => 'subject');
SELECT infer_insert('A', 'capital', 'x', alpha => 1e9);
SELECT infer_delete('');
SELECT count(*) FROM infer.edits WHERE entity = 'A';
-- TRUNCATE: every session forgets every edit
TRUNCATE infer.edits;
SELECT token, probability = 1 AS overridden FROM infer('The capital of Atlantis is', 1);
SELECT * FROM dblink('other', $$SELECT count(*) FROM describe('Atlantis', 'tiny') WHERE target = 'Paris'$$) AS t(n int8);
SELECT dblink_disconnect('other');
