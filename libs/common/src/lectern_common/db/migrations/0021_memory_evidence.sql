-- A memory carries the evidence behind it (what the student said, answered or flagged, and
-- when), and a turn what its message was about in the material's words (issue 31).
ALTER TABLE user_memories ADD COLUMN IF NOT EXISTS evidence jsonb NOT NULL DEFAULT '[]';
ALTER TABLE memory_turn_signals ADD COLUMN IF NOT EXISTS topics text[] NOT NULL DEFAULT '{}';
ALTER TABLE memory_turn_signals ADD COLUMN IF NOT EXISTS answered_by text;
