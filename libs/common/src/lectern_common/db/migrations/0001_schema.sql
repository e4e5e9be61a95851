-- Lectern schema. ${embedding_dim} is the configured embedder's dimension, recorded in
-- embedding_models; changing it is a re-index, not a migration.
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE embedding_models (
    id          smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    name        text NOT NULL,
    dimension   integer NOT NULL CHECK (dimension > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE documents (
    id                    uuid PRIMARY KEY,
    tenant_id             text NOT NULL,
    title                 text NOT NULL,
    filename              text NOT NULL,
    mime_type             text NOT NULL,
    size_bytes            bigint NOT NULL,
    file_sha256           text NOT NULL,
    content_sha256        text,
    simhash               bigint,
    near_duplicate_of     uuid REFERENCES documents(id) ON DELETE SET NULL,
    near_duplicate_score  real,
    status                text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'processing', 'indexed', 'failed', 'superseded',
                          'archived', 'deleted')),
    error_stage           text,
    error_reason          text,
    error_message         text,
    attempts              integer NOT NULL DEFAULT 0,
    page_count            integer,
    skipped_pages         integer NOT NULL DEFAULT 0,
    chunk_count           integer NOT NULL DEFAULT 0,
    qa_count              integer NOT NULL DEFAULT 0,
    language              text,
    ts_config             regconfig,
    enriched              boolean NOT NULL DEFAULT false,
    enrichment_note       text,
    metadata              jsonb NOT NULL DEFAULT '{}'::jsonb,
    subject               text,
    grade_level           smallint,
    module_tag            text,
    class_id              text,
    content_type          text,
    collection            text NOT NULL DEFAULT 'educational'
        CHECK (collection IN ('educational', 'assessment')),
    curriculum_standards  text[] NOT NULL DEFAULT '{}',
    topic_tags            text[] NOT NULL DEFAULT '{}',
    source_priority       real,
    freshness_date        date,
    version               integer NOT NULL DEFAULT 1,
    previous_version_id   uuid REFERENCES documents(id) ON DELETE SET NULL,
    object_name           text,
    uploaded_by           text NOT NULL,
    uploader_role         text NOT NULL DEFAULT 'teacher',
    co_owners             text[] NOT NULL DEFAULT '{}',
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    indexed_at            timestamptz,
    deleted_at            timestamptz
);
CREATE INDEX documents_tenant_status ON documents (tenant_id, status, created_at DESC);
CREATE INDEX documents_tenant_file_hash ON documents (tenant_id, file_sha256);
CREATE INDEX documents_tenant_content_hash ON documents (tenant_id, content_sha256);

CREATE TABLE chunks (
    id                    uuid PRIMARY KEY,
    document_id           uuid NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id             text NOT NULL,
    chunk_index           integer NOT NULL,
    kind                  text NOT NULL DEFAULT 'text' CHECK (kind IN ('text', 'qa', 'table')),
    parent_chunk_id       uuid REFERENCES chunks(id) ON DELETE CASCADE,
    text                  text NOT NULL,
    context_prefix        text,
    section_path          text[] NOT NULL DEFAULT '{}',
    chapter               text,
    page_start            integer,
    page_end              integer,
    slide                 integer,
    time_start            real,
    time_end              real,
    token_count           integer NOT NULL,
    content_hash          text NOT NULL,
    active                boolean NOT NULL DEFAULT true,
    subject               text,
    grade_level           smallint,
    module_tag            text,
    class_id              text,
    content_type          text,
    language              text,
    collection            text NOT NULL DEFAULT 'educational',
    curriculum_standards  text[] NOT NULL DEFAULT '{}',
    topic_tags            text[] NOT NULL DEFAULT '{}',
    source_priority       real,
    freshness_date        date,
    uploaded_by           text,
    ts_config             regconfig NOT NULL DEFAULT 'english',
    embedding             vector(${embedding_dim}) NOT NULL,
    tsv                   tsvector GENERATED ALWAYS AS (
        to_tsvector(ts_config, coalesce(context_prefix, '') || ' ' || text)) STORED,
    created_at            timestamptz NOT NULL DEFAULT now(),
    UNIQUE (document_id, kind, chunk_index)
);
CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops)
    WITH (m = 16, ef_construction = 64);
CREATE INDEX chunks_tsv_gin ON chunks USING gin (tsv);
CREATE INDEX chunks_document ON chunks (document_id);
CREATE INDEX chunks_tenant_filters ON chunks (tenant_id, collection, subject, grade_level)
    WHERE active;
CREATE INDEX chunks_tenant_module ON chunks (tenant_id, module_tag) WHERE active;
CREATE INDEX chunks_tenant_class ON chunks (tenant_id, class_id) WHERE active;
CREATE INDEX chunks_tenant_language ON chunks (tenant_id, language) WHERE active;
CREATE INDEX chunks_tenant_content_type ON chunks (tenant_id, content_type) WHERE active;
CREATE INDEX chunks_topic_tags ON chunks USING gin (topic_tags);
CREATE INDEX chunks_curriculum ON chunks USING gin (curriculum_standards);

CREATE TABLE chat_sessions (
    id                 uuid PRIMARY KEY,
    tenant_id          text NOT NULL,
    user_id            text NOT NULL,
    mode               text NOT NULL DEFAULT 'chat' CHECK (mode IN ('chat', 'tutor')),
    subject            text,
    module_tag         text,
    class_id           text,
    grade_level        smallint,
    learning_style     text,
    explanation_depth  text,
    title              text,
    status             text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'ended')),
    end_reason         text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    last_activity_at   timestamptz NOT NULL DEFAULT now(),
    ended_at           timestamptz
);
CREATE INDEX chat_sessions_user ON chat_sessions (tenant_id, user_id, created_at DESC);
CREATE INDEX chat_sessions_idle ON chat_sessions (last_activity_at) WHERE status = 'active';

CREATE TABLE chat_messages (
    id               uuid PRIMARY KEY,
    session_id       uuid NOT NULL REFERENCES chat_sessions(id) ON DELETE CASCADE,
    tenant_id        text NOT NULL,
    user_id          text NOT NULL,
    role             text NOT NULL CHECK (role IN ('user', 'assistant')),
    content          text NOT NULL,
    citations        jsonb NOT NULL DEFAULT '[]'::jsonb,
    confidence       real,
    confidence_band  text,
    answered_by      text,
    usage            jsonb NOT NULL DEFAULT '{}'::jsonb,
    timings          jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chat_messages_session ON chat_messages (session_id, created_at);

CREATE TABLE user_memories (
    id                 uuid PRIMARY KEY,
    tenant_id          text NOT NULL,
    user_id            text NOT NULL,
    kind               text NOT NULL CHECK (kind IN ('takeaway', 'struggle', 'mastered', 'preference')),
    text               text NOT NULL,
    topic              text,
    source_session_id  uuid,
    strength           real NOT NULL DEFAULT 1.0,
    embedding          vector(${embedding_dim}) NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX user_memories_user ON user_memories (tenant_id, user_id, updated_at DESC);
CREATE INDEX user_memories_embedding ON user_memories USING hnsw (embedding vector_cosine_ops);

CREATE TABLE memory_distillations (
    session_id   uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    user_id      text NOT NULL,
    distilled_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE usage_counters (
    tenant_id  text NOT NULL,
    user_id    text NOT NULL,
    day        date NOT NULL,
    messages   integer NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, user_id, day)
);

CREATE TABLE feedback_flags (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    message_id   uuid NOT NULL REFERENCES chat_messages(id) ON DELETE CASCADE,
    session_id   uuid NOT NULL,
    user_id      text NOT NULL,
    reason       text NOT NULL,
    details      text,
    status       text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'resolved')),
    resolution   text,
    resolved_by  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    resolved_at  timestamptz
);
CREATE INDEX feedback_flags_tenant ON feedback_flags (tenant_id, status, created_at DESC);

CREATE TABLE knowledge_gaps (
    id          uuid PRIMARY KEY,
    tenant_id   text NOT NULL,
    session_id  uuid,
    user_id     text NOT NULL,
    question    text NOT NULL,
    topic       text,
    subject     text,
    confidence  real NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX knowledge_gaps_tenant ON knowledge_gaps (tenant_id, topic, created_at DESC);

CREATE TABLE api_keys (
    id          uuid PRIMARY KEY,
    tenant_id   text NOT NULL,
    name        text NOT NULL,
    key_sha256  text NOT NULL UNIQUE,
    role        text NOT NULL DEFAULT 'teacher',
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
