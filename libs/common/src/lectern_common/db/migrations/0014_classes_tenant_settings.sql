-- Class rosters a teacher manages (besides the identity provider's `classes` token claim):
-- a student may use the material of their own classes only.
CREATE TABLE class_members (
    tenant_id   text NOT NULL,
    class_id    text NOT NULL,
    user_id     text NOT NULL,
    added_by    text NOT NULL,
    added_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, class_id, user_id)
);
CREATE INDEX class_members_user ON class_members (tenant_id, user_id);

-- A tenant's own choices (admins): NULL keeps the deployment's default.
CREATE TABLE tenant_settings (
    tenant_id    text PRIMARY KEY,
    web_search   boolean,              -- Google Search grounding of answers ([W#] sources)
    updated_by   text NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
