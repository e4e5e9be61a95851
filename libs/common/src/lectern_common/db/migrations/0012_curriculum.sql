-- Curriculum standards a tenant uploads (code, description, subject, grade), embedded with
-- the index's model so that documents and sections can be matched to them.
CREATE TABLE curriculum_standards (
    tenant_id    text NOT NULL,
    code         text NOT NULL,
    description  text NOT NULL,
    subject      text,
    grade_level  smallint,
    embedding    vector(${embedding_dim}) NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, code)
);
