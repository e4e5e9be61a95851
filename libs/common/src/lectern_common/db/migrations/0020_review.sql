-- The teachers' review queues.

-- Conflicting sources: a chunk of a newly indexed document and a near neighbour from another
-- document that state different numbers for the same thing, or the same thing negated
-- (found by ingest; statement_* are the two sentences, shown side by side).
CREATE TABLE source_conflicts (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    chunk_a      uuid NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    chunk_b      uuid NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    document_a   uuid NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    document_b   uuid NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('number', 'negation')),
    statement_a  text NOT NULL,
    statement_b  text NOT NULL,
    detail       text NOT NULL,
    similarity   real NOT NULL,
    status       text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'resolved')),
    resolution   text,
    note         text,
    resolved_by  text,
    resolved_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chunk_a, chunk_b)
);
CREATE INDEX source_conflicts_tenant ON source_conflicts (tenant_id, status, created_at DESC);

-- How a teacher resolved a flagged answer, and the document concerned.
ALTER TABLE feedback_flags ADD COLUMN action text
    CHECK (action IN ('fixed_material', 'wrong_source', 'dismissed'));
ALTER TABLE feedback_flags ADD COLUMN document_id uuid REFERENCES documents(id) ON DELETE SET NULL;

-- A gap is answered once a re-try of its question finds material; the student gets a new
-- session with the answer and a notice.
ALTER TABLE knowledge_gaps ADD COLUMN status text NOT NULL DEFAULT 'open'
    CHECK (status IN ('open', 'answered'));
ALTER TABLE knowledge_gaps ADD COLUMN retried_at timestamptz;
ALTER TABLE knowledge_gaps ADD COLUMN answered_at timestamptz;
ALTER TABLE knowledge_gaps ADD COLUMN answer_session_id uuid;
ALTER TABLE knowledge_gaps ADD COLUMN answered_from uuid REFERENCES documents(id) ON DELETE SET NULL;
CREATE INDEX knowledge_gaps_open ON knowledge_gaps (tenant_id, status, topic);

-- A near-duplicate pair a teacher has decided on (kept both, merged or marked distinct).
ALTER TABLE documents ADD COLUMN duplicate_review text
    CHECK (duplicate_review IN ('kept', 'merged', 'distinct'));

-- Days after which a subject's material needs a look (else the gateway's default).
CREATE TABLE freshness_horizons (
    tenant_id  text NOT NULL,
    subject    text NOT NULL,
    days       integer NOT NULL CHECK (days > 0),
    PRIMARY KEY (tenant_id, subject)
);

-- What a student is told: a question they asked now has an answer.
CREATE TABLE student_notices (
    id          uuid PRIMARY KEY,
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('gap_answered')),
    text        text NOT NULL,
    session_id  uuid,
    gap_id      uuid,
    created_at  timestamptz NOT NULL DEFAULT now(),
    read_at     timestamptz
);
CREATE INDEX student_notices_user ON student_notices (tenant_id, user_id, created_at DESC);

-- "This document closes that gap topic": the gateway re-tries the topic's open questions once
-- the document is indexed (status waiting -> running -> done | failed).
CREATE TABLE gap_closures (
    id            uuid PRIMARY KEY,
    tenant_id     text NOT NULL,
    topic         text NOT NULL,
    document_id   uuid NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    requested_by  text NOT NULL,
    status        text NOT NULL DEFAULT 'waiting'
        CHECK (status IN ('waiting', 'running', 'done', 'failed')),
    answered      integer NOT NULL DEFAULT 0,
    still_open    integer NOT NULL DEFAULT 0,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    finished_at   timestamptz
);
CREATE INDEX gap_closures_waiting ON gap_closures (created_at) WHERE status IN ('waiting', 'running');
