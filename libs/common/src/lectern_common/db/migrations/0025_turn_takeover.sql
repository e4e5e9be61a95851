-- A surviving gateway replica takes over a turn whose replica died mid-answer
-- (lectern_gateway.chat.turns): the run answering a turn fences its writes on `owner`, the
-- turn's inputs let another replica answer it again, and `answer_id` records the assistant
-- message in the transaction that stores it, so the answer is stored (and counted and
-- announced) once whoever finishes the turn.
ALTER TABLE chat_turns
    ADD COLUMN owner      uuid,                      -- the run answering the turn now
    ADD COLUMN inputs     jsonb,                     -- the caller, the question, its settings
    ADD COLUMN answer_id  uuid,                      -- the stored assistant message
    ADD COLUMN takeovers  integer NOT NULL DEFAULT 0;
