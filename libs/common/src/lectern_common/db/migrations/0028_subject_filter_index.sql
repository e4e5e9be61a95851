-- The retriever filters chunks by lower(subject) (a subject matches whatever its case), which
-- no index served: chunks_tenant_filters holds subject as written, after collection. Before
-- a filtered search the retriever counts the chunks that pass the filter (up to
-- exact_search_below, to choose exact search or HNSW), and without an index on the
-- expression that count read every chunk of the tenant whose subject was rarer than the
-- limit allows: at a million chunks, subject-filtered searches on a 300,000-chunk tenant
-- took p95 300 ms (`make bench-scale`), most of it counting. With this index the count reads
-- the matching chunks alone, and so does an exact search of a selective filter; the class
-- after the subject serves a subject and classes together (a student's usual filter).
-- Chat's filter keeps untagged material (subject IS NULL): the retriever writes it as
-- lower(subject) IS NULL, which this index serves too. A plain CREATE INDEX: writes to
-- chunks wait while it is built (a few seconds per million chunks).
CREATE INDEX IF NOT EXISTS chunks_tenant_subject
    ON chunks (tenant_id, lower(subject), class_id) WHERE active;
