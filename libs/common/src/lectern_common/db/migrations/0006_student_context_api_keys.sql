-- The re-ranker's educational signals, reachable from chat, and API keys managed over HTTP.

-- A session's curriculum standards (from the student's profile), for the curriculum match.
ALTER TABLE chat_sessions ADD COLUMN curriculum_standards text[] NOT NULL DEFAULT '{}';

-- The uploader's role is the one the gateway records at upload. Rows written without one
-- (evaluation corpora, imports) are unknown, not presumed to be a teacher's: a presumed
-- teacher would lift every such source's priority and the confidence built on it.
ALTER TABLE documents ALTER COLUMN uploader_role DROP DEFAULT;
ALTER TABLE documents ALTER COLUMN uploader_role DROP NOT NULL;

-- A class's teachers are the teachers who uploaded material for it (asked once per chat turn).
CREATE INDEX documents_class_teachers ON documents (tenant_id, class_id, uploaded_by)
    WHERE class_id IS NOT NULL AND uploader_role = 'teacher' AND deleted_at IS NULL;

-- API keys: the plan chosen at creation (keys made before this were all treated as pro),
-- who created the key, and the tenant's listing.
ALTER TABLE api_keys ADD COLUMN plan text NOT NULL DEFAULT 'pro' CHECK (plan IN ('free', 'pro'));
ALTER TABLE api_keys ADD COLUMN created_by text;
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at DESC);
