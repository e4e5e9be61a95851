-- The memory service's record of the flags on answers (issue 61: each service owns its data).
-- It no longer reads the gateway's `feedback_flags`: it keeps one row per
-- `feedback.flagged` event (consumer `lectern-memory-flags`), keyed by the flag, so a
-- re-delivered event changes nothing and erasing one flagger keeps another's flag on the same
-- answer, as the gateway's table does. A flag may arrive before its turn's signals: the
-- distillation asks whether a row names the turn's answer (`message_id`), whichever came first.
CREATE TABLE memory_flags (
    flag_id     uuid PRIMARY KEY,
    tenant_id   text NOT NULL,
    message_id  uuid NOT NULL,   -- the flagged answer (memory_turn_signals.assistant_message_id)
    session_id  uuid NOT NULL,
    user_id     text NOT NULL,   -- who flagged it
    flagged_at  timestamptz NOT NULL
);
CREATE INDEX memory_flags_message ON memory_flags (message_id);
CREATE INDEX memory_flags_session ON memory_flags (tenant_id, session_id);
CREATE INDEX memory_flags_user ON memory_flags (tenant_id, user_id);
