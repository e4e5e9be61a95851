-- Tutor personas: several tutors per tenant, each with its voice, defaults, material in scope,
-- tag boosts, confidence thresholds and knowledge-gap wording. Versioned: an edit is a new
-- version, and a session keeps the version it started with.
CREATE TABLE personas (
    tenant_id          text NOT NULL,
    slug               text NOT NULL,
    version            integer NOT NULL,
    display_name       text NOT NULL,
    instructions       text NOT NULL DEFAULT '',
    default_mode       text NOT NULL DEFAULT 'chat'
                       CHECK (default_mode IN ('chat', 'tutor', 'drill')),
    learning_style     text,
    explanation_depth  text,
    scope              jsonb NOT NULL DEFAULT '{}'::jsonb,
    tag_boosts         text[] NOT NULL DEFAULT '{}',
    band_high          double precision,
    band_medium        double precision,
    band_low           double precision,
    gap_message        text,
    created_by         text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, slug, version)
);
ALTER TABLE chat_sessions ADD COLUMN persona_slug text;
ALTER TABLE chat_sessions ADD COLUMN persona_version integer;
