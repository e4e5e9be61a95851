-- Ingest owns `chunks` and the BM25 statistics (issue 61): the trigger on documents.status
-- that took a document's chunks out of retrieval (or back) when the gateway changed its status
-- wrote ingest's rows from the gateway's transaction. A teacher's change now reaches the chunks
-- as the event the gateway writes to its outbox in that transaction (documents.archived,
-- .restored, .updated, .deleted), which ingest applies (lectern_ingest.lifecycle): ingest's
-- own uploads already index and retire chunks explicitly in their transactions.
DROP TRIGGER IF EXISTS documents_bm25_status ON documents;
DROP FUNCTION IF EXISTS lectern_bm25_document_status();
