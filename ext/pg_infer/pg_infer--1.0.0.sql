-- pg_infer 1.0.0: gburd/pg_infer's SQL surface (names, argument order, defaults and result
-- columns of its code, not its docs) over liblarql. See ext/pg_infer/README.md.
\echo Use "CREATE EXTENSION pg_infer" to load this file. \quit

CREATE SCHEMA IF NOT EXISTS infer;

-- The model registry. pg_dump keeps its rows (pg_infer upstream forgot to register it).
CREATE TABLE infer.models (
    model_name    text PRIMARY KEY,
    vindex_path   text NOT NULL,
    source        text NOT NULL,
    extract_level text NOT NULL DEFAULT 'browse',
    num_layers    int,
    hidden_size   int,
    vocab_size    int,
    backend       text NOT NULL DEFAULT 'local',
    server_url    text,
    registered_at timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('infer.models', '');

-- ---- model management ----
CREATE FUNCTION infer_create_model(model_name text, source text, extract_level text DEFAULT NULL)
RETURNS text AS 'MODULE_PATHNAME', 'pgi_create_model' LANGUAGE C VOLATILE;
CREATE FUNCTION infer_create_model_remote(model_name text, server_url text)
RETURNS text AS 'MODULE_PATHNAME', 'pgi_create_model_remote' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION infer_create_models_remote(model_names text[], server_url text)
RETURNS int AS 'MODULE_PATHNAME', 'pgi_create_models_remote' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION infer_create_model_grid(model_name text, model_id text DEFAULT NULL)
RETURNS text AS 'MODULE_PATHNAME', 'pgi_create_model_grid' LANGUAGE C VOLATILE;
CREATE FUNCTION infer_drop_model(model_name text)
RETURNS text AS 'MODULE_PATHNAME', 'pgi_drop_model' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION infer_models()
RETURNS TABLE(model_name text, vindex_path text, source text, extract_level text,
              num_layers int, hidden_size int, vocab_size int, registered_at timestamptz)
AS $$ SELECT model_name, vindex_path, source, extract_level, num_layers, hidden_size,
             vocab_size, registered_at
      FROM infer.models ORDER BY registered_at, model_name $$ LANGUAGE sql STABLE;
CREATE FUNCTION infer_detect_server()
RETURNS text AS 'MODULE_PATHNAME', 'pgi_detect_server' LANGUAGE C VOLATILE;
CREATE FUNCTION infer_stats()
RETURNS TABLE(cache_hits int8, cache_misses int8, total_queries int8, loaded_models int,
              memory_mb float8)
AS 'MODULE_PATHNAME', 'pgi_stats' LANGUAGE C VOLATILE;
CREATE FUNCTION infer_warmup(model_name text, entities text[])
RETURNS text AS 'MODULE_PATHNAME', 'pgi_warmup' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION infer_server_stats(model_name text)
RETURNS TABLE(entries int8, hits int8, misses int8, evictions int8, memory_mb float8)
AS 'MODULE_PATHNAME', 'pgi_server_stats' LANGUAGE C VOLATILE STRICT;

-- ---- knowledge queries (read-only: STABLE; each process keeps its own mapping) ----
CREATE FUNCTION walk(prompt text, top int DEFAULT NULL, model text DEFAULT NULL)
RETURNS TABLE(layer int, feature int, activation float8, concept text)
AS 'MODULE_PATHNAME', 'pgi_walk' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION infer_explain_walk(prompt text, top int DEFAULT NULL, model text DEFAULT NULL)
RETURNS TABLE(layer int, band text, feature int, activation float8, token text, also text)
AS 'MODULE_PATHNAME', 'pgi_explain_walk' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION describe(entity text, model text DEFAULT NULL, threshold float8 DEFAULT NULL)
RETURNS TABLE(relation text, target text, confidence float8, layer int)
AS 'MODULE_PATHNAME', 'pgi_describe' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION describe_many(entities text[], model text DEFAULT NULL, threshold float8 DEFAULT NULL)
RETURNS TABLE(entity text, relation text, target text, confidence float8, layer int)
AS 'MODULE_PATHNAME', 'pgi_describe_many' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION describe_layers(entity text, model text DEFAULT NULL, threshold float8 DEFAULT NULL)
RETURNS TABLE(layer int, feature int, target text, gate_score float8, also text)
AS 'MODULE_PATHNAME', 'pgi_describe_layers' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION nearest_to(entity text, layer int, top int DEFAULT NULL, model text DEFAULT NULL)
RETURNS TABLE(feature int, token text, score float8, also text)
AS 'MODULE_PATHNAME', 'pgi_nearest_to' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION similar_to(a text, b text, model text DEFAULT NULL)
RETURNS float8 AS 'MODULE_PATHNAME', 'pgi_similar_to' LANGUAGE C STABLE PARALLEL SAFE COST 10000;
CREATE FUNCTION similar_to_many(candidates text[], query text, model text DEFAULT NULL)
RETURNS float8[] AS 'MODULE_PATHNAME', 'pgi_similar_to_many' LANGUAGE C STABLE PARALLEL SAFE COST 10000;
CREATE FUNCTION implies(subject text, object text, model text DEFAULT NULL)
RETURNS bool AS 'MODULE_PATHNAME', 'pgi_implies' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION infer(prompt text, top int DEFAULT NULL, model text DEFAULT NULL)
RETURNS TABLE(token text, probability float8, rank int)
AS 'MODULE_PATHNAME', 'pgi_infer' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION infer_select(entity text DEFAULT NULL, relation text DEFAULT NULL,
                             layer int DEFAULT NULL, "limit" int DEFAULT NULL,
                             min_confidence float8 DEFAULT NULL, order_by text DEFAULT NULL,
                             model text DEFAULT NULL)
RETURNS TABLE(layer int, feature int, target text, confidence float8, relation text)
AS 'MODULE_PATHNAME', 'pgi_select' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION infer_show_layers(model text DEFAULT NULL)
RETURNS TABLE(layer int, band text, num_features int)
AS 'MODULE_PATHNAME', 'pgi_show_layers' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION infer_show_features(layer int, filter text DEFAULT NULL, min_score float8 DEFAULT NULL,
                                    top int DEFAULT NULL, model text DEFAULT NULL)
RETURNS TABLE(feature int, token text, score float8, also text)
AS 'MODULE_PATHNAME', 'pgi_show_features' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION infer_show_relations(model text DEFAULT NULL)
RETURNS TABLE(relation text, count int, max_score float8, layers text, examples text)
AS 'MODULE_PATHNAME', 'pgi_show_relations' LANGUAGE C STABLE PARALLEL SAFE;
CREATE FUNCTION infer_diff(model_a text, model_b text, layer int DEFAULT NULL, top int DEFAULT NULL)
RETURNS TABLE(layer int, feature int, token_a text, token_b text, score_a float8, score_b float8,
              status text)
AS 'MODULE_PATHNAME', 'pgi_diff' LANGUAGE C STABLE PARALLEL SAFE;

-- ---- operators (always infer.default_model) ----
CREATE FUNCTION infer_distance(a text, b text)
RETURNS float8 AS 'MODULE_PATHNAME', 'pgi_distance' LANGUAGE C STABLE STRICT PARALLEL SAFE COST 10000;
CREATE FUNCTION infer_similarity(a text, b text)
RETURNS float8 AS 'MODULE_PATHNAME', 'pgi_similarity' LANGUAGE C STABLE STRICT PARALLEL SAFE COST 10000;
CREATE FUNCTION infer_implies_op("left" text, "right" text)
RETURNS bool AS 'MODULE_PATHNAME', 'pgi_implies_op' LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OPERATOR <~> (LEFTARG = text, RIGHTARG = text, FUNCTION = infer_distance, COMMUTATOR = <~>);
CREATE OPERATOR <~ (LEFTARG = text, RIGHTARG = text, FUNCTION = infer_similarity, COMMUTATOR = <~);
CREATE OPERATOR @> (LEFTARG = text, RIGHTARG = text, FUNCTION = infer_implies_op);

-- ---- the "infer" index access method: ORDER BY col <~> 'query' as an index scan ----
-- CREATE INDEX ON t USING infer (col) WITH (model = 'm'); the index orders by its model.
CREATE FUNCTION infer_am_handler(internal) RETURNS index_am_handler
AS 'MODULE_PATHNAME', 'pgi_am_handler' LANGUAGE C;
CREATE ACCESS METHOD infer TYPE INDEX HANDLER infer_am_handler;
CREATE OPERATOR FAMILY infer_ops USING infer;
CREATE OPERATOR CLASS infer_text_ops DEFAULT FOR TYPE text USING infer FAMILY infer_ops AS
    OPERATOR 1 <~> (text, text) FOR ORDER BY float_ops;

-- ---- knowledge edits: rows every backend (and `larql serve --state-db`) folds in id order ----
-- An edit is computed once, by the backend that writes it (its ops and vectors as a .vlp in
-- `vectors`), and is visible as its row is: to the writing transaction at once, to others
-- after COMMIT, to nobody after ROLLBACK. Deleting a row (infer_revert) takes the edit away.
CREATE TABLE infer.edits (
    id         bigserial PRIMARY KEY,
    model      text NOT NULL,
    op         text NOT NULL CHECK (op IN ('insert', 'delete', 'update', 'patch')),
    entity     text NOT NULL,
    relation   text,
    target     text,
    layer      int,
    mode       text,
    edit_id    text,
    vectors    bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL DEFAULT current_user
);
CREATE INDEX edits_model_id ON infer.edits (model, id);
SELECT pg_catalog.pg_extension_config_dump('infer.edits', '');
SELECT pg_catalog.pg_extension_config_dump('infer.edits_id_seq', '');
-- A fresh sequence value per change of a model's rows: never reused, so a rolled-back change
-- leaves a version nobody folded, and every reader re-checks.
CREATE SEQUENCE infer.edit_version_seq;
CREATE TABLE infer.edit_versions (
    model   text PRIMARY KEY,
    version bigint NOT NULL
);
CREATE FUNCTION infer.edits_bump(m text) RETURNS void AS $$
    INSERT INTO infer.edit_versions AS v VALUES (m, nextval('infer.edit_version_seq'))
    ON CONFLICT (model) DO UPDATE SET version = EXCLUDED.version;
    SELECT pg_notify('infer_edits', m);
$$ LANGUAGE sql VOLATILE;
CREATE FUNCTION infer.edits_changed() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM infer.edits_bump(OLD.model); END IF;
    IF TG_OP <> 'DELETE' AND (TG_OP = 'INSERT' OR NEW.model <> OLD.model) THEN
        PERFORM infer.edits_bump(NEW.model);
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE FUNCTION infer.edits_truncated() RETURNS trigger AS $$
BEGIN
    PERFORM infer.edits_bump(model) FROM infer.edit_versions;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER edits_changed AFTER INSERT OR UPDATE OR DELETE ON infer.edits
    FOR EACH ROW EXECUTE FUNCTION infer.edits_changed();
CREATE TRIGGER edits_truncated AFTER TRUNCATE ON infer.edits
    FOR EACH STATEMENT EXECUTE FUNCTION infer.edits_truncated();

-- INSERT INTO EDGES: mode 'subject' (every phrasing and chat read it back; needs a vindex with
-- weights, the default then), 'knn' or 'compose' (the default without weights). The row's id.
CREATE FUNCTION infer_insert(entity text, relation text, target text, model text DEFAULT NULL,
                             mode text DEFAULT NULL, layer int DEFAULT NULL, alpha float8 DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgi_insert' LANGUAGE C VOLATILE;
-- DELETE FROM EDGES WHERE entity [AND relation]: the row's id, NULL when nothing matched.
CREATE FUNCTION infer_delete(entity text, relation text DEFAULT NULL, model text DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgi_delete' LANGUAGE C VOLATILE;
-- UPDATE EDGES SET target WHERE entity [AND relation]: the row's id, NULL when nothing matched.
CREATE FUNCTION infer_update(entity text, relation text, target text, model text DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgi_update' LANGUAGE C VOLATILE;
-- The model's edits in the order they fold (infer.default_model when model is NULL).
CREATE FUNCTION infer_edits(model text DEFAULT NULL)
RETURNS TABLE(id bigint, op text, entity text, relation text, target text, layer int, mode text,
              edit_id text, created_at timestamptz, created_by text)
AS $$ SELECT e.id, e.op, e.entity, e.relation, e.target, e.layer, e.mode, e.edit_id, e.created_at,
             e.created_by
      FROM infer.edits e
      WHERE e.model = coalesce($1, nullif(current_setting('infer.default_model', true), ''))
      ORDER BY e.id $$ LANGUAGE sql STABLE;
-- Takes an edit away (its row deleted): true when there was one.
CREATE FUNCTION infer_revert(id bigint)
RETURNS boolean AS $$ WITH d AS (DELETE FROM infer.edits e WHERE e.id = $1 RETURNING 1)
                      SELECT count(*) > 0 FROM d $$ LANGUAGE sql VOLATILE STRICT;
