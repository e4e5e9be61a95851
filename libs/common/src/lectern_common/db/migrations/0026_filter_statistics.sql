-- The retriever filters chunks by lower(subject) (a subject matches whatever its case). The
-- planner had no statistics for the expression and guessed 0.5% of a tenant's rows, so a
-- subject that is a fifth of a large tenant's chunks was planned as a scan and sort of all of
-- them (78 ms at 60,000 chunks, seconds at a million) instead of the HNSW index with the
-- filter. Extended statistics on the expression give the planner the real share.
CREATE STATISTICS IF NOT EXISTS chunks_subject_lower ON (lower(subject)) FROM chunks;
CREATE STATISTICS IF NOT EXISTS chunks_tenant_subject (dependencies, mcv)
    ON tenant_id, lower(subject) FROM chunks;
ANALYZE chunks;
