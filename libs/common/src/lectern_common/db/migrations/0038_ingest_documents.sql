-- Each service owns its data (issue 61): `documents` was the last table two services wrote.
-- The gateway keeps its catalogue row; ingest keeps its own record of each upload here, made
-- from `documents.uploaded` (what to fetch, the filter columns its chunks carry) and brought up
-- to date by the gateway's lifecycle events (a snapshot of the row with a revision, applied
-- once and in order), with its processing state: status, attempts, errors, counts, hashes,
-- duplicates and superseded versions. The gateway learns the outcome from `documents.indexed`
-- and `documents.failed` and writes it to its own row.
CREATE TABLE ingest_documents (
    id                    uuid PRIMARY KEY,
    tenant_id             text NOT NULL,
    version               integer NOT NULL DEFAULT 1,
    previous_version_id   uuid,
    object_name           text,
    -- empty on a record a lifecycle event made before the upload reached ingest
    title                 text NOT NULL DEFAULT '',
    filename              text NOT NULL DEFAULT '',
    mime_type             text NOT NULL DEFAULT '',
    uploaded_by           text NOT NULL DEFAULT '',
    uploader_role         text,
    metadata              jsonb NOT NULL DEFAULT '{}'::jsonb,
    subject               text,
    grade_level           smallint,
    module_tag            text,
    class_id              text,
    content_type          text,
    collection            text NOT NULL DEFAULT 'educational',
    curriculum_standards  text[] NOT NULL DEFAULT '{}',
    topic_tags            text[] NOT NULL DEFAULT '{}',
    source_priority       real,
    freshness_date        date,
    language              text,
    -- pending, processing, indexed, failed, duplicate (ingest's outcome); archived,
    -- superseded, deleted (the gateway's lifecycle, or a newer version ingest indexed)
    status                text NOT NULL DEFAULT 'pending',
    attempts              integer NOT NULL DEFAULT 0,
    error_stage           text,
    error_reason          text,
    error_message         text,
    page_count            integer,
    skipped_pages         integer NOT NULL DEFAULT 0,
    chunk_count           integer NOT NULL DEFAULT 0,
    qa_count              integer NOT NULL DEFAULT 0,
    ts_config             regconfig,
    content_sha256        text,
    simhash               bigint,
    near_duplicate_of     uuid,
    near_duplicate_score  real,
    duplicate_of          uuid,
    enriched              boolean NOT NULL DEFAULT false,
    enrichment_note       text,
    -- the gateway row's revision last applied (its lifecycle events carry it)
    revision              bigint NOT NULL DEFAULT 0,
    -- false while only a lifecycle event has been seen (the upload's own fields come later)
    uploaded              boolean NOT NULL DEFAULT true,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    indexed_at            timestamptz,
    deleted_at            timestamptz
);
CREATE INDEX ingest_documents_content_hash ON ingest_documents (tenant_id, content_sha256)
    WHERE status = 'indexed';
CREATE INDEX ingest_documents_previous ON ingest_documents (previous_version_id)
    WHERE previous_version_id IS NOT NULL;

-- The gateway counts its lifecycle changes of a row: a snapshot ingest holds is replaced only
-- by a later one, whatever order the events arrive in.
ALTER TABLE documents ADD COLUMN revision bigint NOT NULL DEFAULT 0;

INSERT INTO ingest_documents (
    id, tenant_id, version, previous_version_id, object_name, title, filename, mime_type,
    uploaded_by, uploader_role, metadata, subject, grade_level, module_tag, class_id,
    content_type, collection, curriculum_standards, topic_tags, source_priority,
    freshness_date, language, status, attempts, error_stage, error_reason, error_message,
    page_count, skipped_pages, chunk_count, qa_count, ts_config, content_sha256, simhash,
    near_duplicate_of, near_duplicate_score, duplicate_of, enriched, enrichment_note,
    created_at, updated_at, indexed_at, deleted_at)
SELECT id, tenant_id, version, previous_version_id, object_name, title, filename, mime_type,
       uploaded_by, uploader_role, metadata, subject, grade_level, module_tag, class_id,
       content_type, collection, curriculum_standards, topic_tags, source_priority,
       freshness_date, language, status, attempts, error_stage, error_reason, error_message,
       page_count, skipped_pages, chunk_count, qa_count, ts_config, content_sha256, simhash,
       near_duplicate_of, near_duplicate_score, duplicate_of, enriched, enrichment_note,
       created_at, updated_at, indexed_at, deleted_at
FROM documents;

-- A chunk belongs to ingest's record of its document; the gateway's row going does not take
-- ingest's rows with it (the `documents.deleted` event does).
ALTER TABLE chunks DROP CONSTRAINT IF EXISTS chunks_document_id_fkey;
