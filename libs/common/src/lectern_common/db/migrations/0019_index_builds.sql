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

-- The live index's model, read under a shared transaction-level advisory lock that a re-index
-- takes exclusively for its switch: a transaction that uses stored vectors calls this first
-- and keeps the model until it ends (lectern_common.index.guard). An advisory lock lives in
-- the lock manager: unlike SELECT ... FOR SHARE, taking it writes nothing. The SELECT runs
-- after the lock is granted, so (read committed) it sees a switch that committed meanwhile.
CREATE FUNCTION lectern_live_embedding_model() RETURNS TABLE (name text, dimension integer)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1955634718);
    RETURN QUERY SELECT m.name, m.dimension FROM embedding_models m WHERE m.id = 1;
END
$$;
