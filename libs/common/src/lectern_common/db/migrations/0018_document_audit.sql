-- Who changed which document, when and how (metadata edits, archive, restore).
CREATE TABLE document_audit (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    document_id  uuid NOT NULL,
    actor        text NOT NULL,
    action       text NOT NULL,
    changes      jsonb NOT NULL DEFAULT '{}'::jsonb,
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX document_audit_document ON document_audit (tenant_id, document_id, at);
