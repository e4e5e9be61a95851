-- A large tenant gets its own HNSW graph: a partial index of chunks.embedding for its rows
-- alone (WHERE tenant_id = '<tenant>'), built CONCURRENTLY by the retriever's maintenance
-- (lectern_retriever.tenant_indexes) once the tenant holds LECTERN_RETRIEVER_TENANT_INDEX_MIN_CHUNKS
-- chunks. Its dense searches name the tenant as a literal so that the planner can use the
-- index; every other tenant shares chunks_embedding_hnsw. Under the tenant filter a shared
-- graph makes the search walk other tenants' chunks (an 11% tenant of a million chunks: p95
-- 118 ms), and recall suffers. A row here is bookkeeping: the index counts once it exists
-- and is valid (pg_index.indisvalid).
CREATE TABLE tenant_vector_indexes (
    tenant_id   text PRIMARY KEY,
    index_name  text NOT NULL UNIQUE,
    chunks      bigint NOT NULL,
    build_ms    real NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
