-- The transactional outbox (lectern_common.outbox): events written in the transaction of the
-- change they report, published by each service's relay with the event id as Nats-Msg-Id.
CREATE TABLE outbox (
    id               uuid PRIMARY KEY,              -- the event id
    subject          text NOT NULL,
    payload          jsonb NOT NULL,
    headers          jsonb NOT NULL DEFAULT '{}'::jsonb,  -- trace context of the cause
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL DEFAULT 0,
    last_error       text,
    published_at     timestamptz
);
CREATE INDEX outbox_pending ON outbox (created_at, id) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

-- One chat turn's Server-Sent Events, kept so a dropped stream resumes (Last-Event-ID) or is
-- replayed, and an Idempotency-Key retry does not ask twice.
CREATE TABLE chat_turns (
    id               uuid PRIMARY KEY,              -- the question's message id
    session_id       uuid NOT NULL REFERENCES chat_sessions(id) ON DELETE CASCADE,
    tenant_id        text NOT NULL,
    user_id          text NOT NULL,
    idempotency_key  text,
    status           text NOT NULL DEFAULT 'streaming'
                     CHECK (status IN ('streaming', 'done', 'failed', 'abandoned')),
    events           jsonb NOT NULL DEFAULT '[]'::jsonb,
    counted_on       date,                          -- the usage_counters day it was charged
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX chat_turns_idempotency ON chat_turns (session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
