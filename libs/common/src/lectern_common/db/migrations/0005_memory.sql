-- Per-turn signals the memory service collects from chat.turn.completed, distilled when the
-- session ends. Keyed by the assistant message, so re-delivery is a no-op.
CREATE TABLE memory_turn_signals (
    assistant_message_id  uuid PRIMARY KEY,
    session_id            uuid NOT NULL,
    tenant_id             text NOT NULL,
    user_id               text NOT NULL,
    question              text NOT NULL,
    answer                text NOT NULL,
    band                  text NOT NULL,
    confidence            real NOT NULL,
    knowledge_gap         boolean NOT NULL DEFAULT false,
    topic                 text,
    occurred_at           timestamptz NOT NULL
);
CREATE INDEX memory_turn_signals_session ON memory_turn_signals (session_id, occurred_at);

ALTER TABLE memory_distillations ADD COLUMN created uuid[] NOT NULL DEFAULT '{}';
ALTER TABLE memory_distillations ADD COLUMN updated uuid[] NOT NULL DEFAULT '{}';
ALTER TABLE memory_distillations ADD COLUMN distiller text NOT NULL DEFAULT 'deterministic';

-- Recall ranks one student's memories exactly (filtered by the (tenant, user) btree, then
-- sorted by distance): an approximate HNSW walk over every student's memories could miss a
-- student's own rows under that filter, and maintaining it only slows distillation down.
DROP INDEX user_memories_embedding;
