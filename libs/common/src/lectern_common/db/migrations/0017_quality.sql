-- The quality dashboard's daily aggregates, kept up to date as turns complete (in the
-- transaction that stores the answer) and as answers are flagged: the dashboard never scans
-- the messages. One row per tenant, day, persona, subject and class ('' for none).
CREATE FUNCTION lectern_add_counts(a integer[], b integer[]) RETURNS integer[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i), '{}')
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
$$;

CREATE TABLE quality_daily (
    tenant_id          text NOT NULL,
    day                date NOT NULL,
    persona            text NOT NULL DEFAULT '',
    subject            text NOT NULL DEFAULT '',
    class_id           text NOT NULL DEFAULT '',
    questions          integer NOT NULL DEFAULT 0,
    band_high          integer NOT NULL DEFAULT 0,
    band_medium        integer NOT NULL DEFAULT 0,
    band_low           integer NOT NULL DEFAULT 0,
    band_gap           integer NOT NULL DEFAULT 0,
    with_citations     integer NOT NULL DEFAULT 0,
    fallbacks          integer NOT NULL DEFAULT 0,
    flagged            integer NOT NULL DEFAULT 0,
    ttft_buckets       integer[] NOT NULL DEFAULT '{}',
    retrieval_buckets  integer[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, day, persona, subject, class_id)
);

CREATE TABLE quality_gap_topics (
    tenant_id  text NOT NULL,
    day        date NOT NULL,
    persona    text NOT NULL DEFAULT '',
    subject    text NOT NULL DEFAULT '',
    class_id   text NOT NULL DEFAULT '',
    topic      text NOT NULL,
    questions  integer NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, persona, subject, class_id, topic)
);

CREATE TABLE quality_citations (
    tenant_id    text NOT NULL,
    day          date NOT NULL,
    persona      text NOT NULL DEFAULT '',
    subject      text NOT NULL DEFAULT '',
    class_id     text NOT NULL DEFAULT '',
    document_id  uuid NOT NULL,
    citations    integer NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, persona, subject, class_id, document_id)
);
