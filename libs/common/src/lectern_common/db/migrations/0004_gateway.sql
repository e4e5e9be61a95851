-- Gateway: link knowledge gaps to the assistant message that answered them and to the
-- related topics offered, and index flags by message (cascading deletes, per-answer look-ups).
ALTER TABLE knowledge_gaps ADD COLUMN message_id uuid;
ALTER TABLE knowledge_gaps ADD COLUMN related_topics text[] NOT NULL DEFAULT '{}';
CREATE INDEX feedback_flags_message ON feedback_flags (message_id);
