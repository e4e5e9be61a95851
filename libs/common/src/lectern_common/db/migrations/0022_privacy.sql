-- Privacy: a student's data is theirs. Export and erasure (DELETE /v1/users/{user}) read and
-- delete by (tenant, user); a tenant may have sessions deleted after a number of days.

-- Days after its last activity a session is deleted, with its messages, tutor checks, flags,
-- knowledge gaps and the memory service's turn signals (NULL: kept, the default).
ALTER TABLE tenant_settings ADD COLUMN session_retention_days integer
    CHECK (session_retention_days BETWEEN 1 AND 36500);
CREATE INDEX chat_sessions_activity ON chat_sessions (tenant_id, last_activity_at);

-- Users erased at a school's request. Keyed by a SHA-256 of tenant and user (never the id):
-- an event about the user that occurred before `erased_at` and arrives later (still in a
-- stream, or overtaking `users.erased` from another stream) is dropped instead of bringing
-- the data back; a repeated DELETE answers with the same erasure.
CREATE TABLE erased_users (
    tenant_id  text NOT NULL,
    user_key   text NOT NULL,
    erased_at  timestamptz NOT NULL,
    event_id   uuid NOT NULL,
    erased_by  text NOT NULL,
    PRIMARY KEY (tenant_id, user_key)
);

-- Look-ups by user for export and erasure (the other user tables have one already).
CREATE INDEX feedback_flags_user ON feedback_flags (tenant_id, user_id);
CREATE INDEX knowledge_gaps_user ON knowledge_gaps (tenant_id, user_id);
CREATE INDEX knowledge_gaps_session ON knowledge_gaps (session_id);
CREATE INDEX memory_turn_signals_user ON memory_turn_signals (tenant_id, user_id);
CREATE INDEX memory_distillations_user ON memory_distillations (tenant_id, user_id);
CREATE INDEX quizzes_creator ON quizzes (tenant_id, created_by);
