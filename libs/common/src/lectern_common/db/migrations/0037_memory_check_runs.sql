-- Mastery across sessions (issue 59, part 6). A tutor check's topic is the student's question's
-- topic, and two questions on one subject are named differently from one session to the next
-- ("blacklist a fragment", then "backoff counter used for in blacklisting"), so the run of
-- right answers kept per topic name (`memory_quiz_topics`) hardly ever reached two. The memory
-- service now counts a check by what it tests: the section of the material its statement comes
-- from (a document's heading path), or, where the material has no headings, each word of its
-- topic. A unit keeps the last chat session a check on it was answered in, whether every check
-- on it in that session was right, and for how many sessions running that has held: two make
-- it mastered (lectern_memory.mastery).
CREATE TABLE memory_check_runs (
    tenant_id        text NOT NULL,
    user_id          text NOT NULL,
    -- 's:' document id and heading path, or 'w:' a topic word's stem
    unit             text NOT NULL,
    session_id       uuid NOT NULL,
    session_right    boolean NOT NULL,
    sessions_running integer NOT NULL DEFAULT 0,
    -- the topics of the run's right checks: this session's, and the earlier sessions'
    topics           text[] NOT NULL DEFAULT '{}',
    earlier_topics   text[] NOT NULL DEFAULT '{}',
    -- the 'mastered' memory the run made (a later wrong or partial answer withdraws it)
    mastered_id      uuid,
    -- when the last check counted was answered: an older one arriving late (a redelivery)
    -- is not counted against a newer session's run
    answered_at      timestamptz NOT NULL DEFAULT '-infinity',
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, unit)
);
CREATE INDEX memory_check_runs_session ON memory_check_runs (tenant_id, session_id);
