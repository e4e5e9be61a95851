-- Study tools: quizzes drawn from the material, students' attempts at them, and what the
-- memory service has tallied from attempts (a topic answered right twice is mastered).
CREATE TABLE quizzes (
    id                 uuid PRIMARY KEY,
    tenant_id          text NOT NULL,
    created_by         text NOT NULL,
    creator_role       text NOT NULL,
    title              text NOT NULL,
    difficulty         text NOT NULL CHECK (difficulty IN ('easy', 'medium', 'hard')),
    request            jsonb NOT NULL,
    generator          text NOT NULL,
    uses_assessment    boolean NOT NULL DEFAULT false,
    assigned_class_id  text,
    questions          jsonb NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX quizzes_tenant ON quizzes (tenant_id, created_at DESC);

CREATE TABLE quiz_attempts (
    id          uuid PRIMARY KEY,
    quiz_id     uuid NOT NULL REFERENCES quizzes(id) ON DELETE CASCADE,
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    answers     jsonb NOT NULL,
    results     jsonb NOT NULL,
    correct     integer NOT NULL,
    total       integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX quiz_attempts_user ON quiz_attempts (tenant_id, user_id, created_at DESC);

CREATE TABLE memory_quiz_topics (
    tenant_id      text NOT NULL,
    user_id        text NOT NULL,
    topic          text NOT NULL,
    right_streak   integer NOT NULL DEFAULT 0,
    wrong_total    integer NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, topic)
);

CREATE TABLE memory_quiz_attempts (
    attempt_id   uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
