-- The index's own record of each document it holds chunks of (issue 61): what retrieval shows
-- and filters on beside a chunk (its title, file, uploader's role, metadata, module, page
-- count, age, text search configuration) and whether its chunks are searchable. Ingest writes
-- it (when it indexes a document, and when a teacher's change reaches it as an event:
-- lectern_ingest.lifecycle), the retriever reads it; the retriever no longer reads the
-- gateway's `documents`. A row exists while the document has chunks; it goes with them.
CREATE TABLE index_documents (
    document_id    uuid PRIMARY KEY,
    tenant_id      text NOT NULL,
    title          text NOT NULL,
    filename       text NOT NULL,
    uploader_role  text,
    metadata       jsonb NOT NULL DEFAULT '{}'::jsonb,
    subject        text,
    module_tag     text,
    class_id       text,
    collection     text NOT NULL,
    page_count     integer,
    ts_config      regconfig,
    created_at     timestamptz NOT NULL,
    -- indexed and not deleted: its chunks answer searches
    searchable     boolean NOT NULL
);
CREATE INDEX index_documents_tenant ON index_documents (tenant_id) WHERE searchable;

INSERT INTO index_documents (document_id, tenant_id, title, filename, uploader_role, metadata,
                             subject, module_tag, class_id, collection, page_count, ts_config,
                             created_at, searchable)
SELECT d.id, d.tenant_id, d.title, d.filename, d.uploader_role, d.metadata, d.subject,
       d.module_tag, d.class_id, d.collection, d.page_count, d.ts_config, d.created_at,
       d.status = 'indexed'
FROM documents d
WHERE d.deleted_at IS NULL AND d.status <> 'deleted'
  AND EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id);
