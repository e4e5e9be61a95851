-- Re-index runs (`lectern reindex`): the model built, how far the backfill got, the outcome.
CREATE TABLE index_builds (
    id              uuid PRIMARY KEY,
    model           text NOT NULL,
    dimension       integer NOT NULL,
    previous_model  text NOT NULL,
    status          text NOT NULL CHECK (status IN ('building', 'switched', 'failed')),
    done            bigint NOT NULL DEFAULT 0,
    total           bigint NOT NULL DEFAULT 0,
    switch_ms       real,
    error           text,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
