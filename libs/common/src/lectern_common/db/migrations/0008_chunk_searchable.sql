-- chunks.active mirrors "its document is searchable" (documents.status = 'indexed'), kept in
-- step by the status trigger, so retrieval filters chunks on their own row instead of joining
-- documents for every candidate (at 100k chunks that join was most of a BM25 query's time).
CREATE OR REPLACE FUNCTION lectern_bm25_document_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE chunks SET active = (NEW.status = 'indexed')
    WHERE document_id = NEW.id AND active IS DISTINCT FROM (NEW.status = 'indexed');
    IF NEW.status = 'indexed' THEN
        -- ingest indexes the chunks in the same transaction before this update: only a
        -- document coming back (restored from archived) still has chunks to index
        IF EXISTS (SELECT 1 FROM chunks WHERE document_id = NEW.id AND doc_length IS NULL) THEN
            PERFORM lectern_bm25_index_documents(ARRAY[NEW.id]);
        END IF;
    ELSIF NEW.status IN ('archived', 'deleted', 'superseded', 'failed') THEN
        PERFORM lectern_bm25_unindex_documents(ARRAY[NEW.id]);
    END IF;
    RETURN NULL;
END
$$;

UPDATE chunks c SET active = (d.status = 'indexed')
FROM documents d
WHERE d.id = c.document_id AND c.active IS DISTINCT FROM (d.status = 'indexed');
