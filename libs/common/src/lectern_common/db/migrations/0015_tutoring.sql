-- Tutoring: the check question a tutor or drill answer ends with, judged when the student
-- replies (status pending -> judged | skipped), and the drill mode.
ALTER TABLE chat_messages ADD COLUMN tutor_check jsonb;
ALTER TABLE chat_sessions DROP CONSTRAINT chat_sessions_mode_check;
ALTER TABLE chat_sessions ADD CONSTRAINT chat_sessions_mode_check
    CHECK (mode IN ('chat', 'tutor', 'drill'));
