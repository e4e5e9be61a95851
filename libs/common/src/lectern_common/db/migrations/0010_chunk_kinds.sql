-- Reference lists, tables of contents and indexes are kept, typed, and filterable: they are
-- no longer plain `text` chunks that compete with content for every question (retrieval
-- searches content kinds unless a request names others). Documents indexed before this
-- migration keep their kinds until they are re-indexed.
ALTER TABLE chunks DROP CONSTRAINT IF EXISTS chunks_kind_check;
ALTER TABLE chunks ADD CONSTRAINT chunks_kind_check
    CHECK (kind IN ('text', 'qa', 'table', 'references', 'contents', 'index'));
