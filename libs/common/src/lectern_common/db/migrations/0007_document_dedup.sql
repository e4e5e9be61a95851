-- Documents whose cleaned text equals an indexed document of the tenant are not indexed a
-- second time: they end 'duplicate', pointing at the document whose chunks hold the text.
ALTER TABLE documents DROP CONSTRAINT IF EXISTS documents_status_check;
ALTER TABLE documents ADD CONSTRAINT documents_status_check
    CHECK (status IN ('pending', 'processing', 'indexed', 'failed', 'superseded', 'archived',
                      'deleted', 'duplicate'));
ALTER TABLE documents ADD COLUMN duplicate_of uuid REFERENCES documents(id) ON DELETE SET NULL;

-- Who deleted a document: a repeated DELETE republishes the same documents.deleted event.
ALTER TABLE documents ADD COLUMN deleted_by text;
