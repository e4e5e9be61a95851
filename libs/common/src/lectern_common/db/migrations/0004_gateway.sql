-- Gateway: link knowledge gaps to the assistant message that answered them, and the
-- look-ups the chat routes make (a tenant's open gaps by topic; a message's flags).
ALTER TABLE knowledge_gaps ADD COLUMN message_id uuid;
ALTER TABLE knowledge_gaps ADD COLUMN related_topics text[] NOT NULL DEFAULT '{}';
CREATE INDEX feedback_flags_message ON feedback_flags (message_id);
CREATE INDEX chat_messages_tenant_user ON chat_messages (tenant_id, user_id, created_at DESC);
