-- BM25 inside Postgres (no extension beyond pgvector).
--
-- Each chunk keeps `bm25`, a sparsevec of its terms' BM25 document weights
-- tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl)) with k1 = 0.9, b = 0.4, indexed by term id from
-- `bm25_vocabulary`. A query carries live idf weights ln(1 + (N − df + 0.5)/(df + 0.5)) from the
-- per-tenant statistics, so the inner product (`<#>` is its negative) is the BM25 score.
-- Candidates come from the GIN index on `tsv` (OR of the query's lexemes).
--
-- Statistics are per tenant and count only indexed chunks (doc_length IS NOT NULL):
-- `lectern_bm25_index_documents` adds chunks, `lectern_bm25_unindex_documents` removes them,
-- a statement trigger removes deleted chunks, and a trigger on documents.status unindexes
-- documents leaving the searchable state (archived, deleted, superseded, failed) and indexes
-- documents becoming 'indexed'. All of them are idempotent.
--
-- Document weights freeze avgdl at insert; `lectern_bm25_reweight(tenant)` recomputes them
-- (run it after bulk loads; the retriever re-weights tenants whose chunk count drifted by more
-- than a set share since their last re-weighting, see `lectern_bm25_stale_tenants`).

CREATE TABLE bm25_vocabulary (
    id    integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    term  text NOT NULL UNIQUE
);

CREATE TABLE bm25_term_stats (
    tenant_id  text NOT NULL,
    term_id    integer NOT NULL REFERENCES bm25_vocabulary(id),
    df         integer NOT NULL CHECK (df >= 0),
    PRIMARY KEY (tenant_id, term_id)
);

CREATE TABLE bm25_collection_stats (
    tenant_id     text PRIMARY KEY,
    chunk_count   bigint NOT NULL DEFAULT 0 CHECK (chunk_count >= 0),
    total_length  bigint NOT NULL DEFAULT 0 CHECK (total_length >= 0),
    reweighted_at timestamptz,
    reweighted_chunk_count bigint
);

ALTER TABLE chunks ADD COLUMN bm25 sparsevec;
ALTER TABLE chunks ADD COLUMN doc_length integer;
-- Weights are written right after the chunk is inserted, and again by every re-weighting.
-- Free space on each page lets those updates be HOT (no new HNSW/GIN index entries): measured
-- on 20k chunks with an HNSW index, re-weighting took 98 s at fillfactor 100, 13-23 s at 60.
ALTER TABLE chunks SET (fillfactor = 60);

-- The dimension every BM25 sparsevec has (term ids must stay below it).
CREATE FUNCTION lectern_bm25_dim() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1000000000 $$;

CREATE FUNCTION lectern_bm25_k1() RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 0.9::double precision $$;

CREATE FUNCTION lectern_bm25_b() RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 0.4::double precision $$;

-- Add every not-yet-indexed chunk of these documents to the BM25 statistics and weights.
CREATE FUNCTION lectern_bm25_index_documents(p_document_ids uuid[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_chunks integer;
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS _bm25_terms (
        chunk_id uuid, tenant_id text, lexeme text, tf integer, term_id integer
    ) ON COMMIT DROP;
    TRUNCATE _bm25_terms;

    INSERT INTO _bm25_terms (chunk_id, tenant_id, lexeme, tf)
    SELECT c.id, c.tenant_id, t.lexeme, coalesce(array_length(t.positions, 1), 1)
    FROM (SELECT id, tenant_id, tsv FROM chunks
          WHERE document_id = ANY (p_document_ids) AND doc_length IS NULL
          ORDER BY id FOR UPDATE) c,
         unnest(c.tsv) t;
    ANALYZE _bm25_terms;

    -- sorted inserts: concurrent writers take the same locks in the same order
    INSERT INTO bm25_vocabulary (term)
    SELECT DISTINCT lexeme FROM _bm25_terms t
    WHERE NOT EXISTS (SELECT 1 FROM bm25_vocabulary v WHERE v.term = t.lexeme)
    ORDER BY 1
    ON CONFLICT (term) DO NOTHING;

    UPDATE _bm25_terms t SET term_id = v.id FROM bm25_vocabulary v WHERE v.term = t.lexeme;

    INSERT INTO bm25_term_stats AS s (tenant_id, term_id, df)
    SELECT tenant_id, term_id, count(*) FROM _bm25_terms
    GROUP BY tenant_id, term_id ORDER BY tenant_id, term_id
    ON CONFLICT (tenant_id, term_id) DO UPDATE SET df = s.df + EXCLUDED.df;

    INSERT INTO bm25_collection_stats AS s (tenant_id, chunk_count, total_length)
    SELECT c.tenant_id, count(*), coalesce(sum(l.dl), 0)
    FROM chunks c
    LEFT JOIN (SELECT chunk_id, sum(tf) AS dl FROM _bm25_terms GROUP BY chunk_id) l
           ON l.chunk_id = c.id
    WHERE c.document_id = ANY (p_document_ids) AND c.doc_length IS NULL
    GROUP BY c.tenant_id ORDER BY c.tenant_id
    ON CONFLICT (tenant_id) DO UPDATE
        SET chunk_count = s.chunk_count + EXCLUDED.chunk_count,
            total_length = s.total_length + EXCLUDED.total_length;

    WITH lengths AS (
        SELECT chunk_id, sum(tf) AS dl FROM _bm25_terms GROUP BY chunk_id
    ), weights AS (
        SELECT t.chunk_id,
               ('{' || string_agg(t.term_id::text || ':' || (
                    t.tf * (lectern_bm25_k1() + 1) /
                    (t.tf + lectern_bm25_k1() * (1 - lectern_bm25_b() + lectern_bm25_b() * l.dl
                        / greatest(s.total_length::double precision / greatest(s.chunk_count, 1),
                                   1e-9)))
                 )::real::text, ',' ORDER BY t.term_id)
                || '}/' || lectern_bm25_dim())::sparsevec AS vec,
               l.dl
        FROM _bm25_terms t
        JOIN lengths l ON l.chunk_id = t.chunk_id
        JOIN bm25_collection_stats s ON s.tenant_id = t.tenant_id
        GROUP BY t.chunk_id, l.dl
    )
    UPDATE chunks c
    SET bm25 = coalesce(w.vec, ('{}/' || lectern_bm25_dim())::sparsevec),
        doc_length = coalesce(w.dl, 0)
    FROM (SELECT id FROM chunks
          WHERE document_id = ANY (p_document_ids) AND doc_length IS NULL) todo
    LEFT JOIN weights w ON w.chunk_id = todo.id
    WHERE c.id = todo.id;
    GET DIAGNOSTICS v_chunks = ROW_COUNT;

    TRUNCATE _bm25_terms;
    RETURN v_chunks;
END
$$;

CREATE FUNCTION lectern_bm25_index_document(p_document_id uuid) RETURNS integer
LANGUAGE sql AS $$ SELECT lectern_bm25_index_documents(ARRAY[p_document_id]) $$;

-- Remove the indexed chunks of these documents from the statistics (chunks stay, unweighted).
CREATE FUNCTION lectern_bm25_unindex_documents(p_document_ids uuid[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_chunks integer;
BEGIN
    WITH gone AS (
        SELECT id, tenant_id, tsv, doc_length FROM chunks
        WHERE document_id = ANY (p_document_ids) AND doc_length IS NOT NULL
        ORDER BY id FOR UPDATE
    ), per_term AS (
        SELECT g.tenant_id, v.id AS term_id, count(*) AS n
        FROM gone g, unnest(g.tsv) t JOIN bm25_vocabulary v ON v.term = t.lexeme
        GROUP BY g.tenant_id, v.id
    ), df AS (
        UPDATE bm25_term_stats s SET df = greatest(s.df - p.n, 0)
        FROM (SELECT * FROM per_term ORDER BY tenant_id, term_id) p
        WHERE s.tenant_id = p.tenant_id AND s.term_id = p.term_id
        RETURNING 1
    ), stats AS (
        UPDATE bm25_collection_stats s
        SET chunk_count = greatest(s.chunk_count - g.n, 0),
            total_length = greatest(s.total_length - g.dl, 0)
        FROM (SELECT tenant_id, count(*) AS n, sum(doc_length) AS dl
              FROM gone GROUP BY tenant_id) g
        WHERE s.tenant_id = g.tenant_id
        RETURNING 1
    )
    -- data-modifying CTEs (df, stats) run once whether or not they are read
    UPDATE chunks c SET bm25 = NULL, doc_length = NULL
    FROM gone g WHERE c.id = g.id;
    GET DIAGNOSTICS v_chunks = ROW_COUNT;
    RETURN v_chunks;
END
$$;

CREATE FUNCTION lectern_bm25_unindex_document(p_document_id uuid) RETURNS integer
LANGUAGE sql AS $$ SELECT lectern_bm25_unindex_documents(ARRAY[p_document_id]) $$;

-- Deleted chunks leave the statistics (also on ON DELETE CASCADE from documents).
CREATE FUNCTION lectern_bm25_chunks_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH per_term AS (
        SELECT g.tenant_id, v.id AS term_id, count(*) AS n
        FROM old_rows g, unnest(g.tsv) t JOIN bm25_vocabulary v ON v.term = t.lexeme
        WHERE g.doc_length IS NOT NULL
        GROUP BY g.tenant_id, v.id
    )
    UPDATE bm25_term_stats s SET df = greatest(s.df - p.n, 0)
    FROM (SELECT * FROM per_term ORDER BY tenant_id, term_id) p
    WHERE s.tenant_id = p.tenant_id AND s.term_id = p.term_id;

    UPDATE bm25_collection_stats s
    SET chunk_count = greatest(s.chunk_count - g.n, 0),
        total_length = greatest(s.total_length - g.dl, 0)
    FROM (SELECT tenant_id, count(*) AS n, sum(doc_length) AS dl
          FROM old_rows WHERE doc_length IS NOT NULL GROUP BY tenant_id) g
    WHERE s.tenant_id = g.tenant_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER chunks_bm25_deleted AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION lectern_bm25_chunks_deleted();

-- Documents leaving the searchable state leave the statistics; coming back re-enters them.
CREATE FUNCTION lectern_bm25_document_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'indexed' THEN
        PERFORM lectern_bm25_index_documents(ARRAY[NEW.id]);
    ELSIF NEW.status IN ('archived', 'deleted', 'superseded', 'failed') THEN
        PERFORM lectern_bm25_unindex_documents(ARRAY[NEW.id]);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER documents_bm25_status AFTER UPDATE OF status ON documents
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION lectern_bm25_document_status();

-- Recompute the tenant's document weights with the current average length.
CREATE FUNCTION lectern_bm25_reweight(p_tenant text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_avgdl double precision;
    v_chunks integer;
BEGIN
    SELECT total_length::double precision / greatest(chunk_count, 1) INTO v_avgdl
    FROM bm25_collection_stats WHERE tenant_id = p_tenant FOR UPDATE;
    IF v_avgdl IS NULL THEN
        RETURN 0;
    END IF;
    v_avgdl := greatest(v_avgdl, 1e-9);
    WITH weights AS (
        SELECT c.id,
               ('{' || string_agg(v.id::text || ':' || (
                    tf * (lectern_bm25_k1() + 1) /
                    (tf + lectern_bm25_k1() * (1 - lectern_bm25_b()
                                               + lectern_bm25_b() * c.doc_length / v_avgdl))
                 )::real::text, ',' ORDER BY v.id)
                || '}/' || lectern_bm25_dim())::sparsevec AS vec
        FROM chunks c,
             LATERAL (SELECT lexeme, coalesce(array_length(positions, 1), 1) AS tf
                      FROM unnest(c.tsv)) t
             JOIN bm25_vocabulary v ON v.term = t.lexeme
        WHERE c.tenant_id = p_tenant AND c.doc_length IS NOT NULL
        GROUP BY c.id
    )
    UPDATE chunks c SET bm25 = w.vec FROM weights w WHERE c.id = w.id;
    GET DIAGNOSTICS v_chunks = ROW_COUNT;
    UPDATE bm25_collection_stats SET reweighted_at = now(), reweighted_chunk_count = chunk_count
    WHERE tenant_id = p_tenant;
    RETURN v_chunks;
END
$$;

-- Tenants whose chunk count moved by more than p_drift (a share) since their last re-weighting.
CREATE FUNCTION lectern_bm25_stale_tenants(p_drift double precision)
RETURNS SETOF text LANGUAGE sql STABLE AS $$
    SELECT tenant_id FROM bm25_collection_stats
    WHERE chunk_count > 0
      AND (reweighted_chunk_count IS NULL
           OR abs(chunk_count - reweighted_chunk_count)
              > p_drift * greatest(reweighted_chunk_count, 1))
    ORDER BY tenant_id
$$;
